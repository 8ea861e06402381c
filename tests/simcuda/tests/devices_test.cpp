// devices_test.cpp: simcuda with several devices (SIMCUDA_DEVICES): each device has its own
// primary context, capacity and use; allocations belong to the current context's device; a
// kernel runs on its stream's device and faults on another device's memory (no peer access),
// as on real GPUs; managed memory migrates to the device that touches it or that a prefetch
// names; VMM chunks live on the device their location names and are accessible only where
// cuMemSetAccess allowed; a location naming no device is CUDA_ERROR_INVALID_DEVICE.
//
// Contract: each test runs in its own process (gtest_discover_tests), so setting
// SIMCUDA_DEVICES before the first driver call decides the device count for that test.
#include <cstdlib>

#include "support.hpp"

using namespace simtest;

// Named, not anonymous: TEST_F's classes derive from the fixture, and GCC warns
// (-Wsubobject-linkage) when a class in an included file (this one, in its unity batch) has a
// base of internal linkage.
namespace simtest_devices {

class TwoDevices : public ::testing::Test {
 protected:
  void SetUp() override {
    setenv("SIMCUDA_DEVICES", "2", 1);
    ASSERT_EQ(cuInit(0), CUDA_SUCCESS);
    for (int d = 0; d < 2; ++d) ASSERT_EQ(cuDevicePrimaryCtxRetain(&ctx_[d], d), CUDA_SUCCESS);
    ASSERT_EQ(cuCtxSetCurrent(ctx_[0]), CUDA_SUCCESS);
    k = register_all();
  }
  void use(int device) { ASSERT_EQ(cuCtxSetCurrent(ctx_[device]), CUDA_SUCCESS); }
  static uint64_t in_use(int device) {
    uint64_t used = 0, peak = 0;
    EXPECT_EQ(simcuda_get_device_memory(device, &used, &peak), CUDA_SUCCESS);
    return used;
  }
  static uint64_t peak(int device) {
    uint64_t used = 0, peak = 0;
    EXPECT_EQ(simcuda_get_device_memory(device, &used, &peak), CUDA_SUCCESS);
    return peak;
  }
  CUmemGenericAllocationHandle create_on(int device, size_t bytes) {
    CUmemAllocationProp prop{};
    prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    prop.location = {CU_MEM_LOCATION_TYPE_DEVICE, device};
    CUmemGenericAllocationHandle h = 0;
    EXPECT_EQ(cuMemCreate(&h, bytes, &prop, 0), CUDA_SUCCESS);
    return h;
  }
  CUcontext ctx_[2] = {};
  Kernels k{};
};

}  // namespace simtest_devices

using simtest_devices::TwoDevices;

namespace {
constexpr size_t kGran = SIMCUDA_VMM_GRANULARITY;
}  // namespace

TEST(OneDevice, IsTheDefaultAndOtherOrdinalsAreInvalid) {
  ASSERT_EQ(cuInit(0), CUDA_SUCCESS);
  int count = 0;
  ASSERT_EQ(cuDeviceGetCount(&count), CUDA_SUCCESS);
  EXPECT_EQ(count, 1);
  CUdevice dev = 0;
  EXPECT_EQ(cuDeviceGet(&dev, 1), CUDA_ERROR_INVALID_DEVICE);
  CUcontext ctx = nullptr;
  EXPECT_EQ(cuDevicePrimaryCtxRetain(&ctx, 1), CUDA_ERROR_INVALID_DEVICE);
  ASSERT_EQ(cuDevicePrimaryCtxRetain(&ctx, 0), CUDA_SUCCESS);
  ASSERT_EQ(cuCtxSetCurrent(ctx), CUDA_SUCCESS);
  CUdeviceptr m = 0;
  ASSERT_EQ(cuMemAllocManaged(&m, 1 << 16, CU_MEM_ATTACH_GLOBAL), CUDA_SUCCESS);
  EXPECT_EQ(cuMemPrefetchAsync_v2(m, 1 << 16, {CU_MEM_LOCATION_TYPE_DEVICE, 1}, 0, nullptr), CUDA_ERROR_INVALID_DEVICE);
  CUmemAllocationProp prop{};
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location = {CU_MEM_LOCATION_TYPE_DEVICE, 1};
  CUmemGenericAllocationHandle h = 0;
  EXPECT_EQ(cuMemCreate(&h, kGran, &prop, 0), CUDA_ERROR_INVALID_DEVICE);
  size_t gran = 0;
  EXPECT_EQ(cuMemGetAllocationGranularity(&gran, &prop, CU_MEM_ALLOC_GRANULARITY_RECOMMENDED), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuMemAdvise_v2(m, 1 << 16, CU_MEM_ADVISE_SET_PREFERRED_LOCATION, {CU_MEM_LOCATION_TYPE_DEVICE, 1}),
            CUDA_ERROR_INVALID_DEVICE);
  uint64_t used = 0;
  EXPECT_EQ(simcuda_get_device_memory(1, &used, nullptr), CUDA_ERROR_INVALID_DEVICE);
}

