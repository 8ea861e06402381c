// standby.hpp: the executor standing by while its budget does not bind. After a few iterations
// in which nothing moved and the job stayed well under its budget, launches, copies, memsets
// and graph launches pass straight to the driver: no lock, no allocation, no policy event, no
// use marks (each call only notes its stream). Allocations and frees still take the lock (the
// executor serves the memory and keeps the budget) but feed no policy. The first call that
// needs a move, and anything that could make one needed or would make a noted stream unusable
// (a shortage, a budget change, a capture beginning, a stream destroyed, a launch the fast path
// declines), wakes the executor: from then on every call is watched again, and what the calls
// passed through used is ordered by one event on each noted stream.
//
// Contract:
//   - pass() and done() are the hooks' fast path: lock-free, no allocation, no driver call.
//     pass() true: the call is forwarded unwatched and done() must follow it on the same
//     thread once the driver returned. pass() false: the caller takes the watched path.
//   - enter(), stop() and take_streams() run under the executor's lock: enter() starts a
//     standby, stop() ends it (no call passes from then on), take_streams() gives the streams
//     the passed calls used (the per-thread default stream is never passed: another thread
//     cannot name it). drain(), between stop() and take_streams(), waits for the calls still
//     being forwarded, and is called without the lock: a passed call can block in the driver
//     (a synchronous copy waits for its stream's work), and that work may wait for another
//     thread's call, which takes the lock.
//   - Ordering (Dekker, sequentially consistent): a call announces itself in calls_ and then
//     reads on_; stop() clears on_ and drain() then waits for calls_ to reach 0. A call that saw
//     on_ set has its stream noted and its forward done before drain() returns.
#pragma once

#include <cuda.h>

#include <atomic>
#include <cstdint>
#include <thread>
#include <vector>

namespace capuchin::interpose::exec {

class Standby {
 public:
  static constexpr int kStreams = 64;  // streams noted per standby; one more declines the call (waking the executor)

  bool on() const { return on_.load(std::memory_order_relaxed); }

  // Fast path (no lock): true when the call on driver stream `ds` is forwarded unwatched.
  bool pass(CUstream ds) {
    if (!on_.load(std::memory_order_acquire)) [[likely]]
      return false;
    return pass_slow(ds);
  }
  void done() { calls_.fetch_sub(1, std::memory_order_release); }

  // Under the lock.
  void enter() {
    ++epoch_;
    for (auto& s : streams_) s.store(0, std::memory_order_relaxed);
    on_.store(true, std::memory_order_seq_cst);
  }
  void stop() { on_.store(false, std::memory_order_seq_cst); }
  // Without the lock, after stop(): the passed calls' forwards have returned.
  void drain() const {
    while (calls_.load(std::memory_order_seq_cst) != 0) std::this_thread::yield();
  }
  // Whether a passed call used `s` in this standby (a stream never noted may go without a wake).
  // Under the lock; while waking too (the table stays until the next enter()).
  bool noted(CUstream s) const {
    const std::uint64_t key = reinterpret_cast<std::uint64_t>(s) + 1;
    for (auto& slot : streams_)
      if (slot.load(std::memory_order_acquire) == key) return true;
    return false;
  }
  // After drain(): the streams the passed calls used, each once.
  void take_streams(std::vector<CUstream>& out) const {
    out.clear();
    for (auto& s : streams_) {
      const std::uint64_t v = s.load(std::memory_order_acquire);
      if (v != 0) out.push_back(reinterpret_cast<CUstream>(v - 1));
    }
  }

 private:
  bool pass_slow(CUstream ds);

  std::atomic<bool> on_{false};
  std::atomic<std::uint32_t> calls_{0};
  // Streams noted in this standby (handle + 1; 0: a free slot), and which standby (epoch_: the
  // threads' last noted stream is valid within one).
  std::atomic<std::uint64_t> streams_[kStreams] = {};
  std::atomic<std::uint64_t> epoch_{0};
};

}  // namespace capuchin::interpose::exec
