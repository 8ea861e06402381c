// ctor_dlsym_lib: a shared library whose constructor resolves driver entry points with dlsym
// and cuGetProcAddress, as libcublasLt.so.13's does. A program linked against it runs that
// constructor before libcapuchin.so's own (the loader runs a program's dependencies first, the
// preloaded library later): our dlsym and cuGetProcAddress must then answer without the
// library's state (on a real GPU this crashed every cuBLAS program under capuchin).
// ctor_dlsym_ready() says whether both resolved.
#include <cuda.h>
#include <dlfcn.h>

namespace {
void* g_alloc = nullptr;
void* g_launch = nullptr;

__attribute__((constructor)) void resolve_at_load() {
  if (dlopen("libcuda.so.1", RTLD_LAZY | RTLD_GLOBAL) == nullptr) return;  // held for the process's life
  g_alloc = dlsym(RTLD_DEFAULT, "cuMemAlloc_v2");
  using Gpa = CUresult (*)(const char*, void**, int, cuuint64_t, CUdriverProcAddressQueryResult*);
  if (auto gpa = reinterpret_cast<Gpa>(dlsym(RTLD_DEFAULT, "cuGetProcAddress_v2"))) {
    CUdriverProcAddressQueryResult q{};
    if (gpa("cuLaunchKernel", &g_launch, 12000, CU_GET_PROC_ADDRESS_DEFAULT, &q) != CUDA_SUCCESS) g_launch = nullptr;
  }
}
}  // namespace

extern "C" int ctor_dlsym_ready() { return g_alloc != nullptr && g_launch != nullptr ? 1 : 0; }
