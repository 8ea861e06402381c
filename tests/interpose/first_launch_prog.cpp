// first_launch_prog: a job whose very first CUDA call is an allocation (the runtime loads
// libcuda inside it, after libcapuchin.so's capture started, so the driver's event entry
// points are not there yet when capture starts), then 4 launches of a kernel and a device
// synchronisation. Under CAPUCHIN_TIMING_EVERY=1 the launches must be timed.
// Exit 0 and "first_launch: ok".
#include <cuda_runtime_api.h>

#include <cstdio>

#include "simcuda/kernel.hpp"

namespace {
void spin(int) {}
void spin_body(void**, const simcuda_launch_info*) {}
}  // namespace

int main() {
  void* p = nullptr;
  if (cudaMalloc(&p, 4096) != cudaSuccess) return 1;
  if (simcuda::register_kernel("spin", spin, spin_body) == nullptr) return 1;
  for (int i = 0; i < 4; ++i)
    if (simcuda::launch(spin, dim3(1), dim3(32), nullptr, i) != cudaSuccess) {
      std::fprintf(stderr, "first_launch: launch %d failed\n", i);
      return 1;
    }
  if (cudaDeviceSynchronize() != cudaSuccess || cudaFree(p) != cudaSuccess) return 1;
  std::printf("first_launch: ok\n");
  return 0;
}
