// runtime_test.cpp: simcuda's libcudart.so.13 on top of its driver: allocation and copies,
// kernels launched through cudaLaunchKernel from their host stubs, cudaGetFuncBySymbol and
// cudaFuncGetParamInfo, errors, pointer attributes, managed memory, capture, driver entry points.
#include <cuda_runtime_api.h>
#include <dlfcn.h>
#include <gtest/gtest.h>

#include <atomic>
#include <vector>

#include "simcuda/kernel.hpp"

namespace {

void scale(float*, int, float) {}
void not_registered(int) {}

void scale_body(void** a, const simcuda_launch_info*) {
  auto [p, n, f] = simcuda::unpack(scale, a);
  p = simcuda::access(p, static_cast<size_t>(n), SIMCUDA_READ_WRITE);
  for (int i = 0; i < n; ++i) p[i] *= f;
}

void* driver_symbol(const char* name) {
  void* h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
  return h ? dlsym(h, name) : nullptr;
}

simcuda_stats stats() {
  simcuda_stats s{};
  auto get = reinterpret_cast<void (*)(simcuda_stats*)>(driver_symbol("simcuda_get_stats"));
  if (get) get(&s);
  return s;
}

class Runtime : public ::testing::Test {
 protected:
  void SetUp() override { ASSERT_NE(simcuda::register_kernel("scale", scale, scale_body), nullptr); }
};

TEST_F(Runtime, MallocCopyLaunchRoundTrip) {
  float* d = nullptr;
  ASSERT_EQ(cudaMalloc(reinterpret_cast<void**>(&d), 100 * sizeof(float)), cudaSuccess);
  std::vector<float> h(100, 2.0f);
  ASSERT_EQ(cudaMemcpy(d, h.data(), 100 * sizeof(float), cudaMemcpyHostToDevice), cudaSuccess);
  ASSERT_EQ(simcuda::launch(scale, dim3(1), dim3(128), nullptr, d, 100, 1.5f), cudaSuccess);
  ASSERT_EQ(cudaMemcpy(h.data(), d, 100 * sizeof(float), cudaMemcpyDefault), cudaSuccess);
  EXPECT_EQ(h[99], 3.0f);
  ASSERT_EQ(cudaMemset(d, 0, 100 * sizeof(float)), cudaSuccess);
  ASSERT_EQ(cudaMemcpy(h.data(), d, sizeof(float), cudaMemcpyDeviceToHost), cudaSuccess);
  EXPECT_EQ(h[0], 0.0f);
  EXPECT_EQ(cudaFree(d), cudaSuccess);
  EXPECT_EQ(cudaFree(nullptr), cudaSuccess);
}

TEST_F(Runtime, FuncBySymbolAndParamInfo) {
  cudaFunction_t f = nullptr;
  ASSERT_EQ(cudaGetFuncBySymbol(&f, reinterpret_cast<const void*>(&scale)), cudaSuccess);
  const char* name = nullptr;
  auto get_name = reinterpret_cast<CUresult (*)(const char**, CUfunction)>(driver_symbol("cuFuncGetName"));
  ASSERT_NE(get_name, nullptr);
  ASSERT_EQ(get_name(&name, f), CUDA_SUCCESS);
  EXPECT_STREQ(name, "scale");
  size_t off = 0, size = 0;
  ASSERT_EQ(cudaFuncGetParamInfo(reinterpret_cast<const void*>(&scale), 2, &off, &size), cudaSuccess);
  EXPECT_EQ(off, 12u);
  EXPECT_EQ(size, 4u);
  EXPECT_EQ(cudaGetFuncBySymbol(&f, reinterpret_cast<const void*>(&not_registered)), cudaErrorInvalidDeviceFunction);
  void* args[] = {nullptr};
  EXPECT_EQ(cudaLaunchKernel(reinterpret_cast<const void*>(&not_registered), dim3(1), dim3(1), args, 0, nullptr),
            cudaErrorInvalidDeviceFunction);
  EXPECT_EQ(cudaGetLastError(), cudaErrorInvalidDeviceFunction);
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);
}

