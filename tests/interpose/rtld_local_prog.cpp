// rtld_local_prog: loads LIBRARY with dlopen(RTLD_NOW | RTLD_LOCAL), as Python loads extension
// modules, and calls its rtld_local_run(STEPS) (rtld_local_lib.cpp). This program itself links no
// CUDA library, so libcudart.so.13 is loaded only inside that local scope.
// Usage: interpose_rtld_local_prog LIBRARY STEPS; prints "rtld_local ok kernels=STEPS", exit 0.
#include <dlfcn.h>

#include <cstdio>
#include <cstdlib>

int main(int argc, char** argv) {
  if (argc != 3) return 2;
  void* lib = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
  if (lib == nullptr) return std::fprintf(stderr, "rtld_local_prog: %s\n", dlerror()), 1;
  auto run = reinterpret_cast<int (*)(int)>(dlsym(lib, "rtld_local_run"));
  if (run == nullptr) return std::fprintf(stderr, "rtld_local_prog: no rtld_local_run\n"), 1;
  const int steps = std::atoi(argv[2]);
  if (run(steps) != 0) return 1;
  std::printf("rtld_local ok kernels=%d\n", steps);
  return 0;
}
