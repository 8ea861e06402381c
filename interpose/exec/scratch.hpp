// scratch.hpp: per-thread scratch vectors for the executor's calls, so that a call which
// leaves the lock to wait (Executor::await) cannot have its working lists changed by another
// thread's call meanwhile, and the launch path reuses storage instead of allocating.
//
// Contract: one Scratch per thread, made on its first executor call and freed when the thread
// exits (held by a trivially destructible initial-exec TLS pointer, so a hook called during
// thread exit after that finds none and makes another).
// Each list belongs to one function at a time: the function that fills it uses it before
// calling anything that could fill it again (`launch`: one launch hook, which never nests on
// its thread).
#pragma once

#include <cstdint>
#include <vector>

#include "block.hpp"
#include "capuchin/controller.hpp"
#include "capuchin/victims.hpp"

namespace capuchin::interpose::exec {

struct Scratch {
  std::vector<Block*> blocks;                     // start_victims, cool_warm: cached blocks to move out
  std::vector<Block*> launch;                     // a launch hook's blocks, from before_launch to after_launch
  std::vector<std::uint64_t> ids;                 // settle_for_unknown_access, kernel event ids
  std::vector<policy::Command> cmds;              // Executor::feed
  std::vector<policy::VictimCandidate> victims;   // start_victims
  std::vector<Ev> waits;                          // await_quiet
  std::vector<Ev> latest;                         // streams_idle_now
  int settling = 0;  // this thread is between a settle and its unknown_in_flight count (SettleWindow)
};

Scratch& scratch();

}  // namespace capuchin::interpose::exec
