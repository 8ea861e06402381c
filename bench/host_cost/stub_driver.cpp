// stub_driver.cpp: a null CUDA driver (libcuda.so.1) for measuring capuchin's HOST cost.
//
// Every call returns at once and does nothing on a device: allocations hand out addresses
// (reused per size, as a caching allocator would), launches, copies, prefetches and syncs are
// counted and return CUDA_SUCCESS, every event is complete. It implements exactly what
// libcapuchin.so's capture and executor (uvm backend) call, so a program linked against it and
// run with LD_PRELOAD=libcapuchin.so spends, beyond its own time, only capuchin's bookkeeping:
// the thing bench_host_cost measures. Not a simulator (tests/simcuda is): no memory exists
// behind the addresses, so nothing may dereference them.
//
// Kernel parameter layouts come from the CUfunction handle (bench_host_cost makes them):
// handle = (index + 1) << 4 | layout, layout 1 = 15 parameters (u64, double, u32, 6 pointers,
// 6 u64 sizes: the shape of a small elementwise kernel's), layout 2 = one 288-byte by-value
// struct (TensorIterator- and foreach-style: 16 pointers and 16 sizes after a header).
#include <cuda.h>

#include <atomic>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

namespace {

constexpr std::uint64_t kDeviceBase = 0x7f0000000000ull;
constexpr std::size_t kTotalBytes = std::size_t{80} << 30;  // an 80 GiB device

// Addresses: a bump pointer, with freed ranges reused by exact rounded size.
class AddressSpace {
 public:
  CUdeviceptr take(std::size_t bytes) {
    const std::size_t rounded = (bytes + 511) / 512 * 512;
    std::lock_guard<std::mutex> lock(mu_);
    CUdeviceptr p;
    auto& pool = free_[rounded];
    if (!pool.empty()) {
      p = pool.back();
      pool.pop_back();
    } else {
      p = next_;
      next_ += rounded;
    }
    size_[p] = rounded;
    return p;
  }
  bool give(CUdeviceptr p) {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = size_.find(p);
    if (it == size_.end()) return false;
    free_[it->second].push_back(p);
    size_.erase(it);
    return true;
  }

 private:
  std::mutex mu_;
  CUdeviceptr next_ = kDeviceBase;
  std::unordered_map<std::size_t, std::vector<CUdeviceptr>> free_;
  std::unordered_map<CUdeviceptr, std::size_t> size_;
};

AddressSpace& space() {
  static auto* s = new AddressSpace;  // never destroyed: calls may come during exit
  return *s;
}

std::atomic<std::uint64_t> g_handles{0x1000};
std::atomic<std::uint64_t> g_launches{0};
CUctx_st* const kContext = reinterpret_cast<CUctx_st*>(0xc0);

template <class T>
T* new_handle() {
  return reinterpret_cast<T*>(g_handles.fetch_add(16, std::memory_order_relaxed));
}

const char* function_name(CUfunction f) {
  static std::mutex mu;
  static auto* names = new std::unordered_map<CUfunction, std::string>;
  std::lock_guard<std::mutex> lock(mu);
  std::string& n = (*names)[f];
  if (n.empty()) n = "stub_kernel_" + std::to_string(reinterpret_cast<std::uintptr_t>(f) >> 4);
  return n.c_str();
}

}  // namespace