TEST_F(Runtime, OutOfMemoryUsesRuntimeCodes) {
  void* p = nullptr;
  EXPECT_EQ(cudaMalloc(&p, 1ull << 40), cudaErrorMemoryAllocation);
  EXPECT_EQ(p, nullptr);
  EXPECT_STREQ(cudaGetErrorString(cudaErrorMemoryAllocation), "out of memory");
  EXPECT_STREQ(cudaGetErrorName(cudaErrorMemoryAllocation), "cudaErrorMemoryAllocation");
  EXPECT_EQ(cudaMallocAsync(&p, 1ull << 40, nullptr), cudaErrorMemoryAllocation);
  size_t free_b = 0, total = 0;
  ASSERT_EQ(cudaMemGetInfo(&free_b, &total), cudaSuccess);
  EXPECT_EQ(total, 64ull << 20);
}

TEST_F(Runtime, StreamOrderedAllocationAndPerThreadLaunch) {
  float* d = nullptr;
  ASSERT_EQ(cudaMallocAsync(reinterpret_cast<void**>(&d), 64 * sizeof(float), cudaStreamPerThread), cudaSuccess);
  ASSERT_EQ(cudaMemsetAsync(d, 0, 64 * sizeof(float), cudaStreamPerThread), cudaSuccess);
  float one = 1.0f;
  ASSERT_EQ(cudaMemcpyAsync(d, &one, sizeof one, cudaMemcpyHostToDevice, cudaStreamPerThread), cudaSuccess);
  int n = 64;
  float f = 4.0f;
  void* args[] = {&d, &n, &f};
  // The _ptsz entry point with stream 0 is the per-thread default stream, not the legacy one.
  auto launch_ptsz = reinterpret_cast<decltype(&cudaLaunchKernel)>(dlsym(RTLD_DEFAULT, "cudaLaunchKernel_ptsz"));
  ASSERT_NE(launch_ptsz, nullptr);
  ASSERT_EQ(launch_ptsz(reinterpret_cast<const void*>(&scale), dim3(1), dim3(64), args, 0, nullptr), cudaSuccess);
  ASSERT_EQ(cudaStreamSynchronize(cudaStreamPerThread), cudaSuccess);
  auto vns = reinterpret_cast<uint64_t (*)(CUstream)>(driver_symbol("simcuda_stream_virtual_ns"));
  ASSERT_NE(vns, nullptr);
  EXPECT_GT(vns(CU_STREAM_PER_THREAD), 0u);
  EXPECT_EQ(vns(CU_STREAM_LEGACY), 0u);
  float h = 0;
  ASSERT_EQ(cudaMemcpy(&h, d, sizeof h, cudaMemcpyDeviceToHost), cudaSuccess);
  EXPECT_EQ(h, 4.0f);
  ASSERT_EQ(cudaFreeAsync(d, cudaStreamPerThread), cudaSuccess);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  EXPECT_EQ(stats().device_bytes_in_use, 0u);
}

TEST_F(Runtime, ManagedMemoryPrefetchAndPointerAttributes) {
  float* m = nullptr;
  ASSERT_EQ(cudaMallocManaged(reinterpret_cast<void**>(&m), 1 << 20, cudaMemAttachGlobal), cudaSuccess);
  for (int i = 0; i < 16; ++i) m[i] = 1.0f;  // host writes managed memory directly
  cudaMemLocation dev{cudaMemLocationTypeDevice, 0};
  ASSERT_EQ(cudaMemPrefetchAsync(m, 1 << 20, dev, 0, nullptr), cudaSuccess);
  ASSERT_EQ(cudaMemAdvise(m, 1 << 20, cudaMemAdviseSetReadMostly, dev), cudaSuccess);
  ASSERT_EQ(simcuda::launch(scale, dim3(1), dim3(1), nullptr, m, 16, 3.0f), cudaSuccess);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  EXPECT_EQ(m[15], 3.0f);
  EXPECT_EQ(stats().uvm_faults, 0u);
  EXPECT_EQ(stats().managed_resident_bytes, 1u << 20);
  cudaPointerAttributes attr{};
  ASSERT_EQ(cudaPointerGetAttributes(&attr, m), cudaSuccess);
  EXPECT_EQ(attr.type, cudaMemoryTypeManaged);
  void* d = nullptr;
  ASSERT_EQ(cudaMalloc(reinterpret_cast<void**>(&d), 16), cudaSuccess);
  ASSERT_EQ(cudaPointerGetAttributes(&attr, d), cudaSuccess);
  EXPECT_EQ(attr.type, cudaMemoryTypeDevice);
  EXPECT_EQ(attr.hostPointer, nullptr);
  void* pinned = nullptr;
  ASSERT_EQ(cudaMallocHost(&pinned, 16), cudaSuccess);
  ASSERT_EQ(cudaPointerGetAttributes(&attr, pinned), cudaSuccess);
  EXPECT_EQ(attr.type, cudaMemoryTypeHost);
  int local = 0;
  ASSERT_EQ(cudaPointerGetAttributes(&attr, &local), cudaSuccess);
  EXPECT_EQ(attr.type, cudaMemoryTypeUnregistered);
  EXPECT_EQ(cudaFreeHost(pinned), cudaSuccess);
  EXPECT_EQ(cudaFree(m), cudaSuccess);
}

