// gpu_info: what scripts/gpu-check.sh reports about the machine before any check (summary.md):
// driver and runtime versions, the device, concurrentManagedAccess (the uvm backend's
// prefetches and evictions need it to be asynchronous), and host-located VMM support (the
// pinned backend's host side could be cuMemCreate'd host memory: CU_DEVICE_ATTRIBUTE_HOST_NUMA_*
// and a trial cuMemCreate located on the host). Reports; fails only when CUDA itself fails.
//
// Prints `INFO key=value` lines (one per fact; the script greps them). Exit 0, or 77 with no
// GPU, 78 with a driver too old for this runtime.
#include <cstdio>

#include "gpu_common.cuh"

namespace {

using DeviceGetAttribute = CUresult (*)(int*, CUdevice_attribute, CUdevice);
using MemGetGranularity = CUresult (*)(size_t*, const CUmemAllocationProp*, CUmemAllocationGranularity_flags);
using MemCreate = CUresult (*)(CUmemGenericAllocationHandle*, size_t, const CUmemAllocationProp*, unsigned long long);
using MemRelease = CUresult (*)(CUmemGenericAllocationHandle);

void fact(const char* key, const char* fmt_value, long long v) {
  std::printf("INFO %s=", key);
  std::printf(fmt_value, v);
  std::printf("\n");
}

// Tries cuMemCreate of one granule located at `type` (host or host NUMA node 0): the outcome.
const char* host_vmm_trial(CUmemLocationType type, int id) {
  auto granularity = gpu_check::driver_entry<MemGetGranularity>("cuMemGetAllocationGranularity");
  auto create = gpu_check::driver_entry<MemCreate>("cuMemCreate");
  auto release = gpu_check::driver_entry<MemRelease>("cuMemRelease");
  CUmemAllocationProp prop{};
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location.type = type;
  prop.location.id = id;
  size_t g = 0;
  if (granularity(&g, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM) != CUDA_SUCCESS || g == 0) return "no (granularity refused)";
  CUmemGenericAllocationHandle h{};
  const CUresult r = create(&h, g, &prop, 0);
  if (r != CUDA_SUCCESS) {
    static char buf[64];
    std::snprintf(buf, sizeof buf, "no (cuMemCreate: CUresult %d)", static_cast<int>(r));
    return buf;
  }
  (void)release(h);
  return "yes";
}

}  // namespace

int main() {
  gpu_check::require_gpu_or_skip("gpu_info");
  int driver = 0, runtime = 0, n = 0, managed = 0, pageable = 0;
  GPU_CK(cudaDriverGetVersion(&driver));
  GPU_CK(cudaRuntimeGetVersion(&runtime));
  GPU_CK(cudaGetDeviceCount(&n));
  GPU_CK(cudaDeviceGetAttribute(&managed, cudaDevAttrConcurrentManagedAccess, 0));
  GPU_CK(cudaDeviceGetAttribute(&pageable, cudaDevAttrPageableMemoryAccess, 0));
  cudaDeviceProp p{};
  GPU_CK(cudaGetDeviceProperties(&p, 0));
  std::printf("INFO device=%s (sm_%d%d, %.1f GiB)\n", p.name, p.major, p.minor,
              static_cast<double>(p.totalGlobalMem) / (1024.0 * 1024.0 * 1024.0));
  fact("devices", "%lld", n);
  std::printf("INFO driver_cuda=%d.%d\nINFO runtime=%d.%d\n", driver / 1000, driver % 1000 / 10, runtime / 1000,
              runtime % 1000 / 10);
  fact("concurrentManagedAccess", "%lld", managed);
  fact("pageableMemoryAccess", "%lld", pageable);
  auto attr = gpu_check::driver_entry<DeviceGetAttribute>("cuDeviceGetAttribute");
  int numa_id = -1, numa_vmm = 0;
  // The HOST_NUMA attributes came with CUDA 12.2; an older driver answers CUDA_ERROR_INVALID_VALUE.
#if CUDA_VERSION >= 12020
  if (attr(&numa_id, CU_DEVICE_ATTRIBUTE_HOST_NUMA_ID, 0) != CUDA_SUCCESS) numa_id = -2;
  if (attr(&numa_vmm, CU_DEVICE_ATTRIBUTE_HOST_NUMA_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED, 0) != CUDA_SUCCESS) numa_vmm = -1;
  fact("host_numa_id", "%lld", numa_id);
  fact("host_numa_vmm_supported", "%lld", numa_vmm);
  std::printf("INFO host_numa_cuMemCreate=%s\n", numa_id >= 0 ? host_vmm_trial(CU_MEM_LOCATION_TYPE_HOST_NUMA, numa_id)
                                                                : "not tried (no host NUMA id)");
#else
  (void)attr;
  std::printf("INFO host_numa_vmm_supported=unknown (built with CUDA %d, before 12.2)\n", CUDA_VERSION);
#endif
#if CUDA_VERSION >= 13000
  std::printf("INFO host_cuMemCreate=%s\n", host_vmm_trial(CU_MEM_LOCATION_TYPE_HOST, 0));
#else
  std::printf("INFO host_cuMemCreate=unknown (CU_MEM_LOCATION_TYPE_HOST allocations need CUDA 13 headers)\n");
#endif
  return 0;
}
