// driver_test.cpp: simcuda driver semantics: versioned and per-thread lookups through
// cuGetProcAddress, parameter info, stream order, cross-stream events, the legacy vs per-thread
// default stream, virtual event timing, stream capture and graph replay, error names.
#include <dlfcn.h>

#include <cstring>
#include <vector>

#include "support.hpp"

using namespace simtest;

namespace {

void* driver_symbol(const char* name) {
  void* h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
  return h ? dlsym(h, name) : nullptr;
}

void* lookup(const char* name, int version, cuuint64_t flags, CUresult* r = nullptr,
             CUdriverProcAddressQueryResult* status = nullptr) {
  void* p = reinterpret_cast<void*>(1);
  CUdriverProcAddressQueryResult s;
  CUresult res = cuGetProcAddress(name, &p, version, flags, &s);
  if (r) *r = res;
  if (status) *status = s;
  return p;
}

}  // namespace

TEST(ProcAddress, CallsBeforeInitFail) {
  CUdeviceptr p = 0;
  EXPECT_EQ(cuMemAlloc(&p, 4096), CUDA_ERROR_NOT_INITIALIZED);
  // cuGetProcAddress itself works before cuInit, as on the real driver.
  EXPECT_NE(lookup("cuInit", 13000, CU_GET_PROC_ADDRESS_DEFAULT), nullptr);
}

TEST(ProcAddress, VersionPicksTheAbiVariant) {
  const auto D = CU_GET_PROC_ADDRESS_DEFAULT;
  EXPECT_EQ(lookup("cuMemAlloc", 12000, D), driver_symbol("cuMemAlloc_v2"));
  EXPECT_EQ(lookup("cuMemFree", 13000, D), driver_symbol("cuMemFree_v2"));
  EXPECT_EQ(lookup("cuMemGetInfo", 11000, D), driver_symbol("cuMemGetInfo_v2"));
  EXPECT_EQ(lookup("cuMemPrefetchAsync", 12000, D), driver_symbol("cuMemPrefetchAsync"));  // CUdevice form
  EXPECT_EQ(lookup("cuMemPrefetchAsync", 12020, D), driver_symbol("cuMemPrefetchAsync_v2"));
  EXPECT_EQ(lookup("cuMemAdvise", 12010, D), driver_symbol("cuMemAdvise"));
  EXPECT_EQ(lookup("cuMemAdvise", 13000, D), driver_symbol("cuMemAdvise_v2"));
  EXPECT_EQ(lookup("cuStreamGetCaptureInfo", 11030, D), driver_symbol("cuStreamGetCaptureInfo_v2"));
  EXPECT_EQ(lookup("cuStreamGetCaptureInfo", 12030, D), driver_symbol("cuStreamGetCaptureInfo_v3"));
  EXPECT_EQ(lookup("cuEventElapsedTime", 12000, D), driver_symbol("cuEventElapsedTime"));
  EXPECT_EQ(lookup("cuEventElapsedTime", 12080, D), driver_symbol("cuEventElapsedTime_v2"));
  EXPECT_EQ(lookup("cuGetProcAddress", 12000, D), driver_symbol("cuGetProcAddress_v2"));
  EXPECT_EQ(lookup("cuGetProcAddress", 11030, D), driver_symbol("cuGetProcAddress"));
  EXPECT_EQ(lookup("cuGraphInstantiate", 12000, D), driver_symbol("cuGraphInstantiateWithFlags"));
  EXPECT_EQ(lookup("cuStreamBeginCapture", 12000, D), driver_symbol("cuStreamBeginCapture_v2"));
  EXPECT_EQ(lookup("cuStreamDestroy", 12000, D), driver_symbol("cuStreamDestroy_v2"));
  // cudaTypedefs.h: PFN_cuCtxSynchronize_v2000(void), PFN_cuCtxSynchronize_v13000(CUcontext).
  EXPECT_EQ(lookup("cuCtxSynchronize", 12090, D), driver_symbol("cuCtxSynchronize"));
  EXPECT_EQ(lookup("cuCtxSynchronize", 13000, D), driver_symbol("cuCtxSynchronize_v2"));
  EXPECT_NE(driver_symbol("cuMemAlloc_v2"), nullptr);
}

TEST(ProcAddress, PerThreadFlagPicksPtszAndPtds) {
  const auto PT = CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM;
  const auto LEG = CU_GET_PROC_ADDRESS_LEGACY_STREAM;
  EXPECT_EQ(lookup("cuLaunchKernel", 13000, PT), driver_symbol("cuLaunchKernel_ptsz"));
  EXPECT_EQ(lookup("cuLaunchKernel", 13000, LEG), driver_symbol("cuLaunchKernel"));
  EXPECT_EQ(lookup("cuLaunchKernel", 13000, CU_GET_PROC_ADDRESS_DEFAULT), driver_symbol("cuLaunchKernel"));
  EXPECT_EQ(lookup("cuMemcpyHtoD", 13000, PT), driver_symbol("cuMemcpyHtoD_v2_ptds"));
  EXPECT_EQ(lookup("cuMemcpyHtoDAsync", 13000, PT), driver_symbol("cuMemcpyHtoDAsync_v2_ptsz"));
  EXPECT_EQ(lookup("cuMemPrefetchAsync", 13000, PT), driver_symbol("cuMemPrefetchAsync_v2_ptsz"));
  EXPECT_EQ(lookup("cuStreamSynchronize", 13000, PT), driver_symbol("cuStreamSynchronize_ptsz"));
  EXPECT_EQ(lookup("cuMemAllocAsync", 13000, PT), driver_symbol("cuMemAllocAsync_ptsz"));
  // No per-thread variant: the legacy one is returned.
  EXPECT_EQ(lookup("cuMemAlloc", 13000, PT), driver_symbol("cuMemAlloc_v2"));
}

