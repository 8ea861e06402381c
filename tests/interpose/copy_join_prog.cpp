// copy_join_prog: strided, 3D, peer and symbol copies, and stream captures that a second stream
// joins through an event, through the runtime and the driver API (reached with
// cudaGetDriverEntryPointByVersion, as libraries reach it). Run on simcuda, plain and under
// LD_PRELOAD=libcapuchin.so: its output must not depend on capuchin; copy_join.sh checks the
// trace and, under CAPUCHIN_BUDGET, the executor's decisions.
//
// Usage: copy_join_prog TENSOR_BYTES STEPS
// Allocations in order (trace ids in allocation order when nothing else allocates):
//   #0 M (8 rows, pitch 128)  #1 N (8 x 96)  #2 V (3 slices x 4 rows, pitch 64)  #3 P (8 x 96)
//   #4 A, #5 B (capture buffers, 64 floats)  then the executor phase: #6 T0 .. #11 T5.
// Phase 1, copies (each one a trace copy: direction, bytes, ids) and 2D/3D memsets (each one a
// trace memset kernel: bytes, the allocation written), see copy_join.sh.
// Phase 2, captures: `main` captures main_kernel(A); `side` joins through an event recorded on
// `main` (runtime calls), captures side_kernel(B) twice and a 2D copy B -> A, and is joined back;
// marker_kernel runs between the end of the capture and 3 graph launches. The same with the
// driver's cuEventRecordWithFlags / cuStreamWaitEvent: side_kernel_drv, 2 graph launches.
// Phase 3, the executor: T0..T5 of TENSOR_BYTES, uploaded in order, T0 scaled once; after each
// later upload and after each step (which scales T(1 + step % 5)) a 3000-byte box of T0 is read
// with cudaMemcpy2D, the only later access to T0.
// Prints checksums of everything read back and exits 0 when every call succeeded.
#include <cuda.h>
#include <cuda_runtime_api.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "simcuda/kernel.hpp"
#include "simcuda/shapes.hpp"

namespace {

using simcuda::extent;
using simcuda::pitched;
using simcuda::pos;

void main_kernel(float*, int) {}
void side_kernel(float*, int) {}
void side_kernel_drv(float*, int) {}
void marker_kernel(float*, int) {}
void scale(float*, int, float) {}

void add_one_body(void** args, const simcuda_launch_info*) {
  auto [p, n] = simcuda::unpack(main_kernel, args);
  p = simcuda::access(p, static_cast<size_t>(n), SIMCUDA_READ_WRITE);
  for (int i = 0; i < n; ++i) p[i] += 1.0f;
}
void scale_body(void** args, const simcuda_launch_info*) {
  auto [p, n, s] = simcuda::unpack(scale, args);
  p = simcuda::access(p, static_cast<size_t>(n), SIMCUDA_READ_WRITE);
  for (int i = 0; i < n; ++i) p[i] = p[i] * s + 1.0f;
}

float g_bias[4] = {0.5f, 1.5f, 2.5f, 3.5f};  // the shadow of a __device__ float[4]

void check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) {
    std::fprintf(stderr, "copy_join_prog: %s failed: %s\n", what, cudaGetErrorString(e));
    std::exit(e == cudaErrorMemoryAllocation ? 2 : 1);
  }
}
void check(CUresult r, const char* what) {
  if (r != CUDA_SUCCESS) {
    std::fprintf(stderr, "copy_join_prog: %s failed: %d\n", what, static_cast<int>(r));
    std::exit(1);
  }
}

template <class F>
F entry(const char* name) {
  void* p = nullptr;
  cudaDriverEntryPointQueryResult st{};
  check(cudaGetDriverEntryPointByVersion(name, &p, 13000, cudaEnableDefault, &st), name);
  if (p == nullptr) {
    std::fprintf(stderr, "copy_join_prog: no driver entry point %s\n", name);
    std::exit(1);
  }
  return reinterpret_cast<F>(p);
}

