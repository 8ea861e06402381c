// cudart_core.cpp: simcuda's libcudart.so.13: loading the driver (dlopen + cuGetProcAddress_v2,
// as the real runtime does), errors, device queries, streams, events, capture and graphs, and
// driver entry-point lookups.
//
// Contract: definitions match the real CUDA 13 cuda_runtime_api.h (compiled with
// __CUDA_API_VERSION_INTERNAL so both the plain and the _ptsz/_ptds variants are declared).
// Every call initialises lazily, makes device 0's primary context current on a thread that has
// none (cudaSetDevice makes another device's current, retaining its primary context) and
// returns the driver's error translated to its cudaError_t (numerically the same codes).
#include <dlfcn.h>

#include <cstring>
#include <iterator>
#include <mutex>

#include "driver_table.hpp"

namespace simcudart {
namespace {

DriverTable g_table;
std::once_flag g_once;
cudaError_t g_load_error = cudaSuccess;
CUcontext g_primary = nullptr;  // device 0's
std::mutex g_device_mu;
CUcontext g_device_ctx[64] = {};  // each device's primary context once retained (under g_device_mu)
thread_local bool tls_ctx_set = false;
thread_local cudaError_t tls_last_error = cudaSuccess;

void load() {
  void* handle = dlopen("libcuda.so.1", RTLD_NOW | RTLD_GLOBAL);
  if (handle == nullptr) {
    g_load_error = cudaErrorInsufficientDriver;
    return;
  }
  g_table.get_proc_address = reinterpret_cast<decltype(g_table.get_proc_address)>(dlsym(handle, "cuGetProcAddress_v2"));
  if (g_table.get_proc_address == nullptr) {
    g_load_error = cudaErrorInsufficientDriver;
    return;
  }
  bool all = true;
#define SIMCUDART_RESOLVE(member, symbol, fn, per_thread)                                              \
  {                                                                                                    \
    void* p = nullptr;                                                                                 \
    CUdriverProcAddressQueryResult status;                                                             \
    const cuuint64_t flags = (per_thread) ? CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM               \
                                          : CU_GET_PROC_ADDRESS_LEGACY_STREAM;                         \
    if (g_table.get_proc_address(symbol, &p, CUDART_VERSION, flags, &status) != CUDA_SUCCESS || !p)    \
      all = false;                                                                                     \
    g_table.member = reinterpret_cast<decltype(g_table.member)>(p);                                    \
  }
  SIMCUDART_DRIVER_ENTRIES(SIMCUDART_RESOLVE)
#undef SIMCUDART_RESOLVE
  if (!all || g_table.init(0) != CUDA_SUCCESS) {
    g_load_error = cudaErrorInsufficientDriver;
    return;
  }
  if (g_table.primary_ctx_retain(&g_primary, 0) != CUDA_SUCCESS) {
    g_load_error = cudaErrorInitializationError;
    return;
  }
  g_device_ctx[0] = g_primary;
  g_table.ok = true;
}

}  // namespace

const DriverTable& rt() { return g_table; }

cudaError_t record(cudaError_t err) {
  if (err != cudaSuccess) tls_last_error = err;
  return err;
}

cudaError_t to_runtime(CUresult r) {
  // The runtime's codes equal the driver's for every error simcuda produces.
  return static_cast<cudaError_t>(r);
}

cudaError_t ready() {
  std::call_once(g_once, load);
  if (!g_table.ok) return record(g_load_error);
  if (!tls_ctx_set) {
    CUcontext current = nullptr;
    g_table.ctx_get_current(&current);
    if (current == nullptr) g_table.ctx_set_current(g_primary);
    tls_ctx_set = true;
  }
  return cudaSuccess;
}

}  // namespace simcudart

using namespace simcudart;

