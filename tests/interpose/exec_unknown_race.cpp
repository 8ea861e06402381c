// exec_unknown_race: work with unknown accesses (a graph launch) on one thread while another
// thread's tensors are dropped and recomputed under a budget. Before a graph launch the
// executor makes every tensor ready (settle_for_unknown_access: dropped ones recomputed, moves
// landed), waiting without its lock, and then forgets every producer (the graph may write
// anything). A drop by the other thread landing in that wait must not happen: the graph could
// read the unmapped tensor, and forgetting the dropped tensor's producer loses its data (its
// next use fails with "dropped and cannot be recomputed").
//
// Usage: exec_unknown_race ITERS [GAP_US]. Thread A (trainer): per iteration four 1 MiB tensors
// made by `produce` (declared output 2) from x, pressure buffers between their production and
// their use, an accumulator they are added to; prints `iter N acc <hex> <hex>`. Thread B: launches
// a graph that adds 1 to its own buffer z, GAP_US (200) apart, until A is done, then checks z
// against its launch count
// and prints `z ok` (nothing else, so the output does not depend on how often B ran). Exits 1
// on a CUDA error or a wrong z.
#include <cuda_runtime_api.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <optional>
#include <thread>
#include <vector>

#include "exec_prog.hpp"

namespace {

using exec_prog::accum;
using exec_prog::check;
using exec_prog::produce;
using exec_prog::fill;

constexpr size_t kBytes = 1u << 20;
constexpr int kN = static_cast<int>(kBytes / sizeof(float));
constexpr int kTensors = 4;

void train(int iters, float* x, float* acc) {
  cudaStream_t s;
  check(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), "stream A");
  for (int it = 0; it < iters; ++it) {
    std::vector<float*> ys(kTensors, nullptr);
    for (int k = 0; k < kTensors; ++k) {
      check(cudaMallocAsync(reinterpret_cast<void**>(&ys[k]), kBytes, s), "malloc y");
      check(simcuda::launch(produce, dim3(1), dim3(256), s, kN, static_cast<const float*>(x), ys[k], static_cast<float>(k + 2)),
            "produce");
      for (int j = 0; j < 2; ++j) {  // pressure between the tensors' production and their use
        float* p = nullptr;
        check(cudaMallocAsync(reinterpret_cast<void**>(&p), kBytes, s), "malloc p");
        check(simcuda::launch(fill, dim3(1), dim3(256), s, kN, p, static_cast<float>(j + k)), "fill");
        check(simcuda::launch(accum, dim3(1), dim3(256), s, kN, static_cast<const float*>(p), acc), "accum p");
        check(cudaFreeAsync(p, s), "free p");
      }
    }
    for (int k = kTensors - 1; k >= 0; --k) {  // used back to front, as a backward pass would
      check(simcuda::launch(accum, dim3(1), dim3(256), s, kN, static_cast<const float*>(ys[k]), acc), "accum y");
      check(cudaFreeAsync(ys[k], s), "free y");
    }
    float v[4];
    check(cudaMemcpyAsync(v, acc, sizeof v, cudaMemcpyDeviceToHost, s), "read acc");
    check(cudaStreamSynchronize(s), "sync A");
    std::printf("iter %d acc %a %a\n", it, static_cast<double>(v[0]), static_cast<double>(v[3]));
  }
  check(cudaStreamDestroy(s), "stream A destroy");
}

}  // namespace

int main(int argc, char** argv) {
  const int iters = argc > 1 ? std::atoi(argv[1]) : 40;
  const int gap_us = argc > 2 ? std::atoi(argv[2]) : 200;
  exec_prog::register_produce(1000);
  exec_prog::register_kernels(2000, 500, 2000);
  float *x = nullptr, *acc = nullptr, *z = nullptr;
  check(cudaMalloc(reinterpret_cast<void**>(&x), kBytes), "malloc x");
  check(cudaMalloc(reinterpret_cast<void**>(&acc), kBytes), "malloc acc");
  check(cudaMalloc(reinterpret_cast<void**>(&z), kBytes), "malloc z");
  std::vector<float> h(static_cast<size_t>(kN), 0.5f);
  check(cudaMemcpy(x, h.data(), kBytes, cudaMemcpyHostToDevice), "upload x");
  check(cudaMemcpy(z, h.data(), kBytes, cudaMemcpyHostToDevice), "upload z");
  check(cudaMemset(acc, 0, kBytes), "memset acc");
  cudaStream_t sb;
  check(cudaStreamCreateWithFlags(&sb, cudaStreamNonBlocking), "stream B");
  std::optional<exec_prog::BumpGraph> graph(std::in_place, sb, kN, z);

  std::atomic<bool> done{false};
  long launches = 0;
  std::thread b([&] {
    while (!done.load(std::memory_order_acquire)) {
      check(cudaGraphLaunch(graph->exec, sb), "graph launch");
      ++launches;
      std::this_thread::sleep_for(std::chrono::microseconds(gap_us));  // room for drops between launches
    }
    check(cudaStreamSynchronize(sb), "sync B");
  });
  train(iters, x, acc);
  done.store(true, std::memory_order_release);
  b.join();
  std::vector<float> zh(static_cast<size_t>(kN));
  check(cudaMemcpy(zh.data(), z, kBytes, cudaMemcpyDeviceToHost), "read z");
  for (int i = 0; i < kN; i += 4099)
    if (zh[static_cast<size_t>(i)] != 0.5f + static_cast<float>(launches)) {
      std::fprintf(stderr, "exec_unknown_race: z[%d] = %g after %ld graph launches\n", i, static_cast<double>(zh[static_cast<size_t>(i)]),
                   launches);
      return 1;
    }
  std::printf("z ok\n");
  graph.reset();
  check(cudaFree(x), "free x");
  check(cudaFree(acc), "free acc");
  check(cudaFree(z), "free z");
  check(cudaStreamDestroy(sb), "stream B destroy");
  return 0;
}
