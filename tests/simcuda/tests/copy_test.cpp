// copy_test.cpp: simcuda's strided, 3D and peer copies and 2D memsets (driver API), module globals, and stream
// capture across streams joined through events (fork, join, unjoined and unmatched ends).
#include <dlfcn.h>

#include <cstring>
#include <numeric>
#include <vector>

#include "support.hpp"

using namespace simtest;

namespace {

CUDA_MEMCPY2D copy_2d(CUmemorytype dst_type, void* dst, size_t dpitch, CUmemorytype src_type, const void* src,
                      size_t spitch, size_t width, size_t height) {
  CUDA_MEMCPY2D c{};
  c.dstMemoryType = dst_type;
  if (dst_type == CU_MEMORYTYPE_HOST) c.dstHost = dst;
  else c.dstDevice = dptr(dst);
  c.dstPitch = dpitch;
  c.srcMemoryType = src_type;
  if (src_type == CU_MEMORYTYPE_HOST) c.srcHost = src;
  else c.srcDevice = dptr(src);
  c.srcPitch = spitch;
  c.WidthInBytes = width;
  c.Height = height;
  return c;
}

std::vector<unsigned char> iota_bytes(size_t n, unsigned char first) {
  std::vector<unsigned char> v(n);
  std::iota(v.begin(), v.end(), first);
  return v;
}

}  // namespace

TEST_F(Simcuda, Copy2DMovesRowsAndLeavesThePaddingAlone) {
  constexpr size_t kWidth = 100, kRows = 16, kPitch = 256;
  CUdeviceptr d = 0;
  ASSERT_EQ(cuMemAlloc(&d, kPitch * kRows), CUDA_SUCCESS);
  ASSERT_EQ(cuMemsetD8(d, 0xab, kPitch * kRows), CUDA_SUCCESS);
  const std::vector<unsigned char> host = iota_bytes(kWidth * kRows, 1);
  simcuda_reset_stats();
  CUDA_MEMCPY2D up = copy_2d(CU_MEMORYTYPE_DEVICE, reinterpret_cast<void*>(d), kPitch, CU_MEMORYTYPE_HOST,
                             host.data(), kWidth, kWidth, kRows);
  ASSERT_EQ(cuMemcpy2D(&up), CUDA_SUCCESS);
  EXPECT_EQ(stats().bytes_htod, kWidth * kRows);  // the moved bytes, not the covered span
  std::vector<unsigned char> whole(kPitch * kRows);
  ASSERT_EQ(cuMemcpyDtoH(whole.data(), d, whole.size()), CUDA_SUCCESS);
  for (size_t r = 0; r < kRows; ++r) {
    EXPECT_EQ(std::memcmp(whole.data() + r * kPitch, host.data() + r * kWidth, kWidth), 0) << "row " << r;
    EXPECT_EQ(whole[r * kPitch + kWidth], 0xab) << "padding of row " << r;
    EXPECT_EQ(whole[r * kPitch + kPitch - 1], 0xab) << "padding of row " << r;
  }
  // Back down into a host buffer with its own pitch, from an offset (x = 4 bytes, y = 2 rows).
  std::vector<unsigned char> back(128 * kRows, 0);
  CUDA_MEMCPY2D down = copy_2d(CU_MEMORYTYPE_HOST, back.data(), 128, CU_MEMORYTYPE_DEVICE,
                               reinterpret_cast<void*>(d), kPitch, 50, kRows - 2);
  down.srcXInBytes = 4;
  down.srcY = 2;
  ASSERT_EQ(cuMemcpy2D(&down), CUDA_SUCCESS);
  for (size_t r = 0; r + 2 < kRows; ++r)
    EXPECT_EQ(std::memcmp(back.data() + r * 128, host.data() + (r + 2) * kWidth + 4, 50), 0) << "row " << r;
  EXPECT_EQ(cuMemFree(d), CUDA_SUCCESS);
}

