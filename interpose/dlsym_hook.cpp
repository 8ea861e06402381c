// dlsym_hook.cpp: how programs reach the driver, intercepted (the dlsym export itself is in
// dlsym_export.cpp): exported cuGetProcAddress / cuGetProcAddress_v2 wrappers, what dlsym
// does with "cu*" names, the driver-symbol resolution the interposer itself uses
// (real_api.hpp), the library's public C API and its constructor.
//
// Contract: a hooked driver entry point comes back wrapped (forwarding to that exact
// pointer). cuGetProcAddress forwards every argument unchanged and wraps *pfn only on
// success for hooked names at the requested cudaVersion / flags.
#include <cuda.h>
#include <dlfcn.h>
#include <link.h>

#include <atomic>
#include <climits>
#include <cstring>

#include "capture.hpp"
#include "library.hpp"
#include "capuchin/version.hpp"
#include "hooks.hpp"
#include "real_api.hpp"

#define CAPUCHIN_EXPORT extern "C" __attribute__((visibility("default")))

// cuda.h renames cuGetProcAddress to _v2; the pre-12.0 four-argument entry keeps the old
// name, so ours is declared under an assembler name.
CAPUCHIN_EXPORT CUresult capuchin_cuGetProcAddress_v1(const char* symbol, void** pfn, int version, cuuint64_t flags)
    __asm__("cuGetProcAddress");

