// tensor_names.hpp: a trace's tensors named as a user recognises them, for every place that
// shows one (the report's top-tensors table and per-tensor decisions, `capuchin log --trace`,
// the frames of `export memory-viz`): the kernel that produces it, its size and role, and
// where it is allocated in its iteration. An allocation id alone means nothing to a user.
//
// Contract: built from a Trace (any, markers or learned iterations); every index passed is a
// valid tensor index of that trace. The trace format records no shapes (docs/TRACE_FORMAT.md),
// so none is named. Nothing here fails: a tensor never accessed is "never used".
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "capuchin/trace_model.hpp"

namespace capuchin::trace {

// What an event is called: a kernel's name, "copy h2d", or the op ("alloc", "sync", ...).
std::string event_name(const Trace& t, std::uint32_t event);

// Where a tensor's data comes from.
struct TensorOrigin {
  std::uint32_t event = kNone;  // the producing event, or (first_use) its first user; kNone: never used
  bool first_use = false;       // read before any write: a parameter or an input (its data predates the trace)
};

// Where a tensor is allocated: in iteration `iteration` (0: set-up, before the first one) at
// its `event`-th event of `events`, its `alloc`-th allocation of `allocs` (all 1-based).
struct TensorPosition {
  std::uint64_t iteration = 0;
  std::uint32_t event = 0, events = 0, alloc = 0, allocs = 0;
};

class TensorNames {
 public:
  explicit TensorNames(const Trace& t);
  // The tensor index of an allocation id (ids are unique over a trace).
  std::optional<std::uint32_t> find(std::uint64_t id) const;
  TensorOrigin origin(std::uint32_t tensor) const;
  std::uint32_t producer(std::uint32_t tensor) const { return producer_[tensor]; }  // first writer; kNone: none
  std::string origin_text(std::uint32_t tensor) const;  // "written by K", "first used by K", "never used"
  TensorPosition position(std::uint32_t tensor) const;
  std::string position_text(std::uint32_t tensor) const;  // "iteration 3, event 120 of 450, its 12th allocation of 80"
  // The one-line name every command shows beside an id:
  // "147.0 MiB activation, written by aten::conv2d; iteration 3, event 120 of 450, its 12th allocation of 80".
  std::string describe(std::uint32_t tensor) const;

 private:
  const Trace& t_;
  std::vector<std::uint32_t> producer_;    // per tensor: first event writing it (kNone: none)
  std::vector<std::uint32_t> range_;       // per event: its range (0: set-up or outside, k: iterations[k-1])
  std::vector<std::uint32_t> alloc_rank_;  // per tensor: 1-based rank among its range's allocations
  std::vector<std::uint32_t> range_allocs_;  // per range: allocations in it
  std::unordered_map<std::uint64_t, std::uint32_t> by_id_;
};

}  // namespace capuchin::trace
