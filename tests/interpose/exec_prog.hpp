// exec_prog.hpp: what the executor's small simcuda test programs share: the `fill` kernel (each
// element set to a value; register_fill gives it a virtual duration), `bump` (each element plus
// one) and `accum` (acc += p), registered by register_kernels, `produce` (y = x * c + 1,
// register_produce), BumpGraph (a captured graph of
// one bump), check(), which ends the
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

inline void bump(int, float*) {}
inline void bump_body(void** a, const simcuda_launch_info*) {
  auto [n, x] = simcuda::unpack(bump, a);
  x = simcuda::access(x, static_cast<size_t>(n), SIMCUDA_READ_WRITE);
  for (int i = 0; i < n; ++i) x[i] += 1.0f;
}
inline void accum(int, const float*, float*) {}
inline void accum_body(void** a, const simcuda_launch_info*) {
  auto [n, p, acc] = simcuda::unpack(accum, a);
  p = simcuda::access(p, static_cast<size_t>(n), SIMCUDA_READ);
  acc = simcuda::access(acc, static_cast<size_t>(n), SIMCUDA_READ_WRITE);
  for (int i = 0; i < n; ++i) acc[i] += p[i];
}
// y = x * c + 1: a tensor made from another, the producer a test drops and recomputes
// (declared output 2: CAPUCHIN_KERNEL_OUTPUTS=produce:2).
inline void produce(int, const float*, float*, float) {}
inline void produce_body(void** a, const simcuda_launch_info*) {
  auto [n, x, y, c] = simcuda::unpack(produce, a);
  x = simcuda::access(x, static_cast<size_t>(n), SIMCUDA_READ);
  y = simcuda::access(y, static_cast<size_t>(n), SIMCUDA_WRITE);
  for (int i = 0; i < n; ++i) y[i] = x[i] * c + 1.0f;
}
inline void register_produce(unsigned long long virtual_ns) { simcuda::register_kernel("produce", produce, produce_body, virtual_ns); }

// fill, bump and accum, each with its virtual duration.
inline void register_kernels(unsigned long long fill_ns, unsigned long long bump_ns, unsigned long long accum_ns) {
  register_fill(fill_ns);
  simcuda::register_kernel("bump", bump, bump_body, bump_ns);
  simcuda::register_kernel("accum", accum, accum_body, accum_ns);
}

inline void check(cudaError_t e, const char* what) {
  if (e == cudaSuccess) return;
  std::fprintf(stderr, "%s: %s: %s\n", program_invocation_short_name, what, cudaGetErrorString(e));
  std::exit(1);
}

// A graph of one `bump` of x[0..n), captured on s (global mode: before other threads start).
struct BumpGraph {
  cudaGraph_t graph = nullptr;
  cudaGraphExec_t exec = nullptr;
  BumpGraph(cudaStream_t s, int n, float* x) {
    check(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal), "begin capture");
    check(simcuda::launch(bump, dim3(1), dim3(256), s, n, x), "bump (captured)");
    check(cudaStreamEndCapture(s, &graph), "end capture");
    check(cudaGraphInstantiate(&exec, graph, 0), "instantiate");
  }
  ~BumpGraph() {
    check(cudaGraphExecDestroy(exec), "graph exec destroy");
    check(cudaGraphDestroy(graph), "graph destroy");
  }
  BumpGraph(const BumpGraph&) = delete;
  BumpGraph& operator=(const BumpGraph&) = delete;
};

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
