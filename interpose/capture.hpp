// capture.hpp: the process-wide capture state and the record_* calls the hooks make.
//
// Contract: hooks open a HookScope first; only the outermost scope of a thread records
// (the library's own CUDA calls, and CUDA calling itself, e.g. cudart calling the driver
// wrappers, pass straight through). record_* never lock, sleep, allocate or search a shared
// map: they write raw values (addresses, handles) into the thread's ring, and the drain thread
// resolves addresses to allocations in the global event order (drain.hpp). The one exception
// is the first launch of each function (one parameter-layout query to the driver, then
// cached). errno
// is preserved across everything a hook adds. When capture is off (CAPUCHIN_DISABLE=1, no
// sink configured, after fork without %p, after shutdown) hooks are pure pass-throughs.
#pragma once

#include <cuda.h>

#include <atomic>
#include <cerrno>
#include <cstdint>
#include <cstring>

#include "config.hpp"
#include "func_cache.hpp"
#include "record.hpp"
#include "ring.hpp"
#include "word_scan.hpp"

namespace capuchin::interpose {

extern __attribute__((tls_model("initial-exec"))) thread_local int t_hook_depth;

// Capture is on (set after init; cleared by shutdown and in a forked child without %p).
extern std::atomic<bool> g_capturing;
// The sink and drain thread start on first CUDA use, not at load (a program that never
// touches CUDA gets no file and no thread).
void ensure_started_slow();
extern std::atomic<bool> g_started;
inline bool capture_on() {
  if (!g_capturing.load(std::memory_order_relaxed)) return false;
  if (!g_started.load(std::memory_order_acquire)) [[unlikely]] ensure_started_slow();
  return g_capturing.load(std::memory_order_relaxed);
}

struct HookScope {
  HookScope() : outer(t_hook_depth++ == 0) {}
  ~HookScope() { --t_hook_depth; }
  HookScope(const HookScope&) = delete;
  HookScope& operator=(const HookScope&) = delete;
  bool record() const { return outer && capture_on(); }
  const bool outer;
};

// Restores errno when it leaves scope (what the real call set it to).
struct ErrnoKeeper {
  ErrnoKeeper() : saved(errno) {}
  ~ErrnoKeeper() { errno = saved; }
  int saved;
};

// Process-wide init (from the library's start, library.cpp), exit and fork handling. Returns
// whether capture is on. Registers no exit handler: the library's stop calls shutdown_capture.
bool init_from_env();
void shutdown_capture(char* summary, std::size_t summary_bytes);
const Config& config();  // after init_from_env only
// CAPUCHIN_DISABLE as the library's start read it; false before that start. Another library's
// constructor can resolve driver symbols (dlsym, cuGetProcAddress) before ours has run (the
// loader runs a program's own dependencies' constructors first; libcublasLt's does this): what
// it gets is wrapped, and the wrappers pass through until capture is on.
bool started_with_disable();

// --- what hooks record -------------------------------------------------------------------
// Returns the allocation's id (kNoId when bytes == 0).
std::uint64_t record_alloc(std::uint64_t base, std::uint64_t bytes, AllocSub sub, std::uint64_t stream,
                           std::uint8_t flags);
// Records the free of the allocation starting at base, before the real free runs (so the
// address is never seen mapped twice); the drain ignores bases it does not know.
void record_free(std::uint64_t base, std::uint64_t stream, std::uint8_t flags);
// A VMM unmap: frees every mapping that starts in [base, base + bytes).
void record_unmap(std::uint64_t base, std::uint64_t bytes);
void record_host_alloc(std::uint64_t base, std::uint64_t bytes);
void record_host_free(std::uint64_t base);

// A launch: the layout (null when unknown: the launch is recorded unscanned), the params as
// cuLaunchKernel takes them (kernelParams or extra).
// `timing` is the launch's kernel-timing pair (kernel_timing.hpp), 0 when not timed.
void record_launch(const FuncLayout* layout, std::uint64_t func, void** params, void** extra,
                   std::uint64_t stream, std::uint8_t flags, std::uint32_t timing = 0);
// The same in two steps, for the executor (which resolves the words to its blocks before the
// launch is forwarded): scan_launch fills `words` (at most kMaxLaunchWords distinct parameter
// words that lie in the span of device allocations seen so far: candidate pointers, interior
// ones included) and may set kTruncated in *flags; record_launch_words records them.
inline constexpr unsigned kMaxLaunchWords = 255 * kIdsPerCont;
// The span of the device allocations recorded so far ([lo, hi), empty until the first): it
// only grows, so a word outside it points into none.
struct DeviceSpan {
  std::uint64_t lo, hi;
};
DeviceSpan device_span();
const ScanRun* scan_runs(const FuncLayout& layout);
// Calls f(word) for each 8-byte-aligned parameter word of a launch inside device_span()
// (repeats included): kernelParams by the layout's scan plan, or an `extra` buffer.
template <class F>
void for_each_candidate(const FuncLayout* layout, void** params, void** extra, F&& f) {
  const DeviceSpan sp = device_span();  // each bound read once: a concurrent first allocation
  if (sp.lo >= sp.hi) return;           // must not make the span wrap around
  const std::uint64_t lo = sp.lo, span = sp.hi - sp.lo;
  // Four words at a time: one or-ed range test per block (vectorisable), a closer look only
  // at blocks holding a candidate. Most words are scalars far outside every allocation.
  auto scan_words = [&](const char* p, std::uint32_t count) {
    std::uint32_t i = 0;
    if (count >= 32) [[unlikely]] {  // a large by-value struct: its runs of scalars skipped in blocks
      while ((i = skip_to_candidates(p, i, count, lo, span)) + 16 <= count) {
        for (const std::uint32_t end = i + 16; i < end; ++i) {
          std::uint64_t x;
          std::memcpy(&x, p + 8 * i, sizeof x);
          if (x - lo < span) f(x);
        }
      }
    }
    for (; i + 4 <= count; i += 4) {
      std::uint64_t w0, w1, w2, w3;  // scalars, not an array: no round trip through the stack
      std::memcpy(&w0, p + 8 * i, 8);
      std::memcpy(&w1, p + 8 * i + 8, 8);
      std::memcpy(&w2, p + 8 * i + 16, 8);
      std::memcpy(&w3, p + 8 * i + 24, 8);
      const bool any = (w0 - lo < span) | (w1 - lo < span) | (w2 - lo < span) | (w3 - lo < span);
      if (any) [[unlikely]] {
        for (std::uint64_t w : {w0, w1, w2, w3})
          if (w - lo < span) f(w);
      }
    }
    for (; i < count; ++i) {
      std::uint64_t x;
      std::memcpy(&x, p + 8 * i, sizeof x);
      if (x - lo < span) f(x);
    }
  };
  if (params != nullptr && layout != nullptr) {
    const ScanRun* runs = scan_runs(*layout);
    for (std::uint32_t k = 0; k < layout->nruns; ++k) {
      const char* value = static_cast<const char*>(params[runs[k].param]);
      if (value == nullptr) [[unlikely]] continue;
      if (runs[k].nwords == 1) {  // a pointer or 8-byte scalar parameter, the most common run:
        std::uint64_t x;          // no block loop to set up for one word
        std::memcpy(&x, value + runs[k].offset, sizeof x);
        if (x - lo < span) f(x);
        continue;
      }
      scan_words(value + runs[k].offset, runs[k].nwords);
    }
  } else if (params == nullptr && extra != nullptr) {
    // CU_LAUNCH_PARAM_BUFFER_POINTER / _SIZE pairs, CU_LAUNCH_PARAM_END-terminated.
    const char* buf = nullptr;
    std::size_t size = 0;
    for (int i = 0; i < 64 && extra[i] != CU_LAUNCH_PARAM_END; i += 2) {
      if (extra[i] == CU_LAUNCH_PARAM_BUFFER_POINTER) buf = static_cast<const char*>(extra[i + 1]);
      else if (extra[i] == CU_LAUNCH_PARAM_BUFFER_SIZE && extra[i + 1] != nullptr)
        size = *static_cast<const std::size_t*>(extra[i + 1]);
    }
    if (buf != nullptr) scan_words(buf, static_cast<std::uint32_t>(size > 0xffffu ? 0xffffu : size) / 8);
  }
}
unsigned scan_launch(const FuncLayout* layout, void** params, void** extra, std::uint64_t* words, std::uint8_t* flags);
void record_launch_words(const FuncLayout* layout, std::uint64_t func, const std::uint64_t* words, unsigned n,
                         std::uint64_t stream, std::uint8_t flags, std::uint32_t timing = 0);
void record_copy(std::uint64_t dst, std::uint64_t src, std::uint64_t bytes, CopyHint hint, std::uint64_t stream,
                 std::uint8_t flags);
void record_memset(std::uint64_t dst, std::uint64_t bytes, std::uint64_t stream, std::uint8_t flags);
void record_sync(SyncSub sub);
void record_capture_begin(std::uint64_t stream, std::uint8_t flags);
// EndCapture returned: `graph` is the captured graph (0 when it failed); `ended` says whether
// the capture is over (see capture_ended). Ending the origin's capture ends it for every stream
// that joined it; a failed EndCapture on a joined stream leaves the capture going.
void record_capture_end(std::uint64_t stream, std::uint64_t graph, std::uint8_t flags, bool ended);
// Whether EndCapture's result (a CUresult, numerically the same cudaError_t) ends the capture:
// everything but a call the driver refused before looking at the capture (a bad argument, the
// wrong thread, a stream the capture did not begin on).
inline bool capture_ended(int code) {
  return code != CUDA_ERROR_INVALID_VALUE && code != CUDA_ERROR_STREAM_CAPTURE_WRONG_THREAD &&
         code != CUDA_ERROR_STREAM_CAPTURE_UNMATCHED;
}
// Captures joined through events (CUDA: a stream that waits on an event recorded in a capturing
// stream joins that capture until it ends). Called after the real call succeeded; no-ops (one
// atomic load) while no capture is active, never on the launch path. An event recorded on a
// capturing stream (not as an external event) is remembered with the capture; recorded anywhere
// else it is forgotten; a stream outside every capture that waits on a remembered event joins it.
void note_event_record(std::uint64_t event, std::uint64_t stream, std::uint8_t flags, bool external);
void note_stream_wait(std::uint64_t stream, std::uint8_t flags, std::uint64_t event);
void record_instantiate(std::uint64_t graph, std::uint64_t exec);
void record_graph_launch(std::uint64_t exec, std::uint64_t stream, std::uint8_t flags);
void record_iteration();

// Parameter layouts, cached: by CUfunction (queries the driver once), by runtime host stub
// (cudaGetFuncBySymbol once). Null when the driver cannot tell.
const FuncLayout* layout_for_function(CUfunction f);
// A launch handle's parameters (offset, size) and name as the driver gives them: a CUfunction
// answers cuFuncGetParamInfo / cuFuncGetName, a CUkernel (what CUDA 13's compiler-generated
// launches pass: crt/host_runtime.h, __cudaGetKernel then __cudaLaunchKernel) answers
// cuKernelGetParamInfo / cuKernelGetName; a lazily loaded function is loaded first. The one
// place both the capture's layouts and the executor's kernel table learn them from.
struct HandleParams {
  int count = -1;  // parameters written to specs; -1: the driver gives no layout for the handle
  const char* name = nullptr;
  bool queries = false;  // the driver has cuFuncGetParamInfo or cuKernelGetParamInfo
  CUresult func_result = CUDA_ERROR_NOT_FOUND, kernel_result = CUDA_ERROR_NOT_FOUND, name_result = CUDA_ERROR_NOT_FOUND;
};
HandleParams describe_handle(void* f, ParamSpec* specs, std::uint32_t max);
const FuncLayout* layout_for_stub(const void* stub);

// The capture sequence a stream is being captured into, as its origin or through a join
// (0 = not capturing). Lock-free.
std::uint32_t capture_sequence(std::uint64_t stream, bool per_thread);
// Some stream capture we track is in progress (on any stream).
bool any_capture_active();

}  // namespace capuchin::interpose
