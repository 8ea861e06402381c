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

#include "exec_prog.hpp"
#include "simcuda/kernel.hpp"

namespace {

using exec_prog::check;
using exec_prog::fill;

constexpr size_t kTensorBytes = (4u << 20) - 4096;  // near two 2 MiB granules: served as VMM memory
constexpr size_t kPressureBytes = 4u << 20;

}  // namespace

int main() {
  const int n = static_cast<int>(kTensorBytes / sizeof(float));
  exec_prog::register_fill(5'000'000);
  float* t = nullptr;
  check(cudaMalloc(reinterpret_cast<void**>(&t), kTensorBytes), "malloc tensor");
  // The main stream first: the side stream's handle is then not handed out again below (a
  // record on a reused handle would land on the new stream, and nothing would say so).
  cudaStream_t main_stream, side;
  check(cudaStreamCreateWithFlags(&main_stream, cudaStreamNonBlocking), "main stream");
  check(cudaStreamCreateWithFlags(&side, cudaStreamNonBlocking), "side stream");
  check(simcuda::launch(fill, dim3(1), dim3(256), side, n, t, 2.0f), "fill tensor on the side stream");
  check(cudaStreamDestroy(side), "destroy the side stream");
  float* pressure = exec_prog::pressure(kPressureBytes, main_stream);  // no room for it and the tensor
  exec_prog::print_ends(t, n);
  check(cudaFreeAsync(pressure, main_stream), "free pressure");
  check(cudaStreamDestroy(main_stream), "destroy the main stream");
  check(cudaFree(t), "free tensor");
  return 0;
}
