// two_devices_prog: one process that uses two devices, switching with cudaSetDevice as a
// model-parallel job does. On device 0: tensors T0..T3 of TENSOR_BYTES, uploaded, scaled STEPS
// times in turn (under a budget of fewer than four tensors the executor must evict). On
// device 1, between the steps: a tensor U allocated, uploaded, scaled by a kernel on device 1,
// read back, then given the contents of one of device 0's tensors by a copy issued on device 1
// (as a pipeline stage hands activations on), read back again, and freed. At the end T3 is
// freed while device 1 is current. Run on simcuda with SIMCUDA_DEVICES=2, plain and under capuchin: the
// output must not depend on capuchin. It prints U's memory type and device as the runtime
// reports them (device memory of device 1: capuchin serves only the device its executor
// started on and passes device 1's allocations through) and checksums of everything read back.
//
// Usage: two_devices_prog TENSOR_BYTES STEPS. Exit 0 when every call succeeded.
#include <cuda_runtime_api.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "simcuda/kernel.hpp"

namespace {

void scale(float*, int, float) {}

void scale_body(void** args, const simcuda_launch_info*) {
  auto [p, n, s] = simcuda::unpack(scale, args);
  p = simcuda::access(p, static_cast<size_t>(n), SIMCUDA_READ_WRITE);
  for (int i = 0; i < n; ++i) p[i] = p[i] * s + 1.0f;
}

void check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) {
    std::fprintf(stderr, "two_devices_prog: %s failed: %s\n", what, cudaGetErrorString(e));
    std::exit(1);
  }
}

void launch_scale(float* p, int n, float s) {
  void* args[] = {&p, &n, &s};
  check(cudaLaunchKernel(reinterpret_cast<const void*>(scale), dim3(1), dim3(32), args, 0, nullptr), "cudaLaunchKernel");
}

uint64_t checksum(const std::vector<float>& v) {
  uint64_t h = 1469598103934665603ull;  // FNV-1a
  for (float f : v) {
    const auto* b = reinterpret_cast<const unsigned char*>(&f);
    for (size_t i = 0; i < sizeof f; ++i) h = (h ^ b[i]) * 1099511628211ull;
  }
  return h;
}

// Device 1's turn: a tensor there, scaled there, read back, given `from` (device 0's), freed.
void work_on_device_1(int n, int step, const float* from) {
  check(cudaSetDevice(1), "cudaSetDevice(1)");
  float* u = nullptr;
  check(cudaMalloc(reinterpret_cast<void**>(&u), static_cast<size_t>(n) * sizeof(float)), "cudaMalloc on device 1");
  if (step == 0) {
    cudaPointerAttributes a{};
    check(cudaPointerGetAttributes(&a, u), "cudaPointerGetAttributes");
    std::printf("U: %s of device %d\n", a.type == cudaMemoryTypeDevice ? "device memory" : "not device memory", a.device);
  }
  std::vector<float> host(static_cast<size_t>(n), static_cast<float>(step));
  check(cudaMemcpy(u, host.data(), host.size() * sizeof(float), cudaMemcpyHostToDevice), "upload U");
  launch_scale(u, n, 3.0f);
  check(cudaMemcpy(host.data(), u, host.size() * sizeof(float), cudaMemcpyDeviceToHost), "download U");
  std::printf("step %d U %016llx\n", step, static_cast<unsigned long long>(checksum(host)));
  check(cudaMemcpy(u, from, host.size() * sizeof(float), cudaMemcpyDeviceToDevice), "copy device 0 -> device 1");
  check(cudaMemcpy(host.data(), u, host.size() * sizeof(float), cudaMemcpyDeviceToHost), "download U");
  std::printf("step %d U from device 0 %016llx\n", step, static_cast<unsigned long long>(checksum(host)));
  check(cudaFree(u), "cudaFree on device 1");
  check(cudaSetDevice(0), "cudaSetDevice(0)");
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: two_devices_prog TENSOR_BYTES STEPS\n");
    return 2;
  }
  const int n = static_cast<int>(std::strtoull(argv[1], nullptr, 10) / sizeof(float));
  const int steps = std::atoi(argv[2]);
  simcuda::register_kernel("scale", scale, scale_body);
  check(cudaSetDevice(0), "cudaSetDevice(0)");
  std::vector<float*> t(4);
  for (size_t i = 0; i < t.size(); ++i) {
    check(cudaMalloc(reinterpret_cast<void**>(&t[i]), static_cast<size_t>(n) * sizeof(float)), "cudaMalloc on device 0");
    std::vector<float> host(static_cast<size_t>(n), static_cast<float>(i) + 0.5f);
    check(cudaMemcpy(t[i], host.data(), host.size() * sizeof(float), cudaMemcpyHostToDevice), "upload T");
  }
  for (int step = 0; step < steps; ++step) {
    launch_scale(t[static_cast<size_t>(step) % t.size()], n, 0.5f);
    work_on_device_1(n, step, t[static_cast<size_t>(step + 2) % t.size()]);
  }
  for (size_t i = 0; i < t.size(); ++i) {
    std::vector<float> host(static_cast<size_t>(n));
    check(cudaMemcpy(host.data(), t[i], host.size() * sizeof(float), cudaMemcpyDeviceToHost), "download T");
    std::printf("T%zu %016llx\n", i, static_cast<unsigned long long>(checksum(host)));
    // The last one is freed from device 1 (cudaFree takes any device's pointer).
    if (i + 1 == t.size()) check(cudaSetDevice(1), "cudaSetDevice(1)");
    check(cudaFree(t[i]), "cudaFree");
  }
  return 0;
}