namespace {

#define SIMCUDART_ERRORS(X)                                                                  \
  X(cudaSuccess, "no error")                                                                 \
  X(cudaErrorInvalidValue, "invalid argument")                                               \
  X(cudaErrorMemoryAllocation, "out of memory")                                              \
  X(cudaErrorInitializationError, "initialization error")                                    \
  X(cudaErrorInvalidMemcpyDirection, "invalid copy direction for memcpy")                    \
  X(cudaErrorInsufficientDriver, "CUDA driver version is insufficient for CUDA runtime version") \
  X(cudaErrorNoDevice, "no CUDA-capable device is detected")                                 \
  X(cudaErrorInvalidDevice, "invalid device ordinal")                                        \
  X(cudaErrorDeviceUninitialized, "invalid device context")                                  \
  X(cudaErrorInvalidDeviceFunction, "invalid device function")                               \
  X(cudaErrorInvalidResourceHandle, "invalid resource handle")                               \
  X(cudaErrorIllegalState, "the operation cannot be performed in the present state")         \
  X(cudaErrorSymbolNotFound, "named symbol not found")                                       \
  X(cudaErrorInvalidSymbol, "invalid device symbol")                                         \
  X(cudaErrorInvalidPitchValue, "invalid pitch argument")                                    \
  X(cudaErrorStreamCaptureMerge, "operation would result in a merge of separate capture sequences") \
  X(cudaErrorStreamCaptureUnmatched, "capture was not ended in the same stream as it began")  \
  X(cudaErrorStreamCaptureUnjoined, "capturing stream has unjoined work")                    \
  X(cudaErrorNotReady, "device not ready")                                                   \
  X(cudaErrorIllegalAddress, "an illegal memory access was encountered")                     \
  X(cudaErrorLaunchFailure, "unspecified launch failure")                                    \
  X(cudaErrorNotSupported, "operation not supported")                                        \
  X(cudaErrorStreamCaptureUnsupported, "operation not permitted when stream is capturing")   \
  X(cudaErrorStreamCaptureInvalidated, "operation failed due to a previous error during capture") \
  X(cudaErrorStreamCaptureImplicit, "operation would make the legacy stream depend on a capturing blocking stream") \
  X(cudaErrorHostMemoryAlreadyRegistered, "part or all of the requested memory range is already mapped") \
  X(cudaErrorHostMemoryNotRegistered, "pointer does not correspond to a registered memory region") \
  X(cudaErrorUnknown, "unknown error")

}  // namespace

