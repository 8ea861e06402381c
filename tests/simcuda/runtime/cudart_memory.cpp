// cudart_memory.cpp: simcuda's libcudart.so.13 memory and launch calls: cudaMalloc family,
// copies and memsets (plain and _ptds/_ptsz), Unified Memory prefetch/advise, cudaMemGetInfo,
// cudaPointerGetAttributes, cudaLaunchKernel(+_ptsz), cudaLaunchKernelExC, cudaGetKernel and
// CUDA 13's compiler launch (__cudaGetKernel, __cudaLaunchKernel(+_ptsz)), cudaGetFuncBySymbol
// and cudaFuncGetParamInfo, each forwarded to the driver entry point the real runtime uses.
//
// Contract: as cudart_core.cpp. A kernel "symbol" is the host stub registered with
// simcuda_register_kernel; an unregistered one is cudaErrorInvalidDeviceFunction.
#include <cstring>

#include "driver_table.hpp"

using namespace simcudart;

namespace {

cudaError_t memcpy_impl(void* dst, const void* src, size_t n, cudaMemcpyKind kind, bool ptds) {
  SIMCUDART_READY();
  const DriverTable& t = rt();
  switch (kind) {
    case cudaMemcpyHostToDevice:
      return check((ptds ? t.memcpy_htod_ptds : t.memcpy_htod)(dp(dst), src, n));
    case cudaMemcpyDeviceToHost:
      return check((ptds ? t.memcpy_dtoh_ptds : t.memcpy_dtoh)(dst, dp(src), n));
    case cudaMemcpyDeviceToDevice:
      return check((ptds ? t.memcpy_dtod_ptds : t.memcpy_dtod)(dp(dst), dp(src), n));
    case cudaMemcpyHostToHost:
    case cudaMemcpyDefault:
      return check((ptds ? t.memcpy_ptds : t.memcpy)(dp(dst), dp(src), n));
  }
  return record(cudaErrorInvalidMemcpyDirection);
}

cudaError_t memcpy_async_impl(void* dst, const void* src, size_t n, cudaMemcpyKind kind, cudaStream_t s, bool ptsz) {
  SIMCUDART_READY();
  const DriverTable& t = rt();
  switch (kind) {
    case cudaMemcpyHostToDevice:
      return check((ptsz ? t.memcpy_htod_async_ptsz : t.memcpy_htod_async)(dp(dst), src, n, s));
    case cudaMemcpyDeviceToHost:
      return check((ptsz ? t.memcpy_dtoh_async_ptsz : t.memcpy_dtoh_async)(dst, dp(src), n, s));
    case cudaMemcpyDeviceToDevice:
      return check((ptsz ? t.memcpy_dtod_async_ptsz : t.memcpy_dtod_async)(dp(dst), dp(src), n, s));
    case cudaMemcpyHostToHost:
    case cudaMemcpyDefault:
      return check((ptsz ? t.memcpy_async_ptsz : t.memcpy_async)(dp(dst), dp(src), n, s));
  }
  return record(cudaErrorInvalidMemcpyDirection);
}

cudaError_t launch_impl(const void* func, dim3 grid, dim3 block, void** args, size_t smem, cudaStream_t s, bool ptsz) {
  SIMCUDART_READY();
  CUfunction f = rt().function_for_stub(func);
  if (f == nullptr) return record(cudaErrorInvalidDeviceFunction);
  return check((ptsz ? rt().launch_kernel_ptsz : rt().launch_kernel)(
      f, grid.x, grid.y, grid.z, block.x, block.y, block.z, static_cast<unsigned>(smem), s, args, nullptr));
}

cudaError_t launch_ex_impl(const cudaLaunchConfig_t* config, const void* func, void** args, bool ptsz) {
  SIMCUDART_READY();
  if (config == nullptr) return record(cudaErrorInvalidValue);
  CUfunction f = rt().function_for_stub(func);
  if (f == nullptr) return record(cudaErrorInvalidDeviceFunction);
  CUlaunchConfig c{};
  c.gridDimX = config->gridDim.x;
  c.gridDimY = config->gridDim.y;
  c.gridDimZ = config->gridDim.z;
  c.blockDimX = config->blockDim.x;
  c.blockDimY = config->blockDim.y;
  c.blockDimZ = config->blockDim.z;
  c.sharedMemBytes = static_cast<unsigned>(config->dynamicSmemBytes);
  c.hStream = config->stream;
  c.attrs = nullptr;  // launch attributes change nothing simcuda models
  c.numAttrs = 0;
  return check((ptsz ? rt().launch_kernel_ex_ptsz : rt().launch_kernel_ex)(&c, f, args, nullptr));
}

CUmemLocation to_driver(cudaMemLocation loc) {
  CUmemLocation out{};
  out.type = static_cast<CUmemLocationType>(loc.type);
  out.id = loc.id;
  return out;
}

}  // namespace