namespace capuchin::interpose {
namespace {

using GetProcV2Fn = CUresult (*)(const char*, void**, int, cuuint64_t, CUdriverProcAddressQueryResult*);
using GetProcV1Fn = CUresult (*)(const char*, void**, int, cuuint64_t);

std::atomic<void*> g_real_gpa_v2{nullptr};
std::atomic<void*> g_real_gpa_v1{nullptr};

}  // namespace

namespace {
// Whether p is inside libcapuchin.so: dlsym(RTLD_DEFAULT, "cu...") finds our own exports first
// (we are preloaded), and those are hooks already; taken for the driver's, our
// cuGetProcAddress_v2 would call itself forever.
bool is_ours(const void* p) {
  Dl_info mine{}, theirs{};
  return dladdr(reinterpret_cast<const void*>(&is_ours), &mine) != 0 && dladdr(p, &theirs) != 0 &&
         mine.dli_fbase == theirs.dli_fbase;
}
}  // namespace

// Names whose real pointers we must see and swap (dlsym_export.cpp calls this for "cu*").
void* intercept_driver_symbol(const char* name, void* real) {
  if (real == nullptr || name == nullptr || name[0] != 'c' || name[1] != 'u') return real;
  if (is_ours(real)) return real;
  if (std::strcmp(name, "cuGetProcAddress_v2") == 0) {
    g_real_gpa_v2.store(real, std::memory_order_release);
    return reinterpret_cast<void*>(&cuGetProcAddress_v2);
  }
  if (std::strcmp(name, "cuGetProcAddress") == 0) {
    g_real_gpa_v1.store(real, std::memory_order_release);
    return reinterpret_cast<void*>(&capuchin_cuGetProcAddress_v1);
  }
  if (started_with_disable()) return real;
  return wrap_driver_pointer(name, real, false, CUDA_VERSION, false);
}

namespace {

struct DriverSymbol {
  const char* name;
  std::atomic<void*> ptr;
};
DriverSymbol g_driver_symbols[] = {{"cuFuncGetParamInfo", {}},   {"cuFuncGetName", {}}, {"cuKernelGetParamInfo", {}},
                                   {"cuKernelGetName", {}},      {"cuFuncLoad", {}}};

}  // namespace

void* real_get_proc_address() {
  void* p = g_real_gpa_v2.load(std::memory_order_acquire);
  if (p != nullptr) return p;
  p = real_dlsym(RTLD_NEXT, "cuGetProcAddress_v2");
  if (p == nullptr) {
    if (void* h = dlopen("libcuda.so.1", RTLD_LAZY | RTLD_NOLOAD)) {
      p = real_dlsym(h, "cuGetProcAddress_v2");
      dlclose(h);
    }
  }
  if (p != nullptr) g_real_gpa_v2.store(p, std::memory_order_release);
  return p;
}

void note_real_get_proc_address(void* real_v2, void* real_v1) {
  if (real_v2 != nullptr) g_real_gpa_v2.store(real_v2, std::memory_order_release);
  if (real_v1 != nullptr) g_real_gpa_v1.store(real_v1, std::memory_order_release);
}

void note_driver_symbol(const char* name, void* real) {
  for (DriverSymbol& s : g_driver_symbols)
    if (std::strcmp(s.name, name) == 0 && real != nullptr) s.ptr.store(real, std::memory_order_release);
}

void* driver_symbol(const char* name) {
  DriverSymbol* slot = nullptr;
  for (DriverSymbol& s : g_driver_symbols)
    if (std::strcmp(s.name, name) == 0) slot = &s;
  if (slot != nullptr)
    if (void* p = slot->ptr.load(std::memory_order_acquire)) return p;
  void* p = nullptr;
  if (auto gpa = reinterpret_cast<GetProcV2Fn>(real_get_proc_address())) {
    CUdriverProcAddressQueryResult status{};
    if (gpa(name, &p, CUDA_VERSION, CU_GET_PROC_ADDRESS_DEFAULT, &status) != CUDA_SUCCESS) p = nullptr;
  }
  if (p == nullptr) p = real_dlsym(RTLD_NEXT, name);
  if (p != nullptr && slot != nullptr) slot->ptr.store(p, std::memory_order_release);
  return p;
}

namespace {

// A libcudart the job loaded outside the global scope (dlopen'ed RTLD_LOCAL, e.g. as the
// dependency of a Python extension module), which RTLD_NEXT does not search: found among the
// loaded objects by name and held open, so the pointers taken from it stay valid.
std::atomic<void*> g_local_cudart{nullptr};

int copy_cudart_path(dl_phdr_info* info, size_t, void* out) {
  const char* path = info->dlpi_name;
  if (path == nullptr || path[0] == '\0') return 0;
  const char* slash = std::strrchr(path, '/');
  if (std::strncmp(slash != nullptr ? slash + 1 : path, "libcudart.so", 12) != 0) return 0;
  auto* buf = static_cast<char*>(out);
  std::strncpy(buf, path, PATH_MAX - 1);
  buf[PATH_MAX - 1] = '\0';
  return 1;
}

void* loaded_cudart() {
  if (void* h = g_local_cudart.load(std::memory_order_acquire)) return h;
  char path[PATH_MAX] = "";
  dl_iterate_phdr(copy_cudart_path, path);  // no dlopen inside: the callback runs under the loader's lock
  if (path[0] == '\0') return nullptr;
  void* h = dlopen(path, RTLD_LAZY | RTLD_NOLOAD);
  if (h == nullptr) return nullptr;
  void* expected = nullptr;
  if (!g_local_cudart.compare_exchange_strong(expected, h, std::memory_order_acq_rel)) {
    dlclose(h);  // another thread found it first
    return expected;
  }
  return h;
}

}  // namespace

void* runtime_symbol(const char* name) {
  if (void* p = real_dlsym(RTLD_NEXT, name)) return p;
  ErrnoKeeper keep;
  void* h = loaded_cudart();
  return h != nullptr ? real_dlsym(h, name) : nullptr;
}

void* driver_export(const char* name) {
  if (void* p = real_dlsym(RTLD_NEXT, name)) return p;
  void* h = dlopen("libcuda.so.1", RTLD_LAZY | RTLD_NOLOAD);
  if (h == nullptr) return nullptr;
  void* p = real_dlsym(h, name);  // a handle lookup searches libcuda itself first
  dlclose(h);
  return p;
}

}  // namespace capuchin::interpose

