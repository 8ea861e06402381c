// plan_refine.cpp: a chosen plan improved by replaying it (see plan.hpp): refine_prefetches
// (earlier in-triggers where the replay of the iteration says they pay) and refine_from_replay
// (what the replay saw: swaps whose evictions it cancelled, victims its pressure rules chose).
#include "capuchin/plan.hpp"

#include <algorithm>
#include <cmath>
#include <iterator>
#include <map>
#include <span>
#include <vector>

namespace capuchin::plan {

namespace {

// For each prefetch decision, the earliest position it may move to: after the latest swap-out
// (evict or drop) of the same tensor planned before it; a cross-iteration swap-in, planned
// before its swap-out in the pattern, may move to the iteration's start. Swap-outs never move
// and a prefetch never moves below its floor, so the floors hold for the whole refinement
// (computed once: a scan per prefetch per round was O(decisions^2) each round).
std::vector<std::uint32_t> prefetch_floors(const Plan& plan) {
  std::map<TensorRef, std::vector<std::uint32_t>> outs;
  for (const Decision& e : plan.decisions)
    if (e.act == Act::Evict || e.act == Act::Drop) outs[e.tensor].push_back(e.at);
  for (auto& [ref, v] : outs) std::sort(v.begin(), v.end());
  std::vector<std::uint32_t> floor(plan.decisions.size(), 0);
  for (std::size_t k = 0; k < plan.decisions.size(); ++k) {
    const Decision& d = plan.decisions[k];
    auto it = outs.find(d.tensor);
    if (d.act != Act::Prefetch || it == outs.end()) continue;
    auto below = std::lower_bound(it->second.begin(), it->second.end(), d.at);  // first >= d.at
    if (below != it->second.begin()) floor[k] = *std::prev(below) + 1;
  }
  return floor;
}

// A change is kept when the iteration replays this much faster.
constexpr double kGain = 1e-4;

// Trace event -> pattern position (kNone when the event is not one of the pattern's).
std::uint32_t position_of(const learn::Pattern& pattern, std::uint32_t event) {
  auto it = std::lower_bound(pattern.events.begin(), pattern.events.end(), event,
                             [](const learn::PatternEvent& e, std::uint32_t x) { return e.trace_event < x; });
  if (it == pattern.events.end() || it->trace_event != event) return trace::kNone;
  return static_cast<std::uint32_t>(it - pattern.events.begin());
}

// What refine_from_replay needs of the pattern: each position's start on the ideal timeline
// (the kernels' own durations: no planned stalls, no stretch), and each trace tensor as a plan
// names it.
struct PatternIndex {
  std::vector<double> start;    // position -> ideal start (n + 1 entries)
  std::vector<TensorRef> refs;  // trace tensor -> TensorRef
  PatternIndex(const sim::PreparedTrace& prep, const learn::Pattern& pattern)
      : start(pattern.events.size() + 1, 0.0), refs(tensor_refs(pattern, prep.trace->tensors.size())) {
    for (std::size_t i = 0; i < pattern.events.size(); ++i) start[i + 1] = start[i] + prep.duration_s[pattern.events[i].trace_event];
  }
  TensorRef ref(std::uint32_t tn) const { return refs[tn]; }
};

}  // namespace

// What plan.hpp says: for each cancellation, the tensor's last planned eviction at or before it,
// where the prefetch that follows within the iteration is not before the cancellation.
std::vector<SwapIndices> cancelled_swaps(const learn::Pattern& pattern, std::span<const TensorRef> refs, const Plan& plan,
                                         const ReplayNotes& notes) {
  std::vector<SwapIndices> found;
  const std::size_t none = plan.decisions.size();
  for (const auto& [event, tn] : notes.cancelled) {
    const std::uint32_t at = position_of(pattern, event);
    if (at == trace::kNone) continue;
    const TensorRef ref = refs[tn];
    std::size_t out = none, in = none;
    for (std::size_t k = 0; k < plan.decisions.size(); ++k) {
      const Decision& d = plan.decisions[k];
      if (!(d.tensor == ref)) continue;
      if (d.act == Act::Evict) {
        if (d.at > at) break;  // decisions are in issue order: later swaps are not this one
        out = k, in = none;
      } else if (d.act == Act::Prefetch && out != none && in == none) {
        in = k;
      }
    }
    if (out == none || in == none || plan.decisions[in].at < at) continue;
    if (std::find(found.begin(), found.end(), SwapIndices{out, in}) == found.end()) found.emplace_back(out, in);
  }
  return found;
}

namespace {

Plan without_swaps(const Plan& plan, std::span<const SwapIndices> swaps) {
  Plan q = plan;
  std::vector<bool> gone(q.decisions.size(), false);
  for (const auto& [out, in] : swaps) {
    gone[out] = gone[in] = true;
    const Decision& d = plan.decisions[out];
    if (d.access >= d.at && q.delayed_evictions > 0) --q.delayed_evictions;  // its access was in the iteration before
  }
  std::size_t k = 0;
  std::erase_if(q.decisions, [&](const Decision&) { return gone[k++]; });
  q.swaps -= static_cast<std::uint32_t>(std::min<std::size_t>(q.swaps, swaps.size()));
  return q;
}

// The replay's swapped pressure victims as planned swaps: evicted right after the access before
// the pressure, brought back from the latest position whose ideal start leaves the copy in (with
// a tenth to spare) before the next access, where the copy out fits in between and the plan has
// no decision on the tensor in that gap. (A swap that takes an input a planned recomputation
// needs in that gap, or that is not worth the link, is left to the replay to refuse.) Victims
// dropped, or with no access on either side within the iteration, are left to the pressure
// rules. Returns how many swaps were added.
std::size_t add_victim_swaps(const sim::PreparedTrace& prep, const learn::Pattern& pattern, const PatternIndex& ix,
                             const ReplayNotes& notes, Plan& q) {
  std::vector<std::uint32_t> taken;
  for (const ReplayNotes::Victim& v : notes.victims) {
    if (v.dropped || v.last_access == trace::kNone || v.next_access == trace::kNone) continue;
    const std::uint32_t a = position_of(pattern, v.last_access), b = position_of(pattern, v.next_access);
    if (a == trace::kNone || b == trace::kNone || b <= a + 1) continue;
    if (std::find(taken.begin(), taken.end(), v.tensor) != taken.end()) continue;
    const TensorRef ref = ix.ref(v.tensor);
    const std::uint32_t out_at = a + 1;
    if (std::any_of(q.decisions.begin(), q.decisions.end(), [&](const Decision& d) { return d.tensor == ref && d.at >= out_at && d.at <= b; }))
      continue;
    const std::uint64_t bytes = prep.trace->tensors[v.tensor].bytes;
    const double out_s = sim::swap_out_s(prep.gpu, prep.eff, bytes), in_s = sim::swap_in_s(prep.gpu, prep.eff, bytes);
    // A tenth to spare: the replay's copies in queue behind others, which the ideal timeline
    // does not see (refine_prefetches moves a late one earlier afterwards).
    std::uint32_t in_at = b;
    while (in_at > out_at && ix.start[b] - ix.start[in_at] < 1.1 * in_s) --in_at;
    if (in_at <= out_at || ix.start[in_at] - ix.start[out_at] < out_s) continue;  // the gap cannot hide the round trip
    taken.push_back(v.tensor);
    const double slack = ix.start[b] - ix.start[out_at] - out_s - in_s;
    q.decisions.push_back({out_at, Act::Evict, ref, bytes, a, Reason::ReplayVictim, slack, 0, 0});
    q.decisions.push_back({in_at, Act::Prefetch, ref, bytes, b, Reason::ReplayVictim, slack, 0, 0});
    ++q.swaps;
  }
  std::stable_sort(q.decisions.begin(), q.decisions.end(), issued_before<Decision>);
  return taken.size();
}

}  // namespace

Plan refine_from_replay(const sim::PreparedTrace& prep, const learn::Pattern& pattern, Plan plan, std::uint64_t budget,
                        bool allow_recompute, const RefineLimits& limits) {
  if (!std::isfinite(plan.replay_s) || pattern.events.empty()) return plan;
  const std::size_t max_replays = std::min(limits.max_replays_from_notes, limits.max_replayed_events / pattern.events.size());
  const PatternIndex ix(prep, pattern);
  std::size_t replays = 0;
  auto try_plan = [&](Plan& q) {  // kept when it replays faster
    ++replays;
    const double s = replay_plan(prep, pattern, q, budget, allow_recompute);
    if (!(s < plan.replay_s * (1 - kGain))) return false;
    q.replay_s = s;
    ++q.refined_moves;
    plan = std::move(q);
    return true;
  };
  while (replays + 2 <= max_replays) {
    ReplayNotes notes;
    ++replays;
    // The plan's own replay again, for its notes (a replay is deterministic; were it not, the
    // notes would describe another run: stop. On the shared traces, p100 and h200 at 0.6x, 0.5x
    // and 0.3x, it always matched).
    if (replay_plan(prep, pattern, plan, budget, allow_recompute, &notes) != plan.replay_s) break;
    // Cancelled swaps: all of them left out, else each alone.
    const std::vector<SwapIndices> wasted = cancelled_swaps(pattern, ix.refs, plan, notes);
    bool kept = false;
    for (std::size_t w = wasted.size() > 1 ? 0 : 1; w <= wasted.size() && !kept && replays < max_replays; ++w) {
      Plan q = w == 0 ? without_swaps(plan, wasted) : without_swaps(plan, std::span(wasted).subspan(w - 1, 1));
      kept = try_plan(q);
    }
    if (kept) continue;
    Plan q = plan;
    if (replays >= max_replays || add_victim_swaps(prep, pattern, ix, notes, q) == 0 || !try_plan(q)) break;
  }
  return plan;
}

Plan refine_prefetches(const sim::PreparedTrace& prep, const learn::Pattern& pattern, Plan plan, std::uint64_t budget,
                       bool allow_recompute, const RefineLimits& limits) {
  if (!std::isfinite(plan.replay_s) || pattern.events.empty()) return plan;
  const std::size_t per_replay = pattern.events.size();
  const std::size_t max_replays = std::min(limits.max_replays, limits.max_replayed_events / per_replay);
  const std::vector<std::uint32_t> floor = prefetch_floors(plan);
  std::size_t replays = 0;
  // Decisions keep their indices (and leave `at` order) while moves are tried: the replay
  // orders its steps by event itself. They are sorted again at the end.
  for (bool improved = true; improved && replays < max_replays;) {
    improved = false;
    for (std::size_t k = 0; k < plan.decisions.size() && replays < max_replays; ++k) {
      const Decision d = plan.decisions[k];  // a copy: plan is replaced when a move is kept
      if (d.act != Act::Prefetch) continue;
      for (const std::uint32_t shift : {32u, 8u, 2u, 1u}) {
        if (d.at < floor[k] + shift || replays >= max_replays) continue;
        Plan q = plan;
        q.decisions[k].at = d.at - shift;
        ++replays;
        const double s = replay_plan(prep, pattern, q, budget, allow_recompute);
        if (!(s < plan.replay_s * (1 - kGain))) continue;
        q.replay_s = s;
        ++q.refined_moves;
        plan = std::move(q);
        improved = true;
        break;
      }
    }
  }
  std::stable_sort(plan.decisions.begin(), plan.decisions.end(), issued_before<Decision>);
  return plan;
}

}  // namespace capuchin::plan
