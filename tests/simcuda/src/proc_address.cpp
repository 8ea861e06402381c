// proc_address.cpp: cuGetProcAddress / cuGetProcAddress_v2 for simcuda's libcuda.so.1, plus the
// older ABI variants (v1 entry points) that a lookup with an older cudaVersion returns.
//
// Contract, as the real driver documents it: `symbol` is the base name (cuMemAlloc); among the
// ABI variants of that name, the one introduced most recently at or before `cudaVersion` is
// returned (cuMemAlloc + 12000 -> cuMemAlloc_v2; cuMemPrefetchAsync + 12000 -> the CUdevice v1,
// + 12020 -> cuMemPrefetchAsync_v2). CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM picks the
// _ptds/_ptsz variant where one exists (else the legacy one); DEFAULT and LEGACY_STREAM pick the
// legacy one. A cudaVersion above the driver's (13000) is CUDA_ERROR_INVALID_VALUE. A symbol
// unknown, or known only from a later version, gives CUDA_ERROR_NOT_FOUND, *pfn = NULL and
// symbolStatus SYMBOL_NOT_FOUND / VERSION_NOT_SUFFICIENT (what shipping drivers return).
// simcuda's own extension API (simcuda_*) is answered too, at any version.
#include <cstring>

#include "internal.hpp"

using namespace simcuda;

extern "C" {
// Older ABI variants, kept because lookups with older cudaVersion values return them.
CUresult cuMemPrefetchAsync(CUdeviceptr p, size_t n, CUdevice dst, CUstream h) {
  CUmemLocation loc{};
  loc.type = dst == CU_DEVICE_CPU ? CU_MEM_LOCATION_TYPE_HOST : CU_MEM_LOCATION_TYPE_DEVICE;
  loc.id = dst == CU_DEVICE_CPU ? 0 : dst;
  return cuMemPrefetchAsync_v2(p, n, loc, 0, h);
}
CUresult cuMemPrefetchAsync_ptsz(CUdeviceptr p, size_t n, CUdevice dst, CUstream h) {
  CUmemLocation loc{};
  loc.type = dst == CU_DEVICE_CPU ? CU_MEM_LOCATION_TYPE_HOST : CU_MEM_LOCATION_TYPE_DEVICE;
  loc.id = dst == CU_DEVICE_CPU ? 0 : dst;
  return cuMemPrefetchAsync_v2_ptsz(p, n, loc, 0, h);
}
CUresult cuMemAdvise(CUdeviceptr p, size_t n, CUmem_advise advice, CUdevice dev) {
  CUmemLocation loc{};
  loc.type = dev == CU_DEVICE_CPU ? CU_MEM_LOCATION_TYPE_HOST : CU_MEM_LOCATION_TYPE_DEVICE;
  loc.id = dev == CU_DEVICE_CPU ? 0 : dev;
  return cuMemAdvise_v2(p, n, advice, loc);
}
CUresult cuStreamBeginCapture(CUstream h) { return cuStreamBeginCapture_v2(h, CU_STREAM_CAPTURE_MODE_GLOBAL); }
CUresult cuStreamBeginCapture_ptsz(CUstream h) { return cuStreamBeginCapture_v2_ptsz(h, CU_STREAM_CAPTURE_MODE_GLOBAL); }
CUresult cuStreamGetCaptureInfo(CUstream h, CUstreamCaptureStatus* s, cuuint64_t* id) {
  return cuStreamGetCaptureInfo_v3(h, s, id, nullptr, nullptr, nullptr, nullptr);
}
CUresult cuStreamGetCaptureInfo_ptsz(CUstream h, CUstreamCaptureStatus* s, cuuint64_t* id) {
  return cuStreamGetCaptureInfo_v3_ptsz(h, s, id, nullptr, nullptr, nullptr, nullptr);
}
CUresult cuStreamGetCaptureInfo_v2(CUstream h, CUstreamCaptureStatus* s, cuuint64_t* id, CUgraph* g,
                                   const CUgraphNode** deps, size_t* n) {
  return cuStreamGetCaptureInfo_v3(h, s, id, g, deps, nullptr, n);
}
CUresult cuStreamGetCaptureInfo_v2_ptsz(CUstream h, CUstreamCaptureStatus* s, cuuint64_t* id, CUgraph* g,
                                        const CUgraphNode** deps, size_t* n) {
  return cuStreamGetCaptureInfo_v3_ptsz(h, s, id, g, deps, nullptr, n);
}
CUresult cuGraphInstantiate(CUgraphExec* exec, CUgraph g, CUgraphNode* err_node, char* log, size_t log_size) {
  return cuGraphInstantiate_v2(exec, g, err_node, log, log_size);
}
CUresult cuStreamDestroy(CUstream h) { return cuStreamDestroy_v2(h); }
CUresult cuEventDestroy(CUevent e) { return cuEventDestroy_v2(e); }
CUresult cuDevicePrimaryCtxRelease(CUdevice dev) { return cuDevicePrimaryCtxRelease_v2(dev); }
CUresult cuDevicePrimaryCtxSetFlags(CUdevice dev, unsigned int flags) { return cuDevicePrimaryCtxSetFlags_v2(dev, flags); }
}

