// plan_refine.hpp: a chosen plan improved by the simulator's replay (anytime refinement).
//
// The planner places each swap-in on its ideal timeline; where the replayed iteration stalls
// (the link is busier than that timeline assumed, or a planned wait moved everything after
// it), an earlier in-trigger can hide a swap-in that arrives late. refine_prefetches tries, for
// each planned prefetch, in-triggers 32, 8 and 2 positions earlier (never before the tensor's
// own swap-out), keeps a move when the replay of the whole iteration gets faster, and repeats
// while a round keeps one.
//
// Contract: pure computation, deterministic (bounded by replays and replayed events, never by
// wall time); the plan returned replays no slower than the one given (its replay_s is the
// replayed time); decisions stay sorted by `at`. Only prefetch positions move: what is
// swapped or recomputed, and where, stays as planned.
#pragma once

#include <cstddef>

#include "capuchin/plan.hpp"

namespace capuchin::plan {

struct RefineLimits {
  std::size_t max_replays = 2000;
  std::size_t max_replayed_events = 4'000'000;  // a 50k-event iteration gets 80 replays
};

// `plan.replay_s` must be its replay at `budget` (finite). allow_recompute as it was replayed.
Plan refine_prefetches(const sim::PreparedTrace& prep, const learn::Pattern& pattern, Plan plan, std::uint64_t budget,
                       bool allow_recompute, const RefineLimits& limits = {});

}  // namespace capuchin::plan
