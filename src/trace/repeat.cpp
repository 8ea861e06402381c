// repeat_last_iteration: the set-up, a preamble making the last iteration's inherited state,
// then the last iteration N times with fresh ids and the inherited/kept hand-over. The
// contract is in include/capuchin/trace_repeat.hpp. The result is built directly (no text
// round trip) with the derived fields build_trace (src/trace/model.cpp) computes: tensor
// alloc/free/first/last access and access counts, access ranges, kernel names in order of
// first use, iterations, setup_end.
#include <algorithm>
#include <limits>

#include "capuchin/trace_repeat.hpp"

namespace capuchin::trace {
namespace {

// Appends events to a Trace, keeping every derived field as build_trace does.
class Builder {
 public:
  explicit Builder(const Trace& t) : t_(t) {
    u_.name = t.name;
    u_.header = t.header;
    name_map_.assign(t.names.size(), kNone);
  }

  // Appends original event `e` with its tensors mapped by `map` (original index -> output
  // index). An alloc makes a new tensor with id `new_id` and returns its index; other events
  // return kNone.
  std::uint32_t copy(std::uint32_t e, const std::vector<std::uint32_t>& map, std::uint64_t new_id = 0) {
    const Event& src = t_.events[e];
    const auto ei = static_cast<std::uint32_t>(u_.events.size());
    Event ev = src;
    ev.access_begin = ev.reads_end = ev.writes_end = ev.access_end = static_cast<std::uint32_t>(u_.accesses.size());
    std::uint32_t made = kNone;
    switch (src.op) {
      case Op::Alloc: {
        const Tensor& orig = t_.tensors[src.tensor];
        Tensor ts;
        ts.id = new_id;
        ts.bytes = orig.bytes;
        ts.role = orig.role;
        ts.alloc_event = ei;
        made = static_cast<std::uint32_t>(u_.tensors.size());
        u_.tensors.push_back(ts);
        last_access_event_.push_back(kNone);
        ev.tensor = made;
        break;
      }
      case Op::Free:
        ev.tensor = map[src.tensor];
        u_.tensors[ev.tensor].free_event = ei;
        break;
      case Op::Kernel:
      case Op::Copy:
        if (src.op == Op::Kernel) {  // names in order of first use, as the reader numbers them
          if (name_map_[src.name] == kNone) {
            name_map_[src.name] = static_cast<std::uint32_t>(u_.names.size());
            u_.names.push_back(t_.names[src.name]);
          }
          ev.name = name_map_[src.name];
        }
        if (src.tensor != kNone) ev.tensor = map[src.tensor];
        if (src.tensor2 != kNone) ev.tensor2 = map[src.tensor2];
        append_accesses(ei, src.access_begin, src.reads_end, map);
        ev.reads_end = static_cast<std::uint32_t>(u_.accesses.size());
        append_accesses(ei, src.reads_end, src.writes_end, map);
        ev.writes_end = static_cast<std::uint32_t>(u_.accesses.size());
        append_accesses(ei, src.writes_end, src.access_end, map);
        break;
      case Op::Iter:
      case Op::Sync:
        break;
    }
    ev.access_end = static_cast<std::uint32_t>(u_.accesses.size());
    u_.events.push_back(ev);
    return made;
  }

  // A `free` of output tensor `x` that the original trace does not have (on its alloc's stream).
  void free(std::uint32_t x) {
    const auto ei = static_cast<std::uint32_t>(u_.events.size());
    const Event& alloc = u_.events[u_.tensors[x].alloc_event];
    Event ev;
    ev.op = Op::Free;
    ev.flags = alloc.flags & kHasStream;
    ev.stream = alloc.stream;
    ev.tensor = x;
    ev.access_begin = ev.reads_end = ev.writes_end = ev.access_end = static_cast<std::uint32_t>(u_.accesses.size());
    u_.tensors[x].free_event = ei;
    u_.events.push_back(ev);
  }

  // An `iter` event numbered n (a copy of original `iter` event e), closing the previous one.
  void iter(std::uint32_t e, std::uint64_t n) {
    const auto ei = static_cast<std::uint32_t>(u_.events.size());
    if (u_.iterations.empty()) u_.setup_end = ei;
    else u_.iterations.back().end = ei;
    u_.iterations.push_back({n, ei, ei});
    copy(e, {});
    u_.events.back().n = n;
  }

  Trace finish() {
    const auto n = static_cast<std::uint32_t>(u_.events.size());
    if (!u_.iterations.empty()) u_.iterations.back().end = n;
    else u_.setup_end = n;
    u_.header.iterations = static_cast<std::int64_t>(u_.iterations.size());
    return std::move(u_);
  }

 private:
  void append_accesses(std::uint32_t ei, std::uint32_t from, std::uint32_t to, const std::vector<std::uint32_t>& map) {
    for (std::uint32_t a = from; a < to; ++a) {
      const std::uint32_t x = map[t_.accesses[a].tensor];
      u_.accesses.push_back({ei, x, t_.accesses[a].mode});
      Tensor& ts = u_.tensors[x];
      if (ts.first_access == kNone) ts.first_access = ei;
      ts.last_access = ei;
      if (last_access_event_[x] != ei) {
        last_access_event_[x] = ei;
        ++ts.access_count;
      }
    }
  }

