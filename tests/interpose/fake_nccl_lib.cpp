// fake_nccl_lib: a stand-in for a CUDA library that allocates memory for itself (NCCL's
// communication buffers, cuDNN's handles), built as libnccl_capuchin_test.so so the
// interposer's library rule (exec::alloc: CUDA libraries' own allocations are left to the
// driver) recognises its name. Not a real NCCL: one function that allocates with cudaMalloc.
#include <cuda_runtime_api.h>

extern "C" __attribute__((visibility("default"))) void* fake_nccl_alloc(size_t bytes) {
  void* p = nullptr;
  return cudaMalloc(&p, bytes) == cudaSuccess ? p : nullptr;
}