TEST_F(Simcuda, Copy2DAsyncAndUnifiedOnAStreamAndThePerThreadVariant) {
  CUstream s;
  ASSERT_EQ(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING), CUDA_SUCCESS);
  CUdeviceptr a = 0, b = 0;
  ASSERT_EQ(cuMemAlloc(&a, 64 * 8), CUDA_SUCCESS);
  ASSERT_EQ(cuMemAlloc(&b, 32 * 8), CUDA_SUCCESS);
  const std::vector<unsigned char> host = iota_bytes(64 * 8, 3);
  ASSERT_EQ(cuMemcpyHtoD(a, host.data(), host.size()), CUDA_SUCCESS);
  // Device to device through unified addressing: every other row's first 32 bytes, packed.
  CUDA_MEMCPY2D c = copy_2d(CU_MEMORYTYPE_UNIFIED, reinterpret_cast<void*>(b), 32, CU_MEMORYTYPE_UNIFIED,
                            reinterpret_cast<void*>(a), 128, 32, 4);
  ASSERT_EQ(cuMemcpy2DAsync(&c, s), CUDA_SUCCESS);
  ASSERT_EQ(cuStreamSynchronize(s), CUDA_SUCCESS);
  std::vector<unsigned char> got(32 * 4);
  ASSERT_EQ(cuMemcpyDtoH(got.data(), b, got.size()), CUDA_SUCCESS);
  for (size_t r = 0; r < 4; ++r) EXPECT_EQ(std::memcmp(got.data() + r * 32, host.data() + r * 128, 32), 0);
  // The _ptsz variant on the calling thread's default stream.
  void* fn = nullptr;
  ASSERT_EQ(cuGetProcAddress("cuMemcpy2DAsync", &fn, 13000, CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM, nullptr),
            CUDA_SUCCESS);
  void* h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
  ASSERT_NE(h, nullptr);
  EXPECT_EQ(fn, dlsym(h, "cuMemcpy2DAsync_v2_ptsz"));
  ASSERT_EQ(cuMemsetD8(b, 0, 32 * 8), CUDA_SUCCESS);
  ASSERT_EQ(reinterpret_cast<CUresult (*)(const CUDA_MEMCPY2D*, CUstream)>(fn)(&c, nullptr), CUDA_SUCCESS);
  ASSERT_EQ(cuStreamSynchronize(CU_STREAM_PER_THREAD), CUDA_SUCCESS);
  ASSERT_EQ(cuMemcpyDtoH(got.data(), b, got.size()), CUDA_SUCCESS);
  EXPECT_EQ(std::memcmp(got.data() + 96, host.data() + 384, 32), 0);
  EXPECT_EQ(cuStreamDestroy(s), CUDA_SUCCESS);
}

TEST_F(Simcuda, Copy2DRejectsBadPitchArraysTypesAndRangesPastTheAllocation) {
  CUdeviceptr d = 0;
  ASSERT_EQ(cuMemAlloc(&d, 1024), CUDA_SUCCESS);
  std::vector<unsigned char> host(4096);
  CUDA_MEMCPY2D c = copy_2d(CU_MEMORYTYPE_DEVICE, reinterpret_cast<void*>(d), 64, CU_MEMORYTYPE_HOST, host.data(),
                            64, 100, 4);  // width above the pitch
  EXPECT_EQ(cuMemcpy2D(&c), CUDA_ERROR_INVALID_VALUE);
  c.WidthInBytes = 64;
  c.Height = 17;  // 17 rows of 64 bytes: past the 1024-byte allocation
  EXPECT_EQ(cuMemcpy2D(&c), CUDA_ERROR_INVALID_VALUE);
  c.Height = 16;
  EXPECT_EQ(cuMemcpy2D(&c), CUDA_SUCCESS);  // exactly the allocation
  CUDA_MEMCPY2D arr = c;
  arr.dstMemoryType = CU_MEMORYTYPE_ARRAY;
  EXPECT_EQ(cuMemcpy2D(&arr), CUDA_ERROR_NOT_SUPPORTED);
  CUDA_MEMCPY2D wrong = copy_2d(CU_MEMORYTYPE_DEVICE, host.data(), 64, CU_MEMORYTYPE_HOST, host.data() + 2048, 64,
                                64, 4);  // pageable host memory typed as device
  EXPECT_EQ(cuMemcpy2D(&wrong), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuMemcpy2D(nullptr), CUDA_ERROR_INVALID_VALUE);
  c.Height = 0;
  EXPECT_EQ(cuMemcpy2D(&c), CUDA_SUCCESS);  // nothing to move
  EXPECT_EQ(cuMemFree(d), CUDA_SUCCESS);
}