  const Trace& t_;
  Trace u_;
  std::vector<std::uint32_t> last_access_event_;  // per output tensor, to count accessing events once
  std::vector<std::uint32_t> name_map_;           // original name index -> output name index
};

}  // namespace

Expected<Trace> repeat_last_iteration(const Trace& t, unsigned iterations) {
  if (iterations == 0) return make_error(t.name + ": cannot repeat the last iteration 0 times (at least 1)");
  if (t.iterations.empty()) return make_error(t.name + " has no `iter` event: nothing to repeat");
  const Iteration& steady = t.iterations.back();

  // Classify the tensors as the contract says.
  std::vector<std::uint32_t> setup_freed_early, made_early, freed_inherited, kept;
  std::uint64_t max_id = 0;
  for (std::uint32_t x = 0; x < t.tensors.size(); ++x) {
    const Tensor& ten = t.tensors[x];
    max_id = std::max(max_id, ten.id);
    const bool made_before = ten.alloc_event < steady.begin;
    const bool freed_before = ten.free_event != kNone && ten.free_event < steady.begin;
    const bool freed_within = ten.free_event != kNone && ten.free_event < steady.end;
    if (made_before && freed_before) {
      if (ten.alloc_event < t.setup_end && ten.free_event >= t.setup_end) setup_freed_early.push_back(x);
      continue;
    }
    if (made_before) {
      if (ten.alloc_event >= t.setup_end) made_early.push_back(x);
      if (freed_within) freed_inherited.push_back(x);
    } else if (!freed_within) {
      kept.push_back(x);
    }
  }
  std::sort(freed_inherited.begin(), freed_inherited.end(),
            [&](std::uint32_t a, std::uint32_t b) { return t.tensors[a].free_event < t.tensors[b].free_event; });
  bool paired = freed_inherited.size() <= kept.size();
  for (std::size_t i = 0; paired && i < freed_inherited.size(); ++i)
    paired = t.tensors[freed_inherited[i]].bytes == t.tensors[kept[i]].bytes;
  if (!paired)
    return make_error(t.name + ": the last iteration frees " + std::to_string(freed_inherited.size()) +
                      " tensors an earlier iteration made, and does not make and keep one of the same size for each "
                      "(in order): it cannot be repeated");

  std::uint64_t made_per_iteration = 0;
  for (std::uint32_t e = steady.begin; e < steady.end; ++e) made_per_iteration += t.events[e].op == Op::Alloc;
  const std::uint64_t fresh_needed = made_per_iteration * (iterations - 1);
  if (fresh_needed > std::numeric_limits<std::uint64_t>::max() - max_id)
    return make_error(t.name + ": the largest id (" + std::to_string(max_id) + ") leaves no room for " +
                      std::to_string(fresh_needed) + " fresh ids");

  Builder b(t);
  std::vector<std::uint32_t> map(t.tensors.size(), kNone);
  // 1. Set-up, as it is.
  for (std::uint32_t e = 0; e < t.setup_end; ++e) {
    const std::uint32_t made = b.copy(e, map, t.events[e].op == Op::Alloc ? t.tensors[t.events[e].tensor].id : 0);
    if (made != kNone) map[t.events[e].tensor] = made;
  }
  // 2. The preamble: set-up tensors an earlier iteration freed, then inherited ones it made.
  std::sort(setup_freed_early.begin(), setup_freed_early.end(),
            [&](std::uint32_t a, std::uint32_t c) { return t.tensors[a].free_event < t.tensors[c].free_event; });
  for (std::uint32_t x : setup_freed_early) b.copy(t.tensors[x].free_event, map);
  for (std::uint32_t x : made_early) map[x] = b.copy(t.tensors[x].alloc_event, map, t.tensors[x].id);
  // 3. The repetitions.
  std::vector<std::uint32_t> unpaired(kept.begin() + static_cast<std::ptrdiff_t>(freed_inherited.size()), kept.end());
  std::uint64_t next_id = max_id + 1;
  for (unsigned r = 1; r <= iterations; ++r) {
    if (r > 1)
      for (std::size_t i = 0; i < freed_inherited.size(); ++i) map[freed_inherited[i]] = map[kept[i]];
    b.iter(steady.begin, r);
    for (std::uint32_t e = steady.begin + 1; e < steady.end; ++e) {
      const Event& ev = t.events[e];
      if (ev.op == Op::Alloc) map[ev.tensor] = b.copy(e, map, r == 1 ? t.tensors[ev.tensor].id : next_id++);
      else b.copy(e, map);
    }
    if (r < iterations)
      for (std::uint32_t x : unpaired) b.free(map[x]);
  }
  return b.finish();
}

}  // namespace capuchin::trace
