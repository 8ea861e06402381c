// real_api.hpp: how the interposer reaches the real CUDA (never linked: resolved at run
// time) for the calls it makes itself.
//
// Contract: real_dlsym is glibc's dlsym (found with dlvsym, so our exported dlsym wrapper
// is bypassed). driver_symbol() returns the real driver's entry point for our own queries
// (cuFuncGetParamInfo, cuFuncGetName): first the pointer the real cuGetProcAddress handed
// the program, else one we ask the real cuGetProcAddress of an already loaded libcuda.so.1
// for. runtime_symbol() is the next definition after libcapuchin (RTLD_NEXT), i.e. cudart's;
// else, when the job loaded libcudart outside the global scope (RTLD_LOCAL), that loaded
// libcudart's own (found by name among the loaded objects, never loaded by us).
#pragma once

namespace capuchin::interpose {

void* real_dlsym(void* handle, const char* name);
// What our dlsym does with a "cu*" name glibc resolved to `real` (dlsym_hook.cpp).
void* intercept_driver_symbol(const char* name, void* real);
void* real_dlvsym(void* handle, const char* name, const char* version);
void* driver_symbol(const char* name);
void* runtime_symbol(const char* name);
// libcuda's own definition of an exported symbol: the next one after us (RTLD_NEXT), else
// the one in an already loaded libcuda.so.1 (dlopen'ed RTLD_LOCAL by cudart or a vendor
// library, so invisible to RTLD_NEXT).
void* driver_export(const char* name);
// The interception saw the real driver's pointer for `name` (the newest ABI the program
// asked for): remember it for driver_symbol().
void note_driver_symbol(const char* name, void* real);
// The real cuGetProcAddress_v2, once seen (or found).
void* real_get_proc_address();
void note_real_get_proc_address(void* real_v2, void* real_v1);

}  // namespace capuchin::interpose