TEST_F(Runtime, HostRegisterMakesCopiesPinnedAndHostFuncsRunInOrder) {
  std::vector<float> host(1 << 20, 1.0f);
  ASSERT_EQ(cudaHostRegister(host.data(), host.size() * sizeof(float), cudaHostRegisterDefault), cudaSuccess);
  EXPECT_EQ(cudaHostRegister(host.data(), 16, cudaHostRegisterDefault), cudaErrorHostMemoryAlreadyRegistered);
  cudaPointerAttributes attr{};
  ASSERT_EQ(cudaPointerGetAttributes(&attr, host.data() + 5), cudaSuccess);
  EXPECT_EQ(attr.type, cudaMemoryTypeHost);
  float* d = nullptr;
  ASSERT_EQ(cudaMalloc(reinterpret_cast<void**>(&d), host.size() * sizeof(float)), cudaSuccess);
  cudaStream_t s;
  ASSERT_EQ(cudaStreamCreate(&s), cudaSuccess);
  cudaEvent_t a, b;
  ASSERT_EQ(cudaEventCreate(&a), cudaSuccess);
  ASSERT_EQ(cudaEventCreate(&b), cudaSuccess);
  ASSERT_EQ(cudaEventRecord(a, s), cudaSuccess);
  ASSERT_EQ(cudaMemcpyAsync(d, host.data(), host.size() * sizeof(float), cudaMemcpyHostToDevice, s), cudaSuccess);
  ASSERT_EQ(cudaEventRecord(b, s), cudaSuccess);
  static std::atomic<int> order{0};
  static int seen_after_copy = -1;
  order = 0;
  ASSERT_EQ(cudaLaunchHostFunc(s, [](void*) { seen_after_copy = order.fetch_add(1); }, nullptr), cudaSuccess);
  ASSERT_EQ(cudaStreamSynchronize(s), cudaSuccess);
  EXPECT_EQ(seen_after_copy, 0);
  float ms = 0;
  ASSERT_EQ(cudaEventElapsedTime(&ms, a, b), cudaSuccess);
  EXPECT_NEAR(ms, (SIMCUDA_COPY_LATENCY_NS + (4 << 20) / SIMCUDA_PINNED_BYTES_PER_NS) / 1e6, 1e-3);
  EXPECT_EQ(cudaHostUnregister(host.data()), cudaSuccess);
  EXPECT_EQ(cudaHostUnregister(host.data()), cudaErrorHostMemoryNotRegistered);
}

TEST_F(Runtime, DeviceQueries) {
  int count = 0, value = 0, version = 0;
  ASSERT_EQ(cudaGetDeviceCount(&count), cudaSuccess);
  EXPECT_EQ(count, 1);
  ASSERT_EQ(cudaDeviceGetAttribute(&value, cudaDevAttrConcurrentManagedAccess, 0), cudaSuccess);
  EXPECT_EQ(value, 1);
  cudaDeviceProp prop{};
  ASSERT_EQ(cudaGetDeviceProperties(&prop, 0), cudaSuccess);
  EXPECT_EQ(prop.totalGlobalMem, 64u << 20);
  EXPECT_EQ(prop.concurrentManagedAccess, 1);
  EXPECT_STRNE(prop.name, "");
  EXPECT_EQ(cudaSetDevice(1), cudaErrorInvalidDevice);
  ASSERT_EQ(cudaDriverGetVersion(&version), cudaSuccess);
  EXPECT_EQ(version, 13000);
}