TEST_F(TwoDevices, EachHasItsOwnContextCapacityAndAllocations) {
  int count = 0;
  ASSERT_EQ(cuDeviceGetCount(&count), CUDA_SUCCESS);
  EXPECT_EQ(count, 2);
  CUdevice dev = -1;
  ASSERT_EQ(cuDeviceGet(&dev, 1), CUDA_SUCCESS);
  EXPECT_EQ(dev, 1);
  EXPECT_EQ(cuDeviceGet(&dev, 2), CUDA_ERROR_INVALID_DEVICE);
  EXPECT_NE(ctx_[0], ctx_[1]);
  size_t total = 0;
  ASSERT_EQ(cuDeviceTotalMem(&total, 1), CUDA_SUCCESS);
  EXPECT_EQ(total, kCapacity);

  use(1);
  ASSERT_EQ(cuCtxGetDevice(&dev), CUDA_SUCCESS);
  EXPECT_EQ(dev, 1);
  CUdeviceptr on1 = 0;
  ASSERT_EQ(cuMemAlloc(&on1, 48ull << 20), CUDA_SUCCESS);
  size_t free_b = 0;
  ASSERT_EQ(cuMemGetInfo(&free_b, &total), CUDA_SUCCESS);
  EXPECT_EQ(free_b, kCapacity - (48ull << 20));
  int ordinal = -1;
  ASSERT_EQ(cuPointerGetAttribute(&ordinal, CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL, on1), CUDA_SUCCESS);
  EXPECT_EQ(ordinal, 1);

  use(0);
  ASSERT_EQ(cuCtxGetDevice(&dev), CUDA_SUCCESS);
  EXPECT_EQ(dev, 0);
  ASSERT_EQ(cuMemGetInfo(&free_b, &total), CUDA_SUCCESS);
  EXPECT_EQ(free_b, kCapacity);  // device 1's allocation is not device 0's
  CUdeviceptr on0 = 0;
  ASSERT_EQ(cuMemAlloc(&on0, 48ull << 20), CUDA_SUCCESS);
  CUdeviceptr more = 0;
  EXPECT_EQ(cuMemAlloc(&more, 48ull << 20), CUDA_ERROR_OUT_OF_MEMORY);  // device 0 is full on its own
  ASSERT_EQ(cuPointerGetAttribute(&ordinal, CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL, on0), CUDA_SUCCESS);
  EXPECT_EQ(ordinal, 0);
  EXPECT_EQ(in_use(0), 48ull << 20);
  EXPECT_EQ(in_use(1), 48ull << 20);
  EXPECT_EQ(stats().device_bytes_in_use, 96ull << 20);  // all devices together

  // Kernels on each device use that device's memory.
  CUstream s1 = nullptr;
  use(1);
  ASSERT_EQ(cuStreamCreate(&s1, CU_STREAM_NON_BLOCKING), CUDA_SUCCESS);
  ASSERT_EQ(launch(k.fill, s1, reinterpret_cast<float*>(on1), 1024, 2.0f), CUDA_SUCCESS);
  ASSERT_EQ(launch(k.fill, nullptr, reinterpret_cast<float*>(on1) + 1024, 1024, 3.0f), CUDA_SUCCESS);
  ASSERT_EQ(cuCtxSynchronize(), CUDA_SUCCESS);
  ASSERT_EQ(cuMemFree(on1), CUDA_SUCCESS);
  EXPECT_EQ(in_use(1), 0u);
  EXPECT_EQ(peak(1), 48ull << 20);
  EXPECT_EQ(in_use(0), 48ull << 20);
}

TEST_F(TwoDevices, KernelTouchingAnotherDevicesMemoryFaults) {
  CUdeviceptr on0 = 0;
  ASSERT_EQ(cuMemAlloc(&on0, 1 << 20), CUDA_SUCCESS);
  use(1);
  // The legacy stream, reached from device 1's context, runs on device 1: no peer access.
  ASSERT_EQ(launch(k.fill, nullptr, reinterpret_cast<float*>(on0), 16, 1.0f), CUDA_SUCCESS);
  EXPECT_EQ(cuCtxSynchronize(), CUDA_ERROR_ILLEGAL_ADDRESS);
}