namespace {

struct ProcEntry {
  const char* name;  // base name
  int version;       // the CUDA version that introduced this ABI variant
  void* legacy;
  void* per_thread;  // the _ptds/_ptsz variant, or null
};

template <typename F>
void* fp(F* f) {
  return reinterpret_cast<void*>(f);
}

#define E(name, version, fn) {name, version, fp(&fn), nullptr}
#define EP(name, version, fn, ptfn) {name, version, fp(&fn), fp(&ptfn)}

const ProcEntry kTable[] = {
    E("cuInit", 2000, cuInit),
    E("cuDriverGetVersion", 2020, cuDriverGetVersion),
    E("cuGetProcAddress", 11030, cuGetProcAddress),
    E("cuGetProcAddress", 12000, cuGetProcAddress_v2),
    E("cuGetErrorName", 6000, cuGetErrorName),
    E("cuGetErrorString", 6000, cuGetErrorString),
    E("cuDeviceGet", 2000, cuDeviceGet),
    E("cuDeviceGetCount", 2000, cuDeviceGetCount),
    E("cuDeviceGetName", 2000, cuDeviceGetName),
    E("cuDeviceTotalMem", 3020, cuDeviceTotalMem_v2),
    E("cuDeviceGetAttribute", 2000, cuDeviceGetAttribute),
    E("cuDevicePrimaryCtxRetain", 7000, cuDevicePrimaryCtxRetain),
    E("cuDevicePrimaryCtxRelease", 7000, cuDevicePrimaryCtxRelease),
    E("cuDevicePrimaryCtxRelease", 11000, cuDevicePrimaryCtxRelease_v2),
    E("cuDevicePrimaryCtxSetFlags", 7000, cuDevicePrimaryCtxSetFlags),
    E("cuDevicePrimaryCtxSetFlags", 11000, cuDevicePrimaryCtxSetFlags_v2),
    E("cuDevicePrimaryCtxGetState", 7000, cuDevicePrimaryCtxGetState),
    E("cuCtxGetCurrent", 4000, cuCtxGetCurrent),
    E("cuCtxSetCurrent", 4000, cuCtxSetCurrent),
    E("cuCtxPushCurrent", 4000, cuCtxPushCurrent_v2),
    E("cuCtxPopCurrent", 4000, cuCtxPopCurrent_v2),
    E("cuCtxGetDevice", 2000, cuCtxGetDevice),
    E("cuCtxSynchronize", 2000, cuCtxSynchronize),
    E("cuCtxSynchronize", 13000, cuCtxSynchronize_v2),  // cudaTypedefs.h: PFN_cuCtxSynchronize_v13000(CUcontext)
    // memory
    E("cuMemGetInfo", 3020, cuMemGetInfo_v2),
    E("cuMemAlloc", 3020, cuMemAlloc_v2),
    E("cuMemFree", 3020, cuMemFree_v2),
    E("cuMemAllocManaged", 6000, cuMemAllocManaged),
    EP("cuMemAllocAsync", 11020, cuMemAllocAsync, cuMemAllocAsync_ptsz),
    EP("cuMemFreeAsync", 11020, cuMemFreeAsync, cuMemFreeAsync_ptsz),
    E("cuMemHostAlloc", 2020, cuMemHostAlloc),
    E("cuMemAllocHost", 3020, cuMemAllocHost_v2),
    E("cuMemFreeHost", 2000, cuMemFreeHost),
    E("cuMemHostRegister", 6050, cuMemHostRegister_v2),
    E("cuMemHostUnregister", 4000, cuMemHostUnregister),
    E("cuMemGetAddressRange", 3020, cuMemGetAddressRange_v2),
    E("cuPointerGetAttribute", 4000, cuPointerGetAttribute),
    EP("cuMemcpy", 4000, cuMemcpy, cuMemcpy_ptds),
    EP("cuMemcpyAsync", 4000, cuMemcpyAsync, cuMemcpyAsync_ptsz),
    EP("cuMemcpyHtoD", 3020, cuMemcpyHtoD_v2, cuMemcpyHtoD_v2_ptds),
    EP("cuMemcpyDtoH", 3020, cuMemcpyDtoH_v2, cuMemcpyDtoH_v2_ptds),
    EP("cuMemcpyDtoD", 3020, cuMemcpyDtoD_v2, cuMemcpyDtoD_v2_ptds),
    EP("cuMemcpyHtoDAsync", 3020, cuMemcpyHtoDAsync_v2, cuMemcpyHtoDAsync_v2_ptsz),
    EP("cuMemcpyDtoHAsync", 3020, cuMemcpyDtoHAsync_v2, cuMemcpyDtoHAsync_v2_ptsz),
    EP("cuMemcpyDtoDAsync", 3020, cuMemcpyDtoDAsync_v2, cuMemcpyDtoDAsync_v2_ptsz),
    EP("cuMemcpy2D", 3020, cuMemcpy2D_v2, cuMemcpy2D_v2_ptds),
    EP("cuMemcpy2DUnaligned", 3020, cuMemcpy2DUnaligned_v2, cuMemcpy2DUnaligned_v2_ptds),
    EP("cuMemcpy2DAsync", 3020, cuMemcpy2DAsync_v2, cuMemcpy2DAsync_v2_ptsz),
    EP("cuMemcpy3D", 3020, cuMemcpy3D_v2, cuMemcpy3D_v2_ptds),
    EP("cuMemcpy3DAsync", 3020, cuMemcpy3DAsync_v2, cuMemcpy3DAsync_v2_ptsz),
    EP("cuMemcpyPeer", 4000, cuMemcpyPeer, cuMemcpyPeer_ptds),
    EP("cuMemcpyPeerAsync", 4000, cuMemcpyPeerAsync, cuMemcpyPeerAsync_ptsz),
    EP("cuMemcpy3DPeer", 4000, cuMemcpy3DPeer, cuMemcpy3DPeer_ptds),
    EP("cuMemcpy3DPeerAsync", 4000, cuMemcpy3DPeerAsync, cuMemcpy3DPeerAsync_ptsz),
    EP("cuMemsetD8", 3020, cuMemsetD8_v2, cuMemsetD8_v2_ptds),
    EP("cuMemsetD16", 3020, cuMemsetD16_v2, cuMemsetD16_v2_ptds),
    EP("cuMemsetD32", 3020, cuMemsetD32_v2, cuMemsetD32_v2_ptds),
    EP("cuMemsetD8Async", 3020, cuMemsetD8Async, cuMemsetD8Async_ptsz),
    EP("cuMemsetD16Async", 3020, cuMemsetD16Async, cuMemsetD16Async_ptsz),
    EP("cuMemsetD32Async", 3020, cuMemsetD32Async, cuMemsetD32Async_ptsz),
    EP("cuMemsetD2D8", 3020, cuMemsetD2D8_v2, cuMemsetD2D8_v2_ptds),
    EP("cuMemsetD2D16", 3020, cuMemsetD2D16_v2, cuMemsetD2D16_v2_ptds),
    EP("cuMemsetD2D32", 3020, cuMemsetD2D32_v2, cuMemsetD2D32_v2_ptds),
    EP("cuMemsetD2D8Async", 3020, cuMemsetD2D8Async, cuMemsetD2D8Async_ptsz),
    EP("cuMemsetD2D16Async", 3020, cuMemsetD2D16Async, cuMemsetD2D16Async_ptsz),
    EP("cuMemsetD2D32Async", 3020, cuMemsetD2D32Async, cuMemsetD2D32Async_ptsz),
    EP("cuMemPrefetchAsync", 8000, cuMemPrefetchAsync, cuMemPrefetchAsync_ptsz),
    EP("cuMemPrefetchAsync", 12020, cuMemPrefetchAsync_v2, cuMemPrefetchAsync_v2_ptsz),
    EP("cuMemDiscardBatchAsync", 12080, cuMemDiscardBatchAsync, cuMemDiscardBatchAsync_ptsz),
    E("cuMemAdvise", 8000, cuMemAdvise),
    E("cuMemAdvise", 12020, cuMemAdvise_v2),
    E("cuMemAddressReserve", 10020, cuMemAddressReserve),
    E("cuMemAddressFree", 10020, cuMemAddressFree),
    E("cuMemCreate", 10020, cuMemCreate),
    E("cuMemRelease", 10020, cuMemRelease),
    E("cuMemMap", 10020, cuMemMap),
    E("cuMemUnmap", 10020, cuMemUnmap),
    E("cuMemSetAccess", 10020, cuMemSetAccess),
    E("cuMemGetAllocationGranularity", 10020, cuMemGetAllocationGranularity),
    E("cuMemRetainAllocationHandle", 11000, cuMemRetainAllocationHandle),
    E("cuIpcGetMemHandle", 4010, cuIpcGetMemHandle),
    // streams
    E("cuStreamCreate", 2000, cuStreamCreate),
    E("cuStreamCreateWithPriority", 5050, cuStreamCreateWithPriority),
    E("cuStreamDestroy", 2000, cuStreamDestroy),
    E("cuStreamDestroy", 4000, cuStreamDestroy_v2),
    EP("cuStreamSynchronize", 2000, cuStreamSynchronize, cuStreamSynchronize_ptsz),
    EP("cuStreamQuery", 2000, cuStreamQuery, cuStreamQuery_ptsz),
    E("cuStreamAddCallback", 5000, cuStreamAddCallback),
    EP("cuStreamWaitEvent", 3020, cuStreamWaitEvent, cuStreamWaitEvent_ptsz),
    EP("cuStreamGetFlags", 5050, cuStreamGetFlags, cuStreamGetFlags_ptsz),
    EP("cuStreamGetPriority", 5050, cuStreamGetPriority, cuStreamGetPriority_ptsz),
    EP("cuStreamGetId", 12000, cuStreamGetId, cuStreamGetId_ptsz),
    EP("cuLaunchHostFunc", 10000, cuLaunchHostFunc, cuLaunchHostFunc_ptsz),
    EP("cuStreamBeginCapture", 10000, cuStreamBeginCapture, cuStreamBeginCapture_ptsz),
    EP("cuStreamBeginCapture", 10010, cuStreamBeginCapture_v2, cuStreamBeginCapture_v2_ptsz),
    EP("cuStreamBeginCaptureToGraph", 12030, cuStreamBeginCaptureToGraph, cuStreamBeginCaptureToGraph_ptsz),
    E("cuThreadExchangeStreamCaptureMode", 10010, cuThreadExchangeStreamCaptureMode),
    EP("cuStreamEndCapture", 10000, cuStreamEndCapture, cuStreamEndCapture_ptsz),
    EP("cuStreamIsCapturing", 10000, cuStreamIsCapturing, cuStreamIsCapturing_ptsz),
    EP("cuStreamGetCaptureInfo", 10010, cuStreamGetCaptureInfo, cuStreamGetCaptureInfo_ptsz),
    EP("cuStreamGetCaptureInfo", 11030, cuStreamGetCaptureInfo_v2, cuStreamGetCaptureInfo_v2_ptsz),
    EP("cuStreamGetCaptureInfo", 12030, cuStreamGetCaptureInfo_v3, cuStreamGetCaptureInfo_v3_ptsz),
    E("cuGraphInstantiate", 10000, cuGraphInstantiate),
    E("cuGraphInstantiate", 11000, cuGraphInstantiate_v2),
    E("cuGraphInstantiate", 12000, cuGraphInstantiateWithFlags),
    E("cuGraphInstantiateWithFlags", 11040, cuGraphInstantiateWithFlags),
    EP("cuGraphLaunch", 10000, cuGraphLaunch, cuGraphLaunch_ptsz),
    E("cuGraphCreate", 10000, cuGraphCreate),
    E("cuGraphGetNodes", 10000, cuGraphGetNodes),
    E("cuGraphDestroy", 10000, cuGraphDestroy),
    E("cuGraphExecDestroy", 10000, cuGraphExecDestroy),
    // events
    E("cuEventCreate", 2000, cuEventCreate),
    E("cuEventDestroy", 2000, cuEventDestroy),
    E("cuEventDestroy", 4000, cuEventDestroy_v2),
    EP("cuEventRecord", 2000, cuEventRecord, cuEventRecord_ptsz),
    EP("cuEventRecordWithFlags", 11010, cuEventRecordWithFlags, cuEventRecordWithFlags_ptsz),
    E("cuEventSynchronize", 2000, cuEventSynchronize),
    E("cuEventQuery", 2000, cuEventQuery),
    E("cuEventElapsedTime", 2000, cuEventElapsedTime),
    E("cuEventElapsedTime", 12080, cuEventElapsedTime_v2),
    // kernels
    EP("cuLaunchKernel", 4000, cuLaunchKernel, cuLaunchKernel_ptsz),
    EP("cuLaunchKernelEx", 11060, cuLaunchKernelEx, cuLaunchKernelEx_ptsz),
    E("cuFuncGetParamInfo", 12040, cuFuncGetParamInfo),
    E("cuFuncGetName", 12030, cuFuncGetName),
    E("cuKernelGetParamInfo", 12040, cuKernelGetParamInfo),
    E("cuKernelGetName", 12030, cuKernelGetName),
    E("cuKernelGetFunction", 12000, cuKernelGetFunction),
    // modules (PTX text run by registered equivalents: modules.cpp)
    E("cuModuleLoadData", 2000, cuModuleLoadData),
    E("cuModuleGetFunction", 2000, cuModuleGetFunction),
    E("cuModuleUnload", 2000, cuModuleUnload),
    // simcuda's extension API
    E("simcuda_register_kernel", 0, simcuda_register_kernel),
    E("simcuda_function_for_stub", 0, simcuda_function_for_stub),
    E("simcuda_kernel_for_stub", 0, simcuda_kernel_for_stub),
    E("simcuda_access", 0, simcuda_access),
    E("simcuda_register_global", 0, simcuda_register_global),
    E("simcuda_global_for_symbol", 0, simcuda_global_for_symbol),
    E("simcuda_add_flops", 0, simcuda_add_flops),
    E("simcuda_get_stats", 0, simcuda_get_stats),
    E("simcuda_stream_virtual_ns", 0, simcuda_stream_virtual_ns),
    E("simcuda_host_virtual_ns", 0, simcuda_host_virtual_ns),
    E("simcuda_set_host_time_scale", 0, simcuda_set_host_time_scale),
    E("simcuda_reset_stats", 0, simcuda_reset_stats),
    E("simcuda_write_stats_json", 0, simcuda_write_stats_json),
};

#undef E
#undef EP

}  // namespace

