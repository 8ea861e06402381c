// runtime_hooks.cpp: the CUDA runtime (libcudart) entry points, exported under cudart's own
// names (and their _ptsz / _ptds per-thread-default-stream twins) so LD_PRELOAD puts them
// in front of the real ones, which are found with dlsym(RTLD_NEXT) once per symbol.
//
// Contract: the outermost hook records; cudart's own calls into the driver wrappers pass
// through (HookScope), so one cudaMalloc is one allocation event. Every hook returns the
// real call's cudaError_t unchanged; a missing real symbol (no cudart after us) returns
// cudaErrorSharedObjectInitFailed without recording.
#include <cuda.h>
#include <cuda_runtime_api.h>

#include <atomic>
#include <optional>

#include "capture.hpp"
#include "copy_shape.hpp"
#include "exec/executor.hpp"
#include "exec/launch_scan.hpp"
#include "hook_common.hpp"
#include "kernel_timing.hpp"
#include "real_api.hpp"

#define CAPUCHIN_EXPORT extern "C" __attribute__((visibility("default")))
#define CAPUCHIN_UNPACK(...) __VA_ARGS__

namespace capuchin::interpose {
namespace {

template <class F>
F runtime_real(std::atomic<void*>& slot, const char* name) {
  void* p = slot.load(std::memory_order_acquire);
  if (p == nullptr) {
    p = runtime_symbol(name);
    slot.store(p, std::memory_order_release);
  }
  return reinterpret_cast<F>(p);
}

inline std::uint8_t pt_flag(bool pt) { return pt ? kPerThread : 0; }

CopyHint hint_of(cudaMemcpyKind kind) {
  switch (kind) {
    case cudaMemcpyHostToDevice: return CopyHint::H2D;
    case cudaMemcpyDeviceToHost: return CopyHint::D2H;
    case cudaMemcpyDeviceToDevice: return CopyHint::D2D;
    default: return CopyHint::Infer;
  }
}

cudaError_t rt_error(CUresult r) {
  switch (r) {
    case CUDA_SUCCESS: return cudaSuccess;
    case CUDA_ERROR_OUT_OF_MEMORY: return cudaErrorMemoryAllocation;
    case CUDA_ERROR_INVALID_VALUE: return cudaErrorInvalidValue;
    case CUDA_ERROR_ILLEGAL_ADDRESS: return cudaErrorIllegalAddress;
    case CUDA_ERROR_ILLEGAL_STATE: return cudaErrorIllegalState;
    default: return cudaErrorUnknown;
  }
}

// The executor serves a runtime allocation; before the runtime made a context current it
// cannot, so the runtime is initialised the usual way (cudaFree(NULL)) and it tries again.
bool executor_alloc(void** p, size_t n, cudaStream_t s, bool pt, bool async, cudaError_t* out) {
  if (p == nullptr) return false;
  CUdeviceptr d = 0;
  CUresult r;
  const void* caller = exec::t_alloc_caller;  // exec::alloc consumes it; the retry needs it again
  for (int attempt = 0; attempt < 2; ++attempt) {
    exec::note_alloc_caller(caller);
    if (!exec::alloc(&d, n, s, pt, async, &r)) return false;
    if (!exec::not_yet(r)) break;
    static std::atomic<void*> slot{nullptr};
    auto init = runtime_real<cudaError_t (*)(void*)>(slot, "cudaFree");
    if (init == nullptr || init(nullptr) != cudaSuccess) return false;
  }
  if (exec::not_yet(r)) return false;
  if (r == CUDA_SUCCESS) *p = reinterpret_cast<void*>(d);
  *out = rt_error(r);
  return true;
}

template <class Real>
cudaError_t executor_launch_rt(Real real, const void* f, dim3 g, dim3 b, size_t shm, cudaStream_t s, bool pt,
                               void** args, bool attributes = false) {
  LaunchWords buf;
  std::optional<ScannedLaunch> sl;
  {
    ErrnoKeeper keep;
    const FuncLayout* layout = layout_for_stub(f);
    sl.emplace(buf, layout, args, nullptr, pt_flag(pt));
    sl->launch.func = layout != nullptr ? reinterpret_cast<CUfunction>(layout->func) : nullptr;
    sl->set_geometry(g.x, g.y, g.z, b.x, b.y, b.z, static_cast<unsigned>(shm), reinterpret_cast<CUstream>(s));
    sl->launch.attributes = attributes;
    if (const CUresult e = sl->prepare(); e != CUDA_SUCCESS) return rt_error(e);
    sl->before_forward();
    sl->timer.begin(reinterpret_cast<CUstream>(s), pt);
  }
  const cudaError_t r = real();
  ErrnoKeeper keep;
  sl->finish(r == cudaSuccess, u64(f), u64(s), [&] { return real() == cudaSuccess ? CUDA_SUCCESS : CUDA_ERROR_LAUNCH_FAILED; });
  return r;
}

struct ExecCopy {
  bool on = false;
  exec::CopyToken tok;
  ExecCopy(HookScope& scope, const void* dst, const void* src, size_t n, cudaStream_t s, bool pt, bool memset,
           cudaError_t* err) {
    if (!executor_on(scope)) return;
    ErrnoKeeper keep;
    const CUresult e = exec::before_copy(u64(dst), u64(src), n, reinterpret_cast<CUstream>(s), pt, memset, tok);
    if (e != CUDA_SUCCESS) {
      *err = rt_error(e);
      return;
    }
    on = true;
  }
  void done(cudaError_t r) {
    if (!on) return;
    ErrnoKeeper keep;
    exec::after_copy(tok, r == cudaSuccess);
  }
};

// After a runtime launch: ends its timing (if sampled) and records it if it was launched.
inline void launched(timing::Timer& timer, bool ok, const void* stub, void** args, std::uint64_t stream,
                     std::uint8_t flags) {
  const std::uint32_t timed = timer.end(ok);
  if (ok) record_launch(layout_for_stub(stub), reinterpret_cast<std::uint64_t>(stub), args, nullptr, stream, flags, timed);
}

#define CAPUCHIN_AFTER(cond, ...) \
  if ((cond) && scope.record()) { \
    ErrnoKeeper keep;             \
    __VA_ARGS__;                  \
  }

template <class F>
cudaError_t rt_cudaMalloc(F real, bool, void** p, size_t n) {
  HookScope scope;
  if (executor_on(scope)) {
    ErrnoKeeper keep;
    cudaError_t out;
    if (executor_alloc(p, n, nullptr, false, false, &out)) return out;
  }
  const cudaError_t r = real(p, n);
  CAPUCHIN_AFTER(r == cudaSuccess && p != nullptr,
                 record_alloc(u64(*p), n, AllocSub::Device, 0, 0))
  return r;
}
template <class F>
cudaError_t rt_cudaMallocManaged(F real, bool, void** p, size_t n, unsigned fl) {
  HookScope scope;
  const cudaError_t r = real(p, n, fl);
  CAPUCHIN_AFTER(r == cudaSuccess && p != nullptr,
                 record_alloc(u64(*p), n, AllocSub::Managed, 0, 0))
  return r;
}
template <class F>
cudaError_t rt_cudaMallocAsync(F real, bool pt, void** p, size_t n, cudaStream_t s) {
  HookScope scope;
  if (executor_on(scope)) {
    ErrnoKeeper keep;
    cudaError_t out;
    if (executor_alloc(p, n, s, pt, true, &out)) return out;
  }
  const cudaError_t r = real(p, n, s);
  CAPUCHIN_AFTER(r == cudaSuccess && p != nullptr,
                 record_alloc(u64(*p), n, AllocSub::Async, u64(s), pt_flag(pt)))
  return r;
}
template <class F>
cudaError_t rt_cudaFree(F real, bool, void* p) {
  HookScope scope;
  if (executor_on(scope) && p != nullptr) {
    ErrnoKeeper keep;
    CUresult r;
    if (exec::free(u64(p), nullptr, false, false, &r)) return rt_error(r);
  }
  CAPUCHIN_AFTER(p != nullptr, record_free(u64(p), 0, 0))
  return real(p);
}
template <class F>
cudaError_t rt_cudaFreeAsync(F real, bool pt, void* p, cudaStream_t s) {
  HookScope scope;
  if (executor_on(scope) && p != nullptr) {
    ErrnoKeeper keep;
    CUresult r;
    if (exec::free(u64(p), reinterpret_cast<CUstream>(s), pt, true, &r)) return rt_error(r);
  }
  CAPUCHIN_AFTER(p != nullptr, record_free(u64(p), u64(s), pt_flag(pt)))
  return real(p, s);
}
template <class F>
cudaError_t rt_cudaMallocHost(F real, bool, void** p, size_t n) {
  HookScope scope;
  const cudaError_t r = real(p, n);
  CAPUCHIN_AFTER(r == cudaSuccess && p != nullptr, record_host_alloc(u64(*p), n))
  return r;
}
template <class F>
cudaError_t rt_cudaHostAlloc(F real, bool, void** p, size_t n, unsigned fl) {
  HookScope scope;
  const cudaError_t r = real(p, n, fl);
  CAPUCHIN_AFTER(r == cudaSuccess && p != nullptr, record_host_alloc(u64(*p), n))
  return r;
}
template <class F>
cudaError_t rt_cudaFreeHost(F real, bool, void* p) {
  HookScope scope;
  CAPUCHIN_AFTER(p != nullptr, record_host_free(u64(p)))
  return real(p);
}
template <class F>
cudaError_t rt_cudaLaunchKernel(F real, bool pt, const void* f, dim3 g, dim3 b, void** args, size_t shm,
                                cudaStream_t s) {
  HookScope scope;
  if (executor_on(scope))
    return executor_launch_rt([&] { return real(f, g, b, args, shm, s); }, f, g, b, shm, s, pt, args);
  timing::Timer timer;
  if (scope.record()) timer.begin(reinterpret_cast<CUstream>(s), pt);
  const cudaError_t r = real(f, g, b, args, shm, s);
  CAPUCHIN_AFTER(true, launched(timer, r == cudaSuccess, f, args, u64(s), pt_flag(pt)))
  return r;
}
template <class F>
cudaError_t rt_cudaLaunchKernelExC(F real, bool pt, const cudaLaunchConfig_t* cfg, const void* f, void** args) {
  HookScope scope;
  if (executor_on(scope) && cfg != nullptr)
    return executor_launch_rt([&] { return real(cfg, f, args); }, f, cfg->gridDim, cfg->blockDim, cfg->dynamicSmemBytes,
                              cfg->stream, pt, args, cfg->numAttrs != 0);
  timing::Timer timer;
  if (scope.record() && cfg != nullptr) timer.begin(reinterpret_cast<CUstream>(cfg->stream), pt);
  const cudaError_t r = real(cfg, f, args);
  CAPUCHIN_AFTER(true, launched(timer, r == cudaSuccess, f, args, cfg != nullptr ? u64(cfg->stream) : 0, pt_flag(pt)))
  return r;
}
template <class F>
cudaError_t rt_cudaMemcpy(F real, bool pt, void* dst, const void* src, size_t n, cudaMemcpyKind k) {
  HookScope scope;
  cudaError_t err = cudaSuccess;
  ExecCopy ec(scope, dst, src, n, nullptr, pt, false, &err);
  if (err != cudaSuccess) return err;
  const cudaError_t r = real(dst, src, n, k);
  ec.done(r);
  CAPUCHIN_AFTER(r == cudaSuccess && k != cudaMemcpyHostToHost,
                 record_copy(u64(dst), u64(src), n, hint_of(k), 0, pt_flag(pt)))
  return r;
}
template <class F>
cudaError_t rt_cudaMemcpyAsync(F real, bool pt, void* dst, const void* src, size_t n, cudaMemcpyKind k,
                               cudaStream_t s) {
  HookScope scope;
  cudaError_t err = cudaSuccess;
  ExecCopy ec(scope, dst, src, n, s, pt, false, &err);
  if (err != cudaSuccess) return err;
  const cudaError_t r = real(dst, src, n, k, s);
  ec.done(r);
  CAPUCHIN_AFTER(r == cudaSuccess && k != cudaMemcpyHostToHost,
                 record_copy(u64(dst), u64(src), n, hint_of(k), u64(s), pt_flag(pt)))
  return r;
}
// A copy whose sides are described by a CopyShape (strided, peer and symbol copies): the
// executor sees each side's first byte and the moved bytes; the trace records the moved bytes.
// `shape` is computed before the call (a null description: forwarded untouched).
template <class Call>
cudaError_t shaped_copy(const CopyShape* shape, cudaStream_t s, bool pt, Call&& call) {
  HookScope scope;  // also when there is nothing to record: the runtime's own calls pass through
  if (shape == nullptr) return call();
  cudaError_t err = cudaSuccess;
  ExecCopy ec(scope, reinterpret_cast<const void*>(shape->dst.start), reinterpret_cast<const void*>(shape->src.start),
              shape->bytes, s, pt, false, &err);
  if (err != cudaSuccess) return err;
  const cudaError_t r = call();
  ec.done(r);
  CAPUCHIN_AFTER(r == cudaSuccess && !shape->host_to_host,
                 record_copy(shape->dst.start, shape->src.start, shape->bytes, shape->hint, u64(s), pt_flag(pt)))
  return r;
}

CopyShape linear_shape(const void* dst, const void* src, size_t n, CopyHint hint) {
  CopyShape sh;
  sh.dst.start = u64(dst);
  sh.src.start = u64(src);
  sh.dst.span = sh.src.span = sh.bytes = n;
  sh.hint = hint;
  return sh;
}

template <class F>
cudaError_t rt_cudaMemcpy2D(F real, bool pt, void* dst, size_t dpitch, const void* src, size_t spitch, size_t width,
                            size_t height, cudaMemcpyKind k) {
  const CopyShape sh = shape_of_2d(dst, dpitch, src, spitch, width, height, k);
  return shaped_copy(&sh, nullptr, pt, [&] { return real(dst, dpitch, src, spitch, width, height, k); });
}
template <class F>
cudaError_t rt_cudaMemcpy2DAsync(F real, bool pt, void* dst, size_t dpitch, const void* src, size_t spitch,
                                 size_t width, size_t height, cudaMemcpyKind k, cudaStream_t s) {
  const CopyShape sh = shape_of_2d(dst, dpitch, src, spitch, width, height, k);
  return shaped_copy(&sh, s, pt, [&] { return real(dst, dpitch, src, spitch, width, height, k, s); });
}
template <class F>
cudaError_t rt_cudaMemcpy3D(F real, bool pt, const cudaMemcpy3DParms* p) {
  if (p == nullptr) return real(p);
  const CopyShape sh = shape_of_3d(*p, runtime_side_type(p->kind, true), runtime_side_type(p->kind, false));
  return shaped_copy(&sh, nullptr, pt, [&] { return real(p); });
}
template <class F>
cudaError_t rt_cudaMemcpy3DAsync(F real, bool pt, const cudaMemcpy3DParms* p, cudaStream_t s) {
  if (p == nullptr) return real(p, s);
  const CopyShape sh = shape_of_3d(*p, runtime_side_type(p->kind, true), runtime_side_type(p->kind, false));
  return shaped_copy(&sh, s, pt, [&] { return real(p, s); });
}
template <class F>
cudaError_t rt_cudaMemcpy3DPeer(F real, bool pt, const cudaMemcpy3DPeerParms* p) {
  if (p == nullptr) return real(p);
  const CopyShape sh = shape_of_3d(*p, CU_MEMORYTYPE_DEVICE, CU_MEMORYTYPE_DEVICE);
  return shaped_copy(&sh, nullptr, pt, [&] { return real(p); });
}
template <class F>
cudaError_t rt_cudaMemcpy3DPeerAsync(F real, bool pt, const cudaMemcpy3DPeerParms* p, cudaStream_t s) {
  if (p == nullptr) return real(p, s);
  const CopyShape sh = shape_of_3d(*p, CU_MEMORYTYPE_DEVICE, CU_MEMORYTYPE_DEVICE);
  return shaped_copy(&sh, s, pt, [&] { return real(p, s); });
}
template <class F>
cudaError_t rt_cudaMemcpyPeer(F real, bool pt, void* dst, int dd, const void* src, int sd, size_t n) {
  const CopyShape sh = linear_shape(dst, src, n, CopyHint::D2D);
  return shaped_copy(&sh, nullptr, pt, [&] { return real(dst, dd, src, sd, n); });
}
template <class F>
cudaError_t rt_cudaMemcpyPeerAsync(F real, bool pt, void* dst, int dd, const void* src, int sd, size_t n,
                                   cudaStream_t s) {
  const CopyShape sh = linear_shape(dst, src, n, CopyHint::D2D);
  return shaped_copy(&sh, s, pt, [&] { return real(dst, dd, src, sd, n, s); });
}

// A module global's device address (the runtime's own lookup), 0 when unknown; asked only when
// the copy is recorded or the executor is on. `to`: the symbol is the destination.
std::uint64_t symbol_address(const void* symbol, size_t offset) {
  HookScope scope;  // the runtime's calls into the driver pass through
  if (!scope.record() && !exec::on()) return 0;
  ErrnoKeeper keep;
  static std::atomic<void*> slot{nullptr};
  auto get = runtime_real<cudaError_t (*)(void**, const void*)>(slot, "cudaGetSymbolAddress");
  void* p = nullptr;
  if (get == nullptr || get(&p, symbol) != cudaSuccess || p == nullptr) return 0;
  return u64(p) + offset;
}
CopyShape symbol_shape(bool to_symbol, std::uint64_t sym, const void* other, size_t n, cudaMemcpyKind k) {
  CopyShape sh = to_symbol ? linear_shape(reinterpret_cast<const void*>(sym), other, n, hint_of(k))
                           : linear_shape(other, reinterpret_cast<const void*>(sym), n, hint_of(k));
  (to_symbol ? sh.dst : sh.src).device = true;
  return sh;
}
template <class F>
cudaError_t rt_cudaMemcpyToSymbol(F real, bool pt, const void* symbol, const void* src, size_t n, size_t off,
                                  cudaMemcpyKind k) {
  const std::uint64_t sym = t_hook_depth == 0 ? symbol_address(symbol, off) : 0;
  const CopyShape sh = symbol_shape(true, sym, src, n, k);
  return shaped_copy(sym != 0 ? &sh : nullptr, nullptr, pt, [&] { return real(symbol, src, n, off, k); });
}
template <class F>
cudaError_t rt_cudaMemcpyFromSymbol(F real, bool pt, void* dst, const void* symbol, size_t n, size_t off,
                                    cudaMemcpyKind k) {
  const std::uint64_t sym = t_hook_depth == 0 ? symbol_address(symbol, off) : 0;
  const CopyShape sh = symbol_shape(false, sym, dst, n, k);
  return shaped_copy(sym != 0 ? &sh : nullptr, nullptr, pt, [&] { return real(dst, symbol, n, off, k); });
}
template <class F>
cudaError_t rt_cudaMemcpyToSymbolAsync(F real, bool pt, const void* symbol, const void* src, size_t n, size_t off,
                                       cudaMemcpyKind k, cudaStream_t s) {
  const std::uint64_t sym = t_hook_depth == 0 ? symbol_address(symbol, off) : 0;
  const CopyShape sh = symbol_shape(true, sym, src, n, k);
  return shaped_copy(sym != 0 ? &sh : nullptr, s, pt, [&] { return real(symbol, src, n, off, k, s); });
}
template <class F>
cudaError_t rt_cudaMemcpyFromSymbolAsync(F real, bool pt, void* dst, const void* symbol, size_t n, size_t off,
                                         cudaMemcpyKind k, cudaStream_t s) {
  const std::uint64_t sym = t_hook_depth == 0 ? symbol_address(symbol, off) : 0;
  const CopyShape sh = symbol_shape(false, sym, dst, n, k);
  return shaped_copy(sym != 0 ? &sh : nullptr, s, pt, [&] { return real(dst, symbol, n, off, k, s); });
}

template <class F>
cudaError_t rt_cudaMemset(F real, bool pt, void* dst, int v, size_t n) {
  HookScope scope;
  cudaError_t err = cudaSuccess;
  ExecCopy ec(scope, dst, nullptr, n, nullptr, pt, true, &err);
  if (err != cudaSuccess) return err;
  const cudaError_t r = real(dst, v, n);
  ec.done(r);
  CAPUCHIN_AFTER(r == cudaSuccess, record_memset(u64(dst), n, 0, pt_flag(pt)))
  return r;
}
template <class F>
cudaError_t rt_cudaMemsetAsync(F real, bool pt, void* dst, int v, size_t n, cudaStream_t s) {
  HookScope scope;
  cudaError_t err = cudaSuccess;
  ExecCopy ec(scope, dst, nullptr, n, s, pt, true, &err);
  if (err != cudaSuccess) return err;
  const cudaError_t r = real(dst, v, n, s);
  ec.done(r);
  CAPUCHIN_AFTER(r == cudaSuccess, record_memset(u64(dst), n, u64(s), pt_flag(pt)))
  return r;
}
// 2D/3D memsets: the executor and the trace see the first byte and the set bytes.
template <class Call>
cudaError_t strided_memset(void* dst, std::uint64_t bytes, cudaStream_t s, bool pt, Call&& call) {
  HookScope scope;
  cudaError_t err = cudaSuccess;
  ExecCopy ec(scope, dst, nullptr, bytes, s, pt, true, &err);
  if (err != cudaSuccess) return err;
  const cudaError_t r = call();
  ec.done(r);
  CAPUCHIN_AFTER(r == cudaSuccess && bytes > 0, record_memset(u64(dst), bytes, u64(s), pt_flag(pt)))
  return r;
}
template <class F>
cudaError_t rt_cudaMemset2D(F real, bool pt, void* dst, size_t pitch, int v, size_t w, size_t h) {
  return strided_memset(dst, std::uint64_t{w} * h, nullptr, pt, [&] { return real(dst, pitch, v, w, h); });
}
template <class F>
cudaError_t rt_cudaMemset2DAsync(F real, bool pt, void* dst, size_t pitch, int v, size_t w, size_t h, cudaStream_t s) {
  return strided_memset(dst, std::uint64_t{w} * h, s, pt, [&] { return real(dst, pitch, v, w, h, s); });
}
template <class F>
cudaError_t rt_cudaMemset3D(F real, bool pt, cudaPitchedPtr p, int v, cudaExtent e) {
  return strided_memset(p.ptr, std::uint64_t{e.width} * e.height * e.depth, nullptr, pt, [&] { return real(p, v, e); });
}
template <class F>
cudaError_t rt_cudaMemset3DAsync(F real, bool pt, cudaPitchedPtr p, int v, cudaExtent e, cudaStream_t s) {
  return strided_memset(p.ptr, std::uint64_t{e.width} * e.height * e.depth, s, pt, [&] { return real(p, v, e, s); });
}

template <class F>
cudaError_t rt_cudaDeviceSynchronize(F real, bool) {
  HookScope scope;
  const cudaError_t r = real();
  CAPUCHIN_AFTER(r == cudaSuccess, record_sync(SyncSub::Device); if (scope.outer && exec::on()) exec::on_sync())
  return r;
}
template <class F>
cudaError_t rt_cudaStreamSynchronize(F real, bool, cudaStream_t s) {
  HookScope scope;
  const cudaError_t r = real(s);
  CAPUCHIN_AFTER(r == cudaSuccess, record_sync(SyncSub::Stream); if (scope.outer && exec::on()) exec::on_sync())
  return r;
}
template <class F>
cudaError_t rt_cudaEventSynchronize(F real, bool, cudaEvent_t e) {
  HookScope scope;
  const cudaError_t r = real(e);
  CAPUCHIN_AFTER(r == cudaSuccess, record_sync(SyncSub::Event); if (scope.outer && exec::on()) exec::on_sync())
  return r;
}
template <class F>
cudaError_t rt_cudaEventRecord(F real, bool pt, cudaEvent_t e, cudaStream_t s) {
  HookScope scope;
  const cudaError_t r = real(e, s);
  CAPUCHIN_AFTER(r == cudaSuccess, note_event_record(u64(e), u64(s), pt_flag(pt), false))
  return r;
}
template <class F>
cudaError_t rt_cudaEventRecordWithFlags(F real, bool pt, cudaEvent_t e, cudaStream_t s, unsigned fl) {
  HookScope scope;
  const cudaError_t r = real(e, s, fl);
  CAPUCHIN_AFTER(r == cudaSuccess, note_event_record(u64(e), u64(s), pt_flag(pt), (fl & cudaEventRecordExternal) != 0))
  return r;
}
template <class F>
cudaError_t rt_cudaStreamWaitEvent(F real, bool pt, cudaStream_t s, cudaEvent_t e, unsigned fl) {
  HookScope scope;
  const cudaError_t r = real(s, e, fl);
  CAPUCHIN_AFTER(r == cudaSuccess, note_stream_wait(u64(s), pt_flag(pt), u64(e)))
  return r;
}
// The executor's deferred events are recorded before a stream goes or a capture begins
// (exec::before_stream_destroy, exec::before_capture).
template <class F>
cudaError_t rt_cudaStreamDestroy(F real, bool pt, cudaStream_t s) {
  HookScope scope;
  if (scope.outer && exec::on()) {
    ErrnoKeeper keep;
    exec::before_stream_destroy(reinterpret_cast<CUstream>(s), pt);
  }
  return real(s);
}
inline void rt_before_capture(const HookScope& scope) {
  if (!scope.outer || !exec::on()) return;
  ErrnoKeeper keep;
  exec::before_capture();
}
template <class F>
cudaError_t rt_cudaStreamBeginCapture(F real, bool pt, cudaStream_t s, cudaStreamCaptureMode mode) {
  HookScope scope;
  rt_before_capture(scope);
  const cudaError_t r = real(s, mode);
  CAPUCHIN_AFTER(r == cudaSuccess, record_capture_begin(u64(s), pt_flag(pt)))
  return r;
}
// An IPC handle of memory the executor serves: it stays where it is from now on.
template <class F>
cudaError_t rt_cudaIpcGetMemHandle(F real, bool, cudaIpcMemHandle_t* h, void* p) {
  HookScope scope;
  const bool served = scope.outer && exec::on();
  if (served) {
    ErrnoKeeper keep;
    exec::exported(u64(p));
  }
  const cudaError_t r = real(h, p);
  if (served && r != cudaSuccess) {
    ErrnoKeeper keep;
    exec::export_failed(u64(p));
  }
  return r;
}
template <class F>
cudaError_t rt_cudaStreamBeginCaptureToGraph(F real, bool pt, cudaStream_t s, cudaGraph_t g, const cudaGraphNode_t* deps,
                                             const cudaGraphEdgeData* edges, size_t n, cudaStreamCaptureMode mode) {
  HookScope scope;
  rt_before_capture(scope);
  const cudaError_t r = real(s, g, deps, edges, n, mode);
  CAPUCHIN_AFTER(r == cudaSuccess, record_capture_begin(u64(s), pt_flag(pt)))
  return r;
}
template <class F>
cudaError_t rt_cudaStreamEndCapture(F real, bool pt, cudaStream_t s, cudaGraph_t* g) {
  HookScope scope;
  const cudaError_t r = real(s, g);
  CAPUCHIN_AFTER(true, record_capture_end(u64(s), r == cudaSuccess && g != nullptr ? u64(*g) : 0, pt_flag(pt),
                                          capture_ended(static_cast<int>(r))))
  return r;
}
template <class F>
cudaError_t rt_cudaGraphInstantiate(F real, bool, cudaGraphExec_t* exec, cudaGraph_t g, unsigned long long fl) {
  HookScope scope;
  const cudaError_t r = real(exec, g, fl);
  CAPUCHIN_AFTER(r == cudaSuccess && exec != nullptr, record_instantiate(u64(g), u64(*exec)))
  return r;
}
template <class F>
cudaError_t rt_cudaGraphInstantiateWithFlags(F real, bool pt, cudaGraphExec_t* exec, cudaGraph_t g,
                                             unsigned long long fl) {
  return rt_cudaGraphInstantiate(real, pt, exec, g, fl);
}
template <class F>
cudaError_t rt_cudaGraphLaunch(F real, bool pt, cudaGraphExec_t exec, cudaStream_t s) {
  HookScope scope;
  if (executor_on(scope)) {
    ErrnoKeeper keep;
    if (const CUresult e = exec::before_unknown_work(reinterpret_cast<CUstream>(s), pt); e != CUDA_SUCCESS) return rt_error(e);
  }
  const cudaError_t r = real(exec, s);
  if (executor_on(scope)) {
    ErrnoKeeper keep;
    exec::after_unknown_work(reinterpret_cast<CUstream>(s), pt, r == cudaSuccess);
  }
  CAPUCHIN_AFTER(r == cudaSuccess, record_graph_launch(u64(exec), u64(s), pt_flag(pt)))
  return r;
}
#undef CAPUCHIN_AFTER

}  // namespace
}  // namespace capuchin::interpose

