// exec_pressure_chain: a forward pass whose activations each come from the one before, under a
// budget with room for a few of them. The pressure rule drops the oldest activation, and then
// the next one although its input is dropped already (a chain, as DTR drops): the backward pass
// recomputes each along its chain. Each iteration is one activation longer than the one before,
// so no iteration repeats and no plan is made: the pressure rule alone, with kernels timed for
// the planner (the rule prices a drop by its producer's measured time).
//
// Usage: exec_pressure_chain ITERS. Iteration i: 6 + i tensors of 2 MiB, y[k] = y[k-1] * c + 1
// (`produce`, declared output 2; y[0] from x), the host waiting after each launch (as a job
// reading a loss would: no stream has work running when the next allocation needs room); then
// each added to an accumulator, last first, and freed. Prints `iter N acc <hex> <hex>`; exits 1
// on a CUDA error.
#include <cuda_runtime_api.h>

#include <cstdio>
#include <cstdlib>
#include <vector>

#include "exec_prog.hpp"

namespace {

using exec_prog::accum;
using exec_prog::check;
using exec_prog::produce;

constexpr size_t kBytes = 2u << 20;
constexpr int kN = static_cast<int>(kBytes / sizeof(float));

}  // namespace

int main(int argc, char** argv) {
  const int iters = argc > 1 ? std::atoi(argv[1]) : 6;
  exec_prog::register_produce(1000);
  exec_prog::register_kernels(2000, 500, 2000);
  float *x = nullptr, *acc = nullptr;
  check(cudaMalloc(reinterpret_cast<void**>(&x), kBytes), "malloc x");
  check(cudaMalloc(reinterpret_cast<void**>(&acc), kBytes), "malloc acc");
  std::vector<float> h(static_cast<size_t>(kN));
  for (int i = 0; i < kN; ++i) h[static_cast<size_t>(i)] = static_cast<float>(i % 97) / 64.0f;
  check(cudaMemcpy(x, h.data(), kBytes, cudaMemcpyHostToDevice), "upload x");
  check(cudaMemset(acc, 0, kBytes), "memset acc");
  cudaStream_t s;
  check(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), "stream");
  for (int it = 0; it < iters; ++it) {
    const int chain = 6 + it;
    std::vector<float*> y(static_cast<size_t>(chain), nullptr);
    for (int k = 0; k < chain; ++k) {
      check(cudaMallocAsync(reinterpret_cast<void**>(&y[static_cast<size_t>(k)]), kBytes, s), "malloc y");
      const float* in = k == 0 ? x : y[static_cast<size_t>(k - 1)];
      check(simcuda::launch(produce, dim3(1), dim3(256), s, kN, in, y[static_cast<size_t>(k)], 0.5f + 0.125f * static_cast<float>(k)), "produce");
      check(cudaStreamSynchronize(s), "sync after produce");
    }
    for (int k = chain - 1; k >= 0; --k) {
      check(simcuda::launch(accum, dim3(1), dim3(256), s, kN, static_cast<const float*>(y[static_cast<size_t>(k)]), acc), "accum y");
      check(cudaFreeAsync(y[static_cast<size_t>(k)], s), "free y");
    }
    float v[2];
    check(cudaMemcpyAsync(&v[0], acc, sizeof(float), cudaMemcpyDeviceToHost, s), "read acc[0]");
    check(cudaMemcpyAsync(&v[1], acc + kN - 1, sizeof(float), cudaMemcpyDeviceToHost, s), "read acc[n-1]");
    check(cudaStreamSynchronize(s), "sync");
    std::printf("iter %d acc %a %a\n", it, static_cast<double>(v[0]), static_cast<double>(v[1]));
  }
  check(cudaStreamDestroy(s), "stream destroy");
  check(cudaFree(x), "free x");
  check(cudaFree(acc), "free acc");
  return 0;
}