TEST_F(TwoDevices, AStreamRunsOnItsOwnDevice) {
  CUdeviceptr on0 = 0;
  ASSERT_EQ(cuMemAlloc(&on0, 1 << 20), CUDA_SUCCESS);
  CUstream s0 = nullptr;
  ASSERT_EQ(cuStreamCreate(&s0, CU_STREAM_NON_BLOCKING), CUDA_SUCCESS);  // device 0's
  use(1);
  ASSERT_EQ(launch(k.fill, s0, reinterpret_cast<float*>(on0), 16, 1.0f), CUDA_SUCCESS);
  EXPECT_EQ(cuStreamSynchronize(s0), CUDA_SUCCESS);
  CUstream s1 = nullptr;
  ASSERT_EQ(cuStreamCreate(&s1, CU_STREAM_NON_BLOCKING), CUDA_SUCCESS);  // device 1's
  use(0);
  ASSERT_EQ(launch(k.fill, s1, reinterpret_cast<float*>(on0), 16, 1.0f), CUDA_SUCCESS);
  EXPECT_EQ(cuStreamSynchronize(s1), CUDA_ERROR_ILLEGAL_ADDRESS);
}

TEST_F(TwoDevices, ManagedMemoryGoesToTheDeviceNamedOrTouching) {
  CUdeviceptr m = 0;
  const size_t bytes = 4 * SIMCUDA_UVM_BLOCK;
  ASSERT_EQ(cuMemAllocManaged(&m, bytes, CU_MEM_ATTACH_GLOBAL), CUDA_SUCCESS);
  ASSERT_EQ(cuMemPrefetchAsync_v2(m, bytes, {CU_MEM_LOCATION_TYPE_DEVICE, 1}, 0, nullptr), CUDA_SUCCESS);
  ASSERT_EQ(cuCtxSynchronize(), CUDA_SUCCESS);
  EXPECT_EQ(in_use(1), bytes);
  EXPECT_EQ(in_use(0), 0u);
  // A kernel on device 0 faults it over to device 0.
  ASSERT_EQ(launch(k.fill, nullptr, reinterpret_cast<float*>(m), static_cast<int>(bytes / sizeof(float)), 1.0f),
            CUDA_SUCCESS);
  ASSERT_EQ(cuCtxSynchronize(), CUDA_SUCCESS);
  EXPECT_EQ(in_use(0), bytes);
  EXPECT_EQ(in_use(1), 0u);
  EXPECT_EQ(cuMemPrefetchAsync_v2(m, bytes, {CU_MEM_LOCATION_TYPE_DEVICE, 2}, 0, nullptr), CUDA_ERROR_INVALID_DEVICE);
  int ordinal = -1;
  use(1);
  ASSERT_EQ(cuPointerGetAttribute(&ordinal, CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL, m), CUDA_SUCCESS);
  EXPECT_EQ(ordinal, 1);  // managed memory: the current device
}

