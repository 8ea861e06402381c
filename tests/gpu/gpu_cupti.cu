// gpu_cupti: are CUPTI kernel timings available here (what kernel durations in traces would
// come from)? Enables the CUPTI activity API for concurrent kernels, launches kernels of
// known relative cost, and checks that each produced a record with a plausible duration,
// and that the longer kernel took longer. Run plain and under libcapuchin.so (CUPTI
// subscribes to the driver too: both must coexist). Exit 0 / 1, or 77 with no GPU.
#include <cupti.h>

#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "gpu_common.cuh"

namespace {

struct KernelTime {
  std::string name;
  uint64_t start, end;
};
std::vector<KernelTime> g_records;

__global__ void spin_short(float* p, int iters) {
  float x = p[threadIdx.x];
  for (int i = 0; i < iters; ++i) x = x * 0.999f + 0.001f;
  p[threadIdx.x] = x;
}
__global__ void spin_long(float* p, int iters) {
  float x = p[threadIdx.x];
  for (int i = 0; i < iters; ++i) x = x * 0.999f + 0.001f;
  p[threadIdx.x] = x;
}

void CUPTIAPI buffer_requested(uint8_t** buffer, size_t* size, size_t* max_records) {
  *size = 1 << 20;
  *buffer = static_cast<uint8_t*>(std::aligned_alloc(8, *size));
  *max_records = 0;
}

void CUPTIAPI buffer_completed(CUcontext, uint32_t, uint8_t* buffer, size_t, size_t valid) {
  CUpti_Activity* rec = nullptr;
  while (cuptiActivityGetNextRecord(buffer, valid, &rec) == CUPTI_SUCCESS) {
    if (rec->kind == CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL || rec->kind == CUPTI_ACTIVITY_KIND_KERNEL) {
      const auto* k = reinterpret_cast<const CUpti_ActivityKernel10*>(rec);
      g_records.push_back({k->name != nullptr ? k->name : "?", k->start, k->end});
    }
  }
  std::free(buffer);
}

#define CUPTI_CK(call)                                                                    \
  do {                                                                                    \
    const CUptiResult r_ = (call);                                                        \
    if (r_ != CUPTI_SUCCESS) {                                                            \
      const char* s_ = nullptr;                                                           \
      cuptiGetResultString(r_, &s_);                                                      \
      std::printf("FAIL %s: %s (CUPTI timing unavailable here)\n", #call, s_ ? s_ : "?"); \
      std::printf("RESULT gpu_cupti FAIL (CUPTI error)\n");                               \
      std::exit(1);                                                                       \
    }                                                                                     \
  } while (0)

}  // namespace

int main() {
  gpu_check::require_gpu_or_skip("gpu_cupti");
  CUPTI_CK(cuptiActivityRegisterCallbacks(buffer_requested, buffer_completed));
  CUPTI_CK(cuptiActivityEnable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL));
  float* p = nullptr;
  GPU_CK(cudaMalloc(&p, 256 * sizeof(float)));
  GPU_CK(cudaMemset(p, 0, 256 * sizeof(float)));
  const int launches = 5;
  for (int i = 0; i < launches; ++i) {
    spin_short<<<1, 256>>>(p, 1000);
    spin_long<<<1, 256>>>(p, 200000);
  }
  GPU_CK(cudaDeviceSynchronize());
  CUPTI_CK(cuptiActivityFlushAll(1));
  CUPTI_CK(cuptiActivityDisable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL));
  uint64_t ts = 0;
  CUPTI_CK(cuptiGetTimestamp(&ts));
  int shorts = 0, longs = 0, sane = 0;
  double short_ns = 0, long_ns = 0;
  for (const auto& r : g_records) {
    const bool is_long = r.name.find("spin_long") != std::string::npos;
    const bool is_short = r.name.find("spin_short") != std::string::npos;
    if (!is_long && !is_short) continue;
    if (r.end > r.start && r.end <= ts) ++sane;
    const double d = static_cast<double>(r.end - r.start);
    if (is_long) ++longs, long_ns += d;
    else ++shorts, short_ns += d;
  }
  gpu_check::check(shorts == launches && longs == launches, "cupti: one kernel record per launch (%d short, %d long of %d each)",
                   shorts, longs, launches);
  gpu_check::check(sane == shorts + longs, "cupti: %d/%d records have end > start, before now", sane, shorts + longs);
  if (shorts > 0 && longs > 0) {
    short_ns /= shorts;
    long_ns /= longs;
    std::printf("INFO cupti mean kernel time: spin_short %.0f ns, spin_long %.0f ns\n", short_ns, long_ns);
    gpu_check::check(long_ns > 10 * short_ns, "cupti: the 200x longer loop takes longer (%.0f ns vs %.0f ns)", long_ns,
                     short_ns);
  }
  GPU_CK(cudaFree(p));
  return gpu_check::finish("gpu_cupti");
}
