// runtime_copy_test.cpp: simcuda's libcudart.so.13 strided, 3D, peer and symbol copies, 2D/3D memsets, and a
// two-stream capture joined through cudaEventRecordWithFlags / cudaStreamWaitEvent.
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <cstring>
#include <numeric>
#include <vector>

#include "simcuda/kernel.hpp"
#include "simcuda/shapes.hpp"

namespace {

using simcuda::extent;
using simcuda::pitched;
using simcuda::pos;

void bump(float*, int) {}
void bump_body(void** a, const simcuda_launch_info*) {
  auto [p, n] = simcuda::unpack(bump, a);
  p = simcuda::access(p, static_cast<size_t>(n), SIMCUDA_READ_WRITE);
  for (int i = 0; i < n; ++i) p[i] += 1.0f;
}

std::vector<unsigned char> iota_bytes(size_t n, unsigned char first) {
  std::vector<unsigned char> v(n);
  std::iota(v.begin(), v.end(), first);
  return v;
}

TEST(RuntimeCopy, Memcpy2DEveryKindAndAsync) {
  constexpr size_t kW = 24, kH = 5, kPitch = 64;
  void* d = nullptr;
  ASSERT_EQ(cudaMalloc(&d, kPitch * kH), cudaSuccess);
  ASSERT_EQ(cudaMemset(d, 0x5a, kPitch * kH), cudaSuccess);
  const std::vector<unsigned char> host = iota_bytes(kW * kH, 1);
  ASSERT_EQ(cudaMemcpy2D(d, kPitch, host.data(), kW, kW, kH, cudaMemcpyHostToDevice), cudaSuccess);
  std::vector<unsigned char> whole(kPitch * kH);
  ASSERT_EQ(cudaMemcpy(whole.data(), d, whole.size(), cudaMemcpyDeviceToHost), cudaSuccess);
  for (size_t r = 0; r < kH; ++r) {
    EXPECT_EQ(std::memcmp(whole.data() + r * kPitch, host.data() + r * kW, kW), 0);
    EXPECT_EQ(whole[r * kPitch + kW], 0x5a);
  }
  std::vector<unsigned char> back(kW * kH, 0);
  ASSERT_EQ(cudaMemcpy2D(back.data(), kW, d, kPitch, kW, kH, cudaMemcpyDefault), cudaSuccess);
  EXPECT_EQ(back, host);
  void* d2 = nullptr;
  ASSERT_EQ(cudaMalloc(&d2, kW * kH), cudaSuccess);
  cudaStream_t s;
  ASSERT_EQ(cudaStreamCreate(&s), cudaSuccess);
  ASSERT_EQ(cudaMemcpy2DAsync(d2, kW, d, kPitch, kW, kH, cudaMemcpyDeviceToDevice, s), cudaSuccess);
  std::fill(back.begin(), back.end(), 0);
  ASSERT_EQ(cudaMemcpy2DAsync(back.data(), kW, d2, kW, kW, kH, cudaMemcpyDeviceToHost, s), cudaSuccess);
  ASSERT_EQ(cudaStreamSynchronize(s), cudaSuccess);
  EXPECT_EQ(back, host);
  // Host to host moves bytes too (no device involved).
  std::vector<unsigned char> h2(kW * kH, 0);
  ASSERT_EQ(cudaMemcpy2D(h2.data(), kW, host.data(), kW, kW, kH, cudaMemcpyHostToHost), cudaSuccess);
  EXPECT_EQ(h2, host);
  EXPECT_EQ(cudaMemcpy2D(d, 16, host.data(), kW, kW, kH, cudaMemcpyHostToDevice), cudaErrorInvalidPitchValue);
  EXPECT_EQ(cudaMemcpy2D(d, kPitch, host.data(), kW, kW, kH, static_cast<cudaMemcpyKind>(9)),
            cudaErrorInvalidMemcpyDirection);
  EXPECT_EQ(cudaMemcpy2D(d, kPitch, host.data(), kW, kW, kH + 1, cudaMemcpyHostToDevice), cudaErrorInvalidValue);
  EXPECT_EQ(cudaGetLastError(), cudaErrorInvalidValue);
  EXPECT_EQ(cudaStreamDestroy(s), cudaSuccess);
  EXPECT_EQ(cudaFree(d), cudaSuccess);
  EXPECT_EQ(cudaFree(d2), cudaSuccess);
}

TEST(RuntimeCopy, Memcpy3DPitchedBoxAndArraysUnsupported) {
  constexpr size_t kPitch = 32, kRows = 4, kSlices = 3;
  void* d = nullptr;
  ASSERT_EQ(cudaMalloc(&d, kPitch * kRows * kSlices), cudaSuccess);
  const std::vector<unsigned char> host = iota_bytes(16 * kRows * kSlices, 0);
  cudaMemcpy3DParms p{};
  p.srcPtr = pitched(const_cast<unsigned char*>(host.data()), 16, 16, kRows);
  p.dstPtr = pitched(d, kPitch, 16, kRows);
  p.extent = extent(16, kRows, kSlices);
  p.kind = cudaMemcpyHostToDevice;
  ASSERT_EQ(cudaMemcpy3D(&p), cudaSuccess);
  std::vector<unsigned char> whole(kPitch * kRows * kSlices);
  ASSERT_EQ(cudaMemcpy(whole.data(), d, whole.size(), cudaMemcpyDeviceToHost), cudaSuccess);
  for (size_t z = 0; z < kSlices; ++z)
    for (size_t y = 0; y < kRows; ++y)
      EXPECT_EQ(std::memcmp(whole.data() + (z * kRows + y) * kPitch, host.data() + (z * kRows + y) * 16, 16), 0);
  // Async, from a position: slice 1, row 1, byte 4 of the device volume, one 8 x 2 x 2 box.
  std::vector<unsigned char> box(8 * 2 * 2, 0);
  cudaMemcpy3DParms q{};
  q.srcPtr = pitched(d, kPitch, 16, kRows);
  q.srcPos = pos(4, 1, 1);
  q.dstPtr = pitched(box.data(), 8, 8, 2);
  q.extent = extent(8, 2, 2);
  q.kind = cudaMemcpyDeviceToHost;
  ASSERT_EQ(cudaMemcpy3DAsync(&q, nullptr), cudaSuccess);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  EXPECT_EQ(std::memcmp(box.data(), host.data() + (1 * kRows + 1) * 16 + 4, 8), 0);
  EXPECT_EQ(std::memcmp(box.data() + 24, host.data() + (2 * kRows + 2) * 16 + 4, 8), 0);
  q.srcArray = reinterpret_cast<cudaArray_t>(0x10);
  EXPECT_EQ(cudaMemcpy3D(&q), cudaErrorNotSupported);
  EXPECT_EQ(cudaFree(d), cudaSuccess);
}

TEST(RuntimeCopy, PeerCopiesOnTheOneDevice) {
  void *a = nullptr, *b = nullptr;
  ASSERT_EQ(cudaMalloc(&a, 256), cudaSuccess);
  ASSERT_EQ(cudaMalloc(&b, 256), cudaSuccess);
  const std::vector<unsigned char> host = iota_bytes(256, 9);
  ASSERT_EQ(cudaMemcpy(a, host.data(), 256, cudaMemcpyHostToDevice), cudaSuccess);
  ASSERT_EQ(cudaMemcpyPeer(b, 0, a, 0, 256), cudaSuccess);
  std::vector<unsigned char> got(256);
  ASSERT_EQ(cudaMemcpy(got.data(), b, 256, cudaMemcpyDeviceToHost), cudaSuccess);
  EXPECT_EQ(got, host);
  EXPECT_EQ(cudaMemcpyPeer(b, 1, a, 0, 256), cudaErrorInvalidDevice);
  ASSERT_EQ(cudaMemset(b, 0, 256), cudaSuccess);
  ASSERT_EQ(cudaMemcpyPeerAsync(b, 0, a, 0, 128, nullptr), cudaSuccess);
  ASSERT_EQ(cudaMemcpy(got.data(), b, 256, cudaMemcpyDeviceToHost), cudaSuccess);
  EXPECT_EQ(std::memcmp(got.data(), host.data(), 128), 0);
  EXPECT_EQ(got[128], 0);
  cudaMemcpy3DPeerParms p{};
  p.srcPtr = pitched(a, 64, 16, 4);
  p.dstPtr = pitched(b, 16, 16, 4);
  p.extent = extent(16, 4, 1);
  ASSERT_EQ(cudaMemcpy3DPeer(&p), cudaSuccess);
  ASSERT_EQ(cudaMemcpy(got.data(), b, 64, cudaMemcpyDeviceToHost), cudaSuccess);
  EXPECT_EQ(std::memcmp(got.data() + 48, host.data() + 192, 16), 0);
  p.dstDevice = 3;
  EXPECT_EQ(cudaMemcpy3DPeerAsync(&p, nullptr), cudaErrorInvalidDevice);
  EXPECT_EQ(cudaFree(a), cudaSuccess);
  EXPECT_EQ(cudaFree(b), cudaSuccess);
}

TEST(RuntimeCopy, Memset2DAnd3D) {
  constexpr size_t kPitch = 32, kRows = 4, kSlices = 2;
  unsigned char* d = nullptr;
  ASSERT_EQ(cudaMalloc(reinterpret_cast<void**>(&d), kPitch * kRows * kSlices), cudaSuccess);
  ASSERT_EQ(cudaMemset(d, 0, kPitch * kRows * kSlices), cudaSuccess);
  ASSERT_EQ(cudaMemset2D(d + 1, kPitch, 0x11, 5, 2), cudaSuccess);
  ASSERT_EQ(cudaMemset3DAsync(pitched(d + 16, kPitch, 8, kRows), 0x22, extent(4, 3, kSlices), nullptr), cudaSuccess);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  std::vector<unsigned char> h(kPitch * kRows * kSlices);
  ASSERT_EQ(cudaMemcpy(h.data(), d, h.size(), cudaMemcpyDeviceToHost), cudaSuccess);
  for (size_t z = 0; z < kSlices; ++z)
    for (size_t y = 0; y < kRows; ++y) {
      const unsigned char* row = h.data() + (z * kRows + y) * kPitch;
      const bool in2d = z == 0 && y < 2, in3d = y < 3;
      EXPECT_EQ(row[0], 0);
      EXPECT_EQ(row[1], in2d ? 0x11 : 0) << z << "," << y;
      EXPECT_EQ(row[5], in2d ? 0x11 : 0) << z << "," << y;
      EXPECT_EQ(row[6], 0);
      EXPECT_EQ(row[16], in3d ? 0x22 : 0) << z << "," << y;
      EXPECT_EQ(row[19], in3d ? 0x22 : 0) << z << "," << y;
      EXPECT_EQ(row[20], 0);
    }
  EXPECT_EQ(cudaMemset2D(d, 4, 0, 8, 2), cudaErrorInvalidValue);  // pitch below the width
  EXPECT_EQ(cudaMemset3D(pitched(d, 4, 8, kRows), 0, extent(8, 2, 1)), cudaErrorInvalidPitchValue);
  EXPECT_EQ(cudaFree(d), cudaSuccess);
}

float g_table[8] = {1, 2, 3, 4, 5, 6, 7, 8};  // the shadow of a __device__ float[8]

TEST(RuntimeCopy, SymbolCopiesAddressAndSize) {
  ASSERT_TRUE(simcuda::register_global("g_table", g_table));
  size_t size = 0;
  ASSERT_EQ(cudaGetSymbolSize(&size, g_table), cudaSuccess);
  EXPECT_EQ(size, sizeof g_table);
  void* addr = nullptr;
  ASSERT_EQ(cudaGetSymbolAddress(&addr, g_table), cudaSuccess);
  float got[8] = {};
  ASSERT_EQ(cudaMemcpyFromSymbol(got, g_table, sizeof got), cudaSuccess);
  EXPECT_EQ(got[7], 8.0f);  // the initial value
  const float upd[2] = {50, 60};
  ASSERT_EQ(cudaMemcpyToSymbol(g_table, upd, sizeof upd, 4 * sizeof(float)), cudaSuccess);
  ASSERT_EQ(cudaMemcpy(got, addr, sizeof got, cudaMemcpyDeviceToHost), cudaSuccess);
  EXPECT_EQ(got[4], 50.0f);
  EXPECT_EQ(got[5], 60.0f);
  EXPECT_EQ(g_table[4], 5.0f);  // the host shadow is not the device variable
  float* d = nullptr;
  ASSERT_EQ(cudaMalloc(reinterpret_cast<void**>(&d), sizeof g_table), cudaSuccess);
  cudaStream_t s;
  ASSERT_EQ(cudaStreamCreate(&s), cudaSuccess);
  ASSERT_EQ(cudaMemcpyFromSymbolAsync(d, g_table, sizeof g_table, 0, cudaMemcpyDeviceToDevice, s), cudaSuccess);
  ASSERT_EQ(cudaMemcpyToSymbolAsync(g_table, d, sizeof(float), 0, cudaMemcpyDefault, s), cudaSuccess);
  ASSERT_EQ(cudaStreamSynchronize(s), cudaSuccess);
  ASSERT_EQ(cudaMemcpy(got, d, sizeof got, cudaMemcpyDeviceToHost), cudaSuccess);
  EXPECT_EQ(got[5], 60.0f);
  static int unknown = 0;
  EXPECT_EQ(cudaMemcpyToSymbol(&unknown, upd, 4), cudaErrorInvalidSymbol);
  EXPECT_EQ(cudaGetSymbolAddress(&addr, &unknown), cudaErrorInvalidSymbol);
  EXPECT_EQ(cudaMemcpyToSymbol(g_table, upd, sizeof upd, 7 * sizeof(float)), cudaErrorInvalidValue);  // past the end
  EXPECT_EQ(cudaMemcpyFromSymbol(got, g_table, 4, 0, cudaMemcpyHostToDevice), cudaErrorInvalidMemcpyDirection);
  EXPECT_EQ(cudaStreamDestroy(s), cudaSuccess);
  EXPECT_EQ(cudaFree(d), cudaSuccess);
}

TEST(RuntimeCopy, TwoStreamCaptureJoinedThroughEvents) {
  ASSERT_NE(simcuda::register_kernel("bump", bump, bump_body), nullptr);
  cudaStream_t main_s, side;
  ASSERT_EQ(cudaStreamCreateWithFlags(&main_s, cudaStreamNonBlocking), cudaSuccess);
  ASSERT_EQ(cudaStreamCreateWithFlags(&side, cudaStreamNonBlocking), cudaSuccess);
  cudaEvent_t fork, join;
  ASSERT_EQ(cudaEventCreateWithFlags(&fork, cudaEventDisableTiming), cudaSuccess);
  ASSERT_EQ(cudaEventCreateWithFlags(&join, cudaEventDisableTiming), cudaSuccess);
  float *a = nullptr, *b = nullptr;
  ASSERT_EQ(cudaMalloc(reinterpret_cast<void**>(&a), 8 * sizeof(float)), cudaSuccess);
  ASSERT_EQ(cudaMalloc(reinterpret_cast<void**>(&b), 8 * sizeof(float)), cudaSuccess);
  ASSERT_EQ(cudaMemset(a, 0, 8 * sizeof(float)), cudaSuccess);
  ASSERT_EQ(cudaMemset(b, 0, 8 * sizeof(float)), cudaSuccess);
  ASSERT_EQ(cudaStreamBeginCapture(main_s, cudaStreamCaptureModeGlobal), cudaSuccess);
  ASSERT_EQ(simcuda::launch(bump, dim3(1), dim3(4), main_s, a, 4), cudaSuccess);
  ASSERT_EQ(cudaEventRecordWithFlags(fork, main_s, cudaEventRecordDefault), cudaSuccess);
  ASSERT_EQ(cudaStreamWaitEvent(side, fork, 0), cudaSuccess);
  cudaStreamCaptureStatus st;
  ASSERT_EQ(cudaStreamIsCapturing(side, &st), cudaSuccess);
  EXPECT_EQ(st, cudaStreamCaptureStatusActive);
  ASSERT_EQ(simcuda::launch(bump, dim3(1), dim3(4), side, b, 4), cudaSuccess);
  // One float per row, rows two floats apart: b[0], b[2] -> a[4], a[6].
  ASSERT_EQ(cudaMemcpy2DAsync(a + 4, 2 * sizeof(float), b, 2 * sizeof(float), sizeof(float), 2,
                              cudaMemcpyDeviceToDevice, side),
            cudaSuccess);
  ASSERT_EQ(cudaEventRecord(join, side), cudaSuccess);
  ASSERT_EQ(cudaStreamWaitEvent(main_s, join, 0), cudaSuccess);
  cudaGraph_t g = nullptr;
  ASSERT_EQ(cudaStreamEndCapture(main_s, &g), cudaSuccess);
  ASSERT_EQ(cudaStreamIsCapturing(side, &st), cudaSuccess);
  EXPECT_EQ(st, cudaStreamCaptureStatusNone);
  cudaGraphExec_t exec = nullptr;
  ASSERT_EQ(cudaGraphInstantiate(&exec, g, 0), cudaSuccess);
  ASSERT_EQ(cudaGraphLaunch(exec, main_s), cudaSuccess);
  ASSERT_EQ(cudaStreamSynchronize(main_s), cudaSuccess);
  float ha[8], hb[8];
  ASSERT_EQ(cudaMemcpy(ha, a, sizeof ha, cudaMemcpyDeviceToHost), cudaSuccess);
  ASSERT_EQ(cudaMemcpy(hb, b, sizeof hb, cudaMemcpyDeviceToHost), cudaSuccess);
  EXPECT_EQ(hb[0], 1.0f);
  EXPECT_EQ(ha[0], 1.0f);
  EXPECT_EQ(ha[4], 1.0f);  // b[0] and b[2], bumped on the side stream, copied after it
  EXPECT_EQ(ha[5], 0.0f);
  EXPECT_EQ(ha[6], 1.0f);
  EXPECT_EQ(cudaGraphExecDestroy(exec), cudaSuccess);
  EXPECT_EQ(cudaGraphDestroy(g), cudaSuccess);
}

}  // namespace
