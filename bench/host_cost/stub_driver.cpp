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
// Every entry point counts its calls (stubcuda_driver_calls(); with STUBCUDA_CALLS=1 the counts
// per entry point are printed at exit): what a null driver cannot show is what each of those
// calls would cost on a real one, so bench_host_cost reports how many capuchin adds.
//
// Kernel parameter layouts come from the CUfunction handle (bench_host_cost makes them):
// handle = (index + 1) << 4 | layout, layout 1 = 15 parameters (u64, double, u32, 6 pointers,
// 6 u64 sizes: the shape of a small elementwise kernel's), layout 2 = one 288-byte by-value
// struct (TensorIterator-style: 16 pointers and 16 sizes after a header), layout 3 = one
// 28,032-byte by-value struct (a foreach op's multi_tensor_apply lists: up to 1,050 addresses,
// 770 element counts, 2,240 blocks' tensor and chunk).
#include <cuda.h>

#include <atomic>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
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

// Calls per entry point, registered on first use; the total for stubcuda_driver_calls().
struct CallCounter {
  const char* name;
  std::atomic<std::uint64_t> n{0};
  CallCounter* next = nullptr;
};
std::atomic<std::uint64_t> g_calls{0};
std::atomic<CallCounter*> g_counters{nullptr};

CallCounter* register_counter(const char* name) {
  auto* c = new CallCounter{name};  // never destroyed: calls may come during exit
  c->next = g_counters.load(std::memory_order_relaxed);
  while (!g_counters.compare_exchange_weak(c->next, c, std::memory_order_release, std::memory_order_relaxed)) {
  }
  return c;
}

void print_counts() {
  for (CallCounter* c = g_counters.load(std::memory_order_acquire); c != nullptr; c = c->next)
    std::fprintf(stderr, "stubcuda calls %s %llu\n", c->name, static_cast<unsigned long long>(c->n.load()));
}

struct CountsAtExit {
  CountsAtExit() {
    if (const char* v = std::getenv("STUBCUDA_CALLS"); v != nullptr && v[0] == '1') std::atexit(print_counts);
  }
} g_counts_at_exit;

#define COUNT_CALL()                                            \
  do {                                                          \
    static CallCounter* counter_ = register_counter(__func__); \
    counter_->n.fetch_add(1, std::memory_order_relaxed);        \
    g_calls.fetch_add(1, std::memory_order_relaxed);            \
  } while (0)

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

CUresult cuInit(unsigned) { COUNT_CALL(); return CUDA_SUCCESS; }
CUresult cuDriverGetVersion(int* v) { COUNT_CALL(); return *v = CUDA_VERSION, CUDA_SUCCESS; }
CUresult cuDeviceGetCount(int* n) { COUNT_CALL(); return *n = 1, CUDA_SUCCESS; }
CUresult cuDeviceGet(CUdevice* d, int ordinal) {
  COUNT_CALL();
  return ordinal == 0 ? (*d = 0, CUDA_SUCCESS) : CUDA_ERROR_INVALID_DEVICE;
}
CUresult cuDeviceTotalMem_v2(size_t* bytes, CUdevice) { COUNT_CALL(); return *bytes = kTotalBytes, CUDA_SUCCESS; }
CUresult cuDeviceGetAttribute(int* v, CUdevice_attribute a, CUdevice) {
  COUNT_CALL();
  *v = (a == CU_DEVICE_ATTRIBUTE_CONCURRENT_MANAGED_ACCESS || a == CU_DEVICE_ATTRIBUTE_MANAGED_MEMORY) ? 1 : 0;
  return CUDA_SUCCESS;
}
CUresult cuDevicePrimaryCtxRetain(CUcontext* c, CUdevice) { COUNT_CALL(); return *c = kContext, CUDA_SUCCESS; }
CUresult cuCtxSetCurrent(CUcontext) { COUNT_CALL(); return CUDA_SUCCESS; }
CUresult cuCtxGetCurrent(CUcontext* c) { COUNT_CALL(); return *c = kContext, CUDA_SUCCESS; }
CUresult cuCtxGetDevice(CUdevice* d) { COUNT_CALL(); return *d = 0, CUDA_SUCCESS; }
CUresult cuCtxSynchronize() { COUNT_CALL(); return CUDA_SUCCESS; }
CUresult cuMemGetInfo_v2(size_t* free_b, size_t* total_b) {
  COUNT_CALL();
  *free_b = *total_b = kTotalBytes;
  return CUDA_SUCCESS;
}

