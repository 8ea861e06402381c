// plan_refine.cpp: refine_prefetches (see plan.hpp): earlier in-triggers where the replay of
// the iteration says they pay.
#include "capuchin/plan.hpp"

#include <algorithm>
#include <cmath>

namespace capuchin::plan {

namespace {

// The earliest position a prefetch of decision k may move to: after the latest swap-out of
// the same tensor planned before it (a cross-iteration swap-in, planned before its swap-out
// in the pattern, may move to the iteration's start).
std::uint32_t earliest_trigger(const Plan& plan, std::size_t k) {
  const Decision& d = plan.decisions[k];
  std::uint32_t lo = 0;
  for (const Decision& e : plan.decisions)
    if ((e.act == Act::Evict || e.act == Act::Drop) && e.tensor == d.tensor && e.at < d.at) lo = std::max(lo, e.at + 1);
  return lo;
}

}  // namespace

Plan refine_prefetches(const sim::PreparedTrace& prep, const learn::Pattern& pattern, Plan plan, std::uint64_t budget,
                       bool allow_recompute, const RefineLimits& limits) {
  if (!std::isfinite(plan.replay_s) || pattern.events.empty()) return plan;
  const std::size_t per_replay = pattern.events.size();
  const std::size_t max_replays = std::min(limits.max_replays, limits.max_replayed_events / per_replay);
  constexpr double kGain = 1e-4;  // a move is kept when the iteration replays this much faster
  std::size_t replays = 0;
  for (bool improved = true; improved && replays < max_replays;) {
    improved = false;
    for (std::size_t k = 0; k < plan.decisions.size() && replays < max_replays; ++k) {
      const Decision d = plan.decisions[k];  // a copy: plan is replaced when a move is kept
      if (d.act != Act::Prefetch) continue;
      const std::uint32_t lo = earliest_trigger(plan, k);
      for (const std::uint32_t shift : {32u, 8u, 2u, 1u}) {
        if (d.at < lo + shift || replays >= max_replays) continue;
        Plan q = plan;
        q.decisions[k].at = d.at - shift;
        ++replays;
        const double s = replay_plan(prep, pattern, q, budget, allow_recompute);
        if (!(s < plan.replay_s * (1 - kGain))) continue;
        q.replay_s = s;
        plan = std::move(q);
        improved = true;
        break;
      }
    }
  }
  std::stable_sort(plan.decisions.begin(), plan.decisions.end(), [](const Decision& x, const Decision& y) { return x.at < y.at; });
  return plan;
}

}  // namespace capuchin::plan