// X(name, (params), (, forwarded args), has per-thread twin, twin suffix)
#define CAPUCHIN_RUNTIME_HOOKS(X)                                                                      \
  X(cudaMalloc, (void** p, size_t n), (, p, n), _)                                                     \
  X(cudaMallocManaged, (void** p, size_t n, unsigned fl), (, p, n, fl), _)                             \
  X(cudaMallocAsync, (void** p, size_t n, cudaStream_t s), (, p, n, s), _ptsz)                         \
  X(cudaFree, (void* p), (, p), _)                                                                     \
  X(cudaFreeAsync, (void* p, cudaStream_t s), (, p, s), _ptsz)                                         \
  X(cudaMallocHost, (void** p, size_t n), (, p, n), _)                                                 \
  X(cudaHostAlloc, (void** p, size_t n, unsigned fl), (, p, n, fl), _)                                 \
  X(cudaFreeHost, (void* p), (, p), _)                                                                 \
  X(cudaIpcGetMemHandle, (cudaIpcMemHandle_t * h, void* p), (, h, p), _)                              \
  X(cudaLaunchKernel, (const void* f, dim3 g, dim3 b, void** a, size_t shm, cudaStream_t s),           \
    (, f, g, b, a, shm, s), _ptsz)                                                                     \
  X(cudaLaunchKernelExC, (const cudaLaunchConfig_t* c, const void* f, void** a), (, c, f, a), _ptsz)   \
  X(cudaMemcpy, (void* d, const void* s, size_t n, cudaMemcpyKind k), (, d, s, n, k), _ptds)           \
  X(cudaMemcpyAsync, (void* d, const void* s, size_t n, cudaMemcpyKind k, cudaStream_t st),            \
    (, d, s, n, k, st), _ptsz)                                                                         \
  X(cudaMemcpy2D, (void* d, size_t dp, const void* s, size_t sp, size_t w, size_t h, cudaMemcpyKind k),   \
    (, d, dp, s, sp, w, h, k), _ptds)                                                                  \
  X(cudaMemcpy2DAsync,                                                                                 \
    (void* d, size_t dp, const void* s, size_t sp, size_t w, size_t h, cudaMemcpyKind k, cudaStream_t st), \
    (, d, dp, s, sp, w, h, k, st), _ptsz)                                                              \
  X(cudaMemcpy3D, (const cudaMemcpy3DParms* p), (, p), _ptds)                                          \
  X(cudaMemcpy3DAsync, (const cudaMemcpy3DParms* p, cudaStream_t st), (, p, st), _ptsz)                \
  X(cudaMemcpy3DPeer, (const cudaMemcpy3DPeerParms* p), (, p), _ptds)                                  \
  X(cudaMemcpy3DPeerAsync, (const cudaMemcpy3DPeerParms* p, cudaStream_t st), (, p, st), _ptsz)        \
  X(cudaMemcpyPeer, (void* d, int dd, const void* s, int sd, size_t n), (, d, dd, s, sd, n), _)        \
  X(cudaMemcpyPeerAsync, (void* d, int dd, const void* s, int sd, size_t n, cudaStream_t st),          \
    (, d, dd, s, sd, n, st), _)                                                                        \
  X(cudaMemcpyToSymbol, (const void* sym, const void* s, size_t n, size_t off, cudaMemcpyKind k),      \
    (, sym, s, n, off, k), _ptds)                                                                      \
  X(cudaMemcpyFromSymbol, (void* d, const void* sym, size_t n, size_t off, cudaMemcpyKind k),          \
    (, d, sym, n, off, k), _ptds)                                                                      \
  X(cudaMemcpyToSymbolAsync,                                                                           \
    (const void* sym, const void* s, size_t n, size_t off, cudaMemcpyKind k, cudaStream_t st),         \
    (, sym, s, n, off, k, st), _ptsz)                                                                  \
  X(cudaMemcpyFromSymbolAsync,                                                                         \
    (void* d, const void* sym, size_t n, size_t off, cudaMemcpyKind k, cudaStream_t st),               \
    (, d, sym, n, off, k, st), _ptsz)                                                                  \
  X(cudaMemset, (void* d, int v, size_t n), (, d, v, n), _ptds)                                        \
  X(cudaMemsetAsync, (void* d, int v, size_t n, cudaStream_t s), (, d, v, n, s), _ptsz)                \
  X(cudaMemset2D, (void* d, size_t p, int v, size_t w, size_t h), (, d, p, v, w, h), _ptds)              \
  X(cudaMemset2DAsync, (void* d, size_t p, int v, size_t w, size_t h, cudaStream_t s),                 \
    (, d, p, v, w, h, s), _ptsz)                                                                       \
  X(cudaMemset3D, (cudaPitchedPtr p, int v, cudaExtent e), (, p, v, e), _ptds)                         \
  X(cudaMemset3DAsync, (cudaPitchedPtr p, int v, cudaExtent e, cudaStream_t s), (, p, v, e, s), _ptsz) \
  X(cudaDeviceSynchronize, (void), (), _)                                                              \
  X(cudaStreamSynchronize, (cudaStream_t s), (, s), _ptsz)                                             \
  X(cudaStreamDestroy, (cudaStream_t s), (, s), _)                                                     \
  X(cudaEventSynchronize, (cudaEvent_t e), (, e), _)                                                   \
  X(cudaEventRecord, (cudaEvent_t e, cudaStream_t s), (, e, s), _ptsz)                                 \
  X(cudaEventRecordWithFlags, (cudaEvent_t e, cudaStream_t s, unsigned fl), (, e, s, fl), _ptsz)       \
  X(cudaStreamWaitEvent, (cudaStream_t s, cudaEvent_t e, unsigned fl), (, s, e, fl), _ptsz)            \
  X(cudaStreamBeginCapture, (cudaStream_t s, cudaStreamCaptureMode m), (, s, m), _ptsz)                \
  X(cudaStreamBeginCaptureToGraph,                                                                      \
    (cudaStream_t s, cudaGraph_t g, const cudaGraphNode_t* deps, const cudaGraphEdgeData* edges, size_t n, \
     cudaStreamCaptureMode m),                                                                           \
    (, s, g, deps, edges, n, m), _ptsz)                                                                  \
  X(cudaStreamEndCapture, (cudaStream_t s, cudaGraph_t * g), (, s, g), _ptsz)                          \
  X(cudaGraphInstantiate, (cudaGraphExec_t * e, cudaGraph_t g, unsigned long long fl), (, e, g, fl), _) \
  X(cudaGraphInstantiateWithFlags, (cudaGraphExec_t * e, cudaGraph_t g, unsigned long long fl),        \
    (, e, g, fl), _)                                                                                   \
  X(cudaGraphLaunch, (cudaGraphExec_t e, cudaStream_t s), (, e, s), _ptsz)