std::uint64_t fnv(const void* data, size_t n) {
  std::uint64_t h = 1469598103934665603ull;
  const auto* b = static_cast<const unsigned char*>(data);
  for (size_t i = 0; i < n; ++i) h = (h ^ b[i]) * 1099511628211ull;
  return h;
}

void* dev_alloc(size_t n) {
  void* p = nullptr;
  check(cudaMalloc(&p, n), "cudaMalloc");
  return p;
}

void copies() {
  constexpr size_t kW = 96, kRows = 8, kPitch = 128;
  unsigned char* m = static_cast<unsigned char*>(dev_alloc(kPitch * kRows));  // #0
  unsigned char* n = static_cast<unsigned char*>(dev_alloc(kW * kRows));      // #1
  unsigned char* v = static_cast<unsigned char*>(dev_alloc(64 * 4 * 3));      // #2
  unsigned char* p = static_cast<unsigned char*>(dev_alloc(kW * kRows));      // #3
  std::vector<unsigned char> host(kW * kRows);
  for (size_t i = 0; i < host.size(); ++i) host[i] = static_cast<unsigned char>(i * 7 + 3);
  // c1: host -> M, 8 rows of 96 bytes into a 128-byte pitch (768 bytes moved).
  check(cudaMemcpy2D(m, kPitch, host.data(), kW, kW, kRows, cudaMemcpyHostToDevice), "c1 2D h2d");
  // c2: M -> N, packed.
  check(cudaMemcpy2D(n, kW, m, kPitch, kW, kRows, cudaMemcpyDeviceToDevice), "c2 2D d2d");
  // c3: 40 bytes of each row from byte 8 of M (an interior first byte) to the host: 320 bytes.
  std::vector<unsigned char> c3(40 * kRows);
  check(cudaMemcpy2D(c3.data(), 40, m + 8, kPitch, 40, kRows, cudaMemcpyDeviceToHost), "c3 2D d2h");
  // c4: a 16 x 4 x 3 host box into V (pitch 64, 4 rows a slice) at x = 8: 192 bytes.
  cudaMemcpy3DParms p3{};
  p3.srcPtr = pitched(host.data(), 16, 16, 4);
  p3.dstPtr = pitched(v, 64, 64, 4);
  p3.dstPos = pos(8, 0, 0);
  p3.extent = extent(16, 4, 3);
  p3.kind = cudaMemcpyHostToDevice;
  check(cudaMemcpy3D(&p3), "c4 3D h2d");
  // s1: bytes 8..11 of rows 0..1 of V's slices 0..1 (a trace memset of 16 bytes).
  check(cudaMemset3D(pitched(v + 8, 64, 64, 4), 0x7f, extent(4, 2, 2)), "s1 3D memset");
  // c5: N -> P across "devices" 0 and 0.
  check(cudaMemcpyPeer(p, 0, n, 0, kW * kRows), "c5 peer");
  // s2: 8 bytes from byte 4 of N's rows 0..1, on the legacy stream (16 bytes).
  check(cudaMemset2DAsync(n + 4, kW, 0x22, 8, 2, nullptr), "s2 2D memset");
  // c6, c7: into the module global from the host, then from it into P (16 bytes each).
  if (!simcuda::register_global("g_bias", g_bias)) return (void)std::fprintf(stderr, "no global\n"), std::exit(1);
  const float bias[4] = {10.0f, 20.0f, 30.0f, 40.0f};
  check(cudaMemcpyToSymbol(g_bias, bias, sizeof bias), "c6 to symbol");
  check(cudaMemcpyFromSymbol(p, g_bias, sizeof bias, 0, cudaMemcpyDeviceToDevice), "c7 from symbol");
  // c8: the driver's cuMemcpy2D: 4 rows of 16 bytes of V's first slice (x = 8) into P: 64 bytes.
  auto memcpy2d = entry<CUresult (*)(const CUDA_MEMCPY2D*)>("cuMemcpy2D");
  CUDA_MEMCPY2D d2{};
  d2.srcMemoryType = CU_MEMORYTYPE_DEVICE;
  d2.srcDevice = reinterpret_cast<CUdeviceptr>(v);
  d2.srcXInBytes = 8;
  d2.srcPitch = 64;
  d2.dstMemoryType = CU_MEMORYTYPE_DEVICE;
  d2.dstDevice = reinterpret_cast<CUdeviceptr>(p) + 16;
  d2.dstPitch = 16;
  d2.WidthInBytes = 16;
  d2.Height = 4;
  check(memcpy2d(&d2), "c8 cuMemcpy2D");
  // c9: the driver's cuMemcpyPeerAsync, P -> N, 100 bytes on the legacy stream.
  auto ctx_get_current = entry<CUresult (*)(CUcontext*)>("cuCtxGetCurrent");
  auto peer_async = entry<CUresult (*)(CUdeviceptr, CUcontext, CUdeviceptr, CUcontext, size_t, CUstream)>(
      "cuMemcpyPeerAsync");
  CUcontext ctx = nullptr;
  check(ctx_get_current(&ctx), "cuCtxGetCurrent");
  check(peer_async(reinterpret_cast<CUdeviceptr>(n), ctx, reinterpret_cast<CUdeviceptr>(p), ctx, 100, nullptr),
        "c9 cuMemcpyPeerAsync");
  // s3: the driver's cuMemsetD2D32, 4 words from byte 32 of P's rows 0..2 (48 bytes).
  auto memset2d32 = entry<CUresult (*)(CUdeviceptr, size_t, unsigned, size_t, size_t)>("cuMemsetD2D32");
  check(memset2d32(reinterpret_cast<CUdeviceptr>(p) + 32, kW, 0xdeadbeefu, 4, 3), "s3 cuMemsetD2D32");
  // c10: the driver's cuMemcpy3D, all of V's 16 x 4 x 3 box back to the host: 192 bytes.
  auto memcpy3d = entry<CUresult (*)(const CUDA_MEMCPY3D*)>("cuMemcpy3D");
  std::vector<unsigned char> c10(16 * 4 * 3);
  CUDA_MEMCPY3D d3{};
  d3.srcMemoryType = CU_MEMORYTYPE_DEVICE;
  d3.srcDevice = reinterpret_cast<CUdeviceptr>(v);
  d3.srcXInBytes = 8;
  d3.srcPitch = 64;
  d3.srcHeight = 4;
  d3.dstMemoryType = CU_MEMORYTYPE_HOST;
  d3.dstHost = c10.data();
  d3.dstPitch = 16;
  d3.dstHeight = 4;
  d3.WidthInBytes = 16;
  d3.Height = 4;
  d3.Depth = 3;
  check(memcpy3d(&d3), "c10 cuMemcpy3D");
  // c11, c12: read N and P back (768 bytes each).
  std::vector<unsigned char> nb(kW * kRows), pb(kW * kRows);
  check(cudaMemcpy(nb.data(), n, nb.size(), cudaMemcpyDeviceToHost), "c11 read N");
  check(cudaMemcpy(pb.data(), p, pb.size(), cudaMemcpyDeviceToHost), "c12 read P");
  std::printf("copies: c3 %016llx c10 %016llx N %016llx P %016llx\n", static_cast<unsigned long long>(fnv(c3.data(), c3.size())),
              static_cast<unsigned long long>(fnv(c10.data(), c10.size())),
              static_cast<unsigned long long>(fnv(nb.data(), nb.size())),
              static_cast<unsigned long long>(fnv(pb.data(), pb.size())));
  for (void* x : {static_cast<void*>(m), static_cast<void*>(n), static_cast<void*>(v), static_cast<void*>(p)})
    check(cudaFree(x), "cudaFree");
}

