// exec_unseen_write: a kernel writes a tensor through a pointer table in device memory, so the
// interposer's launch scan sees only the table. The tensor's last seen use is an earlier fill;
// the table kernel is still queued (behind a long kernel on another stream) when memory
// pressure makes the executor evict the tensor. Under the pinned backend the eviction copies
// the tensor out and remaps its address: a copy that does not wait for the table kernel saves
// the old contents, and the kernel's write lands in memory about to be unmapped.
//
// Usage: exec_unseen_write. Prints the tensor's first and last element (2 when the table
// kernel's write survived) and exits 1 on a CUDA error. With SIMCUDA_TIMELINE set, the
// executor's copy out of the tensor (the first copy of kTensorBytes bytes) can be checked to
// start after the long kernel (kSlowNs of virtual time) and the table kernel ended.
#include <cuda_runtime_api.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>

#include "exec_prog.hpp"
#include "simcuda/kernel.hpp"

namespace {

using exec_prog::check;
using exec_prog::fill;

constexpr size_t kTensorBytes = (4u << 20) - 4096;  // near two 2 MiB granules: served as VMM memory
constexpr size_t kPressureBytes = 4u << 20;
constexpr unsigned long long kSlowNs = 20'000'000;

void slow() {}
void table_write(const std::uint64_t*, int) {}

void slow_body(void**, const simcuda_launch_info*) {}
void table_write_body(void** a, const simcuda_launch_info*) {
  auto [table, n] = simcuda::unpack(table_write, a);
  table = simcuda::access(table, 1, SIMCUDA_READ);
  auto* t = simcuda::access(reinterpret_cast<float*>(table[0]), static_cast<size_t>(n), SIMCUDA_WRITE);
  for (int i = 0; i < n; ++i) t[i] = 2.0f;
}

}  // namespace

int main() {
  const int n = static_cast<int>(kTensorBytes / sizeof(float));
  exec_prog::register_fill(1000);
  simcuda::register_kernel("slow", slow, slow_body, kSlowNs);
  simcuda::register_kernel("table_write", table_write, table_write_body, 1000);
  cudaStream_t a, b;
  check(cudaStreamCreateWithFlags(&a, cudaStreamNonBlocking), "stream a");
  check(cudaStreamCreateWithFlags(&b, cudaStreamNonBlocking), "stream b");
  float* t = nullptr;
  std::uint64_t* table = nullptr;
  check(cudaMalloc(reinterpret_cast<void**>(&t), kTensorBytes), "malloc tensor");
  check(cudaMalloc(reinterpret_cast<void**>(&table), sizeof *table), "malloc table");
  const auto address = reinterpret_cast<std::uint64_t>(t);
  check(cudaMemcpy(table, &address, sizeof address, cudaMemcpyHostToDevice), "upload table");
  check(simcuda::launch(fill, dim3(1), dim3(256), a, n, t, 1.0f), "fill tensor");  // its last seen use
  check(cudaStreamSynchronize(a), "sync a");
  check(simcuda::launch(slow, dim3(1), dim3(1), b), "slow");
  check(simcuda::launch(table_write, dim3(1), dim3(1), b, static_cast<const std::uint64_t*>(table), n), "table write");
  float* pressure = exec_prog::pressure(kPressureBytes, a);  // no room for it and the tensor
  exec_prog::print_ends(t, n);
  check(cudaFreeAsync(pressure, a), "free pressure");
  check(cudaFree(t), "free tensor");
  check(cudaFree(table), "free table");
  return 0;
}