namespace cap = capuchin::interpose;

#define CAPUCHIN_RT_EXPORT(name, suffix, pt, params, fwd)                                \
  CAPUCHIN_EXPORT cudaError_t name##suffix params {                                      \
    static std::atomic<void*> slot{nullptr};                                             \
    auto real = cap::runtime_real<cudaError_t(*) params>(slot, #name #suffix);          \
    if (real == nullptr) return cudaErrorSharedObjectInitFailed;                         \
    cap::exec::note_alloc_caller(__builtin_return_address(0));                           \
    return cap::rt_##name(real, pt CAPUCHIN_UNPACK fwd);                                 \
  }
#define CAPUCHIN_RT_PLAIN(name, params, fwd, twin) CAPUCHIN_RT_EXPORT(name, , false, params, fwd)
CAPUCHIN_RUNTIME_HOOKS(CAPUCHIN_RT_PLAIN)
#undef CAPUCHIN_RT_PLAIN

// The per-thread twins (cudart exports them; nvcc --default-stream per-thread calls them).
#define CAPUCHIN_RT_TWIN_ptsz(name, params, fwd) CAPUCHIN_RT_EXPORT(name, _ptsz, true, params, fwd)
#define CAPUCHIN_RT_TWIN_ptds(name, params, fwd) CAPUCHIN_RT_EXPORT(name, _ptds, true, params, fwd)
#define CAPUCHIN_RT_TWIN_(name, params, fwd)
#define CAPUCHIN_RT_TWINS(name, params, fwd, twin) CAPUCHIN_RT_TWIN##twin(name, params, fwd)
CAPUCHIN_RUNTIME_HOOKS(CAPUCHIN_RT_TWINS)
