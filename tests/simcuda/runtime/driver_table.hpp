// driver_table.hpp: the driver entry points simcuda's libcudart.so.13 uses, resolved the way
// the real runtime resolves them: dlopen("libcuda.so.1"), dlsym("cuGetProcAddress_v2"), then
// cuGetProcAddress_v2(base name, CUDA 13.0, legacy or per-thread flag) for each one.
//
// Contract: rt() returns the table after a one-time load; rt().ok is false (and every runtime
// call fails with cudaErrorInsufficientDriver) when the driver could not be loaded. The
// prototypes come from the real cuda.h (decltype of the declared ABI variant), so a mismatch
// with the driver is a compile error.
#pragma once

#include <cuda.h>
#include <cuda_runtime_api.h>

#include "simcuda/simcuda.h"

namespace simcudart {

// X(member, base symbol, declared variant, per-thread?)
#define SIMCUDART_DRIVER_ENTRIES(X)                                                  \
  X(init, "cuInit", cuInit, false)                                                   \
  X(driver_get_version, "cuDriverGetVersion", cuDriverGetVersion, false)             \
  X(get_error_string, "cuGetErrorString", cuGetErrorString, false)                   \
  X(device_get, "cuDeviceGet", cuDeviceGet, false)                                   \
  X(device_get_count, "cuDeviceGetCount", cuDeviceGetCount, false)                   \
  X(device_get_attribute, "cuDeviceGetAttribute", cuDeviceGetAttribute, false)       \
  X(device_get_name, "cuDeviceGetName", cuDeviceGetName, false)                      \
  X(device_total_mem, "cuDeviceTotalMem", cuDeviceTotalMem_v2, false)                \
  X(primary_ctx_retain, "cuDevicePrimaryCtxRetain", cuDevicePrimaryCtxRetain, false) \
  X(ctx_get_current, "cuCtxGetCurrent", cuCtxGetCurrent, false)                      \
  X(ctx_set_current, "cuCtxSetCurrent", cuCtxSetCurrent, false)                      \
  X(ctx_synchronize, "cuCtxSynchronize", cuCtxSynchronize_v2, false)                 \
  X(ctx_get_device, "cuCtxGetDevice", cuCtxGetDevice, false)                         \
  X(mem_get_info, "cuMemGetInfo", cuMemGetInfo_v2, false)                            \
  X(mem_alloc, "cuMemAlloc", cuMemAlloc_v2, false)                                   \
  X(mem_free, "cuMemFree", cuMemFree_v2, false)                                      \
  X(mem_alloc_managed, "cuMemAllocManaged", cuMemAllocManaged, false)                \
  X(mem_alloc_async, "cuMemAllocAsync", cuMemAllocAsync, false)                      \
  X(mem_alloc_async_ptsz, "cuMemAllocAsync", cuMemAllocAsync_ptsz, true)             \
  X(mem_free_async, "cuMemFreeAsync", cuMemFreeAsync, false)                         \
  X(mem_free_async_ptsz, "cuMemFreeAsync", cuMemFreeAsync_ptsz, true)                \
  X(mem_host_alloc, "cuMemHostAlloc", cuMemHostAlloc, false)                         \
  X(mem_free_host, "cuMemFreeHost", cuMemFreeHost, false)                            \
  X(mem_host_register, "cuMemHostRegister", cuMemHostRegister_v2, false)             \
  X(mem_host_unregister, "cuMemHostUnregister", cuMemHostUnregister, false)          \
  X(launch_host_func, "cuLaunchHostFunc", cuLaunchHostFunc, false)                   \
  X(launch_host_func_ptsz, "cuLaunchHostFunc", cuLaunchHostFunc_ptsz, true)          \
  X(memcpy, "cuMemcpy", cuMemcpy, false)                                             \
  X(memcpy_ptds, "cuMemcpy", cuMemcpy_ptds, true)                                    \
  X(memcpy_htod, "cuMemcpyHtoD", cuMemcpyHtoD_v2, false)                             \
  X(memcpy_htod_ptds, "cuMemcpyHtoD", cuMemcpyHtoD_v2_ptds, true)                    \
  X(memcpy_dtoh, "cuMemcpyDtoH", cuMemcpyDtoH_v2, false)                             \
  X(memcpy_dtoh_ptds, "cuMemcpyDtoH", cuMemcpyDtoH_v2_ptds, true)                    \
  X(memcpy_dtod, "cuMemcpyDtoD", cuMemcpyDtoD_v2, false)                             \
  X(memcpy_dtod_ptds, "cuMemcpyDtoD", cuMemcpyDtoD_v2_ptds, true)                    \
  X(memcpy_async, "cuMemcpyAsync", cuMemcpyAsync, false)                             \
  X(memcpy_async_ptsz, "cuMemcpyAsync", cuMemcpyAsync_ptsz, true)                    \
  X(memcpy_htod_async, "cuMemcpyHtoDAsync", cuMemcpyHtoDAsync_v2, false)             \
  X(memcpy_htod_async_ptsz, "cuMemcpyHtoDAsync", cuMemcpyHtoDAsync_v2_ptsz, true)    \
  X(memcpy_dtoh_async, "cuMemcpyDtoHAsync", cuMemcpyDtoHAsync_v2, false)             \
  X(memcpy_dtoh_async_ptsz, "cuMemcpyDtoHAsync", cuMemcpyDtoHAsync_v2_ptsz, true)    \
  X(memcpy_dtod_async, "cuMemcpyDtoDAsync", cuMemcpyDtoDAsync_v2, false)             \
  X(memcpy_dtod_async_ptsz, "cuMemcpyDtoDAsync", cuMemcpyDtoDAsync_v2_ptsz, true)    \
  X(memcpy_2d, "cuMemcpy2D", cuMemcpy2D_v2, false)                                   \
  X(memcpy_2d_ptds, "cuMemcpy2D", cuMemcpy2D_v2_ptds, true)                          \
  X(memcpy_2d_async, "cuMemcpy2DAsync", cuMemcpy2DAsync_v2, false)                   \
  X(memcpy_2d_async_ptsz, "cuMemcpy2DAsync", cuMemcpy2DAsync_v2_ptsz, true)          \
  X(memcpy_3d, "cuMemcpy3D", cuMemcpy3D_v2, false)                                   \
  X(memcpy_3d_ptds, "cuMemcpy3D", cuMemcpy3D_v2_ptds, true)                          \
  X(memcpy_3d_async, "cuMemcpy3DAsync", cuMemcpy3DAsync_v2, false)                   \
  X(memcpy_3d_async_ptsz, "cuMemcpy3DAsync", cuMemcpy3DAsync_v2_ptsz, true)          \
  X(memcpy_3d_peer, "cuMemcpy3DPeer", cuMemcpy3DPeer, false)                         \
  X(memcpy_3d_peer_ptds, "cuMemcpy3DPeer", cuMemcpy3DPeer_ptds, true)                \
  X(memcpy_3d_peer_async, "cuMemcpy3DPeerAsync", cuMemcpy3DPeerAsync, false)         \
  X(memcpy_3d_peer_async_ptsz, "cuMemcpy3DPeerAsync", cuMemcpy3DPeerAsync_ptsz, true) \
  X(memcpy_peer, "cuMemcpyPeer", cuMemcpyPeer, false)                                \
  X(memcpy_peer_async, "cuMemcpyPeerAsync", cuMemcpyPeerAsync, false)                \
  X(memset_d8, "cuMemsetD8", cuMemsetD8_v2, false)                                   \
  X(memset_d8_ptds, "cuMemsetD8", cuMemsetD8_v2_ptds, true)                          \
  X(memset_d8_async, "cuMemsetD8Async", cuMemsetD8Async, false)                      \
  X(memset_d8_async_ptsz, "cuMemsetD8Async", cuMemsetD8Async_ptsz, true)             \
  X(memset_d2d8, "cuMemsetD2D8", cuMemsetD2D8_v2, false)                             \
  X(memset_d2d8_ptds, "cuMemsetD2D8", cuMemsetD2D8_v2_ptds, true)                    \
  X(memset_d2d8_async, "cuMemsetD2D8Async", cuMemsetD2D8Async, false)                \
  X(memset_d2d8_async_ptsz, "cuMemsetD2D8Async", cuMemsetD2D8Async_ptsz, true)       \
  X(mem_prefetch_async, "cuMemPrefetchAsync", cuMemPrefetchAsync_v2, false)          \
  X(mem_prefetch_async_ptsz, "cuMemPrefetchAsync", cuMemPrefetchAsync_v2_ptsz, true) \
  X(mem_advise, "cuMemAdvise", cuMemAdvise_v2, false)                                \
  X(pointer_get_attribute, "cuPointerGetAttribute", cuPointerGetAttribute, false)    \
  X(stream_create, "cuStreamCreate", cuStreamCreate, false)                          \
  X(stream_create_with_priority, "cuStreamCreateWithPriority", cuStreamCreateWithPriority, false) \
  X(stream_destroy, "cuStreamDestroy", cuStreamDestroy_v2, false)                    \
  X(stream_synchronize, "cuStreamSynchronize", cuStreamSynchronize, false)           \
  X(stream_synchronize_ptsz, "cuStreamSynchronize", cuStreamSynchronize_ptsz, true)  \
  X(stream_query, "cuStreamQuery", cuStreamQuery, false)                             \
  X(stream_query_ptsz, "cuStreamQuery", cuStreamQuery_ptsz, true)                    \
  X(stream_wait_event, "cuStreamWaitEvent", cuStreamWaitEvent, false)                \
  X(stream_wait_event_ptsz, "cuStreamWaitEvent", cuStreamWaitEvent_ptsz, true)       \
  X(stream_begin_capture, "cuStreamBeginCapture", cuStreamBeginCapture_v2, false)    \
  X(stream_begin_capture_ptsz, "cuStreamBeginCapture", cuStreamBeginCapture_v2_ptsz, true) \
  X(stream_end_capture, "cuStreamEndCapture", cuStreamEndCapture, false)             \
  X(stream_end_capture_ptsz, "cuStreamEndCapture", cuStreamEndCapture_ptsz, true)    \
  X(stream_begin_capture_to_graph, "cuStreamBeginCaptureToGraph", cuStreamBeginCaptureToGraph, false) \
  X(stream_begin_capture_to_graph_ptsz, "cuStreamBeginCaptureToGraph", cuStreamBeginCaptureToGraph_ptsz, true) \
  X(thread_exchange_capture_mode, "cuThreadExchangeStreamCaptureMode", cuThreadExchangeStreamCaptureMode, false) \
  X(stream_is_capturing, "cuStreamIsCapturing", cuStreamIsCapturing, false)          \
  X(stream_is_capturing_ptsz, "cuStreamIsCapturing", cuStreamIsCapturing_ptsz, true) \
  X(graph_instantiate, "cuGraphInstantiate", cuGraphInstantiateWithFlags, false)     \
  X(graph_launch, "cuGraphLaunch", cuGraphLaunch, false)                             \
  X(graph_launch_ptsz, "cuGraphLaunch", cuGraphLaunch_ptsz, true)                    \
  X(graph_create, "cuGraphCreate", cuGraphCreate, false)                            \
  X(ipc_get_mem_handle, "cuIpcGetMemHandle", cuIpcGetMemHandle, false)               \
  X(graph_destroy, "cuGraphDestroy", cuGraphDestroy, false)                          \
  X(graph_exec_destroy, "cuGraphExecDestroy", cuGraphExecDestroy, false)             \
  X(event_create, "cuEventCreate", cuEventCreate, false)                             \
  X(event_destroy, "cuEventDestroy", cuEventDestroy_v2, false)                       \
  X(event_record, "cuEventRecord", cuEventRecord, false)                             \
  X(event_record_ptsz, "cuEventRecord", cuEventRecord_ptsz, true)                    \
  X(event_record_with_flags, "cuEventRecordWithFlags", cuEventRecordWithFlags, false) \
  X(event_record_with_flags_ptsz, "cuEventRecordWithFlags", cuEventRecordWithFlags_ptsz, true) \
  X(event_synchronize, "cuEventSynchronize", cuEventSynchronize, false)              \
  X(event_query, "cuEventQuery", cuEventQuery, false)                                \
  X(event_elapsed_time, "cuEventElapsedTime", cuEventElapsedTime_v2, false)          \
  X(launch_kernel, "cuLaunchKernel", cuLaunchKernel, false)                          \
  X(launch_kernel_ptsz, "cuLaunchKernel", cuLaunchKernel_ptsz, true)                 \
  X(launch_kernel_ex, "cuLaunchKernelEx", cuLaunchKernelEx, false)                   \
  X(launch_kernel_ex_ptsz, "cuLaunchKernelEx", cuLaunchKernelEx_ptsz, true)          \
  X(func_get_param_info, "cuFuncGetParamInfo", cuFuncGetParamInfo, false)            \
  X(function_for_stub, "simcuda_function_for_stub", simcuda_function_for_stub, false)  \
  X(kernel_for_stub, "simcuda_kernel_for_stub", simcuda_kernel_for_stub, false)        \
  X(global_for_symbol, "simcuda_global_for_symbol", simcuda_global_for_symbol, false)

struct DriverTable {
  bool ok = false;
  CUresult (*get_proc_address)(const char*, void**, int, cuuint64_t, CUdriverProcAddressQueryResult*) = nullptr;
#define SIMCUDART_MEMBER(member, symbol, fn, per_thread) decltype(&::fn) member = nullptr;
  SIMCUDART_DRIVER_ENTRIES(SIMCUDART_MEMBER)
#undef SIMCUDART_MEMBER
};

// Loads the driver once; then makes the primary context current on the calling thread.
// Returns cudaSuccess or the error every runtime call should report.
cudaError_t ready();
const DriverTable& rt();
// Records a non-success result as the thread's last error and returns it.
cudaError_t record(cudaError_t err);
cudaError_t to_runtime(CUresult r);
inline cudaError_t check(CUresult r) { return record(to_runtime(r)); }
inline CUdeviceptr dp(const void* p) { return reinterpret_cast<CUdeviceptr>(p); }

// Opens a runtime entry point: returns ready()'s error unless the runtime is usable.
#define SIMCUDART_READY()                                       \
  do {                                                          \
    if (cudaError_t e_ = ready(); e_ != cudaSuccess) return e_; \
  } while (0)

}  // namespace simcudart
