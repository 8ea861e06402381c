// ctor_dlsym_prog: linked against ctor_dlsym_lib (whose constructor resolved driver symbols
// before libcapuchin.so started) and simcuda's cudart; then runs a small CUDA job through the
// runtime so capture starts after all. Exit 0 when the constructor's lookups succeeded and the
// job ran; 1 otherwise.
#include <cuda_runtime_api.h>

#include <cstdio>

extern "C" int ctor_dlsym_ready();

int main() {
  if (ctor_dlsym_ready() != 1) {
    std::fprintf(stderr, "ctor_dlsym_prog: the constructor's driver lookups failed\n");
    return 1;
  }
  void* p = nullptr;
  if (cudaMalloc(&p, 1 << 20) != cudaSuccess || cudaMemset(p, 0, 1 << 20) != cudaSuccess ||
      cudaDeviceSynchronize() != cudaSuccess || cudaFree(p) != cudaSuccess) {
    std::fprintf(stderr, "ctor_dlsym_prog: a CUDA call failed\n");
    return 1;
  }
  std::printf("ctor_dlsym_prog: ok\n");
  return 0;
}
