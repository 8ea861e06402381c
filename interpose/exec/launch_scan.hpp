// The scan before a launch the executor handles, shared by the driver and runtime launch
// hooks: collects the parameter words that may point into allocations and fills the
// executor's view of the launch, except the geometry and stream, which each hook sets from
// its own arguments.
// Contract: as scan_launch (no lock, no allocation); call inside the hook's ErrnoKeeper.
#pragma once

#include "../capture.hpp"
#include "../kernel_timing.hpp"
#include "executor.hpp"

namespace capuchin::interpose {

// The scan's words (14 KiB): a hook's local, left uninitialised (a struct with initialised
// members beside it gets the whole object cleared: a memset per launch, measured).
struct LaunchWords {
  std::uint64_t words[kMaxLaunchWords];  // recorded for the trace
};
struct ScannedLaunch {
  exec::Launch launch;
  std::uint64_t* words;
  std::vector<exec::Block*>& blocks;  // the executor's blocks among them (before_launch)
  unsigned nwords = 0;
  std::uint8_t flags = 0;
  timing::Timer timer;  // the hook begins it just before forwarding the launch

  ScannedLaunch(LaunchWords& buf, const FuncLayout* layout, void** params, void** extra, std::uint8_t initial_flags)
      : words(buf.words), blocks(exec::launch_blocks()), flags(initial_flags) {
    nwords = scan_launch(layout, params, extra, words, &flags);
    launch.layout = layout;
    launch.per_thread = (flags & kPerThread) != 0;
    launch.params = params;
    launch.extra = extra;
    launch.complete_scan = layout != nullptr;
    launch.words_truncated = (flags & kTruncated) != 0;
  }
  void set_geometry(unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz, unsigned shmem,
                    CUstream s) {
    launch.grid[0] = gx, launch.grid[1] = gy, launch.grid[2] = gz;
    launch.block[0] = bx, launch.block[1] = by, launch.block[2] = bz;
    launch.shmem = shmem;
    launch.stream = s;
  }
  // Before it: the executor resolves the words to its blocks.
  CUresult prepare() { return exec::before_launch(launch, words, nwords, blocks); }
  // Just before the real launch (after prepare and the timer's start): a probation's first step.
  void before_forward() { exec::probe_before(launch); }
  // After the real launch: a probation's replay (`relaunch`: the same call again, returning a
  // CUresult), then tells the executor, and records the launch when it happened.
  template <class Relaunch>
  void finish(bool launched, std::uint64_t func, std::uint64_t stream, Relaunch&& relaunch) {
    const std::uint32_t timed = timer.end(launched);  // before a probation's replay: not timed
    if (launched) exec::probe_after(launch, relaunch);
    exec::after_launch(launch, blocks, launched);
    if (launched) record_launch_words(launch.layout, func, words, nwords, stream, flags, timed);
  }
};

}  // namespace capuchin::interpose