extern "C" {

// ---- errors --------------------------------------------------------------------------------
cudaError_t cudaGetLastError(void) {
  cudaError_t e = simcudart::tls_last_error;
  simcudart::tls_last_error = cudaSuccess;
  return e;
}
cudaError_t cudaPeekAtLastError(void) { return simcudart::tls_last_error; }

const char* cudaGetErrorName(cudaError_t error) {
  switch (error) {
#define SIMCUDART_NAME(code, text) \
  case code:                       \
    return #code;
    SIMCUDART_ERRORS(SIMCUDART_NAME)
#undef SIMCUDART_NAME
    default:
      return "cudaErrorUnknown";
  }
}

const char* cudaGetErrorString(cudaError_t error) {
  switch (error) {
#define SIMCUDART_STRING(code, text) \
  case code:                         \
    return text;
    SIMCUDART_ERRORS(SIMCUDART_STRING)
#undef SIMCUDART_STRING
    default:
      return "unrecognized error code";
  }
}

// ---- versions and devices ------------------------------------------------------------------
cudaError_t cudaRuntimeGetVersion(int* v) {
  if (v == nullptr) return record(cudaErrorInvalidValue);
  *v = CUDART_VERSION;
  return cudaSuccess;
}
cudaError_t cudaDriverGetVersion(int* v) {
  SIMCUDART_READY();
  return check(rt().driver_get_version(v));
}
cudaError_t cudaGetDeviceCount(int* count) {
  SIMCUDART_READY();
  return check(rt().device_get_count(count));
}
cudaError_t cudaGetDevice(int* device) {
  SIMCUDART_READY();
  if (device == nullptr) return record(cudaErrorInvalidValue);
  CUdevice d = 0;
  if (CUresult r = rt().ctx_get_device(&d); r != CUDA_SUCCESS) return check(r);
  *device = static_cast<int>(d);
  return cudaSuccess;
}
// cuda_runtime_api.h: "This call will bind the primary context of the specified device to the
// calling thread and all the subsequent memory allocations, stream and event creations, and
// kernel launches will be associated with the primary context."
cudaError_t cudaSetDevice(int device) {
  SIMCUDART_READY();
  CUdevice d = 0;
  if (CUresult r = rt().device_get(&d, device); r != CUDA_SUCCESS) return check(r);
  if (static_cast<size_t>(d) >= std::size(g_device_ctx)) return record(cudaErrorInvalidDevice);
  CUcontext ctx = nullptr;
  {
    std::lock_guard<std::mutex> lock(g_device_mu);
    if (g_device_ctx[d] == nullptr) {
      if (CUresult r = rt().primary_ctx_retain(&g_device_ctx[d], d); r != CUDA_SUCCESS) return check(r);
    }
    ctx = g_device_ctx[d];
  }
  return check(rt().ctx_set_current(ctx));
}
cudaError_t cudaDeviceGetAttribute(int* value, enum cudaDeviceAttr attr, int device) {
  SIMCUDART_READY();
  return check(rt().device_get_attribute(value, static_cast<CUdevice_attribute>(attr), device));
}
cudaError_t cudaGetDeviceProperties(struct cudaDeviceProp* prop, int device) {
  SIMCUDART_READY();
  if (prop == nullptr) return record(cudaErrorInvalidValue);
  CUdevice d = 0;
  if (CUresult r = rt().device_get(&d, device); r != CUDA_SUCCESS) return check(r);
  *prop = cudaDeviceProp{};
  if (CUresult r = rt().device_get_name(prop->name, sizeof prop->name, d); r != CUDA_SUCCESS) return check(r);
  if (CUresult r = rt().device_total_mem(&prop->totalGlobalMem, d); r != CUDA_SUCCESS) return check(r);
  struct Field {
    int* out;
    CUdevice_attribute attr;
  };
  int shared_per_block = 0;
  const Field fields[] = {
      {&prop->major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR},
      {&prop->minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR},
      {&prop->multiProcessorCount, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT},
      {&prop->warpSize, CU_DEVICE_ATTRIBUTE_WARP_SIZE},
      {&prop->maxThreadsPerBlock, CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK},
      {&prop->managedMemory, CU_DEVICE_ATTRIBUTE_MANAGED_MEMORY},
      {&prop->concurrentManagedAccess, CU_DEVICE_ATTRIBUTE_CONCURRENT_MANAGED_ACCESS},
      {&prop->unifiedAddressing, CU_DEVICE_ATTRIBUTE_UNIFIED_ADDRESSING},
      {&prop->pageableMemoryAccess, CU_DEVICE_ATTRIBUTE_PAGEABLE_MEMORY_ACCESS},
      {&shared_per_block, CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK},
  };
  for (const Field& f : fields)
    if (CUresult r = rt().device_get_attribute(f.out, f.attr, d); r != CUDA_SUCCESS) return check(r);
  prop->sharedMemPerBlock = static_cast<size_t>(shared_per_block);
  return cudaSuccess;
}

cudaError_t cudaDeviceSynchronize(void) {
  SIMCUDART_READY();
  // As libcudart.so.13 does: the CUDA 13 driver entry (cuCtxSynchronize_v2) on the current context.
  CUcontext ctx = nullptr;
  if (CUresult r = rt().ctx_get_current(&ctx); r != CUDA_SUCCESS) return check(r);
  return check(rt().ctx_synchronize(ctx));
}

// ---- streams -------------------------------------------------------------------------------
cudaError_t cudaStreamCreate(cudaStream_t* s) {
  SIMCUDART_READY();
  return check(rt().stream_create(s, CU_STREAM_DEFAULT));
}
cudaError_t cudaStreamCreateWithFlags(cudaStream_t* s, unsigned int flags) {
  SIMCUDART_READY();
  return check(rt().stream_create(s, flags));
}
cudaError_t cudaStreamCreateWithPriority(cudaStream_t* s, unsigned int flags, int priority) {
  SIMCUDART_READY();
  return check(rt().stream_create_with_priority(s, flags, priority));
}
cudaError_t cudaStreamDestroy(cudaStream_t s) {
  SIMCUDART_READY();
  return check(rt().stream_destroy(s));
}
cudaError_t cudaStreamSynchronize(cudaStream_t s) {
  SIMCUDART_READY();
  return check(rt().stream_synchronize(s));
}
cudaError_t cudaStreamSynchronize_ptsz(cudaStream_t s) {
  SIMCUDART_READY();
  return check(rt().stream_synchronize_ptsz(s));
}
cudaError_t cudaStreamQuery(cudaStream_t s) {
  SIMCUDART_READY();
  CUresult r = rt().stream_query(s);
  return r == CUDA_ERROR_NOT_READY ? cudaErrorNotReady : check(r);  // not-ready is not an error
}
cudaError_t cudaStreamQuery_ptsz(cudaStream_t s) {
  SIMCUDART_READY();
  CUresult r = rt().stream_query_ptsz(s);
  return r == CUDA_ERROR_NOT_READY ? cudaErrorNotReady : check(r);
}
cudaError_t cudaStreamWaitEvent(cudaStream_t s, cudaEvent_t e, unsigned int flags) {
  SIMCUDART_READY();
  return check(rt().stream_wait_event(s, e, flags));
}
cudaError_t cudaStreamWaitEvent_ptsz(cudaStream_t s, cudaEvent_t e, unsigned int flags) {
  SIMCUDART_READY();
  return check(rt().stream_wait_event_ptsz(s, e, flags));
}
cudaError_t cudaStreamBeginCapture(cudaStream_t s, enum cudaStreamCaptureMode mode) {
  SIMCUDART_READY();
  return check(rt().stream_begin_capture(s, static_cast<CUstreamCaptureMode>(mode)));
}
cudaError_t cudaStreamBeginCapture_ptsz(cudaStream_t s, enum cudaStreamCaptureMode mode) {
  SIMCUDART_READY();
  return check(rt().stream_begin_capture_ptsz(s, static_cast<CUstreamCaptureMode>(mode)));
}
cudaError_t cudaStreamEndCapture(cudaStream_t s, cudaGraph_t* g) {
  SIMCUDART_READY();
  return check(rt().stream_end_capture(s, g));
}
cudaError_t cudaStreamEndCapture_ptsz(cudaStream_t s, cudaGraph_t* g) {
  SIMCUDART_READY();
  return check(rt().stream_end_capture_ptsz(s, g));
}
cudaError_t cudaStreamBeginCaptureToGraph(cudaStream_t s, cudaGraph_t g, const cudaGraphNode_t* deps,
                                          const cudaGraphEdgeData* edges, size_t n, enum cudaStreamCaptureMode mode) {
  SIMCUDART_READY();
  return check(rt().stream_begin_capture_to_graph(s, g, deps, reinterpret_cast<const CUgraphEdgeData*>(edges), n,
                                                  static_cast<CUstreamCaptureMode>(mode)));
}
cudaError_t cudaStreamBeginCaptureToGraph_ptsz(cudaStream_t s, cudaGraph_t g, const cudaGraphNode_t* deps,
                                               const cudaGraphEdgeData* edges, size_t n, enum cudaStreamCaptureMode mode) {
  SIMCUDART_READY();
  return check(rt().stream_begin_capture_to_graph_ptsz(s, g, deps, reinterpret_cast<const CUgraphEdgeData*>(edges), n,
                                                       static_cast<CUstreamCaptureMode>(mode)));
}
cudaError_t cudaThreadExchangeStreamCaptureMode(enum cudaStreamCaptureMode* mode) {
  SIMCUDART_READY();
  return check(rt().thread_exchange_capture_mode(reinterpret_cast<CUstreamCaptureMode*>(mode)));
}
cudaError_t cudaStreamIsCapturing(cudaStream_t s, enum cudaStreamCaptureStatus* status) {
  SIMCUDART_READY();
  return check(rt().stream_is_capturing(s, reinterpret_cast<CUstreamCaptureStatus*>(status)));
}
cudaError_t cudaStreamIsCapturing_ptsz(cudaStream_t s, enum cudaStreamCaptureStatus* status) {
  SIMCUDART_READY();
  return check(rt().stream_is_capturing_ptsz(s, reinterpret_cast<CUstreamCaptureStatus*>(status)));
}

// ---- graphs --------------------------------------------------------------------------------
cudaError_t cudaGraphInstantiate(cudaGraphExec_t* exec, cudaGraph_t graph, unsigned long long flags) {
  SIMCUDART_READY();
  return check(rt().graph_instantiate(exec, graph, flags));
}
cudaError_t cudaGraphLaunch(cudaGraphExec_t exec, cudaStream_t s) {
  SIMCUDART_READY();
  return check(rt().graph_launch(exec, s));
}
cudaError_t cudaGraphLaunch_ptsz(cudaGraphExec_t exec, cudaStream_t s) {
  SIMCUDART_READY();
  return check(rt().graph_launch_ptsz(exec, s));
}
cudaError_t cudaIpcGetMemHandle(cudaIpcMemHandle_t* handle, void* ptr) {
  SIMCUDART_READY();
  return check(rt().ipc_get_mem_handle(reinterpret_cast<CUipcMemHandle*>(handle), reinterpret_cast<CUdeviceptr>(ptr)));
}
cudaError_t cudaGraphCreate(cudaGraph_t* g, unsigned int flags) {
  SIMCUDART_READY();
  return check(rt().graph_create(g, flags));
}
cudaError_t cudaGraphDestroy(cudaGraph_t g) {
  SIMCUDART_READY();
  return check(rt().graph_destroy(g));
}
cudaError_t cudaGraphExecDestroy(cudaGraphExec_t e) {
  SIMCUDART_READY();
  return check(rt().graph_exec_destroy(e));
}

// ---- events --------------------------------------------------------------------------------
cudaError_t cudaEventCreate(cudaEvent_t* e) {
  SIMCUDART_READY();
  return check(rt().event_create(e, CU_EVENT_DEFAULT));
}
cudaError_t cudaEventCreateWithFlags(cudaEvent_t* e, unsigned int flags) {
  SIMCUDART_READY();
  return check(rt().event_create(e, flags));
}
cudaError_t cudaEventDestroy(cudaEvent_t e) {
  SIMCUDART_READY();
  return check(rt().event_destroy(e));
}
cudaError_t cudaEventRecord(cudaEvent_t e, cudaStream_t s) {
  SIMCUDART_READY();
  return check(rt().event_record(e, s));
}
cudaError_t cudaEventRecord_ptsz(cudaEvent_t e, cudaStream_t s) {
  SIMCUDART_READY();
  return check(rt().event_record_ptsz(e, s));
}
cudaError_t cudaEventRecordWithFlags(cudaEvent_t e, cudaStream_t s, unsigned int flags) {
  SIMCUDART_READY();
  return check(rt().event_record_with_flags(e, s, flags));
}
cudaError_t cudaEventRecordWithFlags_ptsz(cudaEvent_t e, cudaStream_t s, unsigned int flags) {
  SIMCUDART_READY();
  return check(rt().event_record_with_flags_ptsz(e, s, flags));
}
cudaError_t cudaEventSynchronize(cudaEvent_t e) {
  SIMCUDART_READY();
  return check(rt().event_synchronize(e));
}
cudaError_t cudaEventQuery(cudaEvent_t e) {
  SIMCUDART_READY();
  CUresult r = rt().event_query(e);
  return r == CUDA_ERROR_NOT_READY ? cudaErrorNotReady : check(r);
}
cudaError_t cudaEventElapsedTime(float* ms, cudaEvent_t start, cudaEvent_t end) {
  SIMCUDART_READY();
  return check(rt().event_elapsed_time(ms, start, end));
}

// ---- driver entry points -------------------------------------------------------------------
cudaError_t cudaGetDriverEntryPointByVersion(const char* symbol, void** funcPtr, unsigned int cudaVersion,
                                             unsigned long long flags, enum cudaDriverEntryPointQueryResult* status) {
  SIMCUDART_READY();
  if (symbol == nullptr || funcPtr == nullptr) return record(cudaErrorInvalidValue);
  CUdriverProcAddressQueryResult s = CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
  CUresult r = rt().get_proc_address(symbol, funcPtr, static_cast<int>(cudaVersion), flags, &s);
  if (r == CUDA_ERROR_NOT_FOUND) r = CUDA_SUCCESS;  // reported through the status, funcPtr NULL
  if (status) {
    *status = s == CU_GET_PROC_ADDRESS_SUCCESS             ? cudaDriverEntryPointSuccess
              : s == CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT ? cudaDriverEntryPointVersionNotSufficent
                                                                : cudaDriverEntryPointSymbolNotFound;
  }
  return check(r);
}
cudaError_t cudaGetDriverEntryPointByVersion_ptsz(const char* symbol, void** funcPtr, unsigned int cudaVersion,
                                                  unsigned long long flags, enum cudaDriverEntryPointQueryResult* status) {
  if (flags == cudaEnableDefault) flags = cudaEnablePerThreadDefaultStream;
  return cudaGetDriverEntryPointByVersion(symbol, funcPtr, cudaVersion, flags, status);
}
cudaError_t cudaGetDriverEntryPoint(const char* symbol, void** funcPtr, unsigned long long flags,
                                    enum cudaDriverEntryPointQueryResult* status) {
  return cudaGetDriverEntryPointByVersion(symbol, funcPtr, CUDART_VERSION, flags, status);
}
cudaError_t cudaGetDriverEntryPoint_ptsz(const char* symbol, void** funcPtr, unsigned long long flags,
                                         enum cudaDriverEntryPointQueryResult* status) {
  return cudaGetDriverEntryPointByVersion_ptsz(symbol, funcPtr, CUDART_VERSION, flags, status);
}

}  // extern "C"
