// capture_mode.hpp: capuchin's own CUDA calls must never break an application's graph capture.
//
// CUDA prohibits "potentially unsafe" calls (event and stream queries, synchronisations,
// cuMemAlloc, cuMemAllocManaged, cuMemFree, ...) from a thread in GLOBAL interaction mode (every
// thread's default) while any thread has a GLOBAL capture (torch.cuda.graph's default), and the
// capture is invalidated (cuda.h, cuThreadExchangeStreamCaptureMode; PyTorch met it with its NCCL
// watchdog's cudaEventQuery and moved that thread to thread-local mode). capuchin's calls never
// touch a capturing stream (work on one is left alone), so they are made in a mode that cannot
// break a capture.
//
// Contract:
// - leave_global_capture_mode(): for capuchin's own threads (the drain), once the driver is in
//   use (before, nothing can be found): sets the calling thread's mode to THREAD_LOCAL for good.
//   True when done, or when the driver has no such entry point (a driver before 10.1: nothing to
//   mind); false when the driver refused (not initialised yet: call again later).
// - RelaxedCaptureScope: on an application thread inside a hook. While a capture we track is in
//   progress anywhere, the thread's mode is RELAXED for the scope and restored at its end (so the
//   application's own calls keep their mode); otherwise it costs one atomic load. A capture begun
//   on another thread during the scope is not seen (the window of one hook's bookkeeping).
#pragma once

#include <cuda.h>

namespace capuchin::interpose {

bool leave_global_capture_mode();

class RelaxedCaptureScope {
 public:
  RelaxedCaptureScope();
  ~RelaxedCaptureScope();
  RelaxedCaptureScope(const RelaxedCaptureScope&) = delete;
  RelaxedCaptureScope& operator=(const RelaxedCaptureScope&) = delete;

 private:
  bool swapped_ = false;
  CUstreamCaptureMode previous_ = CU_STREAM_CAPTURE_MODE_GLOBAL;
};

}  // namespace capuchin::interpose
