// api_exec.cpp: the exported driver calls for initialisation, the devices (SIMCUDA_DEVICES)
// and their primary contexts, streams, events, kernel launch and function queries, stream capture and graphs,
// and error names/strings, with the _v2 and _ptsz variants the real driver exports.
//
// Contract: definitions match the real CUDA 13 cuda.h declarations (compiled with
// __CUDA_API_VERSION_INTERNAL). A NULL stream means the legacy default stream for the plain
// entry points and the calling thread's per-thread default stream for the _ptsz/_ptds ones.
#include <algorithm>
#include <cstring>
#include <set>

#include "internal.hpp"

using namespace simcuda;

namespace {

thread_local CUctx_st* tls_ctx = nullptr;
thread_local std::vector<CUctx_st*> tls_ctx_stack;

// Live events; never destroyed (like the Driver), so events a program leaks stay reachable.
std::mutex& g_events_mu = *new std::mutex;
std::set<CUevent_st*>& g_events = *new std::set<CUevent_st*>;

bool live_event(CUevent_st* e) {
  std::lock_guard<std::mutex> lock(g_events_mu);
  return g_events.count(e) != 0;
}

CUstream_st* stream_or(CUstream h, DefaultStream ds, CUresult* err) {
  *err = check_ready();
  if (*err != CUDA_SUCCESS) return nullptr;
  return d().scheduler.resolve(h, ds, err);
}

CUresult stream_sync(CUstream h, DefaultStream ds) {
  CUresult err;
  CUstream_st* s = stream_or(h, ds, &err);
  if (s == nullptr) return err;
  if (CUresult r = check_unsafe_call(); r != CUDA_SUCCESS) return r;
  return d().scheduler.synchronize_stream(s);
}

CUresult stream_query(CUstream h, DefaultStream ds) {
  CUresult err;
  CUstream_st* s = stream_or(h, ds, &err);
  if (s == nullptr) return err;
  if (CUresult r = check_unsafe_call(); r != CUDA_SUCCESS) return r;
  return d().scheduler.query_stream(s);
}

CUresult stream_wait_event(CUstream h, CUevent e, unsigned flags, DefaultStream ds) {
  CUresult err;
  CUstream_st* s = stream_or(h, ds, &err);
  if (s == nullptr) return err;
  if (!live_event(e) || (flags & ~1u) != 0) return CUDA_ERROR_INVALID_HANDLE;
  return d().scheduler.wait_event(s, e);
}

CUresult event_record(CUevent e, CUstream h, DefaultStream ds) {
  CUresult err;
  CUstream_st* s = stream_or(h, ds, &err);
  if (s == nullptr) return err;
  if (!live_event(e)) return CUDA_ERROR_INVALID_HANDLE;
  // cuda.h, cuEventRecord: "hEvent and hStream must be from the same context otherwise
  // CUDA_ERROR_INVALID_HANDLE is returned."
  if (e->device != stream_device(s)) return CUDA_ERROR_INVALID_HANDLE;
  return d().scheduler.record_event(s, e);
}

CUresult launch(CUfunction f, const unsigned grid[3], const unsigned block[3], unsigned smem, CUstream h,
                void** kernel_params, void** extra, DefaultStream ds) {
  CUresult err;
  CUstream_st* s = stream_or(h, ds, &err);
  if (s == nullptr) return err;
  f = launchable(f);
  if (f == nullptr) return CUDA_ERROR_INVALID_HANDLE;
  if (grid[0] == 0 || grid[1] == 0 || grid[2] == 0 || block[0] == 0 || block[1] == 0 || block[2] == 0)
    return CUDA_ERROR_INVALID_VALUE;
  if (static_cast<uint64_t>(block[0]) * block[1] * block[2] > 1024) return CUDA_ERROR_INVALID_VALUE;
  OpPayload p;
  p.kind = OpKind::Kernel;
  p.func = f;
  p.params.assign(f->param_buffer_bytes, 0);
  if (kernel_params != nullptr) {
    for (size_t i = 0; i < f->param_offsets.size(); ++i)
      std::memcpy(p.params.data() + f->param_offsets[i], kernel_params[i], f->param_sizes[i]);
  } else if (extra != nullptr) {
    const void* buffer = nullptr;
    size_t size = 0;
    for (size_t i = 0; extra[i] != CU_LAUNCH_PARAM_END; i += 2) {
      if (extra[i] == CU_LAUNCH_PARAM_BUFFER_POINTER) buffer = extra[i + 1];
      else if (extra[i] == CU_LAUNCH_PARAM_BUFFER_SIZE) size = *static_cast<size_t*>(extra[i + 1]);
      else return CUDA_ERROR_INVALID_VALUE;
    }
    if (buffer == nullptr || size < f->param_buffer_bytes) return CUDA_ERROR_INVALID_VALUE;
    std::memcpy(p.params.data(), buffer, f->param_buffer_bytes);
  } else if (!f->param_offsets.empty()) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  for (int i = 0; i < 3; ++i) {
    p.grid[i] = grid[i];
    p.block[i] = block[i];
  }
  p.shared_mem = smem;
  return d().scheduler.enqueue(s, std::move(p));
}

CUresult launch_classic(CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz,
                        unsigned smem, CUstream h, void** params, void** extra, DefaultStream ds) {
  const unsigned grid[3] = {gx, gy, gz};
  const unsigned block[3] = {bx, by, bz};
  return launch(f, grid, block, smem, h, params, extra, ds);
}

CUresult launch_ex(const CUlaunchConfig* config, CUfunction f, void** params, void** extra, DefaultStream ds) {
  if (config == nullptr) return CUDA_ERROR_INVALID_VALUE;
  const unsigned grid[3] = {config->gridDimX, config->gridDimY, config->gridDimZ};
  const unsigned block[3] = {config->blockDimX, config->blockDimY, config->blockDimZ};
  return launch(f, grid, block, config->sharedMemBytes, config->hStream, params, extra, ds);
}

CUresult host_func(CUstream h, CUhostFn fn, void* user, DefaultStream ds) {
  CUresult err;
  CUstream_st* s = stream_or(h, ds, &err);
  if (s == nullptr) return err;
  if (fn == nullptr) return CUDA_ERROR_INVALID_VALUE;
  OpPayload p;
  p.kind = OpKind::HostFn;
  p.host_fn = fn;
  p.user_data = user;
  return d().scheduler.enqueue(s, std::move(p));
}

CUresult begin_capture(CUstream h, CUstreamCaptureMode mode, DefaultStream ds) {
  CUresult err;
  CUstream_st* s = stream_or(h, ds, &err);
  return s ? d().scheduler.begin_capture(s, mode) : err;
}

CUresult begin_capture_to_graph(CUstream h, CUgraph graph, const CUgraphNode* deps, size_t ndeps, CUstreamCaptureMode mode,
                                DefaultStream ds) {
  CUresult err;
  CUstream_st* s = stream_or(h, ds, &err);
  if (s == nullptr) return err;
  if (graph == nullptr || (ndeps != 0 && deps == nullptr)) return CUDA_ERROR_INVALID_VALUE;
  // Node handles are not simulated (cuGraphGetNodes counts only): no node can be named.
  if (ndeps != 0) return CUDA_ERROR_NOT_SUPPORTED;
  return d().scheduler.begin_capture(s, mode, graph);
}

CUresult end_capture(CUstream h, CUgraph* g, DefaultStream ds) {
  CUresult err;
  CUstream_st* s = stream_or(h, ds, &err);
  if (s == nullptr) return err;
  if (g == nullptr) return CUDA_ERROR_INVALID_VALUE;
  return d().scheduler.end_capture(s, g);
}

CUresult is_capturing(CUstream h, CUstreamCaptureStatus* status, DefaultStream ds) {
  CUresult err;
  CUstream_st* s = stream_or(h, ds, &err);
  if (s == nullptr) return err;
  if (status == nullptr) return CUDA_ERROR_INVALID_VALUE;
  return d().scheduler.capture_status(s, status, nullptr);
}

CUresult capture_info(CUstream h, CUstreamCaptureStatus* status, cuuint64_t* id, CUgraph* graph,
                      const CUgraphNode** deps, const CUgraphEdgeData** edges, size_t* num, DefaultStream ds) {
  CUresult err;
  CUstream_st* s = stream_or(h, ds, &err);
  if (s == nullptr) return err;
  if (status == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (graph) *graph = nullptr;  // the in-progress graph is not exposed
  if (deps) *deps = nullptr;
  if (edges) *edges = nullptr;
  if (num) *num = 0;
  return d().scheduler.capture_status(s, status, id);
}

CUresult graph_launch(CUgraphExec exec, CUstream h, DefaultStream ds) {
  CUresult err;
  CUstream_st* s = stream_or(h, ds, &err);
  if (s == nullptr) return err;
  if (exec == nullptr) return CUDA_ERROR_INVALID_VALUE;
  return d().scheduler.launch_graph(exec, s);
}

#define SIMCUDA_ERRORS(X)                                                                            \
  X(CUDA_SUCCESS, "no error")                                                                        \
  X(CUDA_ERROR_INVALID_VALUE, "invalid argument")                                                    \
  X(CUDA_ERROR_OUT_OF_MEMORY, "out of memory")                                                       \
  X(CUDA_ERROR_NOT_INITIALIZED, "initialization error")                                              \
  X(CUDA_ERROR_DEINITIALIZED, "driver shutting down")                                                \
  X(CUDA_ERROR_NO_DEVICE, "no CUDA-capable device is detected")                                      \
  X(CUDA_ERROR_INVALID_DEVICE, "invalid device ordinal")                                             \
  X(CUDA_ERROR_INVALID_CONTEXT, "invalid device context")                                            \
  X(CUDA_ERROR_INVALID_HANDLE, "invalid resource handle")                                            \
  X(CUDA_ERROR_NOT_FOUND, "named symbol not found")                                                  \
  X(CUDA_ERROR_INVALID_PTX, "a PTX JIT compilation failed")                                          \
  X(CUDA_ERROR_INVALID_IMAGE, "device kernel image is invalid")                                      \
  X(CUDA_ERROR_NO_BINARY_FOR_GPU, "no kernel image is available for execution on the device")        \
  X(CUDA_ERROR_NOT_READY, "device not ready")                                                        \
  X(CUDA_ERROR_ILLEGAL_ADDRESS, "an illegal memory access was encountered")                          \
  X(CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES, "too many resources requested for launch")                   \
  X(CUDA_ERROR_LAUNCH_FAILED, "unspecified launch failure")                                          \
  X(CUDA_ERROR_NOT_SUPPORTED, "operation not supported")                                             \
  X(CUDA_ERROR_ILLEGAL_STATE, "the operation cannot be performed in the present state")              \
  X(CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED, "operation not permitted when stream is capturing")       \
  X(CUDA_ERROR_STREAM_CAPTURE_INVALIDATED, "operation failed due to a previous error during capture") \
  X(CUDA_ERROR_STREAM_CAPTURE_MERGE, "operation would result in a merge of separate capture sequences") \
  X(CUDA_ERROR_STREAM_CAPTURE_UNMATCHED, "capture was not ended in the same stream as it began")     \
  X(CUDA_ERROR_STREAM_CAPTURE_UNJOINED, "capturing stream has unjoined work")                        \
  X(CUDA_ERROR_STREAM_CAPTURE_ISOLATION, "dependency created on uncaptured work in another stream")  \
  X(CUDA_ERROR_STREAM_CAPTURE_IMPLICIT,                                                              \
    "operation would make the legacy stream depend on a capturing blocking stream")                  \
  X(CUDA_ERROR_STREAM_CAPTURE_WRONG_THREAD, "attempt to terminate a thread-local capture sequence from another thread") \
  X(CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED, "part or all of the requested memory range is already mapped") \
  X(CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED, "pointer does not correspond to a registered memory region") \
  X(CUDA_ERROR_UNKNOWN, "unknown error")

}  // namespace

namespace simcuda {

bool driver_initialized() { return d().initialized.load(std::memory_order_acquire); }

CUctx_st*& current_ctx() { return tls_ctx; }

int current_device() { return tls_ctx != nullptr ? tls_ctx->device : 0; }

int stream_device(const CUstream_st* s) { return s->kind == StreamKind::Created ? s->device : current_device(); }

bool is_context(const CUctx_st* ctx) {
  for (const CUctx_st& c : d().primary_ctx)
    if (&c == ctx) return valid_device(c.device);
  return false;
}

CUresult check_ready() {
  if (!driver_initialized()) return CUDA_ERROR_NOT_INITIALIZED;
  if (tls_ctx == nullptr) return CUDA_ERROR_INVALID_CONTEXT;
  return d().scheduler.sticky();
}

CUstreamCaptureMode& thread_capture_mode() {
  thread_local CUstreamCaptureMode mode = CU_STREAM_CAPTURE_MODE_GLOBAL;
  return mode;
}

}  // namespace simcuda

extern "C" {

// ---- init, device, context -----------------------------------------------------------------
CUresult cuInit(unsigned int flags) {
  if (flags != 0) return CUDA_ERROR_INVALID_VALUE;
  d().initialized.store(true, std::memory_order_release);
  return CUDA_SUCCESS;
}

CUresult cuDriverGetVersion(int* version) {
  if (version == nullptr) return CUDA_ERROR_INVALID_VALUE;
  *version = kDriverVersion;
  return CUDA_SUCCESS;
}

CUresult cuDeviceGet(CUdevice* device, int ordinal) {
  if (!driver_initialized()) return CUDA_ERROR_NOT_INITIALIZED;
  if (device == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (!valid_device(ordinal)) return CUDA_ERROR_INVALID_DEVICE;
  *device = ordinal;  // simcuda's device handles are their ordinals
  return CUDA_SUCCESS;
}

CUresult cuDeviceGetCount(int* count) {
  if (!driver_initialized()) return CUDA_ERROR_NOT_INITIALIZED;
  if (count == nullptr) return CUDA_ERROR_INVALID_VALUE;
  *count = device_count();
  return CUDA_SUCCESS;
}

CUresult cuDeviceGetName(char* name, int len, CUdevice dev) {
  if (!driver_initialized()) return CUDA_ERROR_NOT_INITIALIZED;
  if (name == nullptr || len <= 0) return CUDA_ERROR_INVALID_VALUE;
  if (!valid_device(dev)) return CUDA_ERROR_INVALID_DEVICE;
  std::strncpy(name, "simcuda reference GPU", static_cast<size_t>(len) - 1);
  name[len - 1] = '\0';
  return CUDA_SUCCESS;
}

CUresult cuDeviceTotalMem_v2(size_t* bytes, CUdevice dev) {
  if (!driver_initialized()) return CUDA_ERROR_NOT_INITIALIZED;
  if (bytes == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (!valid_device(dev)) return CUDA_ERROR_INVALID_DEVICE;
  *bytes = d().memory.capacity();  // every device has SIMCUDA_DEVICE_BYTES
  return CUDA_SUCCESS;
}

CUresult cuDeviceGetAttribute(int* pi, CUdevice_attribute attrib, CUdevice dev) {
  if (!driver_initialized()) return CUDA_ERROR_NOT_INITIALIZED;
  if (pi == nullptr || attrib <= 0 || attrib >= CU_DEVICE_ATTRIBUTE_MAX) return CUDA_ERROR_INVALID_VALUE;
  if (!valid_device(dev)) return CUDA_ERROR_INVALID_DEVICE;
  switch (attrib) {
    case CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK: *pi = 1024; break;
    case CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_X: case CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Y: *pi = 1024; break;
    case CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Z: *pi = 64; break;
    case CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_X: *pi = 2147483647; break;
    case CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Y: case CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Z: *pi = 65535; break;
    case CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK: *pi = 49152; break;
    case CU_DEVICE_ATTRIBUTE_WARP_SIZE: *pi = 32; break;
    case CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT: *pi = 132; break;
    case CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR: *pi = 9; break;
    case CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR: *pi = 0; break;
    case CU_DEVICE_ATTRIBUTE_UNIFIED_ADDRESSING: case CU_DEVICE_ATTRIBUTE_MANAGED_MEMORY:
    case CU_DEVICE_ATTRIBUTE_CONCURRENT_MANAGED_ACCESS: case CU_DEVICE_ATTRIBUTE_CAN_MAP_HOST_MEMORY:
    case CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED: case CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED:
    case CU_DEVICE_ATTRIBUTE_CONCURRENT_KERNELS: case CU_DEVICE_ATTRIBUTE_ASYNC_ENGINE_COUNT:
      *pi = 1;
      break;
    case CU_DEVICE_ATTRIBUTE_HOST_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED: *pi = host_vmm_supported(CU_MEM_LOCATION_TYPE_HOST); break;
    case CU_DEVICE_ATTRIBUTE_HOST_NUMA_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED:
      *pi = host_vmm_supported(CU_MEM_LOCATION_TYPE_HOST_NUMA);
      break;
    case CU_DEVICE_ATTRIBUTE_HOST_NUMA_ID: *pi = 0; break;  // one node
    default: *pi = 0; break;  // pageable access, HMM, ECC, ...: not offered by this device
  }
  return CUDA_SUCCESS;
}

CUresult cuDevicePrimaryCtxRetain(CUcontext* pctx, CUdevice dev) {
  if (!driver_initialized()) return CUDA_ERROR_NOT_INITIALIZED;
  if (pctx == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (!valid_device(dev)) return CUDA_ERROR_INVALID_DEVICE;
  std::lock_guard<std::mutex> lock(d().kernels_mu);
  d().primary_refs[dev]++;
  *pctx = &d().primary_ctx[dev];
  return CUDA_SUCCESS;
}

CUresult cuDevicePrimaryCtxRelease_v2(CUdevice dev) {
  if (!driver_initialized()) return CUDA_ERROR_NOT_INITIALIZED;
  if (!valid_device(dev)) return CUDA_ERROR_INVALID_DEVICE;
  std::lock_guard<std::mutex> lock(d().kernels_mu);
  if (d().primary_refs[dev] == 0) return CUDA_ERROR_INVALID_CONTEXT;
  d().primary_refs[dev]--;  // the simulated context is never torn down
  return CUDA_SUCCESS;
}

CUresult cuDevicePrimaryCtxGetState(CUdevice dev, unsigned int* flags, int* active) {
  if (!driver_initialized()) return CUDA_ERROR_NOT_INITIALIZED;
  if (flags == nullptr || active == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (!valid_device(dev)) return CUDA_ERROR_INVALID_DEVICE;
  std::lock_guard<std::mutex> lock(d().kernels_mu);
  *flags = 0;
  *active = d().primary_refs[dev] > 0 ? 1 : 0;
  return CUDA_SUCCESS;
}

CUresult cuDevicePrimaryCtxSetFlags_v2(CUdevice dev, unsigned int /*flags*/) {
  if (!driver_initialized()) return CUDA_ERROR_NOT_INITIALIZED;
  return valid_device(dev) ? CUDA_SUCCESS : CUDA_ERROR_INVALID_DEVICE;
}

CUresult cuCtxGetCurrent(CUcontext* pctx) {
  if (!driver_initialized()) return CUDA_ERROR_NOT_INITIALIZED;
  if (pctx == nullptr) return CUDA_ERROR_INVALID_VALUE;
  *pctx = tls_ctx;
  return CUDA_SUCCESS;
}

CUresult cuCtxSetCurrent(CUcontext ctx) {
  if (!driver_initialized()) return CUDA_ERROR_NOT_INITIALIZED;
  if (ctx != nullptr && !is_context(ctx)) return CUDA_ERROR_INVALID_CONTEXT;
  tls_ctx = ctx;
  return CUDA_SUCCESS;
}

CUresult cuCtxPushCurrent_v2(CUcontext ctx) {
  if (!driver_initialized()) return CUDA_ERROR_NOT_INITIALIZED;
  if (!is_context(ctx)) return CUDA_ERROR_INVALID_CONTEXT;
  tls_ctx_stack.push_back(tls_ctx);
  tls_ctx = ctx;
  return CUDA_SUCCESS;
}

CUresult cuCtxPopCurrent_v2(CUcontext* pctx) {
  if (!driver_initialized()) return CUDA_ERROR_NOT_INITIALIZED;
  if (tls_ctx == nullptr) return CUDA_ERROR_INVALID_CONTEXT;
  if (pctx) *pctx = tls_ctx;
  tls_ctx = tls_ctx_stack.empty() ? nullptr : tls_ctx_stack.back();
  if (!tls_ctx_stack.empty()) tls_ctx_stack.pop_back();
  return CUDA_SUCCESS;
}

CUresult cuCtxGetDevice(CUdevice* device) {
  if (!driver_initialized()) return CUDA_ERROR_NOT_INITIALIZED;
  if (tls_ctx == nullptr) return CUDA_ERROR_INVALID_CONTEXT;
  if (device == nullptr) return CUDA_ERROR_INVALID_VALUE;
  *device = tls_ctx->device;  // cuda.h: "Returns the device handle for the current context"
  return CUDA_SUCCESS;
}

CUresult cuCtxSynchronize(void) {
  if (!driver_initialized()) return CUDA_ERROR_NOT_INITIALIZED;
  if (tls_ctx == nullptr) return CUDA_ERROR_INVALID_CONTEXT;
  if (CUresult r = check_unsafe_call(); r != CUDA_SUCCESS) return r;
  return d().scheduler.synchronize_device();
}
// CUDA 13's form (cuda.h: cuCtxSynchronize_v2(CUcontext), what cuGetProcAddress returns for
// "cuCtxSynchronize" from cudaVersion 13000): NULL means the current context; a handle that is
// no context of ours is CUDA_ERROR_INVALID_CONTEXT, so a caller forwarding garbage is caught.
CUresult cuCtxSynchronize_v2(CUcontext ctx) {
  if (!driver_initialized()) return CUDA_ERROR_NOT_INITIALIZED;
  if (ctx == nullptr) return cuCtxSynchronize();
  if (!is_context(ctx)) return CUDA_ERROR_INVALID_CONTEXT;
  if (CUresult r = check_unsafe_call(); r != CUDA_SUCCESS) return r;
  return d().scheduler.synchronize_device();  // every device's work (simcuda README)
}

// ---- streams -------------------------------------------------------------------------------
CUresult cuStreamCreate(CUstream* ph, unsigned int flags) {
  if (CUresult r = check_ready(); r != CUDA_SUCCESS) return r;
  if (ph == nullptr || (flags & ~static_cast<unsigned>(CU_STREAM_NON_BLOCKING)) != 0) return CUDA_ERROR_INVALID_VALUE;
  *ph = d().scheduler.create_stream(flags, 0);
  return CUDA_SUCCESS;
}
CUresult cuStreamCreateWithPriority(CUstream* ph, unsigned int flags, int priority) {
  if (CUresult r = cuStreamCreate(ph, flags); r != CUDA_SUCCESS) return r;
  (*ph)->priority = std::clamp(priority, -5, 0);
  return CUDA_SUCCESS;
}
CUresult cuStreamDestroy_v2(CUstream h) {
  if (!driver_initialized()) return CUDA_ERROR_NOT_INITIALIZED;
  if (h == nullptr || h == CU_STREAM_LEGACY || h == CU_STREAM_PER_THREAD) return CUDA_ERROR_INVALID_HANDLE;
  return d().scheduler.destroy_stream(h);
}
CUresult cuStreamSynchronize(CUstream h) { return stream_sync(h, DefaultStream::Legacy); }
CUresult cuStreamSynchronize_ptsz(CUstream h) { return stream_sync(h, DefaultStream::PerThread); }
CUresult cuStreamQuery(CUstream h) { return stream_query(h, DefaultStream::Legacy); }
CUresult cuStreamQuery_ptsz(CUstream h) { return stream_query(h, DefaultStream::PerThread); }
CUresult cuStreamWaitEvent(CUstream h, CUevent e, unsigned int flags) { return stream_wait_event(h, e, flags, DefaultStream::Legacy); }
CUresult cuStreamWaitEvent_ptsz(CUstream h, CUevent e, unsigned int flags) { return stream_wait_event(h, e, flags, DefaultStream::PerThread); }

static CUresult stream_get_flags(CUstream h, unsigned int* flags, DefaultStream ds) {
  CUresult err;
  CUstream_st* s = stream_or(h, ds, &err);
  if (s == nullptr) return err;
  if (flags == nullptr) return CUDA_ERROR_INVALID_VALUE;
  *flags = s->flags;
  return CUDA_SUCCESS;
}
CUresult cuStreamGetFlags(CUstream h, unsigned int* flags) { return stream_get_flags(h, flags, DefaultStream::Legacy); }
CUresult cuStreamGetFlags_ptsz(CUstream h, unsigned int* flags) { return stream_get_flags(h, flags, DefaultStream::PerThread); }

static CUresult stream_get_id(CUstream h, unsigned long long* id, DefaultStream ds) {
  CUresult err;
  CUstream_st* s = stream_or(h, ds, &err);
  if (s == nullptr) return err;
  if (id == nullptr) return CUDA_ERROR_INVALID_VALUE;
  *id = s->id;
  return CUDA_SUCCESS;
}
CUresult cuStreamGetId(CUstream h, unsigned long long* id) { return stream_get_id(h, id, DefaultStream::Legacy); }
CUresult cuStreamGetId_ptsz(CUstream h, unsigned long long* id) { return stream_get_id(h, id, DefaultStream::PerThread); }

static CUresult stream_get_priority(CUstream h, int* priority, DefaultStream ds) {
  CUresult err;
  CUstream_st* s = stream_or(h, ds, &err);
  if (s == nullptr) return err;
  if (priority == nullptr) return CUDA_ERROR_INVALID_VALUE;
  *priority = s->priority;
  return CUDA_SUCCESS;
}
CUresult cuStreamGetPriority(CUstream h, int* p) { return stream_get_priority(h, p, DefaultStream::Legacy); }
CUresult cuStreamGetPriority_ptsz(CUstream h, int* p) { return stream_get_priority(h, p, DefaultStream::PerThread); }

CUresult cuLaunchHostFunc(CUstream h, CUhostFn fn, void* user) { return host_func(h, fn, user, DefaultStream::Legacy); }
CUresult cuLaunchHostFunc_ptsz(CUstream h, CUhostFn fn, void* user) { return host_func(h, fn, user, DefaultStream::PerThread); }

CUresult cuStreamAddCallback(CUstream h, CUstreamCallback callback, void* user, unsigned int flags) {
  if (callback == nullptr || flags != 0) return CUDA_ERROR_INVALID_VALUE;
  // Called with the stream and the context's status, on the stream's worker, in stream order.
  struct Call {
    CUstream stream;
    CUstreamCallback fn;
    void* user;
  };
  auto* call = new Call{h, callback, user};
  CUresult r = host_func(
      h,
      [](void* p) {
        auto* c = static_cast<Call*>(p);
        c->fn(c->stream, driver().scheduler.sticky(), c->user);
        delete c;
      },
      call, DefaultStream::Legacy);
  if (r != CUDA_SUCCESS) delete call;
  return r;
}

// ---- capture and graphs --------------------------------------------------------------------
CUresult cuStreamBeginCapture_v2(CUstream h, CUstreamCaptureMode mode) { return begin_capture(h, mode, DefaultStream::Legacy); }
CUresult cuStreamBeginCapture_v2_ptsz(CUstream h, CUstreamCaptureMode mode) { return begin_capture(h, mode, DefaultStream::PerThread); }
CUresult cuStreamBeginCaptureToGraph(CUstream h, CUgraph g, const CUgraphNode* deps, const CUgraphEdgeData* /*edges*/,
                                     size_t ndeps, CUstreamCaptureMode mode) {
  return begin_capture_to_graph(h, g, deps, ndeps, mode, DefaultStream::Legacy);
}
CUresult cuStreamBeginCaptureToGraph_ptsz(CUstream h, CUgraph g, const CUgraphNode* deps, const CUgraphEdgeData* /*edges*/,
                                          size_t ndeps, CUstreamCaptureMode mode) {
  return begin_capture_to_graph(h, g, deps, ndeps, mode, DefaultStream::PerThread);
}
CUresult cuThreadExchangeStreamCaptureMode(CUstreamCaptureMode* mode) {
  if (!driver_initialized()) return CUDA_ERROR_NOT_INITIALIZED;
  if (mode == nullptr) return CUDA_ERROR_INVALID_VALUE;
  int raw = 0;  // as an integer: a caller's value outside the enumeration is refused, not loaded as one
  std::memcpy(&raw, mode, sizeof raw);
  if (raw != CU_STREAM_CAPTURE_MODE_GLOBAL && raw != CU_STREAM_CAPTURE_MODE_THREAD_LOCAL && raw != CU_STREAM_CAPTURE_MODE_RELAXED)
    return CUDA_ERROR_INVALID_VALUE;
  std::swap(thread_capture_mode(), *mode);
  return CUDA_SUCCESS;
}
CUresult cuGraphCreate(CUgraph* graph, unsigned int flags) {
  if (CUresult r = check_ready(); r != CUDA_SUCCESS) return r;
  if (graph == nullptr || flags != 0) return CUDA_ERROR_INVALID_VALUE;  // cuda.h: flags must be 0
  *graph = new CUgraph_st;
  return CUDA_SUCCESS;
}
CUresult cuStreamEndCapture(CUstream h, CUgraph* g) { return end_capture(h, g, DefaultStream::Legacy); }
CUresult cuStreamEndCapture_ptsz(CUstream h, CUgraph* g) { return end_capture(h, g, DefaultStream::PerThread); }
CUresult cuStreamIsCapturing(CUstream h, CUstreamCaptureStatus* s) { return is_capturing(h, s, DefaultStream::Legacy); }
CUresult cuStreamIsCapturing_ptsz(CUstream h, CUstreamCaptureStatus* s) { return is_capturing(h, s, DefaultStream::PerThread); }
CUresult cuStreamGetCaptureInfo_v3(CUstream h, CUstreamCaptureStatus* status, cuuint64_t* id, CUgraph* graph,
                                   const CUgraphNode** deps, const CUgraphEdgeData** edges, size_t* num) {
  return capture_info(h, status, id, graph, deps, edges, num, DefaultStream::Legacy);
}
CUresult cuStreamGetCaptureInfo_v3_ptsz(CUstream h, CUstreamCaptureStatus* status, cuuint64_t* id, CUgraph* graph,
                                        const CUgraphNode** deps, const CUgraphEdgeData** edges, size_t* num) {
  return capture_info(h, status, id, graph, deps, edges, num, DefaultStream::PerThread);
}

CUresult cuGraphInstantiateWithFlags(CUgraphExec* exec, CUgraph graph, unsigned long long /*flags*/) {
  if (CUresult r = check_ready(); r != CUDA_SUCCESS) return r;
  if (exec == nullptr || graph == nullptr) return CUDA_ERROR_INVALID_VALUE;
  *exec = new CUgraphExec_st{graph->nodes};
  return CUDA_SUCCESS;
}
CUresult cuGraphInstantiate_v2(CUgraphExec* exec, CUgraph graph, CUgraphNode* error_node, char* log, size_t log_size) {
  if (error_node) *error_node = nullptr;
  if (log && log_size) log[0] = '\0';
  return cuGraphInstantiateWithFlags(exec, graph, 0);
}
CUresult cuGraphLaunch(CUgraphExec exec, CUstream h) { return graph_launch(exec, h, DefaultStream::Legacy); }
CUresult cuGraphLaunch_ptsz(CUgraphExec exec, CUstream h) { return graph_launch(exec, h, DefaultStream::PerThread); }
CUresult cuGraphGetNodes(CUgraph graph, CUgraphNode* nodes, size_t* num) {
  if (graph == nullptr || num == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (nodes != nullptr) return CUDA_ERROR_NOT_SUPPORTED;  // only the count is simulated
  *num = graph->nodes.size();
  return CUDA_SUCCESS;
}
CUresult cuGraphDestroy(CUgraph graph) {
  if (graph == nullptr) return CUDA_ERROR_INVALID_VALUE;
  delete graph;
  return CUDA_SUCCESS;
}
CUresult cuGraphExecDestroy(CUgraphExec exec) {
  if (exec == nullptr) return CUDA_ERROR_INVALID_VALUE;
  delete exec;
  return CUDA_SUCCESS;
}

// ---- events --------------------------------------------------------------------------------
CUresult cuEventCreate(CUevent* ph, unsigned int flags) {
  if (CUresult r = check_ready(); r != CUDA_SUCCESS) return r;
  if (ph == nullptr) return CUDA_ERROR_INVALID_VALUE;
  auto* e = new CUevent_st;
  e->flags = flags;
  e->device = current_device();
  std::lock_guard<std::mutex> lock(g_events_mu);
  g_events.insert(e);
  *ph = e;
  return CUDA_SUCCESS;
}
CUresult cuEventDestroy_v2(CUevent e) {
  if (!driver_initialized()) return CUDA_ERROR_NOT_INITIALIZED;
  std::lock_guard<std::mutex> lock(g_events_mu);
  if (g_events.erase(e) == 0) return CUDA_ERROR_INVALID_HANDLE;
  delete e;  // pending records keep their own completion objects
  return CUDA_SUCCESS;
}
CUresult cuEventRecord(CUevent e, CUstream h) { return event_record(e, h, DefaultStream::Legacy); }
CUresult cuEventRecord_ptsz(CUevent e, CUstream h) { return event_record(e, h, DefaultStream::PerThread); }
CUresult cuEventRecordWithFlags(CUevent e, CUstream h, unsigned int /*flags*/) { return event_record(e, h, DefaultStream::Legacy); }
CUresult cuEventRecordWithFlags_ptsz(CUevent e, CUstream h, unsigned int /*flags*/) { return event_record(e, h, DefaultStream::PerThread); }
CUresult cuEventSynchronize(CUevent e) {
  if (!driver_initialized()) return CUDA_ERROR_NOT_INITIALIZED;
  if (!live_event(e)) return CUDA_ERROR_INVALID_HANDLE;
  if (CUresult r = check_unsafe_call(); r != CUDA_SUCCESS) return r;
  return d().scheduler.synchronize_event(e);
}
CUresult cuEventQuery(CUevent e) {
  if (!driver_initialized()) return CUDA_ERROR_NOT_INITIALIZED;
  if (!live_event(e)) return CUDA_ERROR_INVALID_HANDLE;
  if (CUresult r = check_unsafe_call(); r != CUDA_SUCCESS) return r;
  return d().scheduler.query_event(e);
}
CUresult cuEventElapsedTime_v2(float* ms, CUevent start, CUevent end) {
  if (!driver_initialized()) return CUDA_ERROR_NOT_INITIALIZED;
  if (ms == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (!live_event(start) || !live_event(end)) return CUDA_ERROR_INVALID_HANDLE;
  return d().scheduler.elapsed_ms(start, end, ms);
}
CUresult cuEventElapsedTime(float* ms, CUevent start, CUevent end) { return cuEventElapsedTime_v2(ms, start, end); }

// ---- kernels -------------------------------------------------------------------------------
CUresult cuLaunchKernel(CUfunction f, unsigned int gx, unsigned int gy, unsigned int gz, unsigned int bx, unsigned int by,
                        unsigned int bz, unsigned int smem, CUstream h, void** params, void** extra) {
  return launch_classic(f, gx, gy, gz, bx, by, bz, smem, h, params, extra, DefaultStream::Legacy);
}
CUresult cuLaunchKernel_ptsz(CUfunction f, unsigned int gx, unsigned int gy, unsigned int gz, unsigned int bx,
                             unsigned int by, unsigned int bz, unsigned int smem, CUstream h, void** params, void** extra) {
  return launch_classic(f, gx, gy, gz, bx, by, bz, smem, h, params, extra, DefaultStream::PerThread);
}
CUresult cuLaunchKernelEx(const CUlaunchConfig* config, CUfunction f, void** params, void** extra) {
  return launch_ex(config, f, params, extra, DefaultStream::Legacy);
}
CUresult cuLaunchKernelEx_ptsz(const CUlaunchConfig* config, CUfunction f, void** params, void** extra) {
  return launch_ex(config, f, params, extra, DefaultStream::PerThread);
}

// A CUkernel is a launch handle but not a CUfunction: cuFuncGetParamInfo and cuFuncGetName
// refuse it with CUDA_ERROR_INVALID_VALUE (the one error cuda.h lists for them), as the driver
// did on an H200 (580.159, CUDA 13.0): the runtime's launch handles got no parameters and no
// name from them. cuKernelGetParamInfo / cuKernelGetName answer for it.
CUresult cuFuncGetParamInfo(CUfunction f, size_t index, size_t* offset, size_t* size) {
  if (!driver_initialized()) return CUDA_ERROR_NOT_INITIALIZED;
  if (function_of_kernel(f) != nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (f == nullptr || !is_function(f)) return CUDA_ERROR_INVALID_HANDLE;
  if (index >= f->param_offsets.size()) return CUDA_ERROR_INVALID_VALUE;
  if (offset) *offset = f->param_offsets[index];
  if (size) *size = f->param_sizes[index];
  return CUDA_SUCCESS;
}

CUresult cuFuncGetName(const char** name, CUfunction f) {
  if (!driver_initialized()) return CUDA_ERROR_NOT_INITIALIZED;
  if (name == nullptr || function_of_kernel(f) != nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (f == nullptr || !is_function(f)) return CUDA_ERROR_INVALID_HANDLE;
  *name = f->name.c_str();
  return CUDA_SUCCESS;
}

// cuda.h (12.4): "Returns the offset and size of a kernel parameter in the device-side
// parameter layout"; CUDA_ERROR_INVALID_VALUE past the last parameter.
CUresult cuKernelGetParamInfo(CUkernel k, size_t index, size_t* offset, size_t* size) {
  if (!driver_initialized()) return CUDA_ERROR_NOT_INITIALIZED;
  CUfunc_st* f = function_of_kernel(k);
  if (f == nullptr) return CUDA_ERROR_INVALID_HANDLE;
  if (index >= f->param_offsets.size()) return CUDA_ERROR_INVALID_VALUE;
  if (offset) *offset = f->param_offsets[index];
  if (size) *size = f->param_sizes[index];
  return CUDA_SUCCESS;
}
CUresult cuKernelGetName(const char** name, CUkernel k) {
  if (!driver_initialized()) return CUDA_ERROR_NOT_INITIALIZED;
  if (name == nullptr) return CUDA_ERROR_INVALID_VALUE;
  CUfunc_st* f = function_of_kernel(k);
  if (f == nullptr) return CUDA_ERROR_INVALID_HANDLE;
  *name = f->name.c_str();
  return CUDA_SUCCESS;
}
// cuda.h: "Returns a function handle" for the kernel in the current context (simcuda's functions
// serve every context).
CUresult cuKernelGetFunction(CUfunction* out, CUkernel k) {
  if (!driver_initialized()) return CUDA_ERROR_NOT_INITIALIZED;
  if (out == nullptr) return CUDA_ERROR_INVALID_VALUE;
  CUfunc_st* f = function_of_kernel(k);
  if (f == nullptr) return CUDA_ERROR_INVALID_HANDLE;
  *out = f;
  return CUDA_SUCCESS;
}

// ---- errors --------------------------------------------------------------------------------
CUresult cuGetErrorName(CUresult error, const char** pstr) {
  if (pstr == nullptr) return CUDA_ERROR_INVALID_VALUE;
  switch (error) {
#define SIMCUDA_NAME_CASE(code, text) \
  case code:                          \
    *pstr = #code;                    \
    return CUDA_SUCCESS;
    SIMCUDA_ERRORS(SIMCUDA_NAME_CASE)
#undef SIMCUDA_NAME_CASE
    default:
      *pstr = nullptr;
      return CUDA_ERROR_INVALID_VALUE;
  }
}

CUresult cuGetErrorString(CUresult error, const char** pstr) {
  if (pstr == nullptr) return CUDA_ERROR_INVALID_VALUE;
  switch (error) {
#define SIMCUDA_STRING_CASE(code, text) \
  case code:                            \
    *pstr = text;                       \
    return CUDA_SUCCESS;
    SIMCUDA_ERRORS(SIMCUDA_STRING_CASE)
#undef SIMCUDA_STRING_CASE
    default:
      *pstr = nullptr;
      return CUDA_ERROR_INVALID_VALUE;
  }
}

}  // extern "C"