CUresult cuMemAlloc_v2(CUdeviceptr* p, size_t bytes) { COUNT_CALL(); return *p = space().take(bytes), CUDA_SUCCESS; }
CUresult cuMemAllocManaged(CUdeviceptr* p, size_t bytes, unsigned) {
  COUNT_CALL();
  return *p = space().take(bytes), CUDA_SUCCESS;
}
CUresult cuMemAllocAsync(CUdeviceptr* p, size_t bytes, CUstream) {
  COUNT_CALL();
  return *p = space().take(bytes), CUDA_SUCCESS;
}
CUresult cuMemFree_v2(CUdeviceptr p) { COUNT_CALL(); return space().give(p) ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE; }
CUresult cuMemFreeAsync(CUdeviceptr p, CUstream) {
  COUNT_CALL();
  return space().give(p) ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}
CUresult cuMemPrefetchAsync_v2(CUdeviceptr, size_t, CUmemLocation, unsigned, CUstream) {
  COUNT_CALL();
  return CUDA_SUCCESS;
}
// As CUDA 12.8+ drivers (an H200's): freed managed memory is discarded, not moved.
CUresult cuMemDiscardBatchAsync(CUdeviceptr*, size_t*, size_t, unsigned long long, CUstream) {
  COUNT_CALL();
  return CUDA_SUCCESS;
}
CUresult cuMemAdvise_v2(CUdeviceptr, size_t, CUmem_advise, CUmemLocation) { COUNT_CALL(); return CUDA_SUCCESS; }

CUresult cuStreamCreate(CUstream* s, unsigned) { COUNT_CALL(); return *s = new_handle<CUstream_st>(), CUDA_SUCCESS; }
CUresult cuStreamDestroy_v2(CUstream) { COUNT_CALL(); return CUDA_SUCCESS; }
CUresult cuStreamSynchronize(CUstream) { COUNT_CALL(); return CUDA_SUCCESS; }
CUresult cuStreamQuery(CUstream) { COUNT_CALL(); return CUDA_SUCCESS; }
CUresult cuStreamWaitEvent(CUstream, CUevent, unsigned) { COUNT_CALL(); return CUDA_SUCCESS; }
CUresult cuEventCreate(CUevent* e, unsigned) { COUNT_CALL(); return *e = new_handle<CUevent_st>(), CUDA_SUCCESS; }
CUresult cuEventDestroy_v2(CUevent) { COUNT_CALL(); return CUDA_SUCCESS; }
CUresult cuEventRecord(CUevent, CUstream) { COUNT_CALL(); return CUDA_SUCCESS; }
CUresult cuEventQuery(CUevent) { COUNT_CALL(); return CUDA_SUCCESS; }
CUresult cuEventSynchronize(CUevent) { COUNT_CALL(); return CUDA_SUCCESS; }
CUresult cuEventElapsedTime_v2(float* ms, CUevent, CUevent) { COUNT_CALL(); return *ms = 0.001f, CUDA_SUCCESS; }

CUresult cuLaunchKernel(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, CUstream,
                        void**, void**) {
  COUNT_CALL();
  g_launches.fetch_add(1, std::memory_order_relaxed);
  return CUDA_SUCCESS;
}
CUresult cuFuncGetParamInfo(CUfunction f, size_t i, size_t* off, size_t* size) {
  COUNT_CALL();
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
    case 3:  // a foreach op's tensor lists (host_replay's MultiTensor)
      if (i >= 1) return CUDA_ERROR_INVALID_VALUE;
      *off = 0;
      *size = 28032;
      return CUDA_SUCCESS;
    default:
      return CUDA_ERROR_INVALID_HANDLE;
  }
}
CUresult cuFuncGetName(const char** name, CUfunction f) { COUNT_CALL(); return *name = function_name(f), CUDA_SUCCESS; }

CUresult cuMemcpyAsync(CUdeviceptr, CUdeviceptr, size_t, CUstream) { COUNT_CALL(); return CUDA_SUCCESS; }
CUresult cuMemcpyHtoDAsync_v2(CUdeviceptr, const void*, size_t, CUstream) { COUNT_CALL(); return CUDA_SUCCESS; }
CUresult cuMemcpyDtoHAsync_v2(void*, CUdeviceptr, size_t, CUstream) { COUNT_CALL(); return CUDA_SUCCESS; }
CUresult cuMemcpyHtoD_v2(CUdeviceptr, const void*, size_t) { COUNT_CALL(); return CUDA_SUCCESS; }
CUresult cuMemcpyDtoH_v2(void* dst, CUdeviceptr, size_t n) {
  COUNT_CALL();
  std::memset(dst, 0, n);  // a host buffer: defined bytes, as a real copy would leave
  return CUDA_SUCCESS;
}

// Driver calls so far, every entry point and thread together.
std::uint64_t stubcuda_driver_calls() { return g_calls.load(std::memory_order_relaxed); }

// For a program that wants to check the launches went through.
std::uint64_t stubcuda_launches() { return g_launches.load(std::memory_order_relaxed); }

}  // extern "C"