TEST_F(Simcuda, Copy3DMovesSlicesAndChecksItsFields) {
  // A 3 x 4 x 16-byte box out of an 8 x 32-byte-pitch x 4-slice device volume.
  constexpr size_t kPitch = 32, kHeight = 8, kSlices = 4;
  CUdeviceptr vol = 0;
  ASSERT_EQ(cuMemAlloc(&vol, kPitch * kHeight * kSlices), CUDA_SUCCESS);
  const std::vector<unsigned char> host = iota_bytes(kPitch * kHeight * kSlices, 0);
  ASSERT_EQ(cuMemcpyHtoD(vol, host.data(), host.size()), CUDA_SUCCESS);
  std::vector<unsigned char> box(16 * 4 * 3, 0);
  CUDA_MEMCPY3D c{};
  c.srcMemoryType = CU_MEMORYTYPE_DEVICE;
  c.srcDevice = vol;
  c.srcPitch = kPitch;
  c.srcHeight = kHeight;
  c.srcXInBytes = 8;
  c.srcY = 2;
  c.srcZ = 1;
  c.dstMemoryType = CU_MEMORYTYPE_HOST;
  c.dstHost = box.data();
  c.dstPitch = 16;
  c.dstHeight = 4;
  c.WidthInBytes = 16;
  c.Height = 4;
  c.Depth = 3;
  ASSERT_EQ(cuMemcpy3D(&c), CUDA_SUCCESS);
  for (size_t z = 0; z < 3; ++z)
    for (size_t y = 0; y < 4; ++y)
      EXPECT_EQ(std::memcmp(box.data() + (z * 4 + y) * 16, host.data() + (z + 1) * kPitch * kHeight + (y + 2) * kPitch + 8,
                            16),
                0)
          << "slice " << z << " row " << y;
  CUDA_MEMCPY3D bad = c;
  bad.srcZ = 2;  // slices 2..4 of a 4-slice volume: past the allocation
  EXPECT_EQ(cuMemcpy3D(&bad), CUDA_ERROR_INVALID_VALUE);
  bad = c;
  bad.dstHeight = 3;  // slice height below the copy height
  EXPECT_EQ(cuMemcpy3D(&bad), CUDA_ERROR_INVALID_VALUE);
  bad = c;
  bad.srcLOD = 1;
  EXPECT_EQ(cuMemcpy3D(&bad), CUDA_ERROR_INVALID_VALUE);
  bad = c;
  bad.reserved0 = &bad;
  EXPECT_EQ(cuMemcpy3D(&bad), CUDA_ERROR_INVALID_VALUE);
  CUstream s;
  ASSERT_EQ(cuStreamCreate(&s, 0), CUDA_SUCCESS);
  std::fill(box.begin(), box.end(), 0);
  ASSERT_EQ(cuMemcpy3DAsync(&c, s), CUDA_SUCCESS);
  ASSERT_EQ(cuStreamSynchronize(s), CUDA_SUCCESS);
  EXPECT_EQ(box[0], host[kPitch * kHeight + 2 * kPitch + 8]);
  EXPECT_EQ(cuStreamDestroy(s), CUDA_SUCCESS);
  EXPECT_EQ(cuMemFree(vol), CUDA_SUCCESS);
}

