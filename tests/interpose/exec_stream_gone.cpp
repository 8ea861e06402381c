// exec_stream_gone: the job's last use of a tensor is a kernel on a stream it destroys at once
// (PyTorch destroys side streams; libraries destroy theirs). The executor marks uses with each
// stream's deferred event, recorded only when asked about (interpose/exec/event_pool.hpp):
// here it is asked about when pressure evicts the tensor, after the stream is gone, so the
// executor must have recorded it before the destroy (exec::before_stream_destroy).
//
// Usage: exec_stream_gone. Prints the tensor's first and last element (2 2) and exits 1 on a
// CUDA error.
#include <cuda_runtime_api.h>

#include <cstdio>
#include <cstdlib>

#include "simcuda/kernel.hpp"

namespace {

constexpr size_t kTensorBytes = (4u << 20) - 4096;  // near two 2 MiB granules: served as VMM memory
constexpr size_t kPressureBytes = 4u << 20;

void fill(int, float*, float) {}
void fill_body(void** a, const simcuda_launch_info*) {
  auto [n, p, v] = simcuda::unpack(fill, a);
  p = simcuda::access(p, static_cast<size_t>(n), SIMCUDA_WRITE);
  for (int i = 0; i < n; ++i) p[i] = v;
}

void check(cudaError_t e, const char* what) {
  if (e == cudaSuccess) return;
  std::fprintf(stderr, "exec_stream_gone: %s: %s\n", what, cudaGetErrorString(e));
  std::exit(1);
}

}  // namespace

int main() {
  const int n = static_cast<int>(kTensorBytes / sizeof(float));
  simcuda::register_kernel("fill", fill, fill_body, 5'000'000);
  float* t = nullptr;
  check(cudaMalloc(reinterpret_cast<void**>(&t), kTensorBytes), "malloc tensor");
  // The main stream first: the side stream's handle is then not handed out again below (a
  // record on a reused handle would land on the new stream, and nothing would say so).
  cudaStream_t main_stream, side;
  check(cudaStreamCreateWithFlags(&main_stream, cudaStreamNonBlocking), "main stream");
  check(cudaStreamCreateWithFlags(&side, cudaStreamNonBlocking), "side stream");
  check(simcuda::launch(fill, dim3(1), dim3(256), side, n, t, 2.0f), "fill tensor on the side stream");
  check(cudaStreamDestroy(side), "destroy the side stream");
  float* pressure = nullptr;  // no room for it and the tensor under the test's budget
  check(cudaMallocAsync(reinterpret_cast<void**>(&pressure), kPressureBytes, main_stream), "malloc pressure");
  check(simcuda::launch(fill, dim3(1), dim3(256), main_stream, static_cast<int>(kPressureBytes / sizeof(float)), pressure,
                        3.0f),
        "fill pressure");
  check(cudaDeviceSynchronize(), "sync");
  float first = 0, last = 0;
  check(cudaMemcpy(&first, t, sizeof first, cudaMemcpyDeviceToHost), "read first");
  check(cudaMemcpy(&last, t + n - 1, sizeof last, cudaMemcpyDeviceToHost), "read last");
  std::printf("tensor %g %g\n", static_cast<double>(first), static_cast<double>(last));
  check(cudaFreeAsync(pressure, main_stream), "free pressure");
  check(cudaStreamDestroy(main_stream), "destroy the main stream");
  check(cudaFree(t), "free tensor");
  return 0;
}
