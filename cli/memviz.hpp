// memviz.hpp: `capuchin export memory-viz`, a PyTorch CUDA memory snapshot (what
// torch.cuda.memory._dump_snapshot writes and pytorch.org/memory_viz reads) of a recorded
// trace or a decision log, with capuchin's swaps and recomputations as allocator events.
//
// The format followed (field names, actions, sizes): pytorch/pytorch
// torch/csrc/cuda/memory_snapshot.cpp (_memory_snapshot_pickled, commit 00067369c933), the
// Snapshot / Segment / Block / TraceEntry types documented in torch/cuda/memory.py
// (_snapshot), the readers torch/cuda/_memory_viz.py (segsum, trace, trace_plot,
// segment_plot) and torch/utils/viz/MemoryViz.js (commit c4b5ac720f83), and the record_trace
// calls of c10/cuda/CUDACachingAllocator.cpp (trace sizes are requested sizes). Output checked
// against torch 2.5.1's torch/cuda/_memory_viz.py (segsum, trace, trace_plot, segment_plot).
//
// Two stages: the sources (memviz_cmd.cpp) turn a trace or a decision log into Steps, one
// device each; snapshot_pickle lays the blocks out in an address space and writes the pickle.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "capuchin/decision_log.hpp"
#include "capuchin/expected.hpp"
#include "capuchin/trace_model.hpp"

namespace capuchin::cli::memviz {

// A frame of a block's "stack": the viewer shows filename:line:name, innermost first.
struct Frame {
  std::string filename;
  std::uint64_t line = 0;
  std::string name;
};

// One change of one device's memory.
struct Step {
  enum class Kind : std::uint8_t { Alloc, Free, Oom };
  Kind kind = Kind::Alloc;
  double t_s = 0;
  std::uint64_t key = 0;    // names the block: a Free releases the live Alloc with its key
  std::uint64_t bytes = 0;  // requested bytes (Alloc); Oom: the bytes asked for
  std::uint64_t device_free = 0;  // Oom only: what the device had left
  std::uint32_t stream = 0;
  std::vector<Frame> frames;
};

struct Device {
  std::string label;  // what it shows, listed under the snapshot's 'capuchin' key
  std::vector<Step> steps;  // in time order
};

// The whole snapshot, pickled. Each device's blocks are laid out best-fit in one expandable
// segment (512-byte rounding, grown by 2 MiB segment_map events as PyTorch's expandable
// segments do): an Alloc is an 'alloc' entry, a Free 'free_requested' then 'free_completed'
// with the same address and size, an Oom an 'oom' entry. 'segments' is the state after the
// last step: every block still allocated, the gaps as inactive blocks.
// Contract: steps are in time order; an Alloc's key is not live, a Free's key is. A
// violation is an error naming the device and step (nothing is written).
Expected<std::string> snapshot_pickle(const std::vector<Device>& devices);

// ---- Sources (memviz_sources.cpp) ----------------------------------------------------------

// A trace, replayed by the simulator on a GPU profile: without a budget the trace's own
// allocations and frees (the `ideal` run: natural timing); with one, what the capuchin
// policy does at it (its swap-outs, swap-ins and drop/recompute pairs as frees and allocs,
// each with a 'capuchin: ...' frame naming the trace line where it was decided). Every block
// has a frame for its producing kernel (trace line, kernel name) and one naming the tensor
// (id, size, role, iteration). An infeasible run ends with an 'oom' entry.
struct TraceDevice {
  Device device;
  std::string summary;  // one line: what the device shows and its counts
  std::string warning;  // non-empty when the run was infeasible
};
Expected<TraceDevice> device_from_trace(const trace::Trace& t, const std::string& file, const std::string& gpu,
                                        const std::string& budget);

// Decision records with where they came from (file, 1-based line).
struct LoggedRecord {
  DecisionRecord r;
  std::string file;
  std::uint64_t line = 0;
};
// One device per job process (a record's pid), in order of first appearance. A decision log
// holds capuchin's actions, not the job's allocations: a tensor first seen leaving the device
// (evict, drop) is shown allocated from the start of that record's iteration; a swap-in
// (prefetch, swapin_on_demand) or recompute allocates it again; after its last record a tensor
// on the device is shown released at the end of that iteration (the job's free is not
// logged). Records that contradict the tensor's state (and folded repeats) are skipped.
struct LogDevices {
  std::vector<Device> devices;
  std::vector<std::string> summaries;  // one line per device
};
LogDevices devices_from_log(const std::vector<LoggedRecord>& records);

// Round-up of a request to the block size the viewer shows (PyTorch's kMinBlockSize).
constexpr std::uint64_t kBlockRound = 512;
constexpr std::uint64_t kMapGranule = 2ull << 20;

}  // namespace capuchin::cli::memviz