extern "C" {

cudaError_t cudaMalloc(void** p, size_t size) {
  SIMCUDART_READY();
  if (p == nullptr) return record(cudaErrorInvalidValue);
  if (size == 0) {
    *p = nullptr;
    return cudaSuccess;
  }
  CUdeviceptr d = 0;
  cudaError_t e = check(rt().mem_alloc(&d, size));
  *p = e == cudaSuccess ? reinterpret_cast<void*>(d) : nullptr;
  return e;
}

cudaError_t cudaFree(void* p) {
  SIMCUDART_READY();
  if (p == nullptr) return cudaSuccess;
  return check(rt().mem_free(dp(p)));
}

cudaError_t cudaMallocManaged(void** p, size_t size, unsigned int flags) {
  SIMCUDART_READY();
  if (p == nullptr || size == 0) return record(cudaErrorInvalidValue);
  CUdeviceptr d = 0;
  cudaError_t e = check(rt().mem_alloc_managed(&d, size, flags));
  *p = e == cudaSuccess ? reinterpret_cast<void*>(d) : nullptr;
  return e;
}

static cudaError_t malloc_async(void** p, size_t size, cudaStream_t s, bool ptsz) {
  SIMCUDART_READY();
  if (p == nullptr) return record(cudaErrorInvalidValue);
  if (size == 0) {
    *p = nullptr;
    return cudaSuccess;
  }
  CUdeviceptr d = 0;
  cudaError_t e = check((ptsz ? rt().mem_alloc_async_ptsz : rt().mem_alloc_async)(&d, size, s));
  *p = e == cudaSuccess ? reinterpret_cast<void*>(d) : nullptr;
  return e;
}
cudaError_t cudaMallocAsync(void** p, size_t size, cudaStream_t s) { return malloc_async(p, size, s, false); }
cudaError_t cudaMallocAsync_ptsz(void** p, size_t size, cudaStream_t s) { return malloc_async(p, size, s, true); }

cudaError_t cudaFreeAsync(void* p, cudaStream_t s) {
  SIMCUDART_READY();
  if (p == nullptr) return cudaSuccess;
  return check(rt().mem_free_async(dp(p), s));
}
cudaError_t cudaFreeAsync_ptsz(void* p, cudaStream_t s) {
  SIMCUDART_READY();
  if (p == nullptr) return cudaSuccess;
  return check(rt().mem_free_async_ptsz(dp(p), s));
}

cudaError_t cudaMallocHost(void** p, size_t size) {
  SIMCUDART_READY();
  if (p == nullptr) return record(cudaErrorInvalidValue);
  return check(rt().mem_host_alloc(p, size, 0));
}
cudaError_t cudaHostAlloc(void** p, size_t size, unsigned int flags) {
  SIMCUDART_READY();
  if (p == nullptr) return record(cudaErrorInvalidValue);
  return check(rt().mem_host_alloc(p, size, flags));
}
cudaError_t cudaFreeHost(void* p) {
  SIMCUDART_READY();
  if (p == nullptr) return cudaSuccess;
  return check(rt().mem_free_host(p));
}

cudaError_t cudaHostRegister(void* p, size_t size, unsigned int flags) {
  SIMCUDART_READY();
  return check(rt().mem_host_register(p, size, flags));
}
cudaError_t cudaHostUnregister(void* p) {
  SIMCUDART_READY();
  return check(rt().mem_host_unregister(p));
}

cudaError_t cudaLaunchHostFunc(cudaStream_t s, cudaHostFn_t fn, void* user) {
  SIMCUDART_READY();
  return check(rt().launch_host_func(s, fn, user));
}
cudaError_t cudaLaunchHostFunc_ptsz(cudaStream_t s, cudaHostFn_t fn, void* user) {
  SIMCUDART_READY();
  return check(rt().launch_host_func_ptsz(s, fn, user));
}

cudaError_t cudaMemcpy(void* dst, const void* src, size_t n, enum cudaMemcpyKind kind) {
  return memcpy_impl(dst, src, n, kind, false);
}
cudaError_t cudaMemcpy_ptds(void* dst, const void* src, size_t n, enum cudaMemcpyKind kind) {
  return memcpy_impl(dst, src, n, kind, true);
}
cudaError_t cudaMemcpyAsync(void* dst, const void* src, size_t n, enum cudaMemcpyKind kind, cudaStream_t s) {
  return memcpy_async_impl(dst, src, n, kind, s, false);
}
cudaError_t cudaMemcpyAsync_ptsz(void* dst, const void* src, size_t n, enum cudaMemcpyKind kind, cudaStream_t s) {
  return memcpy_async_impl(dst, src, n, kind, s, true);
}

cudaError_t cudaMemset(void* p, int value, size_t n) {
  SIMCUDART_READY();
  return check(rt().memset_d8(dp(p), static_cast<unsigned char>(value), n));
}
cudaError_t cudaMemset_ptds(void* p, int value, size_t n) {
  SIMCUDART_READY();
  return check(rt().memset_d8_ptds(dp(p), static_cast<unsigned char>(value), n));
}
cudaError_t cudaMemsetAsync(void* p, int value, size_t n, cudaStream_t s) {
  SIMCUDART_READY();
  return check(rt().memset_d8_async(dp(p), static_cast<unsigned char>(value), n, s));
}
cudaError_t cudaMemsetAsync_ptsz(void* p, int value, size_t n, cudaStream_t s) {
  SIMCUDART_READY();
  return check(rt().memset_d8_async_ptsz(dp(p), static_cast<unsigned char>(value), n, s));
}

cudaError_t cudaMemPrefetchAsync(const void* p, size_t n, struct cudaMemLocation loc, unsigned int flags, cudaStream_t s) {
  SIMCUDART_READY();
  return check(rt().mem_prefetch_async(dp(p), n, to_driver(loc), flags, s));
}
cudaError_t cudaMemPrefetchAsync_ptsz(const void* p, size_t n, struct cudaMemLocation loc, unsigned int flags, cudaStream_t s) {
  SIMCUDART_READY();
  return check(rt().mem_prefetch_async_ptsz(dp(p), n, to_driver(loc), flags, s));
}
cudaError_t cudaMemAdvise(const void* p, size_t n, enum cudaMemoryAdvise advice, struct cudaMemLocation loc) {
  SIMCUDART_READY();
  return check(rt().mem_advise(dp(p), n, static_cast<CUmem_advise>(advice), to_driver(loc)));
}

cudaError_t cudaMemGetInfo(size_t* free_bytes, size_t* total) {
  SIMCUDART_READY();
  return check(rt().mem_get_info(free_bytes, total));
}

cudaError_t cudaPointerGetAttributes(struct cudaPointerAttributes* attr, const void* ptr) {
  SIMCUDART_READY();
  if (attr == nullptr) return record(cudaErrorInvalidValue);
  *attr = cudaPointerAttributes{};
  unsigned int type = 0;
  if (rt().pointer_get_attribute(&type, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, dp(ptr)) != CUDA_SUCCESS) {
    attr->type = cudaMemoryTypeUnregistered;  // plain host memory, as the runtime reports it since 11.0
    attr->device = -2;
    return cudaSuccess;
  }
  bool managed = false;
  rt().pointer_get_attribute(&managed, CU_POINTER_ATTRIBUTE_IS_MANAGED, dp(ptr));
  int ordinal = 0;  // device memory's own device; others: the current device
  if (CUresult r = rt().pointer_get_attribute(&ordinal, CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL, dp(ptr)); r != CUDA_SUCCESS)
    return check(r);
  attr->device = ordinal;
  if (managed) {
    attr->type = cudaMemoryTypeManaged;
    attr->devicePointer = const_cast<void*>(ptr);
    attr->hostPointer = const_cast<void*>(ptr);
  } else if (type == CU_MEMORYTYPE_HOST) {
    attr->type = cudaMemoryTypeHost;
    attr->devicePointer = const_cast<void*>(ptr);
    attr->hostPointer = const_cast<void*>(ptr);
  } else {
    attr->type = cudaMemoryTypeDevice;
    attr->devicePointer = const_cast<void*>(ptr);
  }
  return cudaSuccess;
}

cudaError_t cudaLaunchKernel(const void* func, dim3 grid, dim3 block, void** args, size_t smem, cudaStream_t s) {
  return launch_impl(func, grid, block, args, smem, s, false);
}
cudaError_t cudaLaunchKernel_ptsz(const void* func, dim3 grid, dim3 block, void** args, size_t smem, cudaStream_t s) {
  return launch_impl(func, grid, block, args, smem, s, true);
}
cudaError_t cudaLaunchKernelExC(const cudaLaunchConfig_t* config, const void* func, void** args) {
  return launch_ex_impl(config, func, args, false);
}
cudaError_t cudaLaunchKernelExC_ptsz(const cudaLaunchConfig_t* config, const void* func, void** args) {
  return launch_ex_impl(config, func, args, true);
}

// CUDA 13's compiler-generated launch (crt/host_runtime.h, __cudaLaunch unless
// __NV_LEGACY_LAUNCH): __cudaGetKernel(&handle, stub) once, then __cudaLaunchKernel(handle, ...)
// (crt/device_functions.h), which the runtime forwards to the driver with the CUkernel.
cudaError_t cudaGetKernel(cudaKernel_t* kernel, const void* entry) {
  SIMCUDART_READY();
  if (kernel == nullptr) return record(cudaErrorInvalidValue);
  CUkernel k = rt().kernel_for_stub(entry);
  if (k == nullptr) return record(cudaErrorInvalidDeviceFunction);
  *kernel = reinterpret_cast<cudaKernel_t>(k);
  return cudaSuccess;
}
extern "C" cudaError_t __cudaGetKernel(cudaKernel_t* kernel, const void* entry) { return cudaGetKernel(kernel, entry); }

namespace {
cudaError_t launch_kernel_handle(cudaKernel_t k, dim3 grid, dim3 block, void** args, size_t smem, cudaStream_t s, bool ptsz) {
  SIMCUDART_READY();
  if (k == nullptr) return record(cudaErrorInvalidDeviceFunction);
  return check((ptsz ? rt().launch_kernel_ptsz : rt().launch_kernel)(reinterpret_cast<CUfunction>(k), grid.x, grid.y, grid.z,
                                                                      block.x, block.y, block.z, static_cast<unsigned>(smem),
                                                                      s, args, nullptr));
}
}  // namespace
extern "C" cudaError_t __cudaLaunchKernel(cudaKernel_t k, dim3 grid, dim3 block, void** args, size_t smem, cudaStream_t s) {
  return launch_kernel_handle(k, grid, block, args, smem, s, false);
}
extern "C" cudaError_t __cudaLaunchKernel_ptsz(cudaKernel_t k, dim3 grid, dim3 block, void** args, size_t smem,
                                               cudaStream_t s) {
  return launch_kernel_handle(k, grid, block, args, smem, s, true);
}

cudaError_t cudaGetFuncBySymbol(cudaFunction_t* functionPtr, const void* symbolPtr) {
  SIMCUDART_READY();
  if (functionPtr == nullptr) return record(cudaErrorInvalidValue);
  CUfunction f = rt().function_for_stub(symbolPtr);
  if (f == nullptr) return record(cudaErrorInvalidDeviceFunction);
  *functionPtr = f;
  return cudaSuccess;
}

cudaError_t cudaFuncGetParamInfo(const void* func, size_t index, size_t* offset, size_t* size) {
  SIMCUDART_READY();
  CUfunction f = rt().function_for_stub(func);
  if (f == nullptr) return record(cudaErrorInvalidDeviceFunction);
  return check(rt().func_get_param_info(f, index, offset, size));
}

}  // extern "C"