TEST(ProcAddress, UnknownTooNewAndBadArguments) {
  CUresult r;
  CUdriverProcAddressQueryResult st;
  EXPECT_EQ(lookup("cuNoSuchCall", 13000, 0, &r, &st), nullptr);
  EXPECT_EQ(r, CUDA_ERROR_NOT_FOUND);
  EXPECT_EQ(st, CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND);
  EXPECT_EQ(lookup("cuMemAllocAsync", 11000, 0, &r, &st), nullptr);
  EXPECT_EQ(st, CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT);
  lookup("cuMemAlloc", 14000, 0, &r);
  EXPECT_EQ(r, CUDA_ERROR_INVALID_VALUE);  // above the driver's version
  lookup("cuMemAlloc", 13000, 8, &r);
  EXPECT_EQ(r, CUDA_ERROR_INVALID_VALUE);  // unknown flag
}

// cuda.h, cuCtxSynchronize_v2: NULL is the current context; anything else must be a context.
TEST_F(Simcuda, CtxSynchronizeV2ChecksItsContext) {
  EXPECT_EQ(cuCtxSynchronize_v2(nullptr), CUDA_SUCCESS);
  EXPECT_EQ(cuCtxSynchronize_v2(ctx_), CUDA_SUCCESS);
  int not_a_context = 0;
  EXPECT_EQ(cuCtxSynchronize_v2(reinterpret_cast<CUcontext>(&not_a_context)), CUDA_ERROR_INVALID_CONTEXT);
}

TEST_F(Simcuda, ParamInfoAndName) {
  size_t off = 99, size = 99;
  ASSERT_EQ(cuFuncGetParamInfo(k.fill, 0, &off, &size), CUDA_SUCCESS);
  EXPECT_EQ(off, 0u);
  EXPECT_EQ(size, sizeof(float*));
  ASSERT_EQ(cuFuncGetParamInfo(k.fill, 1, &off, &size), CUDA_SUCCESS);
  EXPECT_EQ(off, 8u);
  EXPECT_EQ(size, 4u);
  ASSERT_EQ(cuFuncGetParamInfo(k.fill, 2, &off, &size), CUDA_SUCCESS);
  EXPECT_EQ(off, 12u);
  EXPECT_EQ(cuFuncGetParamInfo(k.fill, 3, &off, &size), CUDA_ERROR_INVALID_VALUE);
  const char* name = nullptr;
  ASSERT_EQ(cuFuncGetName(&name, k.fill), CUDA_SUCCESS);
  EXPECT_STREQ(name, "k_fill");
  EXPECT_EQ(cuFuncGetName(&name, reinterpret_cast<CUfunction>(&name)), CUDA_ERROR_INVALID_HANDLE);
  EXPECT_EQ(simcuda_function_for_stub(reinterpret_cast<const void*>(&k_fill)), k.fill);
}

TEST_F(Simcuda, LaunchWithExtraBufferAndLaunchEx) {
  CUdeviceptr d = 0;
  ASSERT_EQ(cuMemAlloc(&d, 64 * sizeof(float)), CUDA_SUCCESS);
  struct {
    float* p;
    int n;
    float v;
  } packed{reinterpret_cast<float*>(d), 64, 3.5f};
  size_t bytes = sizeof(packed);
  void* extra[] = {CU_LAUNCH_PARAM_BUFFER_POINTER, &packed, CU_LAUNCH_PARAM_BUFFER_SIZE, &bytes, CU_LAUNCH_PARAM_END};
  ASSERT_EQ(cuLaunchKernel(k.fill, 1, 1, 1, 64, 1, 1, 0, nullptr, nullptr, extra), CUDA_SUCCESS);
  CUlaunchConfig cfg{};
  cfg.gridDimX = cfg.gridDimY = cfg.gridDimZ = 1;
  cfg.blockDimX = cfg.blockDimY = cfg.blockDimZ = 1;
  float* p = reinterpret_cast<float*>(d);
  int n = 64;
  void* args[] = {&p, &n};
  ASSERT_EQ(cuLaunchKernelEx(&cfg, k.add_one, args, nullptr), CUDA_SUCCESS);
  std::vector<float> h(64);
  ASSERT_EQ(cuMemcpyDtoH(h.data(), d, 64 * sizeof(float)), CUDA_SUCCESS);
  EXPECT_EQ(h[0], 4.5f);
  EXPECT_EQ(h[63], 4.5f);
  EXPECT_EQ(cuLaunchKernel(k.fill, 0, 1, 1, 1, 1, 1, 0, nullptr, args, nullptr), CUDA_ERROR_INVALID_VALUE);
}