TEST_F(Simcuda, PeerCopiesWithinTheOneDeviceNeedItsContext) {
  CUdeviceptr a = 0, b = 0;
  ASSERT_EQ(cuMemAlloc(&a, 4096), CUDA_SUCCESS);
  ASSERT_EQ(cuMemAlloc(&b, 4096), CUDA_SUCCESS);
  const std::vector<unsigned char> host = iota_bytes(4096, 7);
  ASSERT_EQ(cuMemcpyHtoD(a, host.data(), host.size()), CUDA_SUCCESS);
  simcuda_reset_stats();
  ASSERT_EQ(cuMemcpyPeer(b, ctx_, a, ctx_, 4096), CUDA_SUCCESS);
  EXPECT_EQ(stats().bytes_dtod, 4096u);
  std::vector<unsigned char> got(4096);
  ASSERT_EQ(cuMemcpyDtoH(got.data(), b, got.size()), CUDA_SUCCESS);
  EXPECT_EQ(got, host);
  CUctx_st* bogus = reinterpret_cast<CUctx_st*>(0x1234);
  EXPECT_EQ(cuMemcpyPeer(b, bogus, a, ctx_, 16), CUDA_ERROR_INVALID_CONTEXT);
  EXPECT_EQ(cuMemcpyPeer(b, ctx_, a, nullptr, 16), CUDA_ERROR_INVALID_CONTEXT);
  EXPECT_EQ(cuMemcpyPeer(b, ctx_, dptr(host.data()), ctx_, 16), CUDA_ERROR_INVALID_VALUE);  // not device memory
  CUstream s;
  ASSERT_EQ(cuStreamCreate(&s, 0), CUDA_SUCCESS);
  ASSERT_EQ(cuMemsetD8(b, 0, 4096), CUDA_SUCCESS);
  ASSERT_EQ(cuMemcpyPeerAsync(b + 100, ctx_, a, ctx_, 50, s), CUDA_SUCCESS);
  ASSERT_EQ(cuStreamSynchronize(s), CUDA_SUCCESS);
  ASSERT_EQ(cuMemcpyDtoH(got.data(), b, got.size()), CUDA_SUCCESS);
  EXPECT_EQ(got[99], 0);
  EXPECT_EQ(std::memcmp(got.data() + 100, host.data(), 50), 0);
  EXPECT_EQ(got[150], 0);
  // The 3D peer form: two rows of 8 bytes.
  CUDA_MEMCPY3D_PEER p{};
  p.srcMemoryType = p.dstMemoryType = CU_MEMORYTYPE_DEVICE;
  p.srcDevice = a;
  p.dstDevice = b;
  p.srcContext = p.dstContext = ctx_;
  p.srcPitch = 64;
  p.dstPitch = 8;
  p.WidthInBytes = 8;
  p.Height = 2;
  p.Depth = 1;
  ASSERT_EQ(cuMemcpy3DPeer(&p), CUDA_SUCCESS);
  ASSERT_EQ(cuMemcpyDtoH(got.data(), b, 16), CUDA_SUCCESS);
  EXPECT_EQ(std::memcmp(got.data() + 8, host.data() + 64, 8), 0);
  p.srcContext = bogus;
  EXPECT_EQ(cuMemcpy3DPeerAsync(&p, s), CUDA_ERROR_INVALID_CONTEXT);
  EXPECT_EQ(cuStreamDestroy(s), CUDA_SUCCESS);
}

TEST_F(Simcuda, StridedCopyIsCapturedAndReplayed) {
  CUstream s;
  ASSERT_EQ(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING), CUDA_SUCCESS);
  CUdeviceptr a = 0, b = 0;
  ASSERT_EQ(cuMemAlloc(&a, 16 * sizeof(float)), CUDA_SUCCESS);
  ASSERT_EQ(cuMemAlloc(&b, 8 * sizeof(float)), CUDA_SUCCESS);
  ASSERT_EQ(cuMemsetD32(a, 0, 16), CUDA_SUCCESS);
  ASSERT_EQ(cuStreamBeginCapture(s, CU_STREAM_CAPTURE_MODE_GLOBAL), CUDA_SUCCESS);
  ASSERT_EQ(launch(k.add_one, s, reinterpret_cast<float*>(a), 16), CUDA_SUCCESS);
  // Columns 0..1 of a 4 x 4 float matrix into a packed 4 x 2.
  CUDA_MEMCPY2D c = copy_2d(CU_MEMORYTYPE_DEVICE, reinterpret_cast<void*>(b), 8, CU_MEMORYTYPE_DEVICE,
                            reinterpret_cast<void*>(a), 16, 8, 4);
  ASSERT_EQ(cuMemcpy2DAsync(&c, s), CUDA_SUCCESS);
  CUgraph g = nullptr;
  ASSERT_EQ(cuStreamEndCapture(s, &g), CUDA_SUCCESS);
  size_t nodes = 0;
  ASSERT_EQ(cuGraphGetNodes(g, nullptr, &nodes), CUDA_SUCCESS);
  EXPECT_EQ(nodes, 2u);
  CUgraphExec exec = nullptr;
  ASSERT_EQ(cuGraphInstantiate(&exec, g, 0), CUDA_SUCCESS);
  for (int i = 0; i < 3; ++i) ASSERT_EQ(cuGraphLaunch(exec, s), CUDA_SUCCESS);
  ASSERT_EQ(cuStreamSynchronize(s), CUDA_SUCCESS);
  float got[8];
  ASSERT_EQ(cuMemcpyDtoH(got, b, sizeof got), CUDA_SUCCESS);
  for (float v : got) EXPECT_EQ(v, 3.0f);
  EXPECT_EQ(cuGraphExecDestroy(exec), CUDA_SUCCESS);
  EXPECT_EQ(cuGraphDestroy(g), CUDA_SUCCESS);
  EXPECT_EQ(cuStreamDestroy(s), CUDA_SUCCESS);
}