extern "C" {

CUresult cuInit(unsigned) { return CUDA_SUCCESS; }
CUresult cuDriverGetVersion(int* v) { return *v = CUDA_VERSION, CUDA_SUCCESS; }
CUresult cuDeviceGetCount(int* n) { return *n = 1, CUDA_SUCCESS; }
CUresult cuDeviceGet(CUdevice* d, int ordinal) { return ordinal == 0 ? (*d = 0, CUDA_SUCCESS) : CUDA_ERROR_INVALID_DEVICE; }
CUresult cuDeviceTotalMem_v2(size_t* bytes, CUdevice) { return *bytes = kTotalBytes, CUDA_SUCCESS; }
CUresult cuDeviceGetAttribute(int* v, CUdevice_attribute a, CUdevice) {
  *v = (a == CU_DEVICE_ATTRIBUTE_CONCURRENT_MANAGED_ACCESS || a == CU_DEVICE_ATTRIBUTE_MANAGED_MEMORY) ? 1 : 0;
  return CUDA_SUCCESS;
}
CUresult cuDevicePrimaryCtxRetain(CUcontext* c, CUdevice) { return *c = kContext, CUDA_SUCCESS; }
CUresult cuCtxSetCurrent(CUcontext) { return CUDA_SUCCESS; }
CUresult cuCtxGetCurrent(CUcontext* c) { return *c = kContext, CUDA_SUCCESS; }
CUresult cuCtxGetDevice(CUdevice* d) { return *d = 0, CUDA_SUCCESS; }
CUresult cuCtxSynchronize() { return CUDA_SUCCESS; }
CUresult cuMemGetInfo_v2(size_t* free_b, size_t* total_b) {
  *free_b = *total_b = kTotalBytes;
  return CUDA_SUCCESS;
}

CUresult cuMemAlloc_v2(CUdeviceptr* p, size_t bytes) { return *p = space().take(bytes), CUDA_SUCCESS; }
CUresult cuMemAllocManaged(CUdeviceptr* p, size_t bytes, unsigned) { return *p = space().take(bytes), CUDA_SUCCESS; }
CUresult cuMemAllocAsync(CUdeviceptr* p, size_t bytes, CUstream) { return *p = space().take(bytes), CUDA_SUCCESS; }
CUresult cuMemFree_v2(CUdeviceptr p) { return space().give(p) ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE; }
CUresult cuMemFreeAsync(CUdeviceptr p, CUstream) { return space().give(p) ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE; }
CUresult cuMemPrefetchAsync_v2(CUdeviceptr, size_t, CUmemLocation, unsigned, CUstream) { return CUDA_SUCCESS; }
CUresult cuMemAdvise_v2(CUdeviceptr, size_t, CUmem_advise, CUmemLocation) { return CUDA_SUCCESS; }

CUresult cuStreamCreate(CUstream* s, unsigned) { return *s = new_handle<CUstream_st>(), CUDA_SUCCESS; }
CUresult cuStreamDestroy_v2(CUstream) { return CUDA_SUCCESS; }
CUresult cuStreamSynchronize(CUstream) { return CUDA_SUCCESS; }
CUresult cuStreamWaitEvent(CUstream, CUevent, unsigned) { return CUDA_SUCCESS; }
CUresult cuEventCreate(CUevent* e, unsigned) { return *e = new_handle<CUevent_st>(), CUDA_SUCCESS; }
CUresult cuEventDestroy_v2(CUevent) { return CUDA_SUCCESS; }
CUresult cuEventRecord(CUevent, CUstream) { return CUDA_SUCCESS; }
CUresult cuEventQuery(CUevent) { return CUDA_SUCCESS; }
CUresult cuEventSynchronize(CUevent) { return CUDA_SUCCESS; }
CUresult cuEventElapsedTime_v2(float* ms, CUevent, CUevent) { return *ms = 0.001f, CUDA_SUCCESS; }

CUresult cuLaunchKernel(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, CUstream,
                        void**, void**) {
  g_launches.fetch_add(1, std::memory_order_relaxed);
  return CUDA_SUCCESS;
}
CUresult cuFuncGetParamInfo(CUfunction f, size_t i, size_t* off, size_t* size) {
  switch (reinterpret_cast<std::uintptr_t>(f) & 0xf) {
    case 1: {  // u64 seed, double target, u32 packed, 6 pointers, 6 u64 sizes
      static constexpr std::uint32_t kOff[15] = {0, 8, 16, 24, 32, 40, 48, 56, 64, 72, 80, 88, 96, 104, 112};
      static constexpr std::uint32_t kSize[15] = {8, 8, 4, 8, 8, 8, 8, 8, 8, 8, 8, 8, 8, 8, 8};
      if (i >= 15) return CUDA_ERROR_INVALID_VALUE;
      *off = kOff[i];
      *size = kSize[i];
      return CUDA_SUCCESS;
    }
    case 2:
      if (i >= 1) return CUDA_ERROR_INVALID_VALUE;
      *off = 0;
      *size = 288;
      return CUDA_SUCCESS;
    default:
      return CUDA_ERROR_INVALID_HANDLE;
  }
}
CUresult cuFuncGetName(const char** name, CUfunction f) { return *name = function_name(f), CUDA_SUCCESS; }

CUresult cuMemcpyAsync(CUdeviceptr, CUdeviceptr, size_t, CUstream) { return CUDA_SUCCESS; }
CUresult cuMemcpyHtoDAsync_v2(CUdeviceptr, const void*, size_t, CUstream) { return CUDA_SUCCESS; }
CUresult cuMemcpyDtoHAsync_v2(void*, CUdeviceptr, size_t, CUstream) { return CUDA_SUCCESS; }
CUresult cuMemcpyHtoD_v2(CUdeviceptr, const void*, size_t) { return CUDA_SUCCESS; }
CUresult cuMemcpyDtoH_v2(void* dst, CUdeviceptr, size_t n) {
  std::memset(dst, 0, n);  // a host buffer: defined bytes, as a real copy would leave
  return CUDA_SUCCESS;
}

// For a program that wants to check the launches went through.
std::uint64_t stubcuda_launches() { return g_launches.load(std::memory_order_relaxed); }

}  // extern "C"
