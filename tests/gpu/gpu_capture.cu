// gpu_capture: the runtime, driver and vendor-library paths a real job uses, on a real GPU,
// for checking what libcapuchin.so records (tests/gpu/run_check.sh capture).
//
// 1. runtime: cudaMalloc, cudaMemcpy, 3 saxpy<<<>>> launches (2 allocations each);
// 2. driver: cuMemAlloc / cuMemcpyHtoD / cuLaunchKernel / cuMemcpyDtoH / cuMemFree reached
//    through cudaGetDriverEntryPointByVersion (cudart asks cuGetProcAddress), 2 launches of
//    scale_kernel touching 1 allocation;
// 3. cuBLAS: one SGEMM through the real libcublas (which finds the driver on its own), checked
//    against a CPU reference.
// Prints PASS/FAIL per result, CHECKSUM lines (bit patterns: a run under LD_PRELOAD must print
// the same ones) and EXPECT lines: what the recorded trace must contain
// (tests/gpu/trace_expect.py). Exit 0 / 1, or 77 with no GPU.
#include <cublas_v2.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include "gpu_common.cuh"

namespace {

__global__ void saxpy(float a, const float* x, float* y, int n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = a * x[i] + y[i];
}

__global__ void scale_kernel(float* x, float s, int n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) x[i] *= s;
}

std::uint64_t checksum(const std::vector<float>& v) {
  std::uint64_t h = 1469598103934665603ull;  // FNV-1a over the bit patterns
  for (float f : v) {
    std::uint32_t b;
    std::memcpy(&b, &f, 4);
    h = (h ^ b) * 1099511628211ull;
  }
  return h;
}

using MemAlloc = CUresult (*)(CUdeviceptr*, size_t);
using MemFree = CUresult (*)(CUdeviceptr);
using MemcpyHtoD = CUresult (*)(CUdeviceptr, const void*, size_t);
using MemcpyDtoH = CUresult (*)(void*, CUdeviceptr, size_t);
using LaunchKernel = CUresult (*)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                                  CUstream, void**, void**);
using CtxSynchronize = CUresult (*)();

void runtime_part() {
  const int n = 1 << 20;
  std::vector<float> x(n), y(n), out(n);
  for (int i = 0; i < n; ++i) {
    x[i] = static_cast<float>(i % 97) * 0.25f;
    y[i] = static_cast<float>(i % 13);
  }
  float *dx = nullptr, *dy = nullptr;
  GPU_CK(cudaMalloc(&dx, n * sizeof(float)));
  GPU_CK(cudaMalloc(&dy, n * sizeof(float)));
  GPU_CK(cudaMemcpy(dx, x.data(), n * sizeof(float), cudaMemcpyHostToDevice));
  GPU_CK(cudaMemcpy(dy, y.data(), n * sizeof(float), cudaMemcpyHostToDevice));
  for (int k = 0; k < 3; ++k) saxpy<<<(n + 255) / 256, 256>>>(2.0f, dx, dy, n);
  GPU_CK(cudaGetLastError());
  GPU_CK(cudaMemcpy(out.data(), dy, n * sizeof(float), cudaMemcpyDeviceToHost));
  int bad = 0;
  for (int i = 0; i < n; ++i) {
    float e = y[i];
    for (int k = 0; k < 3; ++k) e = 2.0f * x[i] + e;
    if (out[i] != e) ++bad;
  }
  gpu_check::check(bad == 0, "runtime: 3 saxpy launches give the CPU's result (%d mismatches)", bad);
  std::printf("CHECKSUM runtime_saxpy %016llx\n", static_cast<unsigned long long>(checksum(out)));
  GPU_CK(cudaFree(dx));
  GPU_CK(cudaFree(dy));
  std::printf("EXPECT alloc bytes %zu count_min 2\n", n * sizeof(float));
  std::printf("EXPECT kernel saxpy count 3 touch 2\n");
  std::printf("EXPECT copy count_min 3\n");
}

