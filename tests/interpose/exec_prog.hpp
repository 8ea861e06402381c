// exec_prog.hpp: what the executor's small simcuda test programs share: the `fill` kernel (each
// element set to a value; register_fill gives it a virtual duration), check(), which ends the
// program with exit status 1 on a CUDA error, naming the program and the step, pressure() (a
// filled allocation that the test's budget has no room for beside its tensor) and print_ends()
// (a tensor's first and last element, after every stream finished: the line tests compare).
#pragma once

#include <cuda_runtime_api.h>
#include <errno.h>

#include <cstdio>
#include <cstdlib>

#include "simcuda/kernel.hpp"

namespace exec_prog {

inline void fill(int, float*, float) {}
inline void fill_body(void** a, const simcuda_launch_info*) {
  auto [n, p, v] = simcuda::unpack(fill, a);
  p = simcuda::access(p, static_cast<size_t>(n), SIMCUDA_WRITE);
  for (int i = 0; i < n; ++i) p[i] = v;
}
inline void register_fill(unsigned long long virtual_ns) { simcuda::register_kernel("fill", fill, fill_body, virtual_ns); }

inline void check(cudaError_t e, const char* what) {
  if (e == cudaSuccess) return;
  std::fprintf(stderr, "%s: %s: %s\n", program_invocation_short_name, what, cudaGetErrorString(e));
  std::exit(1);
}

// `bytes` allocated on `s` and filled with 3 there: under the test's budget, room for it is made
// by moving the test's tensor out.
inline float* pressure(size_t bytes, cudaStream_t s) {
  float* p = nullptr;
  check(cudaMallocAsync(reinterpret_cast<void**>(&p), bytes, s), "malloc pressure");
  check(simcuda::launch(fill, dim3(1), dim3(256), s, static_cast<int>(bytes / sizeof(float)), p, 3.0f), "fill pressure");
  return p;
}

// Prints "tensor FIRST LAST" of t[0..n) once the device is idle.
inline void print_ends(const float* t, int n) {
  check(cudaDeviceSynchronize(), "sync");
  float first = 0, last = 0;
  check(cudaMemcpy(&first, t, sizeof first, cudaMemcpyDeviceToHost), "read first");
  check(cudaMemcpy(&last, t + n - 1, sizeof last, cudaMemcpyDeviceToHost), "read last");
  std::printf("tensor %g %g\n", static_cast<double>(first), static_cast<double>(last));
}

}  // namespace exec_prog