extern "C" {

CUresult cuGetProcAddress_v2(const char* symbol, void** pfn, int cudaVersion, cuuint64_t flags,
                             CUdriverProcAddressQueryResult* symbolStatus) {
  if (symbol == nullptr || pfn == nullptr) return CUDA_ERROR_INVALID_VALUE;
  const cuuint64_t known = CU_GET_PROC_ADDRESS_LEGACY_STREAM | CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM;
  if ((flags & ~known) != 0 || cudaVersion > kDriverVersion) return CUDA_ERROR_INVALID_VALUE;
  const bool per_thread = (flags & CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM) != 0;
  const ProcEntry* best = nullptr;
  bool name_known = false;
  for (const ProcEntry& e : kTable) {
    if (std::strcmp(e.name, symbol) != 0) continue;
    name_known = true;
    if (e.version <= cudaVersion && (best == nullptr || e.version > best->version)) best = &e;
  }
  if (best == nullptr) {
    *pfn = nullptr;
    if (symbolStatus)
      *symbolStatus = name_known ? CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT : CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
    return CUDA_ERROR_NOT_FOUND;
  }
  *pfn = (per_thread && best->per_thread != nullptr) ? best->per_thread : best->legacy;
  if (symbolStatus) *symbolStatus = CU_GET_PROC_ADDRESS_SUCCESS;
  return CUDA_SUCCESS;
}

CUresult cuGetProcAddress(const char* symbol, void** pfn, int cudaVersion, cuuint64_t flags) {
  return cuGetProcAddress_v2(symbol, pfn, cudaVersion, flags, nullptr);
}

}  // extern "C"
