// report_data.hpp: what `capuchin log`, `capuchin export perfetto` and `capuchin report`
// read and derive. Inputs are files of two kinds, told apart by content: decision logs
// (JSON lines, include/capuchin/decision_log.hpp) and recorded traces (docs/TRACE_FORMAT.md),
// each plain or gzip. From a trace they derive a timeline simulated on a GPU profile (never
// presented as measured): kernels, the natural live bytes, and, with a budget, the swaps,
// stalls and resident bytes of the capuchin policy.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "capuchin/decision_log.hpp"
#include "capuchin/expected.hpp"
#include "capuchin/sim.hpp"
#include "capuchin/trace_model.hpp"

namespace capuchin::cli {

struct ReportInputs {
  std::vector<std::string> decision_files, trace_files;
  std::vector<DecisionRecord> decisions;  // every decision file, in order
  std::optional<trace::Trace> trace;      // the first trace file
};
Expected<ReportInputs> load_report_inputs(const std::vector<std::string>& files);

// One point of a memory curve.
struct MemPoint {
  double t_s;
  std::uint64_t bytes;
};

struct SimulatedView {
  std::string gpu;
  std::string budget_text;
  std::uint64_t budget_bytes = 0;            // 0: no budget given (no managed run)
  std::uint64_t natural_peak_bytes = 0;
  sim::SimResult natural, managed;            // ideal (unlimited) and capuchin under the budget
  sim::Bound bound;                           // under the budget: the least any policy could reach
  std::vector<sim::TimelineEntry> natural_tl, managed_tl;
  std::vector<MemPoint> natural_mem, managed_mem;  // live bytes / resident bytes over time
  std::vector<sim::MemoryChange> managed_changes;  // the capuchin run's memory changes, in time order
  std::vector<std::uint32_t> event_iteration;      // per event: learned iteration (1-based, 0: set-up)
};
Expected<SimulatedView> simulate_view(const trace::Trace& t, const std::string& gpu, const std::string& budget);

// What a decision log says about memory over time: per job process, the bytes capuchin held
// off the device (swapped out or dropped and not yet brought back), from each tensor's
// evict/drop and prefetch/swapin_on_demand/recompute records. A decision log has no resident
// bytes (the job's own allocations are not in it); this is the part capuchin's decisions
// moved. Records that do not change a tensor's state (a folded repeat, a swap-in of a tensor
// never seen leaving) change nothing. Processes without such records are left out.
struct OffDeviceSeries {
  std::int64_t pid = 0;
  std::vector<MemPoint> pts;  // after each change, in time order
  std::uint64_t max_bytes = 0;
};
std::vector<OffDeviceSeries> off_device_bytes(const std::vector<DecisionRecord>& records);

}  // namespace capuchin::cli
