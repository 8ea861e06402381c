// exec_library_memory: the memory capuchin must leave alone under a budget. A CUDA library's
// own allocation (libnccl_capuchin_test.so, a stand-in for NCCL's buffers) is the driver's;
// an allocation whose handle is handed out (cuMemRetainAllocationHandle, as NCCL registers a
// VMM buffer; cudaIpcGetMemHandle) never moves afterwards, whatever the pressure.
//
// Usage: exec_library_memory. Prints whether the library's allocation is managed memory (what
// capuchin's uvm backend serves), the IPC and retain results (the retained handle must still be
// the one mapped after pressure), and the tensors' sums after pressure; exits 1 on an
// unexpected CUDA error.
#include <cuda.h>
#include <cuda_runtime_api.h>
#include <dlfcn.h>

#include <cstdio>
#include <cstdlib>
#include <vector>

#include "exec_prog.hpp"
#include "simcuda/kernel.hpp"

namespace {

using exec_prog::check;
using exec_prog::fill;

int managed(const void* p) {
  cudaPointerAttributes a{};
  check(cudaPointerGetAttributes(&a, p), "pointer attributes");
  return a.type == cudaMemoryTypeManaged ? 1 : 0;
}

double sum(const float* d, int n) {
  std::vector<float> h(static_cast<size_t>(n));
  check(cudaMemcpy(h.data(), d, h.size() * sizeof(float), cudaMemcpyDeviceToHost), "read back");
  double s = 0;
  for (float v : h) s += static_cast<double>(v);
  return s;
}

}  // namespace

int main() {
  exec_prog::register_fill(1000);
  void* lib = dlopen("libnccl_capuchin_test.so", RTLD_NOW);
  if (lib == nullptr) return std::fprintf(stderr, "exec_library_memory: %s\n", dlerror()), 1;
  auto lib_alloc = reinterpret_cast<void* (*)(size_t)>(dlsym(lib, "fake_nccl_alloc"));
  constexpr size_t kBytes = (2u << 20);
  const int n = static_cast<int>(kBytes / sizeof(float));
  float* app = nullptr;
  check(cudaMalloc(reinterpret_cast<void**>(&app), kBytes), "app malloc");
  void* from_lib = lib_alloc(kBytes);
  if (from_lib == nullptr) return std::fprintf(stderr, "exec_library_memory: the library's cudaMalloc failed\n"), 1;
  std::printf("library allocation managed=%d\n", managed(from_lib));
  float* shared = nullptr;
  check(cudaMalloc(reinterpret_cast<void**>(&shared), kBytes), "shared malloc");
  check(simcuda::launch(fill, dim3(1), dim3(256), nullptr, n, shared, 7.0f), "fill shared");
  cudaIpcMemHandle_t ipc;
  const cudaError_t ipc_r = cudaIpcGetMemHandle(&ipc, shared);
  std::printf("ipc handle %s\n", ipc_r == cudaSuccess ? "given" : cudaGetErrorName(ipc_r));
  (void)cudaGetLastError();
  // NCCL registers a VMM buffer by its allocation handle: the handle mapped there must stay the
  // one mapped there (memory served as VMM blocks under pinned; elsewhere the driver refuses).
  using RetainFn = CUresult (*)(CUmemGenericAllocationHandle*, void*);
  using ReleaseFn = CUresult (*)(CUmemGenericAllocationHandle);
  void *retain_p = nullptr, *release_p = nullptr;
  cudaDriverEntryPointQueryResult q{};
  check(cudaGetDriverEntryPointByVersion("cuMemRetainAllocationHandle", &retain_p, 12000, cudaEnableDefault, &q), "entry point");
  check(cudaGetDriverEntryPointByVersion("cuMemRelease", &release_p, 12000, cudaEnableDefault, &q), "entry point");
  auto retain = reinterpret_cast<RetainFn>(retain_p);
  auto release = reinterpret_cast<ReleaseFn>(release_p);
  float* registered = nullptr;
  check(cudaMalloc(reinterpret_cast<void**>(&registered), kBytes), "registered malloc");
  check(simcuda::launch(fill, dim3(1), dim3(256), nullptr, n, registered, 5.0f), "fill registered");
  CUmemGenericAllocationHandle first = 0;
  const CUresult rr = retain(&first, registered);
  if (rr != CUDA_SUCCESS) std::printf("retain handle refused\n");
  // An IPC request for the same memory that the driver refuses (VMM memory has no IPC handle)
  // must not undo what the granted retain holds.
  cudaIpcMemHandle_t ipc2;
  (void)cudaIpcGetMemHandle(&ipc2, registered);
  (void)cudaGetLastError();
  // Pressure: many tensors, each used once, then all of them again.
  std::vector<float*> t(12);
  for (size_t i = 0; i < t.size(); ++i) {
    check(cudaMalloc(reinterpret_cast<void**>(&t[i]), kBytes), "pressure malloc");
    check(simcuda::launch(fill, dim3(1), dim3(256), nullptr, n, t[i], static_cast<float>(i)), "fill");
  }
  check(cudaDeviceSynchronize(), "sync");
  double total = 0;
  for (float* p : t) total += sum(p, n);
  std::printf("pressure %g shared %g registered %g\n", total, sum(shared, n), sum(registered, n));
  if (rr == CUDA_SUCCESS) {
    CUmemGenericAllocationHandle again = 0;
    const bool same = retain(&again, registered) == CUDA_SUCCESS && again == first;
    std::printf("retain handle stable=%d\n", same ? 1 : 0);
    if (again != 0) (void)release(again);
    (void)release(first);
  }
  for (float* p : t) check(cudaFree(p), "free");
  check(cudaFree(shared), "free shared");
  check(cudaFree(registered), "free registered");
  check(cudaFree(from_lib), "free library allocation");
  check(cudaFree(app), "free app");
  return 0;
}
