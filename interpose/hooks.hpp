// hooks.hpp: glue between the dlsym / cuGetProcAddress interception and the hook tables.
//
// Contract: wrap_driver_pointer() is the single place a real driver pointer is swapped
// for a wrapper: it finds the hooked entry (by cuGetProcAddress name + requested version,
// or by exported symbol name for dlsym), claims one of a few variant slots that forward to
// exactly that real pointer (per-thread-stream semantics remembered per slot) and returns
// the slot's wrapper, of exactly the prototype cuGetProcAddress hands out for that name at
// that cudaVersion (one table entry per ABI, driver_hooks.def); anything not hooked, a
// cudaVersion outside every entry's range, or no free slot returns `real` unchanged. Cold path (a mutex), never called from a launch.
#pragma once

#include <atomic>
#include <cstdint>

namespace capuchin::interpose {

struct Variant {
  std::atomic<void*> real{nullptr};      // the exact pointer the driver returned
  std::atomic<bool> per_thread{false};   // reached through a _ptsz/_ptds name or PER_THREAD
};

void* wrap_driver_pointer(const char* name, void* real, bool by_proc_name, int cuda_version, bool per_thread);

}  // namespace capuchin::interpose
