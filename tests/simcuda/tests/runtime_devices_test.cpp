// runtime_devices_test.cpp: simcuda's runtime with two devices (SIMCUDA_DEVICES=2):
// cudaSetDevice binds the device's primary context to the calling thread (cuda_runtime_api.h),
// so allocations and launches that follow are that device's; cudaGetDevice reports it; a new
// thread starts on device 0; an ordinal that names no device is cudaErrorInvalidDevice.
//
// Contract: each test runs in its own process (gtest_discover_tests); SIMCUDA_DEVICES is set
// before the first runtime call.
#include <cuda_runtime_api.h>
#include <dlfcn.h>
#include <gtest/gtest.h>

#include <cstdlib>
#include <thread>

#include "simcuda/simcuda.h"

namespace {

// The runtime does not link the driver: its extension API is reached like the runtime does.
uint64_t device_in_use(int device) {
  void* h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
  auto get = reinterpret_cast<decltype(&simcuda_get_device_memory)>(h ? dlsym(h, "simcuda_get_device_memory") : nullptr);
  uint64_t used = ~0ull;
  if (get == nullptr || get(device, &used, nullptr) != CUDA_SUCCESS) ADD_FAILURE() << "no device " << device;
  return used;
}

}  // namespace

TEST(RuntimeDevices, SetDeviceBindsTheDevicesContextToTheThread) {
  setenv("SIMCUDA_DEVICES", "2", 1);
  int count = 0;
  ASSERT_EQ(cudaGetDeviceCount(&count), cudaSuccess);
  EXPECT_EQ(count, 2);
  int dev = -1;
  ASSERT_EQ(cudaGetDevice(&dev), cudaSuccess);
  EXPECT_EQ(dev, 0);
  EXPECT_EQ(cudaSetDevice(2), cudaErrorInvalidDevice);
  ASSERT_EQ(cudaSetDevice(1), cudaSuccess);
  ASSERT_EQ(cudaGetDevice(&dev), cudaSuccess);
  EXPECT_EQ(dev, 1);
  void* p = nullptr;
  ASSERT_EQ(cudaMalloc(&p, 1 << 20), cudaSuccess);
  cudaPointerAttributes attr{};
  ASSERT_EQ(cudaPointerGetAttributes(&attr, p), cudaSuccess);
  EXPECT_EQ(attr.type, cudaMemoryTypeDevice);
  EXPECT_EQ(attr.device, 1);
  EXPECT_EQ(device_in_use(0), 0u);
  EXPECT_EQ(device_in_use(1), 1u << 20);
  cudaDeviceProp prop{};
  EXPECT_EQ(cudaGetDeviceProperties(&prop, 1), cudaSuccess);
  EXPECT_EQ(cudaGetDeviceProperties(&prop, 2), cudaErrorInvalidDevice);
  int other_thread_device = -1;
  std::thread([&] { cudaGetDevice(&other_thread_device); }).join();
  EXPECT_EQ(other_thread_device, 0);  // the device is per thread
  ASSERT_EQ(cudaSetDevice(0), cudaSuccess);
  ASSERT_EQ(cudaGetDevice(&dev), cudaSuccess);
  EXPECT_EQ(dev, 0);
  ASSERT_EQ(cudaFree(p), cudaSuccess);  // freeing another device's memory is allowed
  EXPECT_EQ(device_in_use(1), 0u);
}
