// plan_refine.cpp: refine_prefetches (see plan.hpp): earlier in-triggers where the replay of
// the iteration says they pay.
#include "capuchin/plan.hpp"

#include <algorithm>
#include <cmath>
#include <iterator>
#include <map>
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

}  // namespace

Plan refine_prefetches(const sim::PreparedTrace& prep, const learn::Pattern& pattern, Plan plan, std::uint64_t budget,
                       bool allow_recompute, const RefineLimits& limits) {
  if (!std::isfinite(plan.replay_s) || pattern.events.empty()) return plan;
  const std::size_t per_replay = pattern.events.size();
  const std::size_t max_replays = std::min(limits.max_replays, limits.max_replayed_events / per_replay);
  constexpr double kGain = 1e-4;  // a move is kept when the iteration replays this much faster
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