TEST_F(Simcuda, StreamOrderHoldsUnderJitter) {
  // SIMCUDA_JITTER_US is set for this executable: workers sleep randomly before each op.
  CUstream s;
  ASSERT_EQ(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING), CUDA_SUCCESS);
  CUdeviceptr log = 0;
  ASSERT_EQ(cuMemAlloc(&log, 4096), CUDA_SUCCESS);
  ASSERT_EQ(cuMemsetD8Async(log, 0, 4096, s), CUDA_SUCCESS);
  for (int i = 0; i < 200; ++i) ASSERT_EQ(launch(k.log, s, reinterpret_cast<int*>(log), i), CUDA_SUCCESS);
  std::vector<int> h(1024);
  ASSERT_EQ(cuMemcpyDtoHAsync(h.data(), log, 4096, s), CUDA_SUCCESS);
  ASSERT_EQ(cuStreamSynchronize(s), CUDA_SUCCESS);
  ASSERT_EQ(h[0], 200);
  for (int i = 0; i < 200; ++i) ASSERT_EQ(h[1 + i], i);
  EXPECT_EQ(cuStreamDestroy(s), CUDA_SUCCESS);
}

TEST_F(Simcuda, EventOrdersAcrossStreams) {
  CUstream a, b;
  ASSERT_EQ(cuStreamCreate(&a, CU_STREAM_NON_BLOCKING), CUDA_SUCCESS);
  ASSERT_EQ(cuStreamCreate(&b, CU_STREAM_NON_BLOCKING), CUDA_SUCCESS);
  CUevent e;
  ASSERT_EQ(cuEventCreate(&e, 0), CUDA_SUCCESS);
  CUdeviceptr x = 0, y = 0;
  ASSERT_EQ(cuMemAlloc(&x, 256), CUDA_SUCCESS);
  ASSERT_EQ(cuMemAlloc(&y, 256), CUDA_SUCCESS);
  ASSERT_EQ(cuMemsetD32(x, 0, 64), CUDA_SUCCESS);
  g_gate[0] = false;
  ASSERT_EQ(launch(k.wait_gate, a, 0), CUDA_SUCCESS);  // a is held until we open the gate
  ASSERT_EQ(launch(k.fill, a, reinterpret_cast<float*>(x), 64, 41.0f), CUDA_SUCCESS);
  ASSERT_EQ(cuEventRecord(e, a), CUDA_SUCCESS);
  ASSERT_EQ(cuStreamWaitEvent(b, e, 0), CUDA_SUCCESS);
  ASSERT_EQ(launch(k.copy_plus_one, b, reinterpret_cast<const float*>(x), reinterpret_cast<float*>(y), 64), CUDA_SUCCESS);
  std::this_thread::sleep_for(std::chrono::milliseconds(30));
  EXPECT_EQ(cuStreamQuery(b), CUDA_ERROR_NOT_READY);  // b waits for a's event
  EXPECT_EQ(cuEventQuery(e), CUDA_ERROR_NOT_READY);
  g_gate[0] = true;
  ASSERT_EQ(cuStreamSynchronize(b), CUDA_SUCCESS);
  float h = 0;
  ASSERT_EQ(cuMemcpyDtoH(&h, y, sizeof h), CUDA_SUCCESS);
  EXPECT_EQ(h, 42.0f);
  EXPECT_EQ(cuEventQuery(e), CUDA_SUCCESS);
}

TEST_F(Simcuda, LegacyStreamWaitsForBlockingStreamsOnly) {
  CUstream blocking, nonblocking;
  ASSERT_EQ(cuStreamCreate(&blocking, CU_STREAM_DEFAULT), CUDA_SUCCESS);
  ASSERT_EQ(cuStreamCreate(&nonblocking, CU_STREAM_NON_BLOCKING), CUDA_SUCCESS);
  g_gate[0] = false;
  g_gate[1] = false;
  ASSERT_EQ(launch(k.wait_gate, nonblocking, 0), CUDA_SUCCESS);
  // Legacy work does not wait for the held non-blocking stream.
  ASSERT_EQ(launch(k.fixed_1ms, CU_STREAM_LEGACY), CUDA_SUCCESS);
  ASSERT_EQ(cuStreamSynchronize(CU_STREAM_LEGACY), CUDA_SUCCESS);
  EXPECT_EQ(cuStreamQuery(nonblocking), CUDA_ERROR_NOT_READY);
  ASSERT_EQ(launch(k.wait_gate, blocking, 1), CUDA_SUCCESS);
  // The per-thread default stream does not wait for another blocking stream...
  ASSERT_EQ(launch(k.fixed_1ms, CU_STREAM_PER_THREAD), CUDA_SUCCESS);
  ASSERT_EQ(cuStreamSynchronize(CU_STREAM_PER_THREAD), CUDA_SUCCESS);
  EXPECT_EQ(cuStreamQuery(blocking), CUDA_ERROR_NOT_READY);
  // ...but legacy work does wait for the held blocking stream.
  ASSERT_EQ(launch(k.fixed_1ms, nullptr), CUDA_SUCCESS);
  std::this_thread::sleep_for(std::chrono::milliseconds(30));
  EXPECT_EQ(cuStreamQuery(nullptr), CUDA_ERROR_NOT_READY);
  g_gate[1] = true;
  ASSERT_EQ(cuStreamSynchronize(nullptr), CUDA_SUCCESS);
  g_gate[0] = true;
  ASSERT_EQ(cuCtxSynchronize(), CUDA_SUCCESS);
}

