// segment_plan.hpp: planning one observed segment (the events between two host
// synchronisations, as the executor in libcapuchin.so sees them) for the next one. The same
// function runs in the job (embedded planning) and in capuchind (the executor sends the
// segment, the daemon plans and answers), so a plan does not depend on where it was made.
//
// Contract: plan_segment is a pure function of the job (no CUDA, no globals; the GPU profile
// is named in the job): the segment is written as a trace (tensors live at its start first),
// rotated to start where the fewest bytes are live, prepared for the simulator and planned
// with plan::make_plan. Decisions come back keyed to segment positions and to tensors by
// place (the k-th allocation of the current or the previous segment) or by allocation id.
// A segment that cannot be planned is an error naming why.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "capuchin/expected.hpp"
#include "capuchin/plan.hpp"
#include "capuchin/sim.hpp"

namespace capuchin::plan {

inline constexpr std::uint64_t kNoSegmentId = ~std::uint64_t{0};

// One event of a segment (op is a trace::Op).
struct SegmentEvent {
  std::uint8_t op = 0;
  std::uint8_t dir = 0;                         // copy: trace::CopyDir
  std::uint64_t sig = 0;                        // signature the pattern matcher compares
  // The signature without sizes (0: the same as sig): the op, a kernel's function and how many
  // tensors it touches, a copy's direction. The controller falls back to it when iterations
  // repeat only in it (a batch of another size each step). Not sent to the daemon.
  std::uint64_t form = 0;
  std::uint64_t id = 0, id2 = kNoSegmentId;     // alloc/free/copy src; copy dst
  std::uint64_t bytes = 0;
  std::uint32_t ids_off = 0, nreads = 0, nwrites = 0;  // kernel: reads then writes in Job::ids
  bool touch = false;                           // kernel: reads/writes unknown (touch list)
  // kernel, touch: its writes will stay unknown to the executor (no verdict can come for its
  // launch shape), so it keeps no producer for what it touched: nothing it wrote is recomputed.
  // A touch whose verdict may still come is planned as replayable, as its name says.
  bool unreplayable = false;
  std::uint32_t name = 0;                       // kernel: index into Job::names
  std::uint64_t dur_ns = 0;                     // kernel: measured duration (0: unknown)
};

struct SegmentDecision {
  std::uint32_t at = 0;      // segment position: issued before this event
  Act act = Act::Evict;
  bool local = true;
  bool prev = false;         // k names a place in the previous segment (else the current one)
  std::uint32_t k = 0;       // local: the k-th allocation
  std::uint64_t id = 0;      // not local: the allocation id
  std::uint64_t bytes = 0;
  std::uint32_t access = 0;  // prefetch / recompute: the segment position of the access it serves
  Reason reason = Reason::FreeTime;
  double cost_s = 0;
};

struct SegmentPlan {
  std::uint64_t segment = 0;           // the segment it was made from
  std::vector<std::uint64_t> sigs;     // the pattern it applies to
  std::vector<SegmentDecision> decisions;
  bool fits = true;
  std::uint32_t recomputes = 0, swaps = 0;
  double expected_overhead_s = 0;
  double replay_s = 0;                 // its iteration as the simulator replays it (0: not replayed)
  bool passive = false;                // no decisions because the pressure rules alone replayed faster
  bool no_drops = false;               // made and replayed without recomputation: pressure swaps only
  std::uint32_t refined_moves = 0;     // changes the replay's refinement kept (0: as chosen)
  std::uint64_t budget = 0;            // the budget it was made for
  std::uint64_t natural_peak = 0, planned_peak = 0;
  std::string summary;                 // one line for logs
  std::string json;                    // plan_to_json text (when SegmentJob::want_json)
  bool from_daemon = false;            // set by the executor: capuchind made it
};

// A planned swap-in that had not landed at its access in an iteration like this one: the
// next plan starts it earlier by about late_s. The tensor is named as SegmentDecision names
// it; access is the segment position of the access it was to serve.
struct LateArrival {
  bool local = true;
  bool prev = false;
  std::uint32_t k = 0;
  std::uint64_t id = 0;
  std::uint32_t access = 0;
  double late_s = 0;
};

// The link rates a plan request may carry (bytes per second): 1 MB/s to 10 TB/s, or 0.
inline constexpr double kMinLinkRate = 1e6, kMaxLinkRate = 1e13;

struct SegmentJob {
  std::uint64_t segment = 0;
  std::vector<SegmentEvent> events;
  std::vector<std::uint64_t> ids;
  std::vector<std::string> names;
  std::vector<std::pair<std::uint64_t, std::uint64_t>> carried;  // (id, span) live at its start
  std::vector<std::uint64_t> prev_locals;                         // the previous segment's allocations
  std::uint64_t budget = 0;
  std::uint64_t baseline = 0;  // bytes live at the end of the segment
  bool simcuda = false;        // model simcuda's cost constants (the figures are simulated)
  bool allow_recompute = false;
  // Plan as the paper did (the `capuchin-paper` baseline): feature maps only (no parameter or
  // optimizer-state swaps across iterations), a recomputation's dropped inputs kept once
  // recomputed, one pass of the hybrid phase (PlanOptions' improvements off).
  bool paper = false;
  // Follow the planner's own plan, made once for the budget, with no candidates replayed against
  // it (CAPUCHIN_PLAN=always: studying plans, or tests of the moves themselves); by default the
  // candidate the simulator replays fastest is followed, which can be no plan.
  bool keep_plan = false;
  // The first answer of an anytime planner: the planner's own plan alone, as keep_plan, made in
  // one planning (the executor's planner thread sends it at once, then the replay-chosen one).
  bool quick = false;
  bool want_json = false;
  std::string gpu = "h100";    // GPU profile when not simcuda (capuchin sim --list-gpus)
  std::string dump_dir;        // if set: the segment trace and the plan are written there
  std::vector<LateArrival> late;  // feedback from iterations like this one
  // The host link each way as the job measured its own moves (bytes per second, the copy's
  // latency left out; 0: not measured): the plan's swaps are timed with these instead of the
  // profile's rate (sim::Efficiency::swap_out_link, swap_in_link). Not used where the caller
  // passes its own model (the simulator).
  double swap_out_bytes_per_s = 0, swap_in_bytes_per_s = 0;
  // Anytime: called, on the planning thread, with the replay-chosen plan before it is refined
  // by its replays (plan::refine_from_replay, plan::refine_prefetches: up to thousands), so that a caller can
  // follow it while the refinement runs; plan_segment then returns the refined plan
  // (refined_moves == 0: the same plan). Not called for quick, keep_plan or paper jobs, nor
  // where no plan was replayed. Not sent to capuchind.
  std::function<void(const SegmentPlan&)> on_chosen;
};

// The cost model a plan is made on when the caller has its own (the simulator: its profile
// and efficiencies); otherwise job.simcuda / job.gpu name one.
struct PlanModel {
  sim::GpuProfile gpu;
  sim::Efficiency eff;
};

Expected<SegmentPlan, std::string> plan_segment(const SegmentJob& job, const PlanModel* model = nullptr);

}  // namespace capuchin::plan
