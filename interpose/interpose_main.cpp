// libcapuchin.so: the LD_PRELOAD interposer. For now it only identifies itself and stays a
// pure pass-through (it defines no CUDA symbol, so every call reaches real CUDA untouched);
// the capture hooks arrive with the interposer issue. Built against the CUDA 13 headers so
// the prototypes of what it will hook are checked by the compiler.
#include <cuda.h>

#include "capuchin/version.hpp"

static_assert(CUDA_VERSION >= 12000, "capuchin is built against the CUDA 12/13 headers");

extern "C" __attribute__((visibility("default"))) const char* capuchin_interposer_version() {
  return capuchin::kVersion.data();
}
