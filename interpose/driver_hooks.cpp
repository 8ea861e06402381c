// driver_hooks.cpp: the driver hooks (bodies written once per entry point, wrappers and
// exports generated from driver_hooks.def) and wrap_driver_pointer (see hooks.hpp).
//
// Each table entry gets: kVariants template wrappers (the pointers handed out through
// cuGetProcAddress / dlsym, each forwarding to the exact real pointer stored in its slot)
// and one exported symbol of the same name as libcuda's (for programs linked with -lcuda;
// it forwards to dlsym(RTLD_NEXT)). Every body returns the real call's result unchanged.
#include <cuda.h>
#include <cudaTypedefs.h>
#include <dlfcn.h>

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <optional>
#include <type_traits>

#include "capture.hpp"
#include "copy_shape.hpp"
#include "driver_hooks.def"
#include "exec/executor.hpp"
#include "exec/launch_scan.hpp"
#include "hook_common.hpp"
#include "hooks.hpp"
#include "kernel_timing.hpp"
#include "real_api.hpp"

#define CAPUCHIN_EXPORT extern "C" __attribute__((visibility("default")))
#define CAPUCHIN_UNPACK(...) __VA_ARGS__

namespace capuchin::interpose {
namespace {

constexpr int kVariants = 4;

template <class Fn>
inline Fn real_of(const Variant& v) {
  return reinterpret_cast<Fn>(v.real.load(std::memory_order_acquire));
}

inline std::uint8_t thread_flag(const Variant& v) {
  return v.per_thread.load(std::memory_order_relaxed) ? kPerThread : 0;
}

// Each hook's prototype is exactly the header's for the ABI it wraps (a wrapper of another
// prototype would forward garbage to the driver).
#define CAPUCHIN_PFN(id, base, exported, since, until, params, fwd)                   \
  using pfn_##id = CUresult(*) params;                                                \
  static_assert(std::is_same_v<pfn_##id, PFN_cu##base##_v##since>,                    \
                "driver_hooks.def: cu" #base " from " #since " is not cudaTypedefs.h's prototype");
CAPUCHIN_DRIVER_HOOKS(CAPUCHIN_PFN)
#undef CAPUCHIN_PFN
#define REAL(id) real_of<pfn_##id>(v)

// --- bodies --------------------------------------------------------------------------------
// Allocation: record after success (we need the pointer). Free: record before the call so
// the address is never live twice in our map.

CUresult body_MemAlloc(const Variant& v, CUdeviceptr* dptr, size_t bytes) {
  HookScope scope;
  if (executor_on(scope)) {
    ErrnoKeeper keep;
    CUresult r;
    if (exec::alloc(dptr, bytes, nullptr, false, false, &r) && !exec::not_yet(r)) return r;
  }
  const CUresult r = REAL(MemAlloc)(dptr, bytes);
  if (r == CUDA_SUCCESS && scope.record()) {
    ErrnoKeeper keep;
    record_alloc(*dptr, bytes, AllocSub::Device, 0, 0);
  }
  return r;
}
CUresult body_MemAllocManaged(const Variant& v, CUdeviceptr* dptr, size_t bytes, unsigned int fl) {
  HookScope scope;
  const CUresult r = REAL(MemAllocManaged)(dptr, bytes, fl);
  if (r == CUDA_SUCCESS && scope.record()) {
    ErrnoKeeper keep;
    record_alloc(*dptr, bytes, AllocSub::Managed, 0, 0);
  }
  return r;
}
CUresult body_MemAllocAsync(const Variant& v, CUdeviceptr* dptr, size_t bytes, CUstream s) {
  HookScope scope;
  if (executor_on(scope)) {
    ErrnoKeeper keep;
    CUresult r;
    if (exec::alloc(dptr, bytes, s, thread_flag(v) != 0, true, &r) && !exec::not_yet(r)) return r;
  }
  const CUresult r = REAL(MemAllocAsync)(dptr, bytes, s);
  if (r == CUDA_SUCCESS && scope.record()) {
    ErrnoKeeper keep;
    record_alloc(*dptr, bytes, AllocSub::Async, u64(s), thread_flag(v));
  }
  return r;
}
CUresult body_MemAllocFromPoolAsync(const Variant& v, CUdeviceptr* dptr, size_t bytes, CUmemoryPool pool, CUstream s) {
  HookScope scope;
  if (executor_on(scope)) {
    ErrnoKeeper keep;
    CUresult r;
    if (exec::alloc(dptr, bytes, s, thread_flag(v) != 0, true, &r) && !exec::not_yet(r)) return r;
  }
  const CUresult r = REAL(MemAllocFromPoolAsync)(dptr, bytes, pool, s);
  if (r == CUDA_SUCCESS && scope.record()) {
    ErrnoKeeper keep;
    record_alloc(*dptr, bytes, AllocSub::Async, u64(s), thread_flag(v));
  }
  return r;
}
CUresult body_MemFree(const Variant& v, CUdeviceptr p) {
  HookScope scope;
  if (executor_on(scope) && p != 0) {
    ErrnoKeeper keep;
    CUresult r;
    if (exec::free(p, nullptr, false, false, &r)) return r;
  }
  if (scope.record() && p != 0) {
    ErrnoKeeper keep;
    record_free(p, 0, 0);
  }
  return REAL(MemFree)(p);
}
CUresult body_MemFreeAsync(const Variant& v, CUdeviceptr p, CUstream s) {
  HookScope scope;
  if (executor_on(scope) && p != 0) {
    ErrnoKeeper keep;
    CUresult r;
    if (exec::free(p, s, thread_flag(v) != 0, true, &r)) return r;
  }
  if (scope.record() && p != 0) {
    ErrnoKeeper keep;
    record_free(p, u64(s), thread_flag(v));
  }
  return REAL(MemFreeAsync)(p, s);
}
// The job creating and mapping device memory itself (PyTorch's expandable_segments, an
// allocator of its own) under a budget: the executor serves only cudaMalloc / cuMemAlloc and
// the stream-ordered allocations (its own VMM calls do not come through these hooks), so that
// memory is outside the budget. Said once, raw.
void warn_own_vmm_once(HookScope& scope, const char* call) {
  static std::atomic<bool> said{false};
  if (!scope.outer || !exec::on() || said.exchange(true, std::memory_order_relaxed)) return;
  ErrnoKeeper keep;
  // PyTorch's expandable segments are the usual cause: named, with what to change.
  const char* conf = std::getenv("PYTORCH_CUDA_ALLOC_CONF");
  if (conf != nullptr && strcasestr(conf, "expandable_segments:true") != nullptr) {
    log(LogLevel::Warn,
        "PYTORCH_CUDA_ALLOC_CONF=%s: PyTorch's expandable segments map device memory themselves (%s), outside "
        "CAPUCHIN_BUDGET, which then does not hold; leave expandable_segments out (`capuchin run` sets "
        "backend:cudaMallocAsync, whose allocations the executor serves)",
        conf, call);
    return;
  }
  log(LogLevel::Warn,
      "the job maps device memory itself (%s) under CAPUCHIN_BUDGET: the executor serves only cudaMalloc, "
      "cuMemAlloc and the stream-ordered allocations, so this memory is outside the budget (PyTorch: "
      "PYTORCH_CUDA_ALLOC_CONF=backend:cudaMallocAsync, as `capuchin run` sets it)",
      call);
}

CUresult body_MemCreate(const Variant& v, CUmemGenericAllocationHandle* h, size_t bytes, const CUmemAllocationProp* prop,
                        unsigned long long fl) {
  // Physical memory becomes addressable (and so an allocation) only when mapped.
  HookScope scope;
  warn_own_vmm_once(scope, "cuMemCreate");
  return REAL(MemCreate)(h, bytes, prop, fl);
}
CUresult body_MemMap(const Variant& v, CUdeviceptr p, size_t bytes, size_t off, CUmemGenericAllocationHandle h,
                     unsigned long long fl) {
  HookScope scope;
  warn_own_vmm_once(scope, "cuMemMap");
  const CUresult r = REAL(MemMap)(p, bytes, off, h, fl);
  if (r == CUDA_SUCCESS && scope.record()) {
    ErrnoKeeper keep;
    record_alloc(p, bytes, AllocSub::Vmm, 0, 0);
  }
  return r;
}
CUresult body_MemUnmap(const Variant& v, CUdeviceptr p, size_t bytes) {
  HookScope scope;
  if (scope.record()) {
    ErrnoKeeper keep;
    record_unmap(p, bytes);
  }
  return REAL(MemUnmap)(p, bytes);
}

// The launch path: no lock, no allocation, no sleep (after the first launch of a function).
// With a budget: the touched allocations are found first, the executor makes them resident
// (bounded work, see exec/executor.hpp), then the launch is forwarded and recorded.
CUresult executor_launch(const Variant& v, pfn_LaunchKernel real_plain, pfn_LaunchKernelEx real_ex,
                         const CUlaunchConfig* cfg, CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx,
                         unsigned by, unsigned bz, unsigned shmem, CUstream s, void** params, void** extra) {
  LaunchWords buf;
  std::optional<ScannedLaunch> sl;
  {
    ErrnoKeeper keep;
    sl.emplace(buf, layout_for_function(f), params, extra, thread_flag(v));
    sl->launch.func = f;
    sl->set_geometry(gx, gy, gz, bx, by, bz, shmem, s);
    sl->launch.attributes = cfg != nullptr && cfg->numAttrs != 0;
    if (const CUresult e = sl->prepare(); e != CUDA_SUCCESS) return e;
    sl->before_forward();
    sl->timer.begin(s, thread_flag(v) != 0);
  }
  auto call = [&] {
    return real_ex != nullptr ? real_ex(cfg, f, params, extra) : real_plain(f, gx, gy, gz, bx, by, bz, shmem, s, params, extra);
  };
  const CUresult r = call();
  ErrnoKeeper keep;
  sl->finish(r == CUDA_SUCCESS, u64(f), u64(s), call);
  return r;
}

CUresult body_LaunchKernel(const Variant& v, CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx,
                           unsigned by, unsigned bz, unsigned shmem, CUstream s, void** params, void** extra) {
  HookScope scope;
  if (executor_on(scope))
    return executor_launch(v, REAL(LaunchKernel), nullptr, nullptr, f, gx, gy, gz, bx, by, bz, shmem, s, params, extra);
  timing::Timer timer;
  if (scope.record()) timer.begin(s, thread_flag(v) != 0);
  const CUresult r = REAL(LaunchKernel)(f, gx, gy, gz, bx, by, bz, shmem, s, params, extra);
  if (scope.record()) {
    ErrnoKeeper keep;
    const std::uint32_t timed = timer.end(r == CUDA_SUCCESS);
    if (r == CUDA_SUCCESS) record_launch(layout_for_function(f), u64(f), params, extra, u64(s), thread_flag(v), timed);
  }
  return r;
}
CUresult body_LaunchKernelEx(const Variant& v, const CUlaunchConfig* cfg, CUfunction f, void** params, void** extra) {
  HookScope scope;
  if (executor_on(scope) && cfg != nullptr)
    return executor_launch(v, nullptr, REAL(LaunchKernelEx), cfg, f, cfg->gridDimX, cfg->gridDimY, cfg->gridDimZ,
                           cfg->blockDimX, cfg->blockDimY, cfg->blockDimZ, cfg->sharedMemBytes, cfg->hStream, params,
                           extra);
  timing::Timer timer;
  if (scope.record() && cfg != nullptr) timer.begin(cfg->hStream, thread_flag(v) != 0);
  const CUresult r = REAL(LaunchKernelEx)(cfg, f, params, extra);
  if (scope.record()) {
    ErrnoKeeper keep;
    const std::uint32_t timed = timer.end(r == CUDA_SUCCESS);
    if (r == CUDA_SUCCESS)
      record_launch(layout_for_function(f), u64(f), params, extra, cfg != nullptr ? u64(cfg->hStream) : 0,
                    thread_flag(v), timed);
  }
  return r;
}

#define CAPUCHIN_COPY_BODY(id, dst_expr, src_expr, hint, stream_expr, call)            \
  HookScope scope;                                                                   \
  const bool ex = executor_on(scope);                                                \
  exec::CopyToken tok;                                                               \
  if (ex) {                                                                          \
    ErrnoKeeper keep;                                                                \
    const CUresult e = exec::before_copy(dst_expr, src_expr, n, reinterpret_cast<CUstream>(stream_expr), \
                                         thread_flag(v) != 0, false, tok);          \
    if (e != CUDA_SUCCESS) return e;                                                 \
  }                                                                                  \
  const CUresult r = call;                                                           \
  if (ex) {                                                                          \
    ErrnoKeeper keep;                                                                \
    exec::after_copy(tok, r == CUDA_SUCCESS);                                        \
  }                                                                                  \
  if (r == CUDA_SUCCESS && scope.record()) {                                         \
    ErrnoKeeper keep;                                                                \
    record_copy(dst_expr, src_expr, n, hint, stream_expr, thread_flag(v));           \
  }                                                                                  \
  return r;

CUresult body_Memcpy(const Variant& v, CUdeviceptr dst, CUdeviceptr src, size_t n) {
  CAPUCHIN_COPY_BODY(Memcpy, dst, src, CopyHint::Infer, 0, REAL(Memcpy)(dst, src, n))
}
CUresult body_MemcpyAsync(const Variant& v, CUdeviceptr dst, CUdeviceptr src, size_t n, CUstream s) {
  CAPUCHIN_COPY_BODY(MemcpyAsync, dst, src, CopyHint::Infer, u64(s), REAL(MemcpyAsync)(dst, src, n, s))
}
CUresult body_MemcpyHtoD(const Variant& v, CUdeviceptr dst, const void* src, size_t n) {
  CAPUCHIN_COPY_BODY(MemcpyHtoD, dst, u64(src), CopyHint::H2D, 0, REAL(MemcpyHtoD)(dst, src, n))
}
CUresult body_MemcpyDtoH(const Variant& v, void* dst, CUdeviceptr src, size_t n) {
  CAPUCHIN_COPY_BODY(MemcpyDtoH, u64(dst), src, CopyHint::D2H, 0, REAL(MemcpyDtoH)(dst, src, n))
}
CUresult body_MemcpyDtoD(const Variant& v, CUdeviceptr dst, CUdeviceptr src, size_t n) {
  CAPUCHIN_COPY_BODY(MemcpyDtoD, dst, src, CopyHint::D2D, 0, REAL(MemcpyDtoD)(dst, src, n))
}
CUresult body_MemcpyHtoDAsync(const Variant& v, CUdeviceptr dst, const void* src, size_t n, CUstream s) {
  CAPUCHIN_COPY_BODY(MemcpyHtoDAsync, dst, u64(src), CopyHint::H2D, u64(s), REAL(MemcpyHtoDAsync)(dst, src, n, s))
}
CUresult body_MemcpyDtoHAsync(const Variant& v, void* dst, CUdeviceptr src, size_t n, CUstream s) {
  CAPUCHIN_COPY_BODY(MemcpyDtoHAsync, u64(dst), src, CopyHint::D2H, u64(s), REAL(MemcpyDtoHAsync)(dst, src, n, s))
}
CUresult body_MemcpyDtoDAsync(const Variant& v, CUdeviceptr dst, CUdeviceptr src, size_t n, CUstream s) {
  CAPUCHIN_COPY_BODY(MemcpyDtoDAsync, dst, src, CopyHint::D2D, u64(s), REAL(MemcpyDtoDAsync)(dst, src, n, s))
}
CUresult body_MemcpyPeer(const Variant& v, CUdeviceptr dst, CUcontext dst_ctx, CUdeviceptr src, CUcontext src_ctx,
                         size_t n) {
  CAPUCHIN_COPY_BODY(MemcpyPeer, dst, src, CopyHint::D2D, 0, REAL(MemcpyPeer)(dst, dst_ctx, src, src_ctx, n))
}
CUresult body_MemcpyPeerAsync(const Variant& v, CUdeviceptr dst, CUcontext dst_ctx, CUdeviceptr src,
                              CUcontext src_ctx, size_t n, CUstream s) {
  CAPUCHIN_COPY_BODY(MemcpyPeerAsync, dst, src, CopyHint::D2D, u64(s),
                     REAL(MemcpyPeerAsync)(dst, dst_ctx, src, src_ctx, n, s))
}
#undef CAPUCHIN_COPY_BODY

// Strided copies (2D/3D): the shape is read before the call. The executor is given each
// side's first byte (it finds the allocation containing it and makes it resident) and the
// moved bytes; the trace records the moved bytes and the allocation holding each first byte.
template <class Desc, class Call>
CUresult strided_copy(const Variant& v, const Desc* desc, std::uint64_t stream, Call&& call) {
  if (desc == nullptr) return call();  // CUDA's own error
  HookScope scope;
  const CopyShape sh = shape_of(*desc);
  const bool ex = executor_on(scope);
  exec::CopyToken tok;
  if (ex) {
    ErrnoKeeper keep;
    const CUresult e = exec::before_copy(sh.dst.start, sh.src.start, sh.bytes, reinterpret_cast<CUstream>(stream),
                                         thread_flag(v) != 0, false, tok);
    if (e != CUDA_SUCCESS) return e;
  }
  const CUresult r = call();
  if (ex) {
    ErrnoKeeper keep;
    exec::after_copy(tok, r == CUDA_SUCCESS);
  }
  if (r == CUDA_SUCCESS && !sh.host_to_host && scope.record()) {
    ErrnoKeeper keep;
    record_copy(sh.dst.start, sh.src.start, sh.bytes, sh.hint, stream, thread_flag(v));
  }
  return r;
}
CUresult body_Memcpy2D(const Variant& v, const CUDA_MEMCPY2D* p) {
  return strided_copy(v, p, 0, [&] { return REAL(Memcpy2D)(p); });
}
CUresult body_Memcpy2DUnaligned(const Variant& v, const CUDA_MEMCPY2D* p) {
  return strided_copy(v, p, 0, [&] { return REAL(Memcpy2DUnaligned)(p); });
}
CUresult body_Memcpy2DAsync(const Variant& v, const CUDA_MEMCPY2D* p, CUstream s) {
  return strided_copy(v, p, u64(s), [&] { return REAL(Memcpy2DAsync)(p, s); });
}
CUresult body_Memcpy3D(const Variant& v, const CUDA_MEMCPY3D* p) {
  return strided_copy(v, p, 0, [&] { return REAL(Memcpy3D)(p); });
}
CUresult body_Memcpy3DAsync(const Variant& v, const CUDA_MEMCPY3D* p, CUstream s) {
  return strided_copy(v, p, u64(s), [&] { return REAL(Memcpy3DAsync)(p, s); });
}
CUresult body_Memcpy3DPeer(const Variant& v, const CUDA_MEMCPY3D_PEER* p) {
  return strided_copy(v, p, 0, [&] { return REAL(Memcpy3DPeer)(p); });
}
CUresult body_Memcpy3DPeerAsync(const Variant& v, const CUDA_MEMCPY3D_PEER* p, CUstream s) {
  return strided_copy(v, p, u64(s), [&] { return REAL(Memcpy3DPeerAsync)(p, s); });
}

#define CAPUCHIN_MEMSET_BODY(elem, stream_expr, call)                        \
  HookScope scope;                                                         \
  const bool ex = executor_on(scope);                                      \
  exec::CopyToken tok;                                                     \
  if (ex) {                                                                \
    ErrnoKeeper keep;                                                      \
    const CUresult e = exec::before_copy(dst, 0, static_cast<std::uint64_t>(n) * (elem), \
                                         reinterpret_cast<CUstream>(stream_expr), thread_flag(v) != 0, true, tok); \
    if (e != CUDA_SUCCESS) return e;                                       \
  }                                                                        \
  const CUresult r = call;                                                 \
  if (ex) {                                                                \
    ErrnoKeeper keep;                                                      \
    exec::after_copy(tok, r == CUDA_SUCCESS);                              \
  }                                                                        \
  if (r == CUDA_SUCCESS && scope.record()) {                               \
    ErrnoKeeper keep;                                                      \
    record_memset(dst, static_cast<std::uint64_t>(n) * (elem), stream_expr, thread_flag(v)); \
  }                                                                        \
  return r;
CUresult body_MemsetD8(const Variant& v, CUdeviceptr dst, unsigned char x, size_t n) {
  CAPUCHIN_MEMSET_BODY(1, 0, REAL(MemsetD8)(dst, x, n))
}
CUresult body_MemsetD16(const Variant& v, CUdeviceptr dst, unsigned short x, size_t n) {
  CAPUCHIN_MEMSET_BODY(2, 0, REAL(MemsetD16)(dst, x, n))
}
CUresult body_MemsetD32(const Variant& v, CUdeviceptr dst, unsigned int x, size_t n) {
  CAPUCHIN_MEMSET_BODY(4, 0, REAL(MemsetD32)(dst, x, n))
}
CUresult body_MemsetD8Async(const Variant& v, CUdeviceptr dst, unsigned char x, size_t n, CUstream s) {
  CAPUCHIN_MEMSET_BODY(1, u64(s), REAL(MemsetD8Async)(dst, x, n, s))
}
CUresult body_MemsetD16Async(const Variant& v, CUdeviceptr dst, unsigned short x, size_t n, CUstream s) {
  CAPUCHIN_MEMSET_BODY(2, u64(s), REAL(MemsetD16Async)(dst, x, n, s))
}
CUresult body_MemsetD32Async(const Variant& v, CUdeviceptr dst, unsigned int x, size_t n, CUstream s) {
  CAPUCHIN_MEMSET_BODY(4, u64(s), REAL(MemsetD32Async)(dst, x, n, s))
}
// 2D memsets: h rows of w elements; the executor and the trace see the first byte and the set bytes.
#define CAPUCHIN_MEMSET_2D_BODY(elem, stream_expr, call)                                       \
  const std::uint64_t n = static_cast<std::uint64_t>(w) * h;                                    \
  CAPUCHIN_MEMSET_BODY(elem, stream_expr, call)
CUresult body_MemsetD2D8(const Variant& v, CUdeviceptr dst, size_t pitch, unsigned char x, size_t w, size_t h) {
  CAPUCHIN_MEMSET_2D_BODY(1, 0, REAL(MemsetD2D8)(dst, pitch, x, w, h))
}
CUresult body_MemsetD2D16(const Variant& v, CUdeviceptr dst, size_t pitch, unsigned short x, size_t w, size_t h) {
  CAPUCHIN_MEMSET_2D_BODY(2, 0, REAL(MemsetD2D16)(dst, pitch, x, w, h))
}
CUresult body_MemsetD2D32(const Variant& v, CUdeviceptr dst, size_t pitch, unsigned int x, size_t w, size_t h) {
  CAPUCHIN_MEMSET_2D_BODY(4, 0, REAL(MemsetD2D32)(dst, pitch, x, w, h))
}
CUresult body_MemsetD2D8Async(const Variant& v, CUdeviceptr dst, size_t pitch, unsigned char x, size_t w, size_t h,
                              CUstream s) {
  CAPUCHIN_MEMSET_2D_BODY(1, u64(s), REAL(MemsetD2D8Async)(dst, pitch, x, w, h, s))
}
CUresult body_MemsetD2D16Async(const Variant& v, CUdeviceptr dst, size_t pitch, unsigned short x, size_t w, size_t h,
                               CUstream s) {
  CAPUCHIN_MEMSET_2D_BODY(2, u64(s), REAL(MemsetD2D16Async)(dst, pitch, x, w, h, s))
}
CUresult body_MemsetD2D32Async(const Variant& v, CUdeviceptr dst, size_t pitch, unsigned int x, size_t w, size_t h,
                               CUstream s) {
  CAPUCHIN_MEMSET_2D_BODY(4, u64(s), REAL(MemsetD2D32Async)(dst, pitch, x, w, h, s))
}
#undef CAPUCHIN_MEMSET_2D_BODY
#undef CAPUCHIN_MEMSET_BODY

#define CAPUCHIN_SYNC_BODY(sub, call)                 \
  HookScope scope;                                  \
  const CUresult r = call;                          \
  if (r == CUDA_SUCCESS && scope.record()) {        \
    ErrnoKeeper keep;                               \
    record_sync(sub);                               \
    if (scope.outer && exec::on()) exec::on_sync(); \
  }                                                 \
  return r;
CUresult body_CtxSynchronize(const Variant& v) { CAPUCHIN_SYNC_BODY(SyncSub::Device, REAL(CtxSynchronize)()) }
CUresult body_CtxSynchronize_v2(const Variant& v, CUcontext ctx) {
  CAPUCHIN_SYNC_BODY(SyncSub::Device, REAL(CtxSynchronize_v2)(ctx))
}
CUresult body_StreamSynchronize(const Variant& v, CUstream s) {
  CAPUCHIN_SYNC_BODY(SyncSub::Stream, REAL(StreamSynchronize)(s))
}
CUresult body_EventSynchronize(const Variant& v, CUevent e) {
  CAPUCHIN_SYNC_BODY(SyncSub::Event, REAL(EventSynchronize)(e))
}
#undef CAPUCHIN_SYNC_BODY

// Event records and waits: forwarded first, then (during a capture only) a stream waiting on an
// event recorded in a capture is seen joining it (capture.hpp).
CUresult body_EventRecord(const Variant& v, CUevent e, CUstream s) {
  HookScope scope;
  const CUresult r = REAL(EventRecord)(e, s);
  if (r == CUDA_SUCCESS && scope.record()) {
    ErrnoKeeper keep;
    note_event_record(u64(e), u64(s), thread_flag(v), false);
  }
  return r;
}
CUresult body_EventRecordWithFlags(const Variant& v, CUevent e, CUstream s, unsigned int fl) {
  HookScope scope;
  const CUresult r = REAL(EventRecordWithFlags)(e, s, fl);
  if (r == CUDA_SUCCESS && scope.record()) {
    ErrnoKeeper keep;
    note_event_record(u64(e), u64(s), thread_flag(v), (fl & CU_EVENT_RECORD_EXTERNAL) != 0);
  }
  return r;
}
CUresult body_StreamWaitEvent(const Variant& v, CUstream s, CUevent e, unsigned int fl) {
  HookScope scope;
  const CUresult r = REAL(StreamWaitEvent)(s, e, fl);
  if (r == CUDA_SUCCESS && scope.record()) {
    ErrnoKeeper keep;
    note_stream_wait(u64(s), thread_flag(v), u64(e));
  }
  return r;
}

// The executor's deferred events on a stream are recorded while it exists (exec::before_stream_destroy).
CUresult body_StreamDestroy(const Variant& v, CUstream s) {
  HookScope scope;
  if (scope.outer && exec::on()) {
    ErrnoKeeper keep;
    exec::before_stream_destroy(s, v.per_thread.load(std::memory_order_relaxed));
  }
  return REAL(StreamDestroy)(s);
}

// Before a capture begins, nothing of the executor's may be left to record later (exec::before_capture).
void before_capture_begins(const HookScope& scope) {
  if (!scope.outer || !exec::on()) return;
  ErrnoKeeper keep;
  exec::before_capture();
}

CUresult body_StreamBeginCapture(const Variant& v, CUstream s, CUstreamCaptureMode mode) {
  HookScope scope;
  before_capture_begins(scope);
  const CUresult r = REAL(StreamBeginCapture)(s, mode);
  if (r == CUDA_SUCCESS && scope.record()) {
    ErrnoKeeper keep;
    record_capture_begin(u64(s), thread_flag(v));
  }
  return r;
}
// A handle to memory the executor serves is handed out (exec::exported): it stays in place.
template <class Forward>
CUresult handing_out(HookScope& scope, CUdeviceptr p, Forward&& forward) {
  const bool served = scope.outer && exec::on();
  if (served) {
    ErrnoKeeper keep;
    exec::exported(p);
  }
  const CUresult r = forward();
  if (served && r != CUDA_SUCCESS) {
    ErrnoKeeper keep;
    exec::export_failed(p);
  }
  return r;
}
CUresult body_IpcGetMemHandle(const Variant& v, CUipcMemHandle* h, CUdeviceptr p) {
  HookScope scope;
  return handing_out(scope, p, [&] { return REAL(IpcGetMemHandle)(h, p); });
}
CUresult body_MemRetainAllocationHandle(const Variant& v, CUmemGenericAllocationHandle* h, void* addr) {
  HookScope scope;
  return handing_out(scope, u64(addr), [&] { return REAL(MemRetainAllocationHandle)(h, addr); });
}
CUresult body_StreamBeginCaptureToGraph(const Variant& v, CUstream s, CUgraph g, const CUgraphNode* deps,
                                        const CUgraphEdgeData* edges, size_t n, CUstreamCaptureMode mode) {
  HookScope scope;
  before_capture_begins(scope);
  const CUresult r = REAL(StreamBeginCaptureToGraph)(s, g, deps, edges, n, mode);
  if (r == CUDA_SUCCESS && scope.record()) {
    ErrnoKeeper keep;
    record_capture_begin(u64(s), thread_flag(v));
  }
  return r;
}
CUresult body_StreamEndCapture(const Variant& v, CUstream s, CUgraph* g) {
  HookScope scope;
  const CUresult r = REAL(StreamEndCapture)(s, g);
  if (scope.record()) {  // the capture ends even when it failed (invalidated)
    ErrnoKeeper keep;
    record_capture_end(u64(s), r == CUDA_SUCCESS && g != nullptr ? u64(*g) : 0, thread_flag(v), capture_ended(r));
  }
  return r;
}
CUresult body_GraphInstantiateWithFlags(const Variant& v, CUgraphExec* exec, CUgraph g, unsigned long long fl) {
  HookScope scope;
  const CUresult r = REAL(GraphInstantiateWithFlags)(exec, g, fl);
  if (r == CUDA_SUCCESS && scope.record()) {
    ErrnoKeeper keep;
    record_instantiate(u64(g), u64(*exec));
  }
  return r;
}
CUresult body_GraphInstantiateWithParams(const Variant& v, CUgraphExec* exec, CUgraph g,
                                         CUDA_GRAPH_INSTANTIATE_PARAMS* p) {
  HookScope scope;
  const CUresult r = REAL(GraphInstantiateWithParams)(exec, g, p);
  if (r == CUDA_SUCCESS && scope.record()) {
    ErrnoKeeper keep;
    record_instantiate(u64(g), u64(*exec));
  }
  return r;
}
CUresult body_GraphLaunch(const Variant& v, CUgraphExec exec, CUstream s) {
  HookScope scope;
  if (executor_on(scope)) {
    ErrnoKeeper keep;
    if (const CUresult e = exec::before_unknown_work(s, thread_flag(v) != 0); e != CUDA_SUCCESS) return e;
  }
  const CUresult r = REAL(GraphLaunch)(exec, s);
  if (executor_on(scope)) {
    ErrnoKeeper keep;
    exec::after_unknown_work(s, thread_flag(v) != 0, r == CUDA_SUCCESS);
  }
  if (r == CUDA_SUCCESS && scope.record()) {
    ErrnoKeeper keep;
    record_graph_launch(u64(exec), u64(s), thread_flag(v));
  }
  return r;
}
#undef REAL

// --- generated: variant slots, wrappers, exports, table -------------------------------------

struct Entry {
  const char* proc;      // cuGetProcAddress name
  const char* exported;  // libcuda's exported symbol
  int since, until;      // the cudaVersions [since, until) cuGetProcAddress answers with this ABI
  Variant* variants;     // kVariants slots
  void* wrappers[kVariants];
};

#define CAPUCHIN_SLOTS(id, base, exported, since, until, params, fwd)                 \
  Variant g_variants_##id[kVariants];                                                  \
  Variant g_direct_##id;                                                               \
  template <int K>                                                                     \
  CUresult wrap_##id params {                                                          \
    exec::note_alloc_caller(__builtin_return_address(0));                              \
    return body_##id(g_variants_##id[K] CAPUCHIN_UNPACK fwd);                          \
  }
CAPUCHIN_DRIVER_HOOKS(CAPUCHIN_SLOTS)
#undef CAPUCHIN_SLOTS

#define CAPUCHIN_ENTRY(id, base, exported, since, until, params, fwd)                           \
  Entry{"cu" #base, #exported, since, until, g_variants_##id,                                   \
        {reinterpret_cast<void*>(&wrap_##id<0>), reinterpret_cast<void*>(&wrap_##id<1>),         \
         reinterpret_cast<void*>(&wrap_##id<2>), reinterpret_cast<void*>(&wrap_##id<3>)}},
Entry g_entries[] = {CAPUCHIN_DRIVER_HOOKS(CAPUCHIN_ENTRY)};
#undef CAPUCHIN_ENTRY

std::mutex g_wrap_mu;

// By cuGetProcAddress name: the entry whose ABI that cudaVersion gets, or none (an ABI we do
// not wrap). By exported symbol (dlsym): that symbol's entry. "cuGraphInstantiate" from CUDA
// 12.0 on is cuGraphInstantiateWithFlags' ABI (PFN_cuGraphInstantiateWithFlags_v11040).
const Entry* find_entry(const char* name, bool by_proc, int version) {
  if (by_proc && std::strcmp(name, "cuGraphInstantiate") == 0)
    return version >= 12000 ? find_entry("cuGraphInstantiateWithFlags", true, version) : nullptr;
  for (const Entry& e : g_entries) {
    if (!by_proc && std::strcmp(e.exported, name) == 0) return &e;
    if (by_proc && std::strcmp(e.proc, name) == 0 && e.since <= version && version < e.until) return &e;
  }
  return nullptr;
}

}  // namespace

void* wrap_driver_pointer(const char* name, void* real, bool by_proc_name, int cuda_version, bool per_thread) {
  if (real == nullptr || name == nullptr) return real;
  char base[128];
  if (!by_proc_name) {
    // dlsym("cuLaunchKernel_ptsz") / ("cuMemcpyHtoD_v2_ptds"): the per-thread twin.
    const std::size_t len = std::strlen(name);
    if (len >= sizeof base) return real;
    std::memcpy(base, name, len + 1);
    if (len > 5 && (std::strcmp(base + len - 5, "_ptsz") == 0 || std::strcmp(base + len - 5, "_ptds") == 0)) {
      base[len - 5] = '\0';
      per_thread = true;
    }
    name = base;
  }
  const Entry* e = find_entry(name, by_proc_name, cuda_version);
  if (e == nullptr) return real;  // not hooked, or an ABI of that name we do not wrap
  std::lock_guard<std::mutex> lock(g_wrap_mu);
  for (int k = 0; k < kVariants; ++k) {
    Variant& v = e->variants[k];
    void* current = v.real.load(std::memory_order_acquire);
    if (current == real && v.per_thread.load(std::memory_order_relaxed) == per_thread) return e->wrappers[k];
    if (current == nullptr) {
      v.per_thread.store(per_thread, std::memory_order_relaxed);
      v.real.store(real, std::memory_order_release);
      return e->wrappers[k];
    }
  }
  log(LogLevel::Warn, "%s: more than %d distinct driver pointers; this one is not captured", name, kVariants);
  return real;
}

}  // namespace capuchin::interpose

// Exports under libcuda's own names, for programs linked with -lcuda (and for a driver
// whose own cuGetProcAddress hands out its exported, interposable symbols, as simcuda's
// does): forward to libcuda's definition, found once.
namespace cap = capuchin::interpose;
#define CAPUCHIN_EXPORTED(id, base, exported, since, until, params, fwd)           \
  CAPUCHIN_EXPORT CUresult exported params {                                                   \
    cap::Variant& v = cap::g_direct_##id;                                                      \
    if (v.real.load(std::memory_order_acquire) == nullptr) {                                   \
      void* r = cap::driver_export(#exported);                                                 \
      if (r == nullptr) return CUDA_ERROR_NOT_INITIALIZED;                                     \
      v.real.store(r, std::memory_order_release);                                              \
    }                                                                                          \
    cap::exec::note_alloc_caller(__builtin_return_address(0));                                 \
    return cap::body_##id(v CAPUCHIN_UNPACK fwd);                                              \
  }
CAPUCHIN_DRIVER_HOOKS(CAPUCHIN_EXPORTED)
#undef CAPUCHIN_EXPORTED
