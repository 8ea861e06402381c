// dlsym_export.cpp: the exported dlsym wrapper and glibc's real dlsym (found with dlvsym).
//
// Contract: dlsym returns exactly what glibc's would, except that "cu*" names go through
// intercept_driver_symbol (a hooked driver entry point comes back wrapped). Every other
// name is a tail jump into glibc's dlsym, so glibc sees the real caller's return address
// and RTLD_NEXT means "after the caller", not "after libcapuchin". That path touches no
// instrumented code and no interceptable libc call: sanitizer runtimes resolve their
// interceptors with dlsym(RTLD_NEXT, ...) while they initialise, and with libcapuchin
// preloaded those calls land here (this file is built with -fno-sanitize=all).
// "cu*" with RTLD_NEXT (rare) is emulated by walking the link map after the caller.
#include <dlfcn.h>
#include <link.h>

#include "real_api.hpp"

using DlsymFn = void* (*)(void*, const char*);

extern "C" {
// Read by the trampoline below; written once (benign race: every writer stores the same).
__attribute__((visibility("hidden"))) DlsymFn capuchin_real_dlsym_ptr = nullptr;

__attribute__((visibility("hidden"))) void capuchin_resolve_real_dlsym() {
  if (capuchin_real_dlsym_ptr != nullptr) return;
  // glibc 2.34 moved dlsym into libc under a new version; older ones have GLIBC_2.2.5.
  void* p = dlvsym(RTLD_NEXT, "dlsym", "GLIBC_2.34");
  if (p == nullptr) p = dlvsym(RTLD_NEXT, "dlsym", "GLIBC_2.2.5");
  if (p == nullptr) p = dlvsym(RTLD_NEXT, "dlsym", "GLIBC_2.17");  // aarch64
  __atomic_store_n(&capuchin_real_dlsym_ptr, reinterpret_cast<DlsymFn>(p), __ATOMIC_RELEASE);
}
}

namespace capuchin::interpose {
namespace {

// RTLD_NEXT on behalf of `caller`, for "cu*" names only (never during sanitizer start-up).
void* next_after(const void* caller, const char* name) {
  Dl_info info;
  link_map* lm = nullptr;
  if (dladdr1(caller, &info, reinterpret_cast<void**>(&lm), RTLD_DL_LINKMAP) == 0 || lm == nullptr)
    return real_dlsym(RTLD_NEXT, name);
  for (link_map* l = lm->l_next; l != nullptr; l = l->l_next) {
    void* h = dlopen(l->l_name != nullptr && l->l_name[0] != '\0' ? l->l_name : nullptr, RTLD_LAZY | RTLD_NOLOAD);
    if (h == nullptr) continue;
    void* sym = real_dlsym(h, name);
    dlclose(h);
    if (sym != nullptr) return sym;
  }
  return nullptr;
}

}  // namespace

void* real_dlsym(void* handle, const char* name) {
  capuchin_resolve_real_dlsym();
  DlsymFn f = __atomic_load_n(&capuchin_real_dlsym_ptr, __ATOMIC_ACQUIRE);
  return f == nullptr ? nullptr : f(handle, name);
}
void* real_dlvsym(void* handle, const char* name, const char* version) { return dlvsym(handle, name, version); }

}  // namespace capuchin::interpose

// "cu*" names: reached by a tail jump, so __builtin_return_address(0) is dlsym's caller.
extern "C" __attribute__((visibility("hidden"), noinline)) void* capuchin_dlsym_cu(void* handle, const char* name) {
  namespace cap = capuchin::interpose;
  void* real = handle == RTLD_NEXT ? cap::next_after(__builtin_return_address(0), name) : cap::real_dlsym(handle, name);
  return real == nullptr ? nullptr : cap::intercept_driver_symbol(name, real);
}

#if defined(__x86_64__)
// dlsym(handle /*rdi*/, name /*rsi*/): "cu*" -> capuchin_dlsym_cu, else jmp to glibc's.
asm(R"(
  .text
  .globl dlsym
  .type dlsym, @function
dlsym:
  .cfi_startproc
  testq %rsi, %rsi
  je 1f
  cmpb $0x63, (%rsi)
  jne 1f
  cmpb $0x75, 1(%rsi)
  je capuchin_dlsym_cu
1:
  movq capuchin_real_dlsym_ptr(%rip), %rax
  testq %rax, %rax
  je 2f
  jmp *%rax
2:
  pushq %rdi
  .cfi_adjust_cfa_offset 8
  pushq %rsi
  .cfi_adjust_cfa_offset 8
  subq $8, %rsp
  .cfi_adjust_cfa_offset 8
  call capuchin_resolve_real_dlsym
  addq $8, %rsp
  .cfi_adjust_cfa_offset -8
  popq %rsi
  .cfi_adjust_cfa_offset -8
  popq %rdi
  .cfi_adjust_cfa_offset -8
  movq capuchin_real_dlsym_ptr(%rip), %rax
  testq %rax, %rax
  je 3f
  jmp *%rax
3:
  xorl %eax, %eax
  ret
  .cfi_endproc
  .size dlsym, .-dlsym
)");
#else
// Elsewhere: a C wrapper (RTLD_NEXT callers then get "after libcapuchin" for non-cu names).
extern "C" __attribute__((visibility("default"))) void* dlsym(void* handle, const char* name) {
  if (name != nullptr && name[0] == 'c' && name[1] == 'u') return capuchin_dlsym_cu(handle, name);
  return capuchin::interpose::real_dlsym(handle, name);
}
#endif