TEST_F(Simcuda, PerThreadDefaultStreamSyncsWithLegacy) {
  g_gate[2] = false;
  // NULL through the _ptsz entry point is this thread's per-thread stream.
  void* args[] = {nullptr};
  int gate = 2;
  args[0] = &gate;
  auto launch_ptsz = reinterpret_cast<decltype(&cuLaunchKernel)>(
      lookup("cuLaunchKernel", 13000, CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM));
  ASSERT_EQ(launch_ptsz(k.wait_gate, 1, 1, 1, 1, 1, 1, 0, nullptr, args, nullptr), CUDA_SUCCESS);
  EXPECT_EQ(cuStreamQuery(CU_STREAM_PER_THREAD), CUDA_ERROR_NOT_READY);
  EXPECT_EQ(cuStreamQuery(nullptr), CUDA_SUCCESS);  // the legacy stream has nothing queued
  // The per-thread stream is blocking: legacy work waits for it.
  ASSERT_EQ(launch(k.fixed_1ms, nullptr), CUDA_SUCCESS);
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  EXPECT_EQ(cuStreamQuery(nullptr), CUDA_ERROR_NOT_READY);
  g_gate[2] = true;
  EXPECT_EQ(cuStreamSynchronize(nullptr), CUDA_SUCCESS);
  // Another thread's per-thread stream is a different stream.
  unsigned long long mine = 0, theirs = 0;
  ASSERT_EQ(cuStreamGetId(CU_STREAM_PER_THREAD, &mine), CUDA_SUCCESS);
  std::thread t([&] {
    cuCtxSetCurrent(ctx_);
    cuStreamGetId(CU_STREAM_PER_THREAD, &theirs);
  });
  t.join();
  EXPECT_NE(mine, theirs);
}

TEST_F(Simcuda, EventsReportVirtualElapsedTime) {
  CUstream s;
  ASSERT_EQ(cuStreamCreate(&s, 0), CUDA_SUCCESS);
  CUevent start, stop, untimed;
  ASSERT_EQ(cuEventCreate(&start, 0), CUDA_SUCCESS);
  ASSERT_EQ(cuEventCreate(&stop, 0), CUDA_SUCCESS);
  ASSERT_EQ(cuEventCreate(&untimed, CU_EVENT_DISABLE_TIMING), CUDA_SUCCESS);
  ASSERT_EQ(cuEventRecord(start, s), CUDA_SUCCESS);
  for (int i = 0; i < 3; ++i) ASSERT_EQ(launch(k.fixed_1ms, s), CUDA_SUCCESS);
  ASSERT_EQ(cuEventRecord(stop, s), CUDA_SUCCESS);
  ASSERT_EQ(cuEventSynchronize(stop), CUDA_SUCCESS);
  float ms = 0;
  ASSERT_EQ(cuEventElapsedTime(&ms, start, stop), CUDA_SUCCESS);
  EXPECT_FLOAT_EQ(ms, 3.0f);  // three kernels costed at exactly 1 ms of virtual time
  // Pinned copies cost less virtual time than pageable ones of the same size.
  const size_t bytes = 8 << 20;
  void* pinned = nullptr;
  ASSERT_EQ(cuMemHostAlloc(&pinned, bytes, 0), CUDA_SUCCESS);
  std::vector<char> pageable(bytes);
  CUdeviceptr d = 0;
  ASSERT_EQ(cuMemAlloc(&d, bytes), CUDA_SUCCESS);
  float t_pinned = 0, t_pageable = 0;
  ASSERT_EQ(cuEventRecord(start, s), CUDA_SUCCESS);
  ASSERT_EQ(cuMemcpyHtoDAsync(d, pinned, bytes, s), CUDA_SUCCESS);
  ASSERT_EQ(cuEventRecord(stop, s), CUDA_SUCCESS);
  ASSERT_EQ(cuEventSynchronize(stop), CUDA_SUCCESS);
  ASSERT_EQ(cuEventElapsedTime(&t_pinned, start, stop), CUDA_SUCCESS);
  ASSERT_EQ(cuEventRecord(start, s), CUDA_SUCCESS);
  ASSERT_EQ(cuMemcpyHtoDAsync(d, pageable.data(), bytes, s), CUDA_SUCCESS);
  ASSERT_EQ(cuEventRecord(stop, s), CUDA_SUCCESS);
  ASSERT_EQ(cuEventSynchronize(stop), CUDA_SUCCESS);
  ASSERT_EQ(cuEventElapsedTime(&t_pageable, start, stop), CUDA_SUCCESS);
  EXPECT_NEAR(t_pinned, (SIMCUDA_COPY_LATENCY_NS + bytes / SIMCUDA_PINNED_BYTES_PER_NS) / 1e6, 1e-3);
  EXPECT_NEAR(t_pageable, (SIMCUDA_COPY_LATENCY_NS + bytes / SIMCUDA_PAGEABLE_BYTES_PER_NS) / 1e6, 1e-3);
  EXPECT_EQ(cuEventElapsedTime(&ms, start, untimed), CUDA_ERROR_INVALID_HANDLE);
  EXPECT_EQ(cuMemFreeHost(pinned), CUDA_SUCCESS);
}

