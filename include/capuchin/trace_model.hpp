// An in-memory trace for analysis: events in issue order, tensors (one per allocation, in
// allocation order), every tensor access in order, iterations as event ranges, and the
// liveness measures (live bytes after each event, peaks, persistent bytes).
//
// Contract: a Trace is only ever built from a trace that passed every rule of the reader,
// so every index in it is valid. Event indices are 0-based over the events (the header is
// not an event); an event's file line is its index + 2.
#pragma once

#include <cstdint>
#include <string>
#include <unordered_map>
#include <vector>

#include "capuchin/trace.hpp"

namespace capuchin::trace {

enum class AccessMode : std::uint8_t { Read, Write, Touch };

struct Tensor {
  std::uint64_t id = 0;
  std::uint64_t bytes = 0;
  Role role = Role::None;
  std::uint32_t alloc_event = kNone;
  std::uint32_t free_event = kNone;    // kNone: lives to the end of the trace
  std::uint32_t first_access = kNone;  // event indices; kNone when never accessed
  std::uint32_t last_access = kNone;
  std::uint32_t access_count = 0;      // accessing events (a kernel reading and writing it counts once)
};

struct TensorAccess {
  std::uint32_t event;
  std::uint32_t tensor;
  AccessMode mode;
};

struct Event {
  Op op = Op::Sync;
  CopyDir dir = CopyDir::H2D;
  std::uint32_t flags = 0;
  std::uint32_t stream = 0;
  std::uint32_t tensor = kNone;   // alloc/free: the tensor; copy: src (kHasSrc)
  std::uint32_t tensor2 = kNone;  // copy: dst (kHasDst)
  std::uint32_t name = kNone;     // kernel: index into Trace::names
  // Kernel accesses: [access_begin, reads_end) reads, [reads_end, writes_end) writes,
  // [writes_end, access_end) touch. A copy has its src read and dst write in this range too.
  std::uint32_t access_begin = 0, reads_end = 0, writes_end = 0, access_end = 0;
  std::uint64_t bytes = 0;
  double flops = 0;
  std::uint64_t dur_ns = 0;
  std::uint64_t n = 0;  // iter
};

struct Iteration {
  std::uint64_t n = 0;
  std::uint32_t begin = 0;  // the `iter` event
  std::uint32_t end = 0;    // one past the last event of the iteration
};

struct Trace {
  std::string name;  // the file it came from
  Header header;
  std::vector<Event> events;
  std::vector<Tensor> tensors;
  std::vector<TensorAccess> accesses;
  std::vector<std::string> names;  // distinct kernel names
  std::vector<Iteration> iterations;
  std::uint32_t setup_end = 0;  // events [0, setup_end) precede the first `iter`

  // The event as the reader would give it (ids restored), for writing. Uses `scratch`
  // for the id arrays; valid until the next call with the same scratch.
  struct ViewScratch {
    std::vector<std::uint64_t> reads, writes, touch;
  };
  EventView view(std::uint32_t event, ViewScratch& scratch) const;
};

TraceExpected<Trace> load_trace(const std::string& path);
TraceExpected<Trace> parse_trace(std::string_view data, std::string name = "<memory>");
TraceExpected<Trace> build_trace(TraceReader& reader);  // consumes the reader

// Builds a Trace one event at a time with every derived field: tensors (id, bytes, role from
// the alloc; alloc/free events; first/last access and access count), access ranges, kernel
// names numbered in order of first use, iterations and setup_end. build_trace feeds it what
// the reader reads; repeat_last_iteration (trace_repeat.hpp) what it makes.
// Contract: events come in a valid order (what the reader's rules allow); an event's dense
// indices (index, src_index, dst_index, read/write/touch_index) are this trace's tensors, an
// alloc's being the next one; ids other than an alloc's are not read.
class TraceAppender {
 public:
  TraceAppender(std::string name, Header header);
  std::uint32_t append(const EventView& v);  // the event's index
  std::uint32_t tensors() const { return static_cast<std::uint32_t>(t_.tensors.size()); }
  Trace finish();

 private:
  void touch(std::uint32_t ev, std::uint32_t tensor, AccessMode mode);

  Trace t_;
  std::unordered_map<std::string, std::uint32_t> name_index_;
  std::vector<std::uint32_t> last_access_event_;  // per tensor, to count accessing events once
};
Status write_trace(const Trace& trace, const std::string& path);

struct Liveness {
  std::vector<std::uint64_t> live_after;  // bytes live after each event
  std::uint64_t peak_bytes = 0;
  std::uint32_t peak_event = kNone;       // first event reaching the peak
  std::vector<std::uint64_t> iteration_peak_bytes;
  std::vector<std::uint32_t> iteration_peak_event;
  std::uint64_t setup_peak_bytes = 0;
  std::uint64_t persistent_bytes = 0;     // live at the end of the trace
};
Liveness compute_liveness(const Trace& trace);

struct TraceStats {
  std::uint64_t events = 0, kernels = 0, allocs = 0, frees = 0, copies = 0, syncs = 0, iterations = 0;
  std::uint64_t distinct_kernel_names = 0;
  std::uint64_t alloc_bytes_total = 0;                  // sum of all allocation sizes
  std::uint64_t copy_bytes[3] = {0, 0, 0};              // by CopyDir
  std::uint64_t peak_bytes = 0;
  std::uint32_t peak_event = kNone;
  std::vector<std::uint64_t> iteration_peak_bytes;
  std::uint64_t persistent_bytes = 0;
  std::vector<double> iteration_flops;                  // sum of kernel flops per iteration
  std::vector<std::uint64_t> iteration_kernels;
};
TraceStats compute_stats(const Trace& trace, const Liveness& liveness);

}  // namespace capuchin::trace
