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

#include "exec_prog.hpp"

namespace {

using exec_prog::accum;
using exec_prog::check;
using exec_prog::fill;

void produce(int, const float*, float*) {}
void produce_body(void** a, const simcuda_launch_info*) {
  auto [n, x, y] = simcuda::unpack(produce, a);
  x = simcuda::access(x, static_cast<size_t>(n), SIMCUDA_READ);
  y = simcuda::access(y, static_cast<size_t>(n), SIMCUDA_WRITE);
  for (int i = 0; i < n; ++i) y[i] = x[i] * 2.0f + 1.0f;
}

}  // namespace

int main(int argc, char** argv) {
  const int iters = argc > 1 ? std::atoi(argv[1]) : 12;
  constexpr size_t kBytes = 2u << 20;
  const int n = static_cast<int>(kBytes / sizeof(float));
  simcuda::register_kernel("produce", produce, produce_body, 1000);
  exec_prog::register_kernels(2000, 2000, 2000);
  cudaStream_t s;
  check(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), "stream");
  float *x = nullptr, *acc = nullptr;
  check(cudaMalloc(reinterpret_cast<void**>(&x), kBytes), "malloc x");
  check(cudaMalloc(reinterpret_cast<void**>(&acc), kBytes), "malloc acc");
  std::vector<float> h(static_cast<size_t>(n), 0.5f);
  check(cudaMemcpy(x, h.data(), kBytes, cudaMemcpyHostToDevice), "upload x");
  check(cudaMemset(acc, 0, kBytes), "memset acc");
  exec_prog::BumpGraph graph(s, n, x);
  for (int it = 0; it < iters; ++it) {
    float* y = nullptr;
    check(cudaMallocAsync(reinterpret_cast<void**>(&y), kBytes, s), "malloc y");
    check(simcuda::launch(produce, dim3(1), dim3(256), s, n, static_cast<const float*>(x), y), "produce");
    check(cudaGraphLaunch(graph.exec, s), "graph launch");
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
  check(cudaFree(x), "free x");
  check(cudaFree(acc), "free acc");
  check(cudaStreamDestroy(s), "stream destroy");
  return 0;
}
