// chains.hpp: recomputation chains among dropped blocks, as the executor's drops and
// recomputations need them (recompute.cpp). A dropped block is recomputed by replaying its
// producer's launch; each input of that launch must be there at the version it had then, or
// be dropped and recomputable in turn (a chain). Another output of the same launch is not a
// level of a chain: dropped too, the one replay writes both (co_output).
//
// Contract: pure functions of the block table and the blocks' producers, versions, `where`
// and dependents lists; no driver call, no wait. Each walk works out a block's result once
// (however many chains share it: never a walk of every path), goes no deeper than a chain may
// be, and ends on a cycle (the dependents lists can keep entries of earlier drops).
// Called under the executor's lock.
#pragma once

#include <cstdint>

#include "block.hpp"
#include "capuchin/victims.hpp"

namespace capuchin::interpose::exec::chains {

// The most dropped blocks on one chain recomputed for one access (the block itself included):
// each level is a nested recompute on the calling thread's stack. The simulator's pressure rule
// bounds its chains the same (plan::chains::allows_drop).
inline constexpr int kMaxChain = policy::kMaxRecomputeChain;

// `in` is another output of the launch that `p` replays (written by the same replay).
inline bool co_output(const Block& in, const Producer& p) {
  return p.launch != 0 && in.producer != nullptr && in.producer->launch == p.launch;
}

// Dropped blocks under b on its longest chain of dropped inputs (0: none is dropped); -1 when
// b cannot be recomputed: no producer, an input gone or changed since its producer ran,
// `dropping` among the inputs on the way, or more than `room` dropped blocks under it.
int dropped_under(const BlockTable& blocks, const Block& b, int room, const Block* dropping = nullptr);

// Some input of b's producer is dropped (not another output of its launch): dropping b makes
// or lengthens a chain.
bool input_dropped(const BlockTable& blocks, const Block& b);

// Dropped blocks over b on its longest chain of dropped dependents (past kMaxChain: some
// number over it). A dropped output of b's own launch is on b's level.
int dropped_over(const BlockTable& blocks, const Block& b);

// Dropping b (resident now) keeps it recomputable and every chain through it within kMaxChain.
bool allows_drop(const BlockTable& blocks, const Block& b);

// What b's recomputation holds at once: b, its producer's inputs, and those of each dropped
// input recomputed first (pinned while the levels above wait), each block counted once (up to
// 512 blocks: a bound on the work).
std::uint64_t replay_bytes(const BlockTable& blocks, const Block& b);

// With b dropped (resident now), its replay and each replay that would recompute it first (of
// the dropped blocks over it) hold at most `budget` at once, each on its own. The pressure
// rule drops only such blocks (the simulator's: plan::chains::allows_drop): a chain whose
// replay cannot fit would run from host memory.
bool replays_fit(const BlockTable& blocks, const Block& b, std::uint64_t budget);

}  // namespace capuchin::interpose::exec::chains