void driver_part() {
  auto mem_alloc = gpu_check::driver_entry<MemAlloc>("cuMemAlloc");
  auto mem_free = gpu_check::driver_entry<MemFree>("cuMemFree");
  auto htod = gpu_check::driver_entry<MemcpyHtoD>("cuMemcpyHtoD");
  auto dtoh = gpu_check::driver_entry<MemcpyDtoH>("cuMemcpyDtoH");
  auto launch = gpu_check::driver_entry<LaunchKernel>("cuLaunchKernel");
  auto ctx_sync = gpu_check::driver_entry<CtxSynchronize>("cuCtxSynchronize");
  cudaFunction_t rf = nullptr;
  GPU_CK(cudaGetFuncBySymbol(&rf, reinterpret_cast<const void*>(scale_kernel)));
  CUfunction f = reinterpret_cast<CUfunction>(rf);

  const int n = 3 * 1000 * 1000 + 17;  // an odd size: 12,000,068 bytes
  std::vector<float> h(n), out(n);
  for (int i = 0; i < n; ++i) h[i] = static_cast<float>(i % 1000) - 500.0f;
  CUdeviceptr d = 0;
  GPU_CU(mem_alloc(&d, n * sizeof(float)));
  GPU_CU(htod(d, h.data(), n * sizeof(float)));
  float s = 0.5f;
  int nn = n;
  void* params[] = {&d, &s, &nn};
  for (int k = 0; k < 2; ++k)
    GPU_CU(launch(f, static_cast<unsigned>((n + 255) / 256), 1, 1, 256, 1, 1, 0, nullptr, params, nullptr));
  GPU_CU(ctx_sync());
  GPU_CU(dtoh(out.data(), d, n * sizeof(float)));
  int bad = 0;
  for (int i = 0; i < n; ++i)
    if (out[i] != h[i] * 0.25f) ++bad;
  gpu_check::check(bad == 0, "driver: cuLaunchKernel (via cuGetProcAddress) x2 gives the CPU's result (%d mismatches)",
                   bad);
  std::printf("CHECKSUM driver_scale %016llx\n", static_cast<unsigned long long>(checksum(out)));
  GPU_CU(mem_free(d));
  std::printf("EXPECT alloc bytes %zu count_min 1\n", n * sizeof(float));
  std::printf("EXPECT kernel scale_kernel count 2 touch 1\n");
}

void cublas_part() {
  const int m = 384, k = 512, n = 256;  // C(m x n) = A(m x k) * B(k x n), column-major
  std::vector<float> a(static_cast<std::size_t>(m) * k), b(static_cast<std::size_t>(k) * n),
      c(static_cast<std::size_t>(m) * n);
  for (std::size_t i = 0; i < a.size(); ++i) a[i] = static_cast<float>((i * 7) % 19) / 19.0f - 0.5f;
  for (std::size_t i = 0; i < b.size(); ++i) b[i] = static_cast<float>((i * 5) % 23) / 23.0f - 0.5f;
  float *da = nullptr, *db = nullptr, *dc = nullptr;
  GPU_CK(cudaMalloc(&da, a.size() * 4));
  GPU_CK(cudaMalloc(&db, b.size() * 4));
  GPU_CK(cudaMalloc(&dc, c.size() * 4));
  GPU_CK(cudaMemcpy(da, a.data(), a.size() * 4, cudaMemcpyHostToDevice));
  GPU_CK(cudaMemcpy(db, b.data(), b.size() * 4, cudaMemcpyHostToDevice));
  cublasHandle_t h = nullptr;
  if (cublasCreate(&h) != CUBLAS_STATUS_SUCCESS) {
    gpu_check::check(false, "cublasCreate");
    return;
  }
  (void)cublasSetMathMode(h, CUBLAS_PEDANTIC_MATH);  // plain FP32: comparable with the CPU
  const float alpha = 1.0f, beta = 0.0f;
  const cublasStatus_t st = cublasSgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, m, n, k, &alpha, da, m, db, k, &beta, dc, m);
  GPU_CK(cudaDeviceSynchronize());
  gpu_check::check(st == CUBLAS_STATUS_SUCCESS, "cuBLAS: cublasSgemm returned %d", static_cast<int>(st));
  GPU_CK(cudaMemcpy(c.data(), dc, c.size() * 4, cudaMemcpyDeviceToHost));
  double worst = 0;
  for (int j = 0; j < n; ++j)
    for (int i = 0; i < m; ++i) {
      double e = 0;
      for (int p = 0; p < k; ++p)
        e += static_cast<double>(a[static_cast<std::size_t>(p) * m + i]) * b[static_cast<std::size_t>(j) * k + p];
      worst = std::fmax(worst, std::fabs(e - c[static_cast<std::size_t>(j) * m + i]));
    }
  gpu_check::check(worst < 1e-3, "cuBLAS: SGEMM %dx%dx%d matches the CPU (max abs error %.2e)", m, n, k, worst);
  std::printf("CHECKSUM cublas_sgemm %016llx\n", static_cast<unsigned long long>(checksum(c)));
  (void)cublasDestroy(h);
  GPU_CK(cudaFree(da));
  GPU_CK(cudaFree(db));
  GPU_CK(cudaFree(dc));
  // cuBLAS's kernel names vary with the version and GPU (sm90_xmma_gemm_*, cutlass_*, *sgemm*):
  // at least one launched kernel must touch A, B and C.
  std::printf("EXPECT kernel (?i)(gemm|xmma|cutlass) count_min 1 touch_min 3\n");
}

}  // namespace

int main() {
  gpu_check::require_gpu_or_skip("gpu_capture");
  runtime_part();
  driver_part();
  cublas_part();
  return gpu_check::finish("gpu_capture");
}
