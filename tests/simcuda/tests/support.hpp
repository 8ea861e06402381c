// support.hpp: shared fixtures for simcuda's own tests: a driver-API context, a set of small test
// kernels registered through the simcuda API, and a launch helper.
//
// Contract: every test runs in its own process (gtest_discover_tests), with
// SIMCUDA_DEVICE_BYTES=64 MiB set by tests/simcuda/CMakeLists.txt.
#pragma once

#include <cuda.h>
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <thread>

#include "simcuda/kernel.hpp"

namespace simtest {

constexpr uint64_t kCapacity = 64ull << 20;

// Host-side gates a kernel can block on (test scaffolding, not device memory).
inline std::atomic<bool> g_gate[4];

// ---- kernels: stubs and bodies ------------------------------------------------------------
inline void k_fill(float*, int, float) {}
inline void k_add_one(float*, int) {}
inline void k_touch(const char*, size_t) {}
inline void k_log(int*, int) {}
inline void k_wait_gate(int) {}
inline void k_fixed() {}
inline void k_raw_write(char*) {}
inline void k_copy_plus_one(const float*, float*, int) {}

inline void fill_body(void** a, const simcuda_launch_info*) {
  auto [p, n, v] = simcuda::unpack(k_fill, a);
  p = simcuda::access(p, static_cast<size_t>(n), SIMCUDA_WRITE);
  for (int i = 0; i < n; ++i) p[i] = v;
}
inline void add_one_body(void** a, const simcuda_launch_info*) {
  auto [p, n] = simcuda::unpack(k_add_one, a);
  p = simcuda::access(p, static_cast<size_t>(n), SIMCUDA_READ_WRITE);
  for (int i = 0; i < n; ++i) p[i] += 1.0f;
}
inline void touch_body(void** a, const simcuda_launch_info*) {
  auto [p, n] = simcuda::unpack(k_touch, a);
  simcuda::access(p, n, SIMCUDA_READ);
}
inline void log_body(void** a, const simcuda_launch_info*) {
  auto [log, tag] = simcuda::unpack(k_log, a);
  log = simcuda::access(log, 1024, SIMCUDA_READ_WRITE);
  log[1 + log[0]] = tag;
  log[0]++;
}
inline void wait_gate_body(void** a, const simcuda_launch_info*) {
  auto [gate] = simcuda::unpack(k_wait_gate, a);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (!g_gate[gate].load() && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::microseconds(200));
}
inline void fixed_body(void**, const simcuda_launch_info*) {}
inline void raw_write_body(void** a, const simcuda_launch_info*) {
  auto [p] = simcuda::unpack(k_raw_write, a);
  *static_cast<volatile char*>(p) = 1;  // deliberately undeclared: the SIGSEGV backstop's case
}
inline void copy_plus_one_body(void** a, const simcuda_launch_info*) {
  auto [in, out, n] = simcuda::unpack(k_copy_plus_one, a);
  in = simcuda::access(in, static_cast<size_t>(n), SIMCUDA_READ);
  out = simcuda::access(out, static_cast<size_t>(n), SIMCUDA_WRITE);
  for (int i = 0; i < n; ++i) out[i] = in[i] + 1.0f;
}

struct Kernels {
  CUfunction fill, add_one, touch, log, wait_gate, fixed_1ms, raw_write, copy_plus_one;
};

inline Kernels register_all() {
  Kernels k{};
  k.fill = simcuda::register_kernel("k_fill", k_fill, fill_body);
  k.add_one = simcuda::register_kernel("k_add_one", k_add_one, add_one_body);
  k.touch = simcuda::register_kernel("k_touch", k_touch, touch_body);
  k.log = simcuda::register_kernel("k_log", k_log, log_body);
  k.wait_gate = simcuda::register_kernel("k_wait_gate", k_wait_gate, wait_gate_body);
  k.fixed_1ms = simcuda::register_kernel("k_fixed", k_fixed, fixed_body, 1e6 - SIMCUDA_KERNEL_LAUNCH_NS);
  k.raw_write = simcuda::register_kernel("k_raw_write", k_raw_write, raw_write_body);
  k.copy_plus_one = simcuda::register_kernel("k_copy_plus_one", k_copy_plus_one, copy_plus_one_body);
  return k;
}

template <typename... Args>
CUresult launch(CUfunction f, CUstream s, Args... args) {
  void* argv[] = {static_cast<void*>(&args)..., nullptr};
  return cuLaunchKernel(f, 1, 1, 1, 32, 1, 1, 0, s, argv, nullptr);
}

inline CUdeviceptr dptr(const void* p) { return reinterpret_cast<CUdeviceptr>(p); }

class Simcuda : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_EQ(cuInit(0), CUDA_SUCCESS);
    ASSERT_EQ(cuDevicePrimaryCtxRetain(&ctx_, 0), CUDA_SUCCESS);
    ASSERT_EQ(cuCtxSetCurrent(ctx_), CUDA_SUCCESS);
    k = register_all();
    ASSERT_NE(k.fill, nullptr);
  }
  CUcontext ctx_ = nullptr;
  Kernels k{};
};

inline simcuda_stats stats() {
  simcuda_stats s{};
  simcuda_get_stats(&s);
  return s;
}

}  // namespace simtest