TEST_F(Simcuda, ModuleGlobalsAreMadeOnFirstUseFromTheirShadow) {
  static int shadow[4] = {10, 20, 30, 40};
  ASSERT_EQ(simcuda_register_global(shadow, sizeof shadow, "table"), 0);
  EXPECT_EQ(simcuda_register_global(shadow, sizeof shadow, "table"), 0);   // the same again: fine
  EXPECT_EQ(simcuda_register_global(shadow, 4, "table"), -1);              // another size: refused
  EXPECT_EQ(simcuda_register_global(nullptr, 4, "x"), -1);
  CUdeviceptr p = 0, again = 0;
  size_t bytes = 0;
  ASSERT_EQ(simcuda_global_for_symbol(shadow, &p, &bytes), CUDA_SUCCESS);
  EXPECT_EQ(bytes, sizeof shadow);
  ASSERT_NE(p, 0u);
  ASSERT_EQ(simcuda_global_for_symbol(shadow, &again, nullptr), CUDA_SUCCESS);
  EXPECT_EQ(again, p);  // one device copy
  int got[4] = {};
  ASSERT_EQ(cuMemcpyDtoH(got, p, sizeof got), CUDA_SUCCESS);
  EXPECT_EQ(got[3], 40);
  shadow[3] = 99;  // later host writes to the shadow do not reach the device copy
  ASSERT_EQ(cuMemcpyDtoH(got, p, sizeof got), CUDA_SUCCESS);
  EXPECT_EQ(got[3], 40);
  static int unregistered = 0;
  EXPECT_EQ(simcuda_global_for_symbol(&unregistered, &p, &bytes), CUDA_ERROR_NOT_FOUND);
}

TEST_F(Simcuda, Memset2DSetsRowsOfElementsAndChecksPitchAndAlignment) {
  constexpr size_t kPitch = 64, kRows = 4;
  CUdeviceptr d = 0;
  ASSERT_EQ(cuMemAlloc(&d, kPitch * kRows), CUDA_SUCCESS);
  ASSERT_EQ(cuMemsetD8(d, 0, kPitch * kRows), CUDA_SUCCESS);
  ASSERT_EQ(cuMemsetD2D32(d + 8, kPitch, 0xa1b2c3d4u, 3, kRows), CUDA_SUCCESS);  // 3 words a row
  CUstream s;
  ASSERT_EQ(cuStreamCreate(&s, 0), CUDA_SUCCESS);
  ASSERT_EQ(cuMemsetD2D16Async(d + 40, kPitch, 0x5566, 2, 2, s), CUDA_SUCCESS);
  ASSERT_EQ(cuMemsetD2D8Async(d + 60, kPitch, 0x77, 4, 1, s), CUDA_SUCCESS);
  ASSERT_EQ(cuStreamSynchronize(s), CUDA_SUCCESS);
  std::vector<unsigned char> h(kPitch * kRows);
  ASSERT_EQ(cuMemcpyDtoH(h.data(), d, h.size()), CUDA_SUCCESS);
  for (size_t r = 0; r < kRows; ++r) {
    const unsigned char* row = h.data() + r * kPitch;
    uint32_t w = 0;
    std::memcpy(&w, row + 8 + 8, 4);
    EXPECT_EQ(w, 0xa1b2c3d4u) << "row " << r;
    EXPECT_EQ(row[7], 0) << "row " << r;
    EXPECT_EQ(row[20], 0) << "row " << r;  // just past 3 words
    uint16_t x = 0;
    std::memcpy(&x, row + 42, 2);
    EXPECT_EQ(x, r < 2 ? 0x5566 : 0) << "row " << r;
    EXPECT_EQ(row[63], r == 0 ? 0x77 : 0) << "row " << r;
  }
  EXPECT_EQ(cuMemsetD2D32(d, 8, 0, 3, 2), CUDA_ERROR_INVALID_VALUE);       // pitch below the row
  EXPECT_EQ(cuMemsetD2D32(d + 2, kPitch, 0, 1, 2), CUDA_ERROR_INVALID_VALUE);  // misaligned
  EXPECT_EQ(cuMemsetD2D16(d, 63, 0, 1, 2), CUDA_ERROR_INVALID_VALUE);      // pitch not a multiple of 2
  EXPECT_EQ(cuMemsetD2D8(d, kPitch, 0, 8, kRows + 1), CUDA_ERROR_INVALID_VALUE);  // past the allocation
  EXPECT_EQ(cuStreamDestroy(s), CUDA_SUCCESS);
  EXPECT_EQ(cuMemFree(d), CUDA_SUCCESS);
}