namespace cap = capuchin::interpose;

namespace {
void* wrap_proc(const char* symbol, void* real, int version, cuuint64_t flags) {
  if (symbol == nullptr || real == nullptr) return real;
  cap::note_driver_symbol(symbol, real);
  if (std::strcmp(symbol, "cuGetProcAddress") == 0) {
    // The driver handing out its own cuGetProcAddress: the v2 ABI from 12.0 on.
    if (version >= 12000) {
      cap::note_real_get_proc_address(real, nullptr);
      return reinterpret_cast<void*>(&cuGetProcAddress_v2);
    }
    cap::note_real_get_proc_address(nullptr, real);
    return reinterpret_cast<void*>(&capuchin_cuGetProcAddress_v1);
  }
  if (cap::started_with_disable()) return real;
  return cap::wrap_driver_pointer(symbol, real, true, version,
                                  (flags & CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM) != 0);
}
}  // namespace

CAPUCHIN_EXPORT CUresult cuGetProcAddress_v2(const char* symbol, void** pfn, int version, cuuint64_t flags,
                                             CUdriverProcAddressQueryResult* status) {
  auto real = reinterpret_cast<cap::GetProcV2Fn>(cap::real_get_proc_address());
  if (real == nullptr) return CUDA_ERROR_NOT_INITIALIZED;
  const CUresult r = real(symbol, pfn, version, flags, status);
  if (r == CUDA_SUCCESS && pfn != nullptr && *pfn != nullptr) {
    cap::ErrnoKeeper keep;
    *pfn = wrap_proc(symbol, *pfn, version, flags);
  }
  return r;
}

CUresult capuchin_cuGetProcAddress_v1(const char* symbol, void** pfn, int version, cuuint64_t flags) {
  auto real = reinterpret_cast<cap::GetProcV1Fn>(cap::g_real_gpa_v1.load(std::memory_order_acquire));
  if (real == nullptr) {
    real = reinterpret_cast<cap::GetProcV1Fn>(cap::real_dlsym(RTLD_NEXT, "cuGetProcAddress"));
    if (real == nullptr) return CUDA_ERROR_NOT_INITIALIZED;
    cap::g_real_gpa_v1.store(reinterpret_cast<void*>(real), std::memory_order_release);
  }
  const CUresult r = real(symbol, pfn, version, flags);
  if (r == CUDA_SUCCESS && pfn != nullptr && *pfn != nullptr) {
    cap::ErrnoKeeper keep;
    *pfn = wrap_proc(symbol, *pfn, version, flags);
  }
  return r;
}

// --- the library's own C API ------------------------------------------------------------------

CAPUCHIN_EXPORT const char* capuchin_interposer_version() { return capuchin::kVersion.data(); }

// Marks the start of a training iteration (an `iter` event); frameworks or the program may
// call it through dlsym(RTLD_DEFAULT, "capuchin_mark_iteration") without linking us.
CAPUCHIN_EXPORT void capuchin_mark_iteration(void) {
  cap::HookScope scope;
  if (scope.record()) {
    cap::ErrnoKeeper keep;
    cap::record_iteration();
  }
}

// Stops capture now (final drain, sink closed) and writes the totals line into `summary`.
// Later CUDA calls pass straight through. Returns 0.
CAPUCHIN_EXPORT int capuchin_finish(char* summary, size_t summary_bytes) {
  cap::stop_library(summary, summary_bytes);
  return 0;
}

// The pointer cuGetProcAddress(symbol, ..., cudaVersion, flags) would hand the program
// for the real driver pointer `real` (exactly the interception path; for tests/benchmarks
// that bring their own driver).
CAPUCHIN_EXPORT void* capuchin_wrap_driver_proc(const char* symbol, void* real, int cuda_version,
                                                unsigned long long flags) {
  return wrap_proc(symbol, real, cuda_version, flags);
}

__attribute__((constructor)) static void capuchin_init() { cap::start_library(); }