TEST_F(Simcuda, VirtualTimeWaitsTakeTheMax) {
  CUstream a, b;
  ASSERT_EQ(cuStreamCreate(&a, CU_STREAM_NON_BLOCKING), CUDA_SUCCESS);
  ASSERT_EQ(cuStreamCreate(&b, CU_STREAM_NON_BLOCKING), CUDA_SUCCESS);
  CUevent e, b0, b1;
  for (CUevent* ev : {&e, &b0, &b1}) ASSERT_EQ(cuEventCreate(ev, 0), CUDA_SUCCESS);
  ASSERT_EQ(cuEventRecord(b0, b), CUDA_SUCCESS);
  for (int i = 0; i < 5; ++i) ASSERT_EQ(launch(k.fixed_1ms, a), CUDA_SUCCESS);
  ASSERT_EQ(cuEventRecord(e, a), CUDA_SUCCESS);
  ASSERT_EQ(launch(k.fixed_1ms, b), CUDA_SUCCESS);  // b: 1 ms of its own
  ASSERT_EQ(cuStreamWaitEvent(b, e, 0), CUDA_SUCCESS);  // then waits for a's 5 ms
  ASSERT_EQ(launch(k.fixed_1ms, b), CUDA_SUCCESS);
  ASSERT_EQ(cuEventRecord(b1, b), CUDA_SUCCESS);
  ASSERT_EQ(cuCtxSynchronize(), CUDA_SUCCESS);
  float ms = 0;
  ASSERT_EQ(cuEventElapsedTime(&ms, b0, b1), CUDA_SUCCESS);
  EXPECT_FLOAT_EQ(ms, 6.0f);  // max(1, 5) + 1
}

// The host's clock moves only when the host waits, to the finish of what it waited for, and
// later work starts no earlier (a kernel enqueued after the host waited for 3 ms ends at 4 ms
// although its stream was idle).
TEST_F(Simcuda, HostClockMovesOnlyWhenTheHostWaits) {
  CUstream a, b;
  ASSERT_EQ(cuStreamCreate(&a, CU_STREAM_NON_BLOCKING), CUDA_SUCCESS);
  ASSERT_EQ(cuStreamCreate(&b, CU_STREAM_NON_BLOCKING), CUDA_SUCCESS);
  EXPECT_EQ(simcuda_host_virtual_ns(), 0u);
  for (int i = 0; i < 3; ++i) ASSERT_EQ(launch(k.fixed_1ms, a), CUDA_SUCCESS);
  std::this_thread::sleep_for(std::chrono::milliseconds(20));  // executed or not: no wait yet
  EXPECT_EQ(simcuda_host_virtual_ns(), 0u);
  ASSERT_EQ(cuStreamSynchronize(a), CUDA_SUCCESS);
  EXPECT_EQ(simcuda_host_virtual_ns(), 3000000u);
  ASSERT_EQ(launch(k.fixed_1ms, b), CUDA_SUCCESS);
  EXPECT_EQ(simcuda_host_virtual_ns(), 3000000u);
  ASSERT_EQ(cuStreamSynchronize(b), CUDA_SUCCESS);
  EXPECT_EQ(simcuda_stream_virtual_ns(b), 4000000u);
  EXPECT_EQ(simcuda_host_virtual_ns(), 4000000u);
  simcuda_stats st{};
  simcuda_get_stats(&st);
  EXPECT_EQ(st.max_stream_virtual_ns, 4000000u);
}