// ---- capture across streams ------------------------------------------------------------------

TEST_F(Simcuda, StreamWaitingOnACapturedEventJoinsTheCaptureUntilItEnds) {
  CUstream s1, s2;
  ASSERT_EQ(cuStreamCreate(&s1, CU_STREAM_NON_BLOCKING), CUDA_SUCCESS);
  ASSERT_EQ(cuStreamCreate(&s2, CU_STREAM_NON_BLOCKING), CUDA_SUCCESS);
  CUevent fork, join;
  ASSERT_EQ(cuEventCreate(&fork, CU_EVENT_DISABLE_TIMING), CUDA_SUCCESS);
  ASSERT_EQ(cuEventCreate(&join, CU_EVENT_DISABLE_TIMING), CUDA_SUCCESS);
  CUdeviceptr a = 0, b = 0;
  ASSERT_EQ(cuMemAlloc(&a, 8 * sizeof(float)), CUDA_SUCCESS);
  ASSERT_EQ(cuMemAlloc(&b, 8 * sizeof(float)), CUDA_SUCCESS);
  ASSERT_EQ(cuMemsetD32(a, 0, 8), CUDA_SUCCESS);
  ASSERT_EQ(cuMemsetD32(b, 0, 8), CUDA_SUCCESS);
  ASSERT_EQ(cuStreamBeginCapture(s1, CU_STREAM_CAPTURE_MODE_GLOBAL), CUDA_SUCCESS);
  ASSERT_EQ(launch(k.add_one, s1, reinterpret_cast<float*>(a), 8), CUDA_SUCCESS);
  ASSERT_EQ(cuEventRecord(fork, s1), CUDA_SUCCESS);
  CUstreamCaptureStatus st;
  ASSERT_EQ(cuStreamIsCapturing(s2, &st), CUDA_SUCCESS);
  EXPECT_EQ(st, CU_STREAM_CAPTURE_STATUS_NONE);
  ASSERT_EQ(cuStreamWaitEvent(s2, fork, 0), CUDA_SUCCESS);
  cuuint64_t id1 = 0, id2 = 0;
  ASSERT_EQ(cuStreamGetCaptureInfo(s1, &st, &id1, nullptr, nullptr, nullptr, nullptr), CUDA_SUCCESS);
  ASSERT_EQ(cuStreamGetCaptureInfo(s2, &st, &id2, nullptr, nullptr, nullptr, nullptr), CUDA_SUCCESS);
  EXPECT_EQ(st, CU_STREAM_CAPTURE_STATUS_ACTIVE);
  EXPECT_EQ(id1, id2);  // one capture sequence
  ASSERT_EQ(launch(k.add_one, s2, reinterpret_cast<float*>(b), 8), CUDA_SUCCESS);
  ASSERT_EQ(launch(k.add_one, s2, reinterpret_cast<float*>(b), 8), CUDA_SUCCESS);
  ASSERT_EQ(cuEventRecord(join, s2), CUDA_SUCCESS);
  ASSERT_EQ(cuStreamWaitEvent(s1, join, 0), CUDA_SUCCESS);
  ASSERT_EQ(launch(k.add_one, s1, reinterpret_cast<float*>(a), 8), CUDA_SUCCESS);
  float h = -1;
  ASSERT_EQ(cuMemcpyDtoH(&h, b, sizeof h), CUDA_SUCCESS);
  EXPECT_EQ(h, 0.0f);  // the joined stream's launches were captured, not run
  CUgraph g = nullptr;
  ASSERT_EQ(cuStreamEndCapture(s1, &g), CUDA_SUCCESS);
  ASSERT_EQ(cuStreamIsCapturing(s2, &st), CUDA_SUCCESS);
  EXPECT_EQ(st, CU_STREAM_CAPTURE_STATUS_NONE);  // the join ended with the capture
  size_t nodes = 0;
  ASSERT_EQ(cuGraphGetNodes(g, nullptr, &nodes), CUDA_SUCCESS);
  EXPECT_EQ(nodes, 4u);
  CUgraphExec exec = nullptr;
  ASSERT_EQ(cuGraphInstantiate(&exec, g, 0), CUDA_SUCCESS);
  for (int i = 0; i < 2; ++i) ASSERT_EQ(cuGraphLaunch(exec, s1), CUDA_SUCCESS);
  ASSERT_EQ(cuStreamSynchronize(s1), CUDA_SUCCESS);
  float ha = 0, hb = 0;
  ASSERT_EQ(cuMemcpyDtoH(&ha, a, sizeof ha), CUDA_SUCCESS);
  ASSERT_EQ(cuMemcpyDtoH(&hb, b, sizeof hb), CUDA_SUCCESS);
  EXPECT_EQ(ha, 4.0f);
  EXPECT_EQ(hb, 4.0f);
  // Work on s2 after the capture runs at once again.
  ASSERT_EQ(launch(k.add_one, s2, reinterpret_cast<float*>(b), 8), CUDA_SUCCESS);
  ASSERT_EQ(cuStreamSynchronize(s2), CUDA_SUCCESS);
  ASSERT_EQ(cuMemcpyDtoH(&hb, b, sizeof hb), CUDA_SUCCESS);
  EXPECT_EQ(hb, 5.0f);
  EXPECT_EQ(cuGraphExecDestroy(exec), CUDA_SUCCESS);
  EXPECT_EQ(cuGraphDestroy(g), CUDA_SUCCESS);
}

