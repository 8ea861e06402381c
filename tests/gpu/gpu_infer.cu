// gpu_infer: write sets inferred on real kernels (interpose/exec/write_sets.hpp), nothing
// declared. Run plain (the ground truth) and under libcapuchin.so with a budget below its
// working set (tests/gpu/run_check.sh, cases infer_uvm and infer_pinned), where each kernel's
// first launch shape is put on probation and must be judged as it deserves:
//   - a cuBLAS SGEMM writing a new tensor (beta = 0)               -> replayable
//   - scale, an elementwise kernel writing a new tensor            -> replayable
//   - stamp, which adds the GPU's nanosecond timer to its output   -> not-deterministic
//   - accumulate, integer atomics into a tensor a kernel zeroed    -> never judged replayable
//     (it writes no new tensor: in place, so never a producer)
// and the run must stay bit-identical (CHECKSUM lines: everything but stamp's output). Six
// pressure buffers are touched every iteration so that the budget forces drops or evictions.
// Usage: gpu_infer [MiB per tensor, default 32]. Exit 0 / 1, or 77 with no GPU.
#include <cublas_v2.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "gpu_common.cuh"

namespace {

constexpr int kGrid = 256, kBlock = 256;

__global__ void scale(const float* x, float* y, long long n) {
  for (long long i = blockIdx.x * 1ll * blockDim.x + threadIdx.x; i < n; i += 1ll * gridDim.x * blockDim.x)
    y[i] = x[i] * 0.5f + 1.0f;
}

__global__ void stamp(const float* x, float* y, long long n) {
  unsigned long long t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  for (long long i = blockIdx.x * 1ll * blockDim.x + threadIdx.x; i < n; i += 1ll * gridDim.x * blockDim.x)
    y[i] = x[i] + static_cast<float>(t & 0xffu);
}

__global__ void zero(int* p, long long n) {
  for (long long i = blockIdx.x * 1ll * blockDim.x + threadIdx.x; i < n; i += 1ll * gridDim.x * blockDim.x) p[i] = 0;
}

__global__ void accumulate(const float* x, int* bins, long long n, int nbins) {
  for (long long i = blockIdx.x * 1ll * blockDim.x + threadIdx.x; i < n; i += 1ll * gridDim.x * blockDim.x)
    atomicAdd(&bins[static_cast<long long>(x[i]) % nbins], 1);
}

__global__ void touch(float* p, long long n, float v) {
  for (long long i = blockIdx.x * 1ll * blockDim.x + threadIdx.x; i < n; i += 1ll * gridDim.x * blockDim.x) p[i] += v;
}

std::uint64_t fnv(const void* data, std::size_t bytes, std::uint64_t h) {
  const auto* p = static_cast<const unsigned char*>(data);
  for (std::size_t i = 0; i < bytes; ++i) h = (h ^ p[i]) * 1099511628211ull;
  return h;
}

#define CUBLAS_CK(call)                                                                          \
  do {                                                                                           \
    const cublasStatus_t s_ = (call);                                                            \
    if (s_ != CUBLAS_STATUS_SUCCESS) {                                                           \
      std::printf("FAIL %s: cuBLAS status %d\n", #call, static_cast<int>(s_));                   \
      std::exit(1);                                                                              \
    }                                                                                            \
  } while (0)

}  // namespace

int main(int argc, char** argv) {
  const long long mib = argc > 1 ? std::atoll(argv[1]) : 32;
  if (mib <= 0 || mib > 4096) {
    std::fprintf(stderr, "usage: gpu_infer [MiB per tensor, 1..4096]\n");
    return 2;
  }
  gpu_check::require_gpu_or_skip("gpu_infer");
  const int dim = 1024;                            // W is dim x dim
  const long long cols = mib * 1024 * 1024 / 4 / dim;  // x, y are dim x cols
  const long long n = dim * cols;
  const std::size_t bytes = static_cast<std::size_t>(n) * sizeof(float);
  const int nbins = 4096, iters = 5, pressure = 6;
  cublasHandle_t h = nullptr;
  CUBLAS_CK(cublasCreate(&h));
  float* w = nullptr;
  GPU_CK(cudaMalloc(&w, static_cast<std::size_t>(dim) * dim * sizeof(float)));
  std::vector<float> host(static_cast<std::size_t>(dim) * dim);
  for (std::size_t i = 0; i < host.size(); ++i) host[i] = static_cast<float>(static_cast<int>(i % 7) - 3) / 8.0f;
  GPU_CK(cudaMemcpy(w, host.data(), host.size() * sizeof(float), cudaMemcpyHostToDevice));
  std::vector<float*> press(pressure);
  for (float*& p : press) {
    GPU_CK(cudaMalloc(&p, bytes));
    GPU_CK(cudaMemset(p, 0, bytes));
  }
  std::vector<float> xs(static_cast<std::size_t>(n));
  std::uint64_t sum = 1469598103934665603ull;
  for (int it = 0; it < iters; ++it) {
    for (long long i = 0; i < n; ++i) xs[static_cast<std::size_t>(i)] = static_cast<float>((i * 31 + it) % 17) / 4.0f;
    float *x = nullptr, *y = nullptr, *z = nullptr, *s = nullptr;
    int* bins = nullptr;
    GPU_CK(cudaMalloc(&x, bytes));
    GPU_CK(cudaMemcpy(x, xs.data(), bytes, cudaMemcpyHostToDevice));
    GPU_CK(cudaMalloc(&y, bytes));
    const float one = 1.0f, nil = 0.0f;  // y = W x (a new tensor: beta = 0)
    CUBLAS_CK(cublasSgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, dim, static_cast<int>(cols), dim, &one, w, dim, x, dim, &nil, y, dim));
    GPU_CK(cudaMalloc(&z, bytes));
    scale<<<kGrid, kBlock>>>(y, z, n);
    GPU_CK(cudaMalloc(&s, bytes));
    stamp<<<kGrid, kBlock>>>(z, s, n);
    GPU_CK(cudaMalloc(&bins, nbins * sizeof(int)));
    zero<<<kGrid, kBlock>>>(bins, nbins);
    accumulate<<<kGrid, kBlock>>>(z, bins, n, nbins);
    for (float* p : press) touch<<<kGrid, kBlock>>>(p, n, 1.0f);  // pushes y, z out under the budget
    scale<<<kGrid, kBlock>>>(y, x, n);                             // y and z used again after the pressure
    touch<<<kGrid, kBlock>>>(z, n, 2.0f);
    GPU_CK(cudaGetLastError());
    GPU_CK(cudaDeviceSynchronize());
    std::vector<float> zh(static_cast<std::size_t>(n)), xh(static_cast<std::size_t>(n));
    std::vector<int> bh(nbins);
    GPU_CK(cudaMemcpy(zh.data(), z, bytes, cudaMemcpyDeviceToHost));
    GPU_CK(cudaMemcpy(xh.data(), x, bytes, cudaMemcpyDeviceToHost));
    GPU_CK(cudaMemcpy(bh.data(), bins, nbins * sizeof(int), cudaMemcpyDeviceToHost));
    sum = fnv(zh.data(), bytes, fnv(xh.data(), bytes, fnv(bh.data(), bh.size() * sizeof(int), sum)));
    for (void* p : {static_cast<void*>(x), static_cast<void*>(y), static_cast<void*>(z), static_cast<void*>(s),
                    static_cast<void*>(bins)})
      GPU_CK(cudaFree(p));
  }
  for (float* p : press) GPU_CK(cudaFree(p));
  GPU_CK(cudaFree(w));
  CUBLAS_CK(cublasDestroy(h));
  gpu_check::check(true, "gpu_infer: %d iterations of %lld MiB tensors ran", iters, mib);
  std::printf("CHECKSUM infer %016llx\n", static_cast<unsigned long long>(sum));
  return gpu_check::finish("gpu_infer");
}