void captures() {
  constexpr int kN = 64;
  float* a = static_cast<float*>(dev_alloc(kN * sizeof(float)));  // #4
  float* b = static_cast<float*>(dev_alloc(kN * sizeof(float)));  // #5
  check(cudaMemset(a, 0, kN * sizeof(float)), "memset a");
  check(cudaMemset(b, 0, kN * sizeof(float)), "memset b");
  cudaStream_t main_s, side;
  check(cudaStreamCreateWithFlags(&main_s, cudaStreamNonBlocking), "stream");
  check(cudaStreamCreateWithFlags(&side, cudaStreamNonBlocking), "stream");
  cudaEvent_t fork, join;
  check(cudaEventCreateWithFlags(&fork, cudaEventDisableTiming), "event");
  check(cudaEventCreateWithFlags(&join, cudaEventDisableTiming), "event");
  const dim3 grid(1), block(64);

  // Runtime fork and join.
  check(cudaStreamBeginCapture(main_s, cudaStreamCaptureModeGlobal), "begin capture");
  check(simcuda::launch(main_kernel, grid, block, main_s, a, kN), "main_kernel");
  check(cudaEventRecord(fork, main_s), "record fork");
  check(cudaStreamWaitEvent(side, fork, 0), "side waits");
  check(simcuda::launch(side_kernel, grid, block, side, b, kN), "side_kernel");
  check(simcuda::launch(side_kernel, grid, block, side, b, kN), "side_kernel");
  // Captured on the joined stream: b's first 8 floats as 2 rows of 4 into a[32..35], a[48..51].
  check(cudaMemcpy2DAsync(a + 32, 16 * sizeof(float), b, 4 * sizeof(float), 4 * sizeof(float), 2,
                          cudaMemcpyDeviceToDevice, side),
        "captured 2D copy");
  check(cudaEventRecord(join, side), "record join");
  check(cudaStreamWaitEvent(main_s, join, 0), "main waits");
  cudaGraph_t g = nullptr;
  check(cudaStreamEndCapture(main_s, &g), "end capture");
  check(simcuda::launch(marker_kernel, grid, block, main_s, a, 1), "marker_kernel");
  cudaGraphExec_t exec = nullptr;
  check(cudaGraphInstantiate(&exec, g, 0), "instantiate");
  for (int i = 0; i < 3; ++i) check(cudaGraphLaunch(exec, main_s), "graph launch");
  check(cudaStreamSynchronize(main_s), "sync");
  check(cudaGraphExecDestroy(exec), "exec destroy");
  check(cudaGraphDestroy(g), "graph destroy");

  // The same fork and join through the driver's event calls.
  auto record = entry<CUresult (*)(CUevent, CUstream, unsigned)>("cuEventRecordWithFlags");
  auto wait = entry<CUresult (*)(CUstream, CUevent, unsigned)>("cuStreamWaitEvent");
  check(cudaStreamBeginCapture(main_s, cudaStreamCaptureModeGlobal), "begin capture 2");
  check(record(fork, main_s, CU_EVENT_RECORD_DEFAULT), "cuEventRecordWithFlags fork");
  check(wait(side, fork, CU_EVENT_WAIT_DEFAULT), "cuStreamWaitEvent side");
  check(simcuda::launch(side_kernel_drv, grid, block, side, b, kN), "side_kernel_drv");
  check(record(join, side, CU_EVENT_RECORD_DEFAULT), "cuEventRecordWithFlags join");
  check(wait(main_s, join, CU_EVENT_WAIT_DEFAULT), "cuStreamWaitEvent main");
  check(cudaStreamEndCapture(main_s, &g), "end capture 2");
  check(cudaGraphInstantiate(&exec, g, 0), "instantiate 2");
  for (int i = 0; i < 2; ++i) check(cudaGraphLaunch(exec, main_s), "graph launch 2");
  check(cudaStreamSynchronize(main_s), "sync 2");
  check(cudaGraphExecDestroy(exec), "exec destroy 2");
  check(cudaGraphDestroy(g), "graph destroy 2");

  std::vector<float> ha(kN), hb(kN);
  check(cudaMemcpy(ha.data(), a, kN * sizeof(float), cudaMemcpyDeviceToHost), "read a");
  check(cudaMemcpy(hb.data(), b, kN * sizeof(float), cudaMemcpyDeviceToHost), "read b");
  std::printf("captures: a[0] %g a[1] %g a[32] %g a[51] %g b[0] %g\n", static_cast<double>(ha[0]),
              static_cast<double>(ha[1]), static_cast<double>(ha[32]), static_cast<double>(ha[51]),
              static_cast<double>(hb[0]));
  check(cudaStreamDestroy(main_s), "stream destroy");
  check(cudaStreamDestroy(side), "stream destroy");
  check(cudaEventDestroy(fork), "event destroy");
  check(cudaEventDestroy(join), "event destroy");
  check(cudaFree(a), "free a");
  check(cudaFree(b), "free b");
}