TEST_F(Simcuda, JoinsAreTransitive) {
  CUstream s1, s2, s3;
  for (CUstream* s : {&s1, &s2, &s3}) ASSERT_EQ(cuStreamCreate(s, CU_STREAM_NON_BLOCKING), CUDA_SUCCESS);
  CUevent e[4];
  for (CUevent& x : e) ASSERT_EQ(cuEventCreate(&x, 0), CUDA_SUCCESS);
  ASSERT_EQ(cuStreamBeginCapture(s1, CU_STREAM_CAPTURE_MODE_RELAXED), CUDA_SUCCESS);
  ASSERT_EQ(cuEventRecord(e[0], s1), CUDA_SUCCESS);
  ASSERT_EQ(cuStreamWaitEvent(s2, e[0], 0), CUDA_SUCCESS);  // s2 forks from s1
  ASSERT_EQ(cuEventRecord(e[1], s2), CUDA_SUCCESS);
  ASSERT_EQ(cuStreamWaitEvent(s3, e[1], 0), CUDA_SUCCESS);  // s3 forks from s2
  ASSERT_EQ(launch(k.fixed_1ms, s3), CUDA_SUCCESS);
  ASSERT_EQ(launch(k.fixed_1ms, s2), CUDA_SUCCESS);
  ASSERT_EQ(cuEventRecord(e[2], s3), CUDA_SUCCESS);
  ASSERT_EQ(cuStreamWaitEvent(s2, e[2], 0), CUDA_SUCCESS);  // s3 joins s2
  ASSERT_EQ(cuEventRecord(e[3], s2), CUDA_SUCCESS);
  ASSERT_EQ(cuStreamWaitEvent(s1, e[3], 0), CUDA_SUCCESS);  // s2 (and through it s3) joins s1
  CUgraph g = nullptr;
  ASSERT_EQ(cuStreamEndCapture(s1, &g), CUDA_SUCCESS);
  size_t nodes = 0;
  ASSERT_EQ(cuGraphGetNodes(g, nullptr, &nodes), CUDA_SUCCESS);
  EXPECT_EQ(nodes, 2u);
  EXPECT_EQ(cuGraphDestroy(g), CUDA_SUCCESS);
}

