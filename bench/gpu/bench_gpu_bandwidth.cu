// bench_gpu_bandwidth: host<->device bandwidth on a real GPU, each way, for the two ways the
// executor moves tensors: pinned-memory copies (the pinned backend) and Unified Memory
// prefetches (the uvm backend), plus pageable copies and on-demand UVM faults for reference.
// These calibrate the simulator's GPU profile (src/sim/profiles.cpp: the h200 profile's host
// link is PCIe 5.0 x16, 63 GB/s each way nominal).
//
// Usage: bench_gpu_bandwidth [MiB ...]  (default 256 1024)
// Output: `bw <kind> <MiB> <GB/s>` per kind and size (best of 5, CUDA event timing; GB = 1e9
// bytes). Exit 77 with no GPU.
#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "../../tests/gpu/gpu_common.cuh"

namespace {

__global__ void touch_pages(const float* p, long long n, float* sink) {
  float acc = 0;
  for (long long j = (blockIdx.x * 1ll * blockDim.x + threadIdx.x) * 1024; j < n; j += 1ll * gridDim.x * blockDim.x * 1024)
    acc += p[j];  // one float per 4 KiB: the cost is the page migration
  if (acc == 12345.0f) sink[0] = acc;
}

template <class Op>
double best_gbps(std::size_t bytes, cudaStream_t s, Op&& op, int reps = 5) {
  cudaEvent_t a, b;
  GPU_CK(cudaEventCreate(&a));
  GPU_CK(cudaEventCreate(&b));
  double best = 0;
  for (int r = 0; r < reps; ++r) {
    GPU_CK(cudaEventRecord(a, s));
    op(r);
    GPU_CK(cudaEventRecord(b, s));
    GPU_CK(cudaEventSynchronize(b));
    float ms = 0;
    GPU_CK(cudaEventElapsedTime(&ms, a, b));
    if (ms > 0) best = std::max(best, static_cast<double>(bytes) / (ms * 1e-3) / 1e9);
  }
  GPU_CK(cudaEventDestroy(a));
  GPU_CK(cudaEventDestroy(b));
  return best;
}

void report(const char* kind, std::size_t mib, double gbps) {
  std::printf("bw %s %zu %.2f\n", kind, mib, gbps);
  std::fflush(stdout);
}

void measure(std::size_t mib) {
  const std::size_t bytes = mib << 20;
  cudaStream_t s = nullptr;
  GPU_CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  void* dev = nullptr;
  GPU_CK(cudaMalloc(&dev, bytes));
  void* pinned = nullptr;
  GPU_CK(cudaMallocHost(&pinned, bytes));
  std::memset(pinned, 1, bytes);
  report("pinned_h2d", mib, best_gbps(bytes, s, [&](int) { GPU_CK(cudaMemcpyAsync(dev, pinned, bytes, cudaMemcpyHostToDevice, s)); }));
  report("pinned_d2h", mib, best_gbps(bytes, s, [&](int) { GPU_CK(cudaMemcpyAsync(pinned, dev, bytes, cudaMemcpyDeviceToHost, s)); }));
  GPU_CK(cudaFreeHost(pinned));
  std::vector<char> pageable(bytes, 1);
  report("pageable_h2d", mib, best_gbps(bytes, s, [&](int) { GPU_CK(cudaMemcpyAsync(dev, pageable.data(), bytes, cudaMemcpyHostToDevice, s)); }, 3));
  report("pageable_d2h", mib, best_gbps(bytes, s, [&](int) { GPU_CK(cudaMemcpyAsync(pageable.data(), dev, bytes, cudaMemcpyDeviceToHost, s)); }, 3));
  GPU_CK(cudaFree(dev));

  char* managed = nullptr;
  GPU_CK(cudaMallocManaged(&managed, bytes));
  std::memset(managed, 1, bytes);  // first touch on the host: the pages start there
  // CUDA 13 takes a cudaMemLocation (and flags); CUDA 12 a device number (cudaCpuDeviceId: host).
#if CUDART_VERSION >= 13000
  cudaMemLocation to_dev{}, to_host{};
  to_dev.type = cudaMemLocationTypeDevice;
  to_dev.id = 0;
  to_host.type = cudaMemLocationTypeHost;
  to_host.id = 0;
  auto prefetch = [&](const cudaMemLocation& where) { GPU_CK(cudaMemPrefetchAsync(managed, bytes, where, 0, s)); };
#else
  const int to_dev = 0, to_host = cudaCpuDeviceId;
  auto prefetch = [&](int where) { GPU_CK(cudaMemPrefetchAsync(managed, bytes, where, s)); };
#endif
  // Each rep: prefetch to the device (timed), then back to the host (untimed here), and the reverse.
  double h2d = 0, d2h = 0;
  for (int r = 0; r < 5; ++r) {
    h2d = std::max(h2d, best_gbps(bytes, s, [&](int) { prefetch(to_dev); }, 1));
    d2h = std::max(d2h, best_gbps(bytes, s, [&](int) { prefetch(to_host); }, 1));
  }
  report("uvm_prefetch_h2d", mib, h2d);
  report("uvm_prefetch_d2h", mib, d2h);
  // On-demand faults: pages on the host, a kernel touches each 4 KiB page once.
  float* sink = nullptr;
  GPU_CK(cudaMalloc(&sink, 4));
  double fault = 0;
  for (int r = 0; r < 3; ++r) {
    prefetch(to_host);
    GPU_CK(cudaStreamSynchronize(s));
    fault = std::max(fault, best_gbps(bytes, s, [&](int) {
      touch_pages<<<264, 256, 0, s>>>(reinterpret_cast<const float*>(managed), static_cast<long long>(bytes / 4), sink);
    }, 1));
  }
  report("uvm_fault_h2d", mib, fault);
  GPU_CK(cudaFree(sink));
  GPU_CK(cudaFree(managed));
  GPU_CK(cudaStreamDestroy(s));
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<std::size_t> sizes;
  for (int i = 1; i < argc; ++i) {
    const long long m = std::atoll(argv[i]);
    if (m <= 0 || m > 65536) {
      std::fprintf(stderr, "bench_gpu_bandwidth: sizes are MiB in 1..65536, not '%s'\n", argv[i]);
      return 2;
    }
    sizes.push_back(static_cast<std::size_t>(m));
  }
  if (sizes.empty()) sizes = {256, 1024};
  gpu_check::require_gpu_or_skip("bench_gpu_bandwidth");
  for (auto mib : sizes) measure(mib);
  return 0;
}