void executor_phase(size_t bytes, int steps) {
  const int n = static_cast<int>(bytes / sizeof(float));
  std::vector<float*> t(6);
  std::vector<float> host(static_cast<size_t>(n));
  // T0 seen as 3 rows of 1000 bytes, 4096 bytes apart, from byte 40: read after every other
  // access, so T0 is never the tensor used longest ago.
  std::vector<unsigned char> box(3000);
  std::uint64_t sum = 0;
  auto read_t0 = [&] {
    check(cudaMemcpy2D(box.data(), 1000, reinterpret_cast<unsigned char*>(t[0]) + 40, 4096, 1000, 3,
                       cudaMemcpyDeviceToHost),
          "read T0 box");
    sum = sum * 31 + fnv(box.data(), box.size());
  };
  for (size_t k = 0; k < t.size(); ++k) {
    t[k] = static_cast<float*>(dev_alloc(bytes));  // #6 + k
    for (int i = 0; i < n; ++i) host[static_cast<size_t>(i)] = static_cast<float>((i * 3 + static_cast<int>(k) * 17) % 97);
    check(cudaMemcpy(t[k], host.data(), bytes, cudaMemcpyHostToDevice), "upload");
    // T0 is scaled once (on the device then, for every backend), later only read.
    if (k == 0) check(simcuda::launch(scale, dim3(1), dim3(256), nullptr, t[0], n, 0.5f), "scale T0");
    if (k > 0) read_t0();
  }
  for (int s = 0; s < steps; ++s) {
    check(simcuda::launch(scale, dim3(1), dim3(256), nullptr, t[static_cast<size_t>(1 + s % 5)], n, 0.5f), "scale");
    read_t0();
  }
  check(cudaDeviceSynchronize(), "sync");
  std::uint64_t all = 0;
  for (float* x : t) {
    check(cudaMemcpy(host.data(), x, bytes, cudaMemcpyDeviceToHost), "download");
    all = all * 31 + fnv(host.data(), bytes);
    check(cudaFree(x), "free");
  }
  std::printf("executor phase: box %016llx tensors %016llx\n", static_cast<unsigned long long>(sum),
              static_cast<unsigned long long>(all));
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: copy_join_prog TENSOR_BYTES STEPS\n");
    return 1;
  }
  const size_t bytes = std::strtoull(argv[1], nullptr, 10);
  const int steps = std::atoi(argv[2]);
  if (bytes < 16384 || steps < 1) return 1;
  simcuda::register_kernel("main_kernel", main_kernel, add_one_body);
  simcuda::register_kernel("side_kernel", side_kernel, add_one_body);
  simcuda::register_kernel("side_kernel_drv", side_kernel_drv, add_one_body);
  simcuda::register_kernel("marker_kernel", marker_kernel, add_one_body);
  simcuda::register_kernel("scale", scale, scale_body);
  check(cudaSetDevice(0), "cudaSetDevice");
  copies();
  captures();
  executor_phase(bytes, steps);
  std::printf("copy_join_prog ok\n");
  return 0;
}