TEST_F(Runtime, DriverEntryPointsByVersion) {
  void* p = nullptr;
  cudaDriverEntryPointQueryResult st;
  ASSERT_EQ(cudaGetDriverEntryPointByVersion("cuMemAlloc", &p, 12000, cudaEnableDefault, &st), cudaSuccess);
  EXPECT_EQ(st, cudaDriverEntryPointSuccess);
  EXPECT_EQ(p, driver_symbol("cuMemAlloc_v2"));
  ASSERT_EQ(cudaGetDriverEntryPointByVersion("cuLaunchKernel", &p, 13000, cudaEnablePerThreadDefaultStream, &st), cudaSuccess);
  EXPECT_EQ(p, driver_symbol("cuLaunchKernel_ptsz"));
  ASSERT_EQ(cudaGetDriverEntryPointByVersion("cuNotThere", &p, 13000, cudaEnableDefault, &st), cudaSuccess);
  EXPECT_EQ(st, cudaDriverEntryPointSymbolNotFound);
  EXPECT_EQ(p, nullptr);
  ASSERT_EQ(cudaGetDriverEntryPointByVersion("cuMemAllocAsync", &p, 11000, cudaEnableDefault, &st), cudaSuccess);
  EXPECT_EQ(st, cudaDriverEntryPointVersionNotSufficent);
}

TEST_F(Runtime, CaptureReplayAndEvents) {
  cudaStream_t s;
  ASSERT_EQ(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), cudaSuccess);
  float* d = nullptr;
  ASSERT_EQ(cudaMalloc(reinterpret_cast<void**>(&d), 4 * sizeof(float)), cudaSuccess);
  float init[4] = {1, 1, 1, 1};
  ASSERT_EQ(cudaMemcpy(d, init, sizeof init, cudaMemcpyHostToDevice), cudaSuccess);
  ASSERT_EQ(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal), cudaSuccess);
  ASSERT_EQ(simcuda::launch(scale, dim3(1), dim3(4), s, d, 4, 2.0f), cudaSuccess);
  cudaGraph_t g;
  ASSERT_EQ(cudaStreamEndCapture(s, &g), cudaSuccess);
  cudaGraphExec_t exec;
  ASSERT_EQ(cudaGraphInstantiate(&exec, g, 0), cudaSuccess);
  cudaEvent_t a, b;
  ASSERT_EQ(cudaEventCreate(&a), cudaSuccess);
  ASSERT_EQ(cudaEventCreate(&b), cudaSuccess);
  ASSERT_EQ(cudaEventRecord(a, s), cudaSuccess);
  for (int i = 0; i < 3; ++i) ASSERT_EQ(cudaGraphLaunch(exec, s), cudaSuccess);
  ASSERT_EQ(cudaEventRecord(b, s), cudaSuccess);
  ASSERT_EQ(cudaEventSynchronize(b), cudaSuccess);
  float ms = 0;
  ASSERT_EQ(cudaEventElapsedTime(&ms, a, b), cudaSuccess);
  EXPECT_GT(ms, 0.0f);
  float h[4];
  ASSERT_EQ(cudaMemcpy(h, d, sizeof h, cudaMemcpyDeviceToHost), cudaSuccess);
  EXPECT_EQ(h[3], 8.0f);
  EXPECT_EQ(cudaGraphExecDestroy(exec), cudaSuccess);
  EXPECT_EQ(cudaGraphDestroy(g), cudaSuccess);
  EXPECT_EQ(cudaStreamDestroy(s), cudaSuccess);
}

TEST_F(Runtime, IllegalAddressReachesTheNextSynchronisingCall) {
  float* d = nullptr;
  ASSERT_EQ(cudaMalloc(reinterpret_cast<void**>(&d), 4096), cudaSuccess);
  ASSERT_EQ(cudaFree(d), cudaSuccess);
  ASSERT_EQ(simcuda::launch(scale, dim3(1), dim3(1), nullptr, d, 4, 2.0f), cudaSuccess);
  EXPECT_EQ(cudaDeviceSynchronize(), cudaErrorIllegalAddress);
  EXPECT_STREQ(cudaGetErrorString(cudaErrorIllegalAddress), "an illegal memory access was encountered");
  void* p = nullptr;
  EXPECT_EQ(cudaMalloc(&p, 16), cudaErrorIllegalAddress);
}

}  // namespace
