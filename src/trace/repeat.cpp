// repeat_last_iteration: the set-up, a preamble making the last iteration's inherited state,
// then the last iteration N times with fresh ids and the inherited/kept hand-over. The
// contract is in include/capuchin/trace_repeat.hpp. The result is built directly (no text
// round trip) by the TraceAppender build_trace uses, so its derived fields are the reader's.
#include <algorithm>
#include <limits>
#include <span>

#include "capuchin/trace_repeat.hpp"

namespace capuchin::trace {
namespace {

// Appends events of T, their tensors mapped, to a TraceAppender, which derives the rest as
// build_trace does.
class Builder {
 public:
  explicit Builder(const Trace& t) : t_(t), out_(t.name, t.header) {}

  // Appends T's event `e` with its tensors mapped by `map` (T's index -> output index). An
  // alloc makes a new tensor with id `new_id` and returns its index; other events return kNone.
  std::uint32_t copy(std::uint32_t e, const std::vector<std::uint32_t>& map, std::uint64_t new_id = 0) {
    const Event& src = t_.events[e];
    source_.push_back(e);
    EventView v = view_of(src);
    switch (src.op) {
      case Op::Alloc: {
        v.id = new_id;
        v.role = t_.tensors[src.tensor].role;
        const std::uint32_t made = out_.tensors();
        out_.append(v);
        return made;
      }
      case Op::Free:
        v.index = map[src.tensor];
        break;
      case Op::Kernel:
        v.name = t_.names[src.name];
        v.read_index = mapped(reads_, src.access_begin, src.reads_end, map);
        v.write_index = mapped(writes_, src.reads_end, src.writes_end, map);
        v.touch_index = mapped(touch_, src.writes_end, src.access_end, map);
        break;
      case Op::Copy:
        if (src.flags & kHasSrc) v.src_index = map[src.tensor];
        if (src.flags & kHasDst) v.dst_index = map[src.tensor2];
        break;
      case Op::Iter:
      case Op::Sync:
        break;
    }
    out_.append(v);
    return kNone;
  }

  // A `free` of T's tensor `x` (output tensor map[x]) that T does not have, on its alloc's stream.
  void free(std::uint32_t x, const std::vector<std::uint32_t>& map) {
    const Event& alloc = t_.events[t_.tensors[x].alloc_event];
    EventView v;
    v.op = Op::Free;
    v.flags = alloc.flags & kHasStream;
    v.stream = alloc.stream;
    v.index = map[x];
    source_.push_back(kNone);
    out_.append(v);
  }

  // T's `iter` event e, numbered n.
  void iter(std::uint32_t e, std::uint64_t n) {
    EventView v = view_of(t_.events[e]);
    v.n = n;
    source_.push_back(e);
    out_.append(v);
  }

  Trace finish(std::vector<std::uint32_t>* source) {
    if (source) *source = std::move(source_);
    Trace u = out_.finish();
    u.header.iterations = static_cast<std::int64_t>(u.iterations.size());
    return u;
  }

 private:
  static EventView view_of(const Event& e) {
    EventView v;
    v.op = e.op;
    v.flags = e.flags;
    v.stream = e.stream;
    v.dir = e.dir;
    v.bytes = e.bytes;
    v.n = e.n;
    v.flops = e.flops;
    v.dur_ns = e.dur_ns;
    return v;
  }

  std::span<const std::uint32_t> mapped(std::vector<std::uint32_t>& out, std::uint32_t from, std::uint32_t to,
                                        const std::vector<std::uint32_t>& map) const {
    out.clear();
    for (std::uint32_t a = from; a < to; ++a) out.push_back(map[t_.accesses[a].tensor]);
    return out;
  }

  const Trace& t_;
  TraceAppender out_;
  std::vector<std::uint32_t> source_;  // per appended event: T's event it copies, kNone for an added free
  std::vector<std::uint32_t> reads_, writes_, touch_;
};

}  // namespace

Expected<Trace> repeat_last_iteration(const Trace& t, unsigned iterations, std::vector<std::uint32_t>* source_event) {
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
      for (std::uint32_t x : unpaired) b.free(x, map);
  }
  return b.finish(source_event);
}

}  // namespace capuchin::trace
