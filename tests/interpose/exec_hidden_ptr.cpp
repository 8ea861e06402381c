// exec_hidden_ptr: a kernel that reaches tensors through an array of pointers stored in device
// memory, which capture cannot see (only the array is a kernel parameter). Used to check that
// the executor stays correct for accesses it missed: under uvm they page-fault in; under
// pinned an evicted tensor is a host chunk mapped at its own address, read over the link.
//
// Usage: exec_hidden_ptr TENSORS BYTES ROUNDS. Allocates TENSORS tensors of BYTES bytes
// (cudaMalloc), fills each with a distinct pattern, stores their addresses in a device array,
// then for ROUNDS rounds: touches every tensor with a visible kernel (scale, so the budget
// forces evictions) and sums all of them through the pointer array. Prints `round N sum <hex>`
// per round and exits 0; the output must not depend on capuchin.
#include <cuda_runtime_api.h>

#include <cstdio>
#include <cstdlib>
#include <vector>

#include "simcuda/kernel.hpp"

namespace {

void scale(int, float*, float) {}
void gather_sum(int, int, const float* const*, float*) {}

void scale_body(void** args, const simcuda_launch_info*) {
  auto [n, x, s] = simcuda::unpack(scale, args);
  x = simcuda::access(x, static_cast<size_t>(n), SIMCUDA_READ_WRITE);
  for (int i = 0; i < n; ++i) x[i] = x[i] * s + 1.0f;
}

void gather_sum_body(void** args, const simcuda_launch_info*) {
  auto [count, n, ptrs, out] = simcuda::unpack(gather_sum, args);
  ptrs = simcuda::access(ptrs, static_cast<size_t>(count), SIMCUDA_READ);
  out = simcuda::access(out, 1, SIMCUDA_WRITE);
  float sum = 0.0f;
  for (int t = 0; t < count; ++t) {
    const float* x = simcuda::access(ptrs[t], static_cast<size_t>(n), SIMCUDA_READ);  // hidden from capture
    for (int i = 0; i < n; ++i) sum += x[i] * static_cast<float>(t + 1);
  }
  *out = sum;
}

void check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) {
    std::fprintf(stderr, "exec_hidden_ptr: %s failed: %s\n", what, cudaGetErrorString(e));
    std::exit(e == cudaErrorMemoryAllocation ? 2 : 1);
  }
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 4) {
    std::fprintf(stderr, "usage: exec_hidden_ptr TENSORS BYTES ROUNDS\n");
    return 1;
  }
  const int tensors = std::atoi(argv[1]), rounds = std::atoi(argv[3]);
  const int n = static_cast<int>(std::atol(argv[2]) / static_cast<long>(sizeof(float)));
  simcuda::register_kernel("scale", scale, scale_body);
  simcuda::register_kernel("gather_sum", gather_sum, gather_sum_body);
  check(cudaSetDevice(0), "cudaSetDevice");
  std::vector<float*> t(static_cast<size_t>(tensors));
  std::vector<float> host(static_cast<size_t>(n));
  for (int k = 0; k < tensors; ++k) {
    check(cudaMalloc(reinterpret_cast<void**>(&t[static_cast<size_t>(k)]), static_cast<size_t>(n) * sizeof(float)), "cudaMalloc");
    for (int i = 0; i < n; ++i) host[static_cast<size_t>(i)] = static_cast<float>((i * 7 + k * 13) % 101) * 0.01f;
    check(cudaMemcpy(t[static_cast<size_t>(k)], host.data(), host.size() * sizeof(float), cudaMemcpyHostToDevice), "upload");
  }
  float** ptrs = nullptr;
  float* out = nullptr;
  check(cudaMalloc(reinterpret_cast<void**>(&ptrs), t.size() * sizeof(float*)), "cudaMalloc ptrs");
  check(cudaMalloc(reinterpret_cast<void**>(&out), sizeof(float)), "cudaMalloc out");
  check(cudaMemcpy(ptrs, t.data(), t.size() * sizeof(float*), cudaMemcpyHostToDevice), "upload ptrs");
  const dim3 grid(1), block(256);
  for (int r = 0; r < rounds; ++r) {
    for (int k = 0; k < tensors; ++k) check(simcuda::launch(scale, grid, block, nullptr, n, t[static_cast<size_t>(k)], 0.5f), "scale");
    check(simcuda::launch(gather_sum, grid, block, nullptr, tensors, n, static_cast<const float* const*>(ptrs), out), "gather_sum");
    float sum = 0;
    check(cudaMemcpy(&sum, out, sizeof sum, cudaMemcpyDeviceToHost), "download");
    check(cudaDeviceSynchronize(), "sync");
    std::printf("round %d sum %a\n", r, static_cast<double>(sum));
  }
  return 0;
}
