// sim_actions.hpp: what the capuchin policies do in the simulator besides following the
// controller: a plan command turned into a simulator action where it applies, and victims
// chosen under memory pressure. Shared by the `capuchin` policies (capuchin_policy.cpp) and
// the planner's replay of a candidate plan (plan_replay.cpp), so a plan is judged by the same
// rules the simulated job follows.
//
// Contract: pure functions of the simulator state; they append actions and never apply them
// (the simulator validates every action).
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "capuchin/plan.hpp"
#include "capuchin/sim.hpp"
#include "capuchin/victims.hpp"

namespace capuchin::plan {

// The command `act` on tensor tn as an action, when it applies now (an eviction of a resident
// tensor, a prefetch of one on the host, ...); the executor skips commands that do not apply.
void issue_action(const sim::SimState& s, Act act, std::uint32_t tn, bool allow_recompute, std::vector<sim::Action>& out);

// Victims for a shortage of bytes_short: resident tensors by policy::VictimOrder (restore cost
// per byte and idle time), one dropped instead of swapped when recomputing it is allowed, its
// writers' inputs are resident or dropped (a chain: recomputed first, as DTR does), its own
// recomputation is cheaper than the swap round trip and chains::allows_drop (sim_chains.hpp)
// allows it; asked again with this round's drops counted, a refusal skips it (the executor's
// start_victims does the same). idle_since: the tick of each tensor's last use; now: the
// current tick. cands is scratch.
void pressure_victims(const sim::SimState& s, bool allow_recompute, std::span<const std::uint64_t> idle_since,
                      std::uint64_t now, std::uint64_t bytes_short, std::vector<policy::VictimCandidate>& cands,
                      std::vector<sim::Action>& out);

}  // namespace capuchin::plan