// Queries answer in virtual time (cuda.h, cuStreamQuery: SUCCESS "if all operations in the
// stream ... have completed"): work the worker has already run in real time is still in flight
// until the host's clock reaches its finish, and a query moves no clock. So what the host
// submits after a query that said NOT_READY may be ordered after that work, and a timeline does
// not depend on how far the workers got.
TEST_F(Simcuda, QueriesAnswerInVirtualTimeAndMoveNoClock) {
  CUstream a, b;
  ASSERT_EQ(cuStreamCreate(&a, CU_STREAM_NON_BLOCKING), CUDA_SUCCESS);
  ASSERT_EQ(cuStreamCreate(&b, CU_STREAM_NON_BLOCKING), CUDA_SUCCESS);
  CUevent e, e_b;
  ASSERT_EQ(cuEventCreate(&e, 0), CUDA_SUCCESS);
  ASSERT_EQ(cuEventCreate(&e_b, 0), CUDA_SUCCESS);
  const auto before = simcuda_host_virtual_ns();
  for (int i = 0; i < 3; ++i) ASSERT_EQ(launch(k.fixed_1ms, a), CUDA_SUCCESS);
  ASSERT_EQ(cuEventRecord(e, a), CUDA_SUCCESS);
  // Let the worker run them in real time (bounded): the stream's virtual clock shows it.
  for (int i = 0; i < 5000 && simcuda_stream_virtual_ns(a) < before + 3000000u; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  ASSERT_GE(simcuda_stream_virtual_ns(a), before + 3000000u);
  EXPECT_EQ(cuStreamQuery(a), CUDA_ERROR_NOT_READY);  // run, but not by the host's clock
  EXPECT_EQ(cuEventQuery(e), CUDA_ERROR_NOT_READY);
  float ms = 0;
  EXPECT_EQ(cuEventElapsedTime(&ms, e, e), CUDA_ERROR_NOT_READY);
  EXPECT_EQ(simcuda_host_virtual_ns(), before);  // a query moves nothing
  // The host waits for 4 ms of other work: past a's finish, the queries say done.
  for (int i = 0; i < 4; ++i) ASSERT_EQ(launch(k.fixed_1ms, b), CUDA_SUCCESS);
  ASSERT_EQ(cuEventRecord(e_b, b), CUDA_SUCCESS);
  ASSERT_EQ(cuEventSynchronize(e_b), CUDA_SUCCESS);
  EXPECT_EQ(simcuda_host_virtual_ns(), before + 4000000u);
  EXPECT_EQ(cuStreamQuery(a), CUDA_SUCCESS);
  EXPECT_EQ(cuEventQuery(e), CUDA_SUCCESS);
  EXPECT_EQ(cuEventElapsedTime(&ms, e, e_b), CUDA_SUCCESS);
  EXPECT_FLOAT_EQ(ms, 1.0f);  // a ended at 3 ms, b at 4
  EXPECT_EQ(simcuda_host_virtual_ns(), before + 4000000u);
  EXPECT_EQ(cuEventDestroy(e), CUDA_SUCCESS);
  EXPECT_EQ(cuEventDestroy(e_b), CUDA_SUCCESS);
}

// Host time (simcuda_set_host_time_scale): the wall time the host spends between calls moves
// its clock, so a kernel submitted after 30 ms of host work starts no earlier (its stream
// idles meanwhile); scaled by the factor given; off, the same program's clock ignores it.
TEST_F(Simcuda, HostTimeDelaysWorkSubmittedAfterIt) {
  CUstream a;
  ASSERT_EQ(cuStreamCreate(&a, CU_STREAM_NON_BLOCKING), CUDA_SUCCESS);
  auto busy = [](int ms) {  // host work: the thread runs, it does not wait in simcuda
    const auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(ms);
    while (std::chrono::steady_clock::now() < until) {
    }
  };
  ASSERT_EQ(launch(k.fixed_1ms, a), CUDA_SUCCESS);
  busy(30);  // off: ignored
  ASSERT_EQ(launch(k.fixed_1ms, a), CUDA_SUCCESS);
  ASSERT_EQ(cuStreamSynchronize(a), CUDA_SUCCESS);
  EXPECT_EQ(simcuda_host_virtual_ns(), 2000000u);
  simcuda_set_host_time_scale(0.5);
  ASSERT_EQ(launch(k.fixed_1ms, a), CUDA_SUCCESS);  // the first call since: host time counts from its return
  busy(30);
  ASSERT_EQ(launch(k.fixed_1ms, a), CUDA_SUCCESS);
  ASSERT_EQ(cuStreamSynchronize(a), CUDA_SUCCESS);
  const std::uint64_t t = simcuda_host_virtual_ns();
  // 2 ms, then the first kernel (1 ms) while the host works 15 ms (30 x 0.5), then the second:
  // at least 2 + 15 + 1 = 18 ms; well under 2 + 30 + 1 (the scale applies).
  EXPECT_GE(t, 18000000u);
  EXPECT_LT(t, 30000000u);
  simcuda_set_host_time_scale(0);
}

TEST_F(Simcuda, CaptureAndReplayGraph) {
  CUstream s;
  ASSERT_EQ(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING), CUDA_SUCCESS);
  CUdeviceptr a = 0, b = 0;
  ASSERT_EQ(cuMemAlloc(&a, 64 * sizeof(float)), CUDA_SUCCESS);
  ASSERT_EQ(cuMemAlloc(&b, 64 * sizeof(float)), CUDA_SUCCESS);
  ASSERT_EQ(cuMemsetD32(a, 0, 64), CUDA_SUCCESS);
  ASSERT_EQ(cuStreamBeginCapture(s, CU_STREAM_CAPTURE_MODE_GLOBAL), CUDA_SUCCESS);
  CUstreamCaptureStatus st;
  ASSERT_EQ(cuStreamIsCapturing(s, &st), CUDA_SUCCESS);
  EXPECT_EQ(st, CU_STREAM_CAPTURE_STATUS_ACTIVE);
  for (int i = 0; i < 3; ++i) ASSERT_EQ(launch(k.add_one, s, reinterpret_cast<float*>(a), 64), CUDA_SUCCESS);
  ASSERT_EQ(cuMemcpyDtoDAsync(b, a, 64 * sizeof(float), s), CUDA_SUCCESS);
  CUgraph g = nullptr;
  ASSERT_EQ(cuStreamEndCapture(s, &g), CUDA_SUCCESS);
  size_t nodes = 0;
  ASSERT_EQ(cuGraphGetNodes(g, nullptr, &nodes), CUDA_SUCCESS);
  EXPECT_EQ(nodes, 4u);
  float h = -1;
  ASSERT_EQ(cuMemcpyDtoH(&h, a, sizeof h), CUDA_SUCCESS);
  EXPECT_EQ(h, 0.0f);  // captured work did not run
  CUgraphExec exec = nullptr;
  ASSERT_EQ(cuGraphInstantiate(&exec, g, 0), CUDA_SUCCESS);
  for (int i = 0; i < 5; ++i) ASSERT_EQ(cuGraphLaunch(exec, s), CUDA_SUCCESS);
  ASSERT_EQ(cuStreamSynchronize(s), CUDA_SUCCESS);
  ASSERT_EQ(cuMemcpyDtoH(&h, b, sizeof h), CUDA_SUCCESS);
  EXPECT_EQ(h, 15.0f);
  EXPECT_EQ(cuGraphExecDestroy(exec), CUDA_SUCCESS);
  EXPECT_EQ(cuGraphDestroy(g), CUDA_SUCCESS);
}

TEST_F(Simcuda, SynchronisingInsideCaptureInvalidatesIt) {
  CUstream s;
  ASSERT_EQ(cuStreamCreate(&s, 0), CUDA_SUCCESS);
  ASSERT_EQ(cuStreamBeginCapture(s, CU_STREAM_CAPTURE_MODE_GLOBAL), CUDA_SUCCESS);
  ASSERT_EQ(launch(k.fixed_1ms, s), CUDA_SUCCESS);
  EXPECT_EQ(cuStreamSynchronize(s), CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED);
  // Legacy work while a blocking stream captures would depend on it: refused.
  EXPECT_EQ(launch(k.fixed_1ms, nullptr), CUDA_ERROR_STREAM_CAPTURE_IMPLICIT);
  CUgraph g = nullptr;
  EXPECT_EQ(cuStreamEndCapture(s, &g), CUDA_ERROR_STREAM_CAPTURE_INVALIDATED);
  EXPECT_EQ(g, nullptr);
  EXPECT_EQ(cuStreamBeginCapture(nullptr, CU_STREAM_CAPTURE_MODE_GLOBAL), CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED);
}

