// getproc_spy.cpp: an LD_PRELOAD test shim that interposes dlsym the way a CUDA interposer
// does: when a library asks libcuda.so.1 for cuGetProcAddress_v2 it gets a wrapper that logs
// every (symbol, cudaVersion, flags) lookup to $SIMCUDA_SPY_LOG and forwards to the driver.
// It proves simcuda's runtime and vendor library reach the driver through that path only.
#include <cuda.h>
#include <dlfcn.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>

namespace {

using DlsymFn = void* (*)(void*, const char*);
using GetProcFn = CUresult (*)(const char*, void**, int, cuuint64_t, CUdriverProcAddressQueryResult*);

GetProcFn g_real_get_proc = nullptr;
std::mutex g_log_mu;

DlsymFn real_dlsym() {
  static DlsymFn fn = [] {
    void* p = dlvsym(RTLD_NEXT, "dlsym", "GLIBC_2.34");
    if (p == nullptr) p = dlvsym(RTLD_NEXT, "dlsym", "GLIBC_2.2.5");
    return reinterpret_cast<DlsymFn>(p);
  }();
  return fn;
}

CUresult spy_get_proc(const char* symbol, void** pfn, int version, cuuint64_t flags,
                      CUdriverProcAddressQueryResult* status) {
  if (const char* path = std::getenv("SIMCUDA_SPY_LOG")) {
    std::lock_guard<std::mutex> lock(g_log_mu);
    if (FILE* f = std::fopen(path, "a")) {
      std::fprintf(f, "%s %d %llu\n", symbol, version, static_cast<unsigned long long>(flags));
      std::fclose(f);
    }
  }
  return g_real_get_proc(symbol, pfn, version, flags, status);
}

}  // namespace

extern "C" void* dlsym(void* handle, const char* name) {
  void* p = real_dlsym()(handle, name);
  if (p != nullptr && std::strcmp(name, "cuGetProcAddress_v2") == 0) {
    g_real_get_proc = reinterpret_cast<GetProcFn>(p);
    return reinterpret_cast<void*>(&spy_get_proc);
  }
  return p;
}