TEST_F(TwoDevices, VmmChunksLiveOnTheirDeviceAndAnswerOnlyWhereAccessible) {
  const CUmemGenericAllocationHandle h = create_on(1, kGran);
  EXPECT_EQ(in_use(1), kGran);
  EXPECT_EQ(in_use(0), 0u);
  CUmemAllocationProp bad{};
  bad.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  bad.location = {CU_MEM_LOCATION_TYPE_DEVICE, 2};
  CUmemGenericAllocationHandle none = 0;
  EXPECT_EQ(cuMemCreate(&none, kGran, &bad, 0), CUDA_ERROR_INVALID_DEVICE);
  CUdeviceptr va = 0;
  ASSERT_EQ(cuMemAddressReserve(&va, kGran, 0, 0, 0), CUDA_SUCCESS);
  ASSERT_EQ(cuMemMap(va, kGran, 0, h, 0), CUDA_SUCCESS);
  CUmemAccessDesc nowhere{{CU_MEM_LOCATION_TYPE_DEVICE, 2}, CU_MEM_ACCESS_FLAGS_PROT_READWRITE};
  EXPECT_EQ(cuMemSetAccess(va, kGran, &nowhere, 1), CUDA_ERROR_INVALID_DEVICE);
  CUmemAccessDesc for1{{CU_MEM_LOCATION_TYPE_DEVICE, 1}, CU_MEM_ACCESS_FLAGS_PROT_READWRITE};
  ASSERT_EQ(cuMemSetAccess(va, kGran, &for1, 1), CUDA_SUCCESS);
  use(1);
  ASSERT_EQ(launch(k.fill, nullptr, reinterpret_cast<float*>(va), 256, 4.0f), CUDA_SUCCESS);
  ASSERT_EQ(cuCtxSynchronize(), CUDA_SUCCESS);
  // Access granted to device 0 later keeps device 1's ("set the access flags for the target
  // locations"); both devices then use it.
  CUmemAccessDesc for0{{CU_MEM_LOCATION_TYPE_DEVICE, 0}, CU_MEM_ACCESS_FLAGS_PROT_READWRITE};
  ASSERT_EQ(cuMemSetAccess(va, kGran, &for0, 1), CUDA_SUCCESS);
  ASSERT_EQ(launch(k.add_one, nullptr, reinterpret_cast<float*>(va), 256), CUDA_SUCCESS);
  use(0);
  ASSERT_EQ(launch(k.add_one, nullptr, reinterpret_cast<float*>(va), 256), CUDA_SUCCESS);
  ASSERT_EQ(cuCtxSynchronize(), CUDA_SUCCESS);
  float h_val = 0;
  ASSERT_EQ(cuMemcpyDtoH(&h_val, va + 1020, sizeof h_val), CUDA_SUCCESS);
  EXPECT_EQ(h_val, 6.0f);
  ASSERT_EQ(cuMemUnmap(va, kGran), CUDA_SUCCESS);
  ASSERT_EQ(cuMemRelease(h), CUDA_SUCCESS);
  EXPECT_EQ(in_use(1), 0u);
}

TEST_F(TwoDevices, VmmChunkNotAccessibleToADeviceFaultsThere) {
  const CUmemGenericAllocationHandle h = create_on(0, kGran);
  CUdeviceptr va = 0;
  ASSERT_EQ(cuMemAddressReserve(&va, kGran, 0, 0, 0), CUDA_SUCCESS);
  ASSERT_EQ(cuMemMap(va, kGran, 0, h, 0), CUDA_SUCCESS);
  CUmemAccessDesc for0{{CU_MEM_LOCATION_TYPE_DEVICE, 0}, CU_MEM_ACCESS_FLAGS_PROT_READWRITE};
  ASSERT_EQ(cuMemSetAccess(va, kGran, &for0, 1), CUDA_SUCCESS);
  ASSERT_EQ(launch(k.fill, nullptr, reinterpret_cast<float*>(va), 256, 4.0f), CUDA_SUCCESS);
  ASSERT_EQ(cuCtxSynchronize(), CUDA_SUCCESS);
  use(1);
  ASSERT_EQ(launch(k.fill, nullptr, reinterpret_cast<float*>(va), 256, 4.0f), CUDA_SUCCESS);
  EXPECT_EQ(cuCtxSynchronize(), CUDA_ERROR_ILLEGAL_ADDRESS);
}

TEST_F(TwoDevices, AnEventIsRecordedOnlyOnItsOwnDevicesStreams) {
  CUevent e0 = nullptr;
  ASSERT_EQ(cuEventCreate(&e0, 0), CUDA_SUCCESS);  // device 0's
  CUstream s0 = nullptr;
  ASSERT_EQ(cuStreamCreate(&s0, CU_STREAM_NON_BLOCKING), CUDA_SUCCESS);
  use(1);
  CUstream s1 = nullptr;
  ASSERT_EQ(cuStreamCreate(&s1, CU_STREAM_NON_BLOCKING), CUDA_SUCCESS);
  EXPECT_EQ(cuEventRecord(e0, s1), CUDA_ERROR_INVALID_HANDLE);
  EXPECT_EQ(cuEventRecord(e0, nullptr), CUDA_ERROR_INVALID_HANDLE);  // device 1's legacy stream
  EXPECT_EQ(cuEventRecord(e0, s0), CUDA_SUCCESS);  // its own context's stream, whatever is current
  // A stream may wait for another device's event (cuda.h: "hEvent may be from a different
  // context or device than hStream").
  EXPECT_EQ(cuStreamWaitEvent(s1, e0, 0), CUDA_SUCCESS);
  EXPECT_EQ(cuStreamSynchronize(s1), CUDA_SUCCESS);
}
