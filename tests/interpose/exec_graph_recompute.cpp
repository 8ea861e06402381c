// exec_graph_recompute: a graph launch writes X, the input of Y's declared producer, between
// Y's production and its last use. Under a budget the executor may drop Y and recompute it
// from its producer; the graph's write must make that replay impossible (its accesses are
// unknown: it may write anything), else the replay reads the new X and Y comes back wrong.
//
// Usage: exec_graph_recompute ITERS. Prints `iter N acc <hex> <hex>` per iteration (two words
// of an accumulator every iteration adds Y and some temporary buffers to); exits 1 on a CUDA
// error. Kernels: produce (Y = 2X + 1, declared output 2), bump (X += 1, captured in a graph),
// fill and accum (pressure: 2 MiB buffers allocated, used and freed each iteration).
#include <cuda_runtime_api.h>

#include <cstdio>
#include <cstdlib>
#include <vector>

#include "simcuda/kernel.hpp"

namespace {

void produce(int, const float*, float*) {}
void bump(int, float*) {}
void fill(int, float*, float) {}
void accum(int, const float*, float*) {}

void produce_body(void** a, const simcuda_launch_info*) {
  auto [n, x, y] = simcuda::unpack(produce, a);
  x = simcuda::access(x, static_cast<size_t>(n), SIMCUDA_READ);
  y = simcuda::access(y, static_cast<size_t>(n), SIMCUDA_WRITE);
  for (int i = 0; i < n; ++i) y[i] = x[i] * 2.0f + 1.0f;
}
void bump_body(void** a, const simcuda_launch_info*) {
  auto [n, x] = simcuda::unpack(bump, a);
  x = simcuda::access(x, static_cast<size_t>(n), SIMCUDA_READ_WRITE);
  for (int i = 0; i < n; ++i) x[i] += 1.0f;
}
void fill_body(void** a, const simcuda_launch_info*) {
  auto [n, p, v] = simcuda::unpack(fill, a);
  p = simcuda::access(p, static_cast<size_t>(n), SIMCUDA_WRITE);
  for (int i = 0; i < n; ++i) p[i] = v + static_cast<float>(i % 7);
}
void accum_body(void** a, const simcuda_launch_info*) {
  auto [n, p, acc] = simcuda::unpack(accum, a);
  p = simcuda::access(p, static_cast<size_t>(n), SIMCUDA_READ);
  acc = simcuda::access(acc, static_cast<size_t>(n), SIMCUDA_READ_WRITE);
  for (int i = 0; i < n; ++i) acc[i] += p[i];
}

void check(cudaError_t e, const char* what) {
  if (e == cudaSuccess) return;
  std::fprintf(stderr, "exec_graph_recompute: %s: %s\n", what, cudaGetErrorString(e));
  std::exit(1);
}

}  // namespace

int main(int argc, char** argv) {
  const int iters = argc > 1 ? std::atoi(argv[1]) : 12;
  constexpr size_t kBytes = 2u << 20;
  const int n = static_cast<int>(kBytes / sizeof(float));
  simcuda::register_kernel("produce", produce, produce_body, 1000);
  simcuda::register_kernel("bump", bump, bump_body, 2000);
  simcuda::register_kernel("fill", fill, fill_body, 2000);
  simcuda::register_kernel("accum", accum, accum_body, 2000);
  cudaStream_t s;
  check(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), "stream");
  float *x = nullptr, *acc = nullptr;
  check(cudaMalloc(reinterpret_cast<void**>(&x), kBytes), "malloc x");
  check(cudaMalloc(reinterpret_cast<void**>(&acc), kBytes), "malloc acc");
  std::vector<float> h(static_cast<size_t>(n), 0.5f);
  check(cudaMemcpy(x, h.data(), kBytes, cudaMemcpyHostToDevice), "upload x");
  check(cudaMemset(acc, 0, kBytes), "memset acc");
  cudaGraph_t g;
  cudaGraphExec_t ge = nullptr;
  check(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal), "begin capture");
  check(simcuda::launch(bump, dim3(1), dim3(256), s, n, x), "bump (captured)");
  check(cudaStreamEndCapture(s, &g), "end capture");
  check(cudaGraphInstantiate(&ge, g, 0), "instantiate");
  for (int it = 0; it < iters; ++it) {
    float* y = nullptr;
    check(cudaMallocAsync(reinterpret_cast<void**>(&y), kBytes, s), "malloc y");
    check(simcuda::launch(produce, dim3(1), dim3(256), s, n, static_cast<const float*>(x), y), "produce");
    check(cudaGraphLaunch(ge, s), "graph launch");
    for (int k = 0; k < 4; ++k) {  // pressure between Y's production and its use
      float* p = nullptr;
      check(cudaMallocAsync(reinterpret_cast<void**>(&p), kBytes, s), "malloc p");
      check(simcuda::launch(fill, dim3(1), dim3(256), s, n, p, static_cast<float>(k)), "fill");
      check(simcuda::launch(accum, dim3(1), dim3(256), s, n, static_cast<const float*>(p), acc), "accum p");
      check(cudaFreeAsync(p, s), "free p");
    }
    check(simcuda::launch(accum, dim3(1), dim3(256), s, n, static_cast<const float*>(y), acc), "accum y");
    check(cudaFreeAsync(y, s), "free y");
    float v[4];
    check(cudaMemcpyAsync(v, acc, sizeof v, cudaMemcpyDeviceToHost, s), "read acc");
    check(cudaStreamSynchronize(s), "sync");
    std::printf("iter %d acc %a %a\n", it, static_cast<double>(v[0]), static_cast<double>(v[3]));
  }
  check(cudaGraphExecDestroy(ge), "graph exec destroy");
  check(cudaGraphDestroy(g), "graph destroy");
  check(cudaFree(x), "free x");
  check(cudaFree(acc), "free acc");
  check(cudaStreamDestroy(s), "stream destroy");
  return 0;
}
