// kernel.hpp: C++ helpers for programs that run on simcuda: register a kernel from its host stub's
// signature (parameter offsets/sizes laid out as CUDA lays out kernel parameters: each at the next
// offset aligned for its type), unpack typed arguments inside a body, and launch through
// cudaLaunchKernel exactly as an nvcc stub would; register a module global (a __device__ variable)
// under its host shadow, as nvcc's registration code does.
//
// Contract: the simcuda calls (registration, access declarations, flops) are resolved from
// libcuda.so.1 with dlopen + dlsym, so a program needs to link only libcudart. Header-only.
#pragma once

#include <cstdlib>
#include <dlfcn.h>

#include <array>
#include <cstddef>
#include <tuple>
#include <utility>

#include "simcuda/simcuda.h"

namespace simcuda {

template <typename... Args>
struct ParamLayout {
  static constexpr size_t count = sizeof...(Args);
  static constexpr std::array<size_t, count> sizes{sizeof(Args)...};
  static constexpr std::array<size_t, count> offsets = [] {
    std::array<size_t, count> out{};
    constexpr std::array<size_t, count> aligns{alignof(Args)...};
    size_t at = 0;
    for (size_t i = 0; i < count; ++i) {
      at = (at + aligns[i] - 1) / aligns[i] * aligns[i];
      out[i] = at;
      at += sizes[i];
    }
    return out;
  }();
};

struct Api {
  CUfunction (*register_kernel)(const simcuda_kernel_desc*) = nullptr;
  void* (*access)(const void*, size_t, int) = nullptr;
  void (*add_flops)(double) = nullptr;
  int (*register_global)(const void*, size_t, const char*) = nullptr;
};

inline const Api& api() {
  static const Api resolved = [] {
    Api a;
    if (void* handle = dlopen("libcuda.so.1", RTLD_NOW | RTLD_GLOBAL)) {
      a.register_kernel = reinterpret_cast<decltype(a.register_kernel)>(dlsym(handle, "simcuda_register_kernel"));
      a.access = reinterpret_cast<decltype(a.access)>(dlsym(handle, "simcuda_access"));
      a.add_flops = reinterpret_cast<decltype(a.add_flops)>(dlsym(handle, "simcuda_add_flops"));
      a.register_global = reinterpret_cast<decltype(a.register_global)>(dlsym(handle, "simcuda_register_global"));
    }
    return a;
  }();
  return resolved;
}

inline CUfunction register_desc(const simcuda_kernel_desc& desc) {
  return api().register_kernel ? api().register_kernel(&desc) : nullptr;
}

// Registers `body` as the kernel whose host stub is `stub`; returns its CUfunction (or null).
template <typename... Args>
CUfunction register_kernel(const char* name, void (*stub)(Args...), simcuda_kernel_body body, double fixed_ns = 0) {
  using L = ParamLayout<Args...>;
  simcuda_kernel_desc desc{};
  desc.name = name;
  desc.host_stub = reinterpret_cast<const void*>(stub);
  desc.num_params = L::count;
  desc.param_offsets = L::count ? L::offsets.data() : nullptr;
  desc.param_sizes = L::count ? L::sizes.data() : nullptr;
  desc.body = body;
  desc.fixed_ns = fixed_ns;
  return register_desc(desc);
}

// Registers `shadow` (a host variable standing for a __device__ variable of its type) as a module
// global: cudaMemcpyToSymbol(shadow, ...) and cudaGetSymbolAddress(&p, shadow) reach its device
// copy, which starts with the shadow's value. Returns true on success.
template <typename T>
bool register_global(const char* name, const T& shadow) {
  return api().register_global != nullptr && api().register_global(&shadow, sizeof(T), name) == 0;
}

// Inside a body: the typed parameter values.
template <typename... Args, size_t... I>
std::tuple<Args...> unpack_impl(void** args, std::index_sequence<I...>) {
  return std::tuple<Args...>{*static_cast<Args*>(args[I])...};
}
template <typename... Args>
std::tuple<Args...> unpack(void (*)(Args...), void** args) {
  return unpack_impl<Args...>(args, std::index_sequence_for<Args...>{});
}

// Typed declaration of an access inside a body.
template <typename T>
T* access(T* ptr, size_t count, int mode) {
  return static_cast<T*>(api().access(ptr, count * sizeof(T), mode));
}
inline void add_flops(double flops) { api().add_flops(flops); }

}  // namespace simcuda

#ifdef __CUDA_RUNTIME_API_H__
// CUDA 13's compiler launch entry points (crt/device_functions.h; exported by libcudart.so.13).
extern "C" cudaError_t __cudaGetKernel(cudaKernel_t*, const void*);
extern "C" cudaError_t __cudaLaunchKernel(cudaKernel_t, dim3, dim3, void**, size_t, cudaStream_t);
extern "C" cudaError_t __cudaLaunchKernel_ptsz(cudaKernel_t, dim3, dim3, void**, size_t, cudaStream_t);

namespace simcuda {
// Launches the kernel registered for `stub` as CUDA 13's nvcc-generated code does
// (crt/host_runtime.h, __cudaLaunch): __cudaGetKernel for the stub's CUkernel, then
// __cudaLaunchKernel with it, which reaches the driver's cuLaunchKernel with the CUkernel (not
// cudaLaunchKernel, and not a CUfunction). SIMCUDA_LEGACY_LAUNCH (set): as launch_legacy.
template <typename... Args, typename... Values>
cudaError_t launch(void (*stub)(Args...), dim3 grid, dim3 block, cudaStream_t stream, Values... values) {
  std::tuple<Args...> typed{static_cast<Args>(values)...};
  std::array<void*, sizeof...(Args)> argv{};
  std::apply([&](auto&... v) { size_t i = 0; ((argv[i++] = static_cast<void*>(&v)), ...); }, typed);
  static const bool legacy = std::getenv("SIMCUDA_LEGACY_LAUNCH") != nullptr;  // a program built as launch_legacy
  if (legacy) return cudaLaunchKernel(reinterpret_cast<const void*>(stub), grid, block, argv.data(), 0, stream);
  cudaKernel_t k = nullptr;
  if (const cudaError_t e = __cudaGetKernel(&k, reinterpret_cast<const void*>(stub)); e != cudaSuccess) return e;
#if defined(__CUDART_API_PER_THREAD_DEFAULT_STREAM)
  return __cudaLaunchKernel_ptsz(k, grid, block, argv.data(), 0, stream);
#else
  return __cudaLaunchKernel(k, grid, block, argv.data(), 0, stream);
#endif
}
// The launch of older toolkits and of nvcc with __NV_LEGACY_LAUNCH, and of code calling the
// runtime itself: cudaLaunchKernel with the host stub.
template <typename... Args, typename... Values>
cudaError_t launch_legacy(void (*stub)(Args...), dim3 grid, dim3 block, cudaStream_t stream, Values... values) {
  std::tuple<Args...> typed{static_cast<Args>(values)...};
  std::array<void*, sizeof...(Args)> argv{};
  std::apply([&](auto&... v) { size_t i = 0; ((argv[i++] = static_cast<void*>(&v)), ...); }, typed);
  return cudaLaunchKernel(reinterpret_cast<const void*>(stub), grid, block, argv.data(), 0, stream);
}
}  // namespace simcuda
#endif