// cuda.h, cuThreadExchangeStreamCaptureMode: a thread in GLOBAL mode is prohibited from
// potentially unsafe calls while another thread has a GLOBAL capture; the call fails and the
// capture is invalidated (PyTorch's NCCL watchdog querying events, pytorch#104487).
TEST_F(Simcuda, UnsafeCallOnAnotherThreadBreaksAGlobalCaptureUnlessThatThreadIsRelaxed) {
  CUevent ev;
  ASSERT_EQ(cuEventCreate(&ev, 0), CUDA_SUCCESS);
  ASSERT_EQ(cuEventRecord(ev, nullptr), CUDA_SUCCESS);
  // Completed before any capture: an allowed query then says CUDA_SUCCESS, never NOT_READY
  // (a loaded CI machine's worker had not reached the record yet: 600 instead of 0).
  ASSERT_EQ(cuEventSynchronize(ev), CUDA_SUCCESS);
  auto on_other_thread = [&](CUstreamCaptureMode mode) {
    CUresult r = CUDA_ERROR_UNKNOWN;
    std::thread t([&] {
      cuCtxSetCurrent(ctx_);
      CUstreamCaptureMode m = mode;
      if (cuThreadExchangeStreamCaptureMode(&m) != CUDA_SUCCESS) return;
      r = cuEventQuery(ev);
    });
    t.join();
    return r;
  };
  for (CUstreamCaptureMode capture_mode : {CU_STREAM_CAPTURE_MODE_GLOBAL, CU_STREAM_CAPTURE_MODE_THREAD_LOCAL}) {
    for (CUstreamCaptureMode thread_mode :
         {CU_STREAM_CAPTURE_MODE_GLOBAL, CU_STREAM_CAPTURE_MODE_THREAD_LOCAL, CU_STREAM_CAPTURE_MODE_RELAXED}) {
      SCOPED_TRACE(testing::Message() << "capture " << capture_mode << ", other thread " << thread_mode);
      CUstream s;
      ASSERT_EQ(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING), CUDA_SUCCESS);
      ASSERT_EQ(cuStreamBeginCapture(s, capture_mode), CUDA_SUCCESS);
      ASSERT_EQ(launch(k.fixed_1ms, s), CUDA_SUCCESS);
      const bool breaks = capture_mode == CU_STREAM_CAPTURE_MODE_GLOBAL && thread_mode == CU_STREAM_CAPTURE_MODE_GLOBAL;
      EXPECT_EQ(on_other_thread(thread_mode), breaks ? CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED : CUDA_SUCCESS);
      CUgraph g = nullptr;
      EXPECT_EQ(cuStreamEndCapture(s, &g), breaks ? CUDA_ERROR_STREAM_CAPTURE_INVALIDATED : CUDA_SUCCESS);
      if (g != nullptr) {
        EXPECT_EQ(cuGraphDestroy(g), CUDA_SUCCESS);
      }
      EXPECT_EQ(cuStreamDestroy(s), CUDA_SUCCESS);
    }
  }
  EXPECT_EQ(cuEventQuery(ev), CUDA_SUCCESS);  // nothing captured any more
  CUstreamCaptureMode bad{};
  const int seven = 7;  // no such mode (stored as the integer a caller might pass)
  std::memcpy(&bad, &seven, sizeof seven);
  EXPECT_EQ(cuThreadExchangeStreamCaptureMode(&bad), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuThreadExchangeStreamCaptureMode(nullptr), CUDA_ERROR_INVALID_VALUE);
}

// The capturing thread itself: unsafe calls are prohibited unless it (or the capture) is RELAXED.
TEST_F(Simcuda, UnsafeCallOnTheCapturingThreadFollowsItsMode) {
  CUstream s;
  ASSERT_EQ(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING), CUDA_SUCCESS);
  ASSERT_EQ(cuStreamBeginCapture(s, CU_STREAM_CAPTURE_MODE_THREAD_LOCAL), CUDA_SUCCESS);
  CUstreamCaptureMode m = CU_STREAM_CAPTURE_MODE_RELAXED;
  ASSERT_EQ(cuThreadExchangeStreamCaptureMode(&m), CUDA_SUCCESS);
  EXPECT_EQ(m, CU_STREAM_CAPTURE_MODE_GLOBAL);  // the previous mode comes back
  CUdeviceptr p = 0;
  EXPECT_EQ(cuMemAllocManaged(&p, 4096, CU_MEM_ATTACH_GLOBAL), CUDA_SUCCESS);  // relaxed: allowed
  ASSERT_EQ(cuThreadExchangeStreamCaptureMode(&m), CUDA_SUCCESS);  // back to GLOBAL
  CUdeviceptr q = 0;
  EXPECT_EQ(cuMemAlloc(&q, 4096), CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED);
  CUgraph g = nullptr;
  EXPECT_EQ(cuStreamEndCapture(s, &g), CUDA_ERROR_STREAM_CAPTURE_INVALIDATED);
  EXPECT_EQ(cuMemFree(p), CUDA_SUCCESS);
  // Unless begun RELAXED, the capture ends on the thread that began it.
  ASSERT_EQ(cuStreamBeginCapture(s, CU_STREAM_CAPTURE_MODE_GLOBAL), CUDA_SUCCESS);
  CUresult other = CUDA_ERROR_UNKNOWN;
  std::thread([&] {
    cuCtxSetCurrent(ctx_);
    CUgraph og = nullptr;
    other = cuStreamEndCapture(s, &og);
  }).join();
  EXPECT_EQ(other, CUDA_ERROR_STREAM_CAPTURE_WRONG_THREAD);
  ASSERT_EQ(cuStreamEndCapture(s, &g), CUDA_SUCCESS);
  EXPECT_EQ(cuGraphDestroy(g), CUDA_SUCCESS);
}

