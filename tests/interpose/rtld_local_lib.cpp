// rtld_local_lib: a shared library linked against libcudart.so.13, as a framework's extension
// module is (Python loads those RTLD_LOCAL, so libcudart is then outside the global scope while
// libcapuchin.so, preloaded, is in it and interposes the library's cuda* calls).
//
// rtld_local_run(steps): two buffers allocated with cudaMalloc, one uploaded, rl_kernel launched
// `steps` times (each adds 1 to every element of the first and copies it into the second, so
// each launch touches exactly the 2 allocations), cudaDeviceSynchronize, the second read back
// and checked (every element = its start value + steps), both freed. Returns 0, or 1 after
// naming the first call that failed.
#include <cuda_runtime_api.h>

#include <cstdio>
#include <vector>

#include "simcuda/kernel.hpp"

namespace {

void rl_kernel(float*, float*, int) {}

void rl_body(void** args, const simcuda_launch_info*) {
  auto [a, b, n] = simcuda::unpack(rl_kernel, args);
  a = simcuda::access(a, static_cast<size_t>(n), SIMCUDA_READ_WRITE);
  b = simcuda::access(b, static_cast<size_t>(n), SIMCUDA_WRITE);
  for (int i = 0; i < n; ++i) b[i] = a[i] += 1.0f;
}

bool ok(cudaError_t e, const char* what) {
  if (e != cudaSuccess) std::fprintf(stderr, "rtld_local_lib: %s failed: %s\n", what, cudaGetErrorString(e));
  return e == cudaSuccess;
}

}  // namespace

extern "C" __attribute__((visibility("default"))) int rtld_local_run(int steps) {
  constexpr int kN = 1024;
  if (simcuda::register_kernel("rl_kernel", rl_kernel, rl_body) == nullptr) return 1;
  std::vector<float> host(kN);
  for (int i = 0; i < kN; ++i) host[static_cast<size_t>(i)] = static_cast<float>(i);
  float *a = nullptr, *b = nullptr;
  if (!ok(cudaMalloc(reinterpret_cast<void**>(&a), kN * sizeof(float)), "cudaMalloc") ||
      !ok(cudaMalloc(reinterpret_cast<void**>(&b), kN * sizeof(float)), "cudaMalloc"))
    return 1;
  if (!ok(cudaMemcpy(a, host.data(), kN * sizeof(float), cudaMemcpyHostToDevice), "cudaMemcpy H2D")) return 1;
  for (int s = 0; s < steps; ++s)
    if (!ok(simcuda::launch(rl_kernel, dim3(1), dim3(256), nullptr, a, b, kN), "launch")) return 1;
  if (!ok(cudaDeviceSynchronize(), "cudaDeviceSynchronize")) return 1;
  if (!ok(cudaMemcpy(host.data(), b, kN * sizeof(float), cudaMemcpyDeviceToHost), "cudaMemcpy D2H")) return 1;
  for (int i = 0; i < kN; ++i)
    if (host[static_cast<size_t>(i)] != static_cast<float>(i + steps)) {
      std::fprintf(stderr, "rtld_local_lib: element %d is %g, expected %d\n", i,
                   static_cast<double>(host[static_cast<size_t>(i)]), i + steps);
      return 1;
    }
  return ok(cudaFree(a), "cudaFree") && ok(cudaFree(b), "cudaFree") ? 0 : 1;
}
