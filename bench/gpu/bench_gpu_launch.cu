// bench_gpu_launch: the cost of one kernel launch on a real GPU in a launch-bound loop, for
// measuring what libcapuchin.so adds (scripts/gpu-check.sh runs it plain, preloaded with
// CAPUCHIN_DISABLE=1, with capture on (CAPUCHIN_SINK=null, CAPUCHIN_RECORD) and with the
// executor on, and prints the differences). Two launch paths: the runtime's <<<>>> and the
// driver's cuLaunchKernel obtained through cudaGetDriverEntryPointByVersion (the path vendor
// libraries take). The kernel takes 4 pointers to live allocations; 1000 allocations are
// live so the interposer's interval lookups are realistic.
//
// Output: per path, `launch <path> enqueue_ns <median> total_ns <median>` (enqueue: the
// host loop alone; total: including the final synchronisation), medians of 7 runs of 20000
// launches. Exit 77 with no GPU.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <vector>

#include "../../tests/gpu/gpu_common.cuh"

namespace {

__global__ void empty4(float* a, float* b, float* c, float* d) {
  if (threadIdx.x == 1024) a[0] = b[0] + c[0] + d[0];  // never true: keeps the parameters
}

using LaunchKernel = CUresult (*)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                                  CUstream, void**, void**);

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

template <class Launch>
void measure(const char* path, Launch&& launch) {
  using Clock = std::chrono::steady_clock;
  const int per_run = 20000, runs = 7;
  for (int i = 0; i < 2000; ++i) launch();
  GPU_CK(cudaDeviceSynchronize());
  std::vector<double> enqueue, total;
  for (int r = 0; r < runs; ++r) {
    const auto t0 = Clock::now();
    for (int i = 0; i < per_run; ++i) launch();
    const auto t1 = Clock::now();
    GPU_CK(cudaDeviceSynchronize());
    const auto t2 = Clock::now();
    enqueue.push_back(std::chrono::duration<double, std::nano>(t1 - t0).count() / per_run);
    total.push_back(std::chrono::duration<double, std::nano>(t2 - t0).count() / per_run);
  }
  GPU_CK(cudaGetLastError());
  std::printf("launch %s enqueue_ns %.1f total_ns %.1f\n", path, median(enqueue), median(total));
  std::fflush(stdout);
}

}  // namespace

int main() {
  gpu_check::require_gpu_or_skip("bench_gpu_launch");
  std::vector<float*> live(1000);
  for (auto& p : live) GPU_CK(cudaMalloc(&p, 4096));
  float *a = live[10], *b = live[200], *c = live[500], *d = live[900];
  measure("runtime", [&] { empty4<<<1, 32>>>(a, b, c, d); });
  auto launch = gpu_check::driver_entry<LaunchKernel>("cuLaunchKernel");
  cudaFunction_t rf = nullptr;
  GPU_CK(cudaGetFuncBySymbol(&rf, reinterpret_cast<const void*>(empty4)));
  void* params[] = {&a, &b, &c, &d};
  measure("driver", [&] { (void)launch(reinterpret_cast<CUfunction>(rf), 1, 1, 1, 32, 1, 1, 0, nullptr, params, nullptr); });
  for (auto p : live) GPU_CK(cudaFree(p));
  return 0;
}