TEST_F(Simcuda, CaptureToAnExistingGraphAddsItsNodes) {
  CUstream s;
  ASSERT_EQ(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING), CUDA_SUCCESS);
  CUdeviceptr a = 0;
  ASSERT_EQ(cuMemAlloc(&a, 64 * sizeof(float)), CUDA_SUCCESS);
  ASSERT_EQ(cuMemsetD32(a, 0, 64), CUDA_SUCCESS);
  CUgraph g = nullptr;
  ASSERT_EQ(cuGraphCreate(&g, 0), CUDA_SUCCESS);
  for (int round = 0; round < 2; ++round) {  // two captures into the same graph
    ASSERT_EQ(cuStreamBeginCaptureToGraph(s, g, nullptr, nullptr, 0, CU_STREAM_CAPTURE_MODE_GLOBAL), CUDA_SUCCESS);
    ASSERT_EQ(launch(k.add_one, s, reinterpret_cast<float*>(a), 64), CUDA_SUCCESS);
    CUgraph out = nullptr;
    ASSERT_EQ(cuStreamEndCapture(s, &out), CUDA_SUCCESS);
    EXPECT_EQ(out, g);
  }
  size_t nodes = 0;
  ASSERT_EQ(cuGraphGetNodes(g, nullptr, &nodes), CUDA_SUCCESS);
  EXPECT_EQ(nodes, 2u);
  CUgraphExec exec = nullptr;
  ASSERT_EQ(cuGraphInstantiate(&exec, g, 0), CUDA_SUCCESS);
  ASSERT_EQ(cuGraphLaunch(exec, s), CUDA_SUCCESS);
  ASSERT_EQ(cuStreamSynchronize(s), CUDA_SUCCESS);
  float h = 0;
  ASSERT_EQ(cuMemcpyDtoH(&h, a, sizeof h), CUDA_SUCCESS);
  EXPECT_EQ(h, 2.0f);
  EXPECT_EQ(cuGraphExecDestroy(exec), CUDA_SUCCESS);
  EXPECT_EQ(cuGraphDestroy(g), CUDA_SUCCESS);
  EXPECT_EQ(cuGraphCreate(&g, 1), CUDA_ERROR_INVALID_VALUE);
}

TEST(Errors, NamesAndStrings) {
  const char* s = nullptr;
  ASSERT_EQ(cuGetErrorName(CUDA_ERROR_ILLEGAL_ADDRESS, &s), CUDA_SUCCESS);
  EXPECT_STREQ(s, "CUDA_ERROR_ILLEGAL_ADDRESS");
  ASSERT_EQ(cuGetErrorString(CUDA_ERROR_OUT_OF_MEMORY, &s), CUDA_SUCCESS);
  EXPECT_STREQ(s, "out of memory");
  EXPECT_EQ(cuGetErrorName(static_cast<CUresult>(123456), &s), CUDA_ERROR_INVALID_VALUE);
}

TEST_F(Simcuda, ManyHostThreadsAtOnce) {
  constexpr int kThreads = 8;
  std::vector<std::thread> threads;
  std::vector<int> ok(kThreads, 0);
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      cuCtxSetCurrent(ctx_);
      CUstream s;
      if (cuStreamCreate(&s, t % 2 ? CU_STREAM_NON_BLOCKING : 0) != CUDA_SUCCESS) return;
      int good = 1;
      for (int round = 0; round < 20; ++round) {
        CUdeviceptr d = 0;
        if (cuMemAllocAsync(&d, 1024 * sizeof(float), s) != CUDA_SUCCESS) good = 0;
        launch(k.fill, s, reinterpret_cast<float*>(d), 1024, static_cast<float>(t));
        launch(k.add_one, s, reinterpret_cast<float*>(d), 1024);
        if (t % 3 == 0) launch(k.fixed_1ms, CU_STREAM_PER_THREAD);
        float h = 0;
        cuMemcpyDtoHAsync(&h, d + 1023 * sizeof(float), sizeof h, s);
        cuStreamSynchronize(s);
        if (h != static_cast<float>(t) + 1.0f) good = 0;
        cuMemFreeAsync(d, s);
      }
      cuStreamSynchronize(s);
      cuStreamDestroy(s);
      ok[t] = good;
    });
  }
  for (auto& th : threads) th.join();
  for (int t = 0; t < kThreads; ++t) EXPECT_EQ(ok[t], 1) << "thread " << t;
  EXPECT_EQ(cuCtxSynchronize(), CUDA_SUCCESS);
  EXPECT_EQ(stats().device_bytes_in_use, 0u);
}