TEST_F(Simcuda, AnUnjoinedForkFailsTheCaptureAndEndsIt) {
  CUstream s1, s2;
  ASSERT_EQ(cuStreamCreate(&s1, CU_STREAM_NON_BLOCKING), CUDA_SUCCESS);
  ASSERT_EQ(cuStreamCreate(&s2, CU_STREAM_NON_BLOCKING), CUDA_SUCCESS);
  CUevent fork, late;
  ASSERT_EQ(cuEventCreate(&fork, 0), CUDA_SUCCESS);
  ASSERT_EQ(cuEventCreate(&late, 0), CUDA_SUCCESS);
  ASSERT_EQ(cuStreamBeginCapture(s1, CU_STREAM_CAPTURE_MODE_GLOBAL), CUDA_SUCCESS);
  ASSERT_EQ(cuEventRecord(fork, s1), CUDA_SUCCESS);
  ASSERT_EQ(cuStreamWaitEvent(s2, fork, 0), CUDA_SUCCESS);
  ASSERT_EQ(cuEventRecord(late, s2), CUDA_SUCCESS);
  ASSERT_EQ(cuStreamWaitEvent(s1, late, 0), CUDA_SUCCESS);  // joined before s2's launch: not covering it
  ASSERT_EQ(launch(k.fixed_1ms, s2), CUDA_SUCCESS);
  // Ending on the forked stream is refused and breaks the capture.
  CUgraph g = reinterpret_cast<CUgraph>(0x1);
  EXPECT_EQ(cuStreamEndCapture(s2, &g), CUDA_ERROR_STREAM_CAPTURE_UNMATCHED);
  CUstreamCaptureStatus st;
  ASSERT_EQ(cuStreamIsCapturing(s1, &st), CUDA_SUCCESS);
  EXPECT_EQ(st, CU_STREAM_CAPTURE_STATUS_INVALIDATED);
  EXPECT_EQ(cuStreamEndCapture(s1, &g), CUDA_ERROR_STREAM_CAPTURE_INVALIDATED);
  EXPECT_EQ(g, nullptr);
  // Again without the unmatched end: the origin's end reports the unjoined work.
  ASSERT_EQ(cuStreamBeginCapture(s1, CU_STREAM_CAPTURE_MODE_GLOBAL), CUDA_SUCCESS);
  ASSERT_EQ(cuEventRecord(fork, s1), CUDA_SUCCESS);
  ASSERT_EQ(cuStreamWaitEvent(s2, fork, 0), CUDA_SUCCESS);
  ASSERT_EQ(launch(k.fixed_1ms, s2), CUDA_SUCCESS);
  g = reinterpret_cast<CUgraph>(0x1);
  EXPECT_EQ(cuStreamEndCapture(s1, &g), CUDA_ERROR_STREAM_CAPTURE_UNJOINED);
  EXPECT_EQ(g, nullptr);
  ASSERT_EQ(cuStreamIsCapturing(s2, &st), CUDA_SUCCESS);
  EXPECT_EQ(st, CU_STREAM_CAPTURE_STATUS_NONE);
  ASSERT_EQ(launch(k.fixed_1ms, s2), CUDA_SUCCESS);  // runs at once again
  EXPECT_EQ(cuStreamSynchronize(s2), CUDA_SUCCESS);
}

TEST_F(Simcuda, WaitingAcrossTwoCapturesIsAMerge) {
  CUstream s1, s2;
  ASSERT_EQ(cuStreamCreate(&s1, CU_STREAM_NON_BLOCKING), CUDA_SUCCESS);
  ASSERT_EQ(cuStreamCreate(&s2, CU_STREAM_NON_BLOCKING), CUDA_SUCCESS);
  CUevent e;
  ASSERT_EQ(cuEventCreate(&e, 0), CUDA_SUCCESS);
  ASSERT_EQ(cuStreamBeginCapture(s1, CU_STREAM_CAPTURE_MODE_RELAXED), CUDA_SUCCESS);
  ASSERT_EQ(cuStreamBeginCapture(s2, CU_STREAM_CAPTURE_MODE_RELAXED), CUDA_SUCCESS);
  ASSERT_EQ(cuEventRecord(e, s1), CUDA_SUCCESS);
  EXPECT_EQ(cuStreamWaitEvent(s2, e, 0), CUDA_ERROR_STREAM_CAPTURE_MERGE);
  CUgraph g = nullptr;
  EXPECT_EQ(cuStreamEndCapture(s1, &g), CUDA_ERROR_STREAM_CAPTURE_INVALIDATED);
  EXPECT_EQ(cuStreamEndCapture(s2, &g), CUDA_ERROR_STREAM_CAPTURE_INVALIDATED);
}
