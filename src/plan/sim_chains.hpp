// sim_chains.hpp: recomputation chains among dropped tensors in the simulator, as the
// executor's pressure rule meets them (interpose/exec/chains.hpp is the executor's side, on its
// blocks): a tensor may be dropped while an input of its writers is dropped as well (a chain:
// that input is recomputed first, as DTR does), when every chain through it stays within
// policy::kMaxRecomputeChain dropped tensors and each recomputation that would run it first
// (its own, and those of the dropped tensors over it) fits the budget on its own.
//
// Contract: pure functions of the simulator state and of the drops chosen in the current
// round (not yet applied: the executor applies each before choosing the next, so they count
// as dropped). Each walk works out a tensor's result once and goes no deeper than a chain may.
#pragma once

#include <cstdint>
#include <span>

#include "capuchin/sim.hpp"

namespace capuchin::plan::chains {

// Every input of t's writers is on the device now, or dropped (recomputed first).
bool inputs_there_or_dropped(const sim::SimState& s, std::uint32_t t);

// Dropping t (resident now) keeps it recomputable, every chain of dropped tensors through it
// within policy::kMaxRecomputeChain, and every recomputation that would recompute it first
// within the budget on its own (the executor's try_drop: chains::allows_drop and
// chains::replay_bytes). `chosen`: this round's drops, counted as dropped.
bool allows_drop(const sim::SimState& s, std::uint32_t t, std::span<const std::uint32_t> chosen);

}  // namespace capuchin::plan::chains
