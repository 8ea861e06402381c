// kernel_timing.hpp: measured kernel durations for captured traces, from CUDA event pairs
// recorded around sampled launches (every Nth launch of a thread; CAPUCHIN_TIMING_EVERY,
// default 16, 0 = off). On a GPU the events time the kernel on the device; on simcuda they
// read its virtual clock. The drain thread reads a pair once its end event completes and
// writes the duration as the kernel's `dur_ns`.
//
// Contract (hook side): Timer::begin is an inline thread-local countdown; only a sampled
// launch takes the out-of-line path: claim a free pair (one CAS; none free -> not timed),
// create its events on first use (a driver call, like the first launch's layout query),
// record the start event on the launch's stream. Launches are never timed while any stream
// capture we track is active (an event recorded into a capture cannot be timed, and must
// not change the user's graph). Timer::end records the end event after a successful launch
// or frees the pair. A failed event call never changes what the program sees: the launch's
// own result is returned untouched, the launch is simply not timed.
// Contract (drain side): poll() says whether a pair's duration is ready, and frees the pair
// when it is read (or failed, or abandoned).
#pragma once

#include <cuda.h>

#include <cstdint>

namespace capuchin::interpose::timing {

// Times 1 launch in `every` per thread (0: off). The driver's event entry points are resolved
// at the first timed launches (capture may start before libcuda is loaded); timing goes off,
// said once, when they are still missing after a few tries. Called once capture starts.
void start(std::uint32_t every);
void reset_after_fork();

extern std::uint32_t g_every;  // 0: off
extern __attribute__((tls_model("initial-exec"))) thread_local std::uint32_t t_countdown;

std::uint32_t begin_slow(CUstream stream);  // pair index + 1, or 0
bool end_slow(std::uint32_t pair, CUstream stream, bool launched);  // false: not timed (pair freed)

class Timer {
 public:
  // Before the launch, with the hook's stream handle (NULL through a _ptsz entry point is
  // the per-thread stream).
  void begin(CUstream stream, bool per_thread) {
    if (t_countdown > 1) [[likely]] {
      --t_countdown;
      return;
    }
    t_countdown = g_every != 0 ? g_every : ~0u;
    if (g_every == 0) return;
    stream_ = stream == nullptr && per_thread ? CU_STREAM_PER_THREAD : stream;
    pair_ = begin_slow(stream_);
  }
  // After the launch: 0 when this launch is not timed, else what the launch record carries.
  std::uint32_t end(bool launched) {
    if (pair_ == 0) [[likely]] return 0;
    return end_slow(pair_, stream_, launched) ? pair_ : 0;
  }

 private:
  std::uint32_t pair_ = 0;
  CUstream stream_ = nullptr;
};

enum class Poll { Ready, NotReady, Failed };
// A launch record's timing pair: Ready fills *dur_ns and frees the pair; Failed frees it;
// NotReady keeps it unless `give_up` (then it is freed and Failed returned). Called on the
// drain thread only: the first call takes that thread out of global capture mode.
Poll poll(std::uint32_t pair, std::uint64_t* dur_ns, bool give_up);

}  // namespace capuchin::interpose::timing
