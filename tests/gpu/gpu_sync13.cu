// gpu_sync13: context synchronisation in the form the CUDA 13 runtime uses. cudart 13 asks
// cuGetProcAddress for cuCtxSynchronize at version 13000 and gets cuCtxSynchronize_v2(CUcontext)
// (issue 16: an interposer answering with the old cuCtxSynchronize(void) breaks every
// cudaDeviceSynchronize). Each synchronisation below must wait for a kernel that spins ~20 ms
// and then writes into mapped host memory, read directly by the host afterwards: a call
// that returns early, or fails, is caught.
//   1. cudaDeviceSynchronize (cudart's own path: version 13000 under CUDA 13);
//   2. cuCtxSynchronize at version 13000 with an explicit context and with NULL (CUDA 13
//      builds only; SKIP line otherwise);
//   3. cuCtxSynchronize at version 12000 (the (void) form older libraries ask for).
// Prints PASS/FAIL/SKIP lines, CHECKSUM lines and EXPECT lines (tests/gpu/run_check.sh
// sync13). Exit 0 / 1, or 77 with no GPU, 78 with a driver too old.
#include <cstdint>

#include "gpu_common.cuh"

namespace {

__global__ void spin_then_write(unsigned* host_flag, unsigned* dev_out, unsigned value, long long cycles) {
  const long long t0 = clock64();
  while (clock64() - t0 < cycles) {
  }
  dev_out[0] = value;
  __threadfence_system();
  *reinterpret_cast<volatile unsigned*>(host_flag) = value;
}

using CtxSyncV1 = CUresult (*)();
#if CUDA_VERSION >= 13000
using CtxSyncV2 = CUresult (*)(CUcontext);
using CtxGetCurrent = CUresult (*)(CUcontext*);
#endif

struct Bench {
  unsigned* host = nullptr;  // mapped pinned host memory: the kernel's last write lands here
  unsigned* dev = nullptr;
  long long cycles = 0;
  unsigned next = 1;
  Bench() {
    GPU_CK(cudaHostAlloc(&host, sizeof(unsigned), cudaHostAllocMapped));
    GPU_CK(cudaMalloc(&dev, sizeof(unsigned)));
    int khz = 0;
    GPU_CK(cudaDeviceGetAttribute(&khz, cudaDevAttrClockRate, 0));
    cycles = static_cast<long long>(khz > 0 ? khz : 1500000) * 20;  // ~20 ms at the SM clock
    *host = 0;
  }
  ~Bench() {
    (void)cudaFreeHost(host);
    (void)cudaFree(dev);
  }
  // Launches the spinner and synchronises with `sync`; true when the host sees the write.
  template <class Sync>
  bool waits(Sync sync) {
    const unsigned v = next++;
    unsigned* dhost = nullptr;
    GPU_CK(cudaHostGetDevicePointer(reinterpret_cast<void**>(&dhost), host, 0));
    spin_then_write<<<1, 1>>>(dhost, dev, v, cycles);
    GPU_CK(cudaGetLastError());
    const bool ok = sync();
    return ok && *reinterpret_cast<volatile unsigned*>(host) == v;
  }
};

}  // namespace

int main() {
  gpu_check::require_gpu_or_skip("gpu_sync13");
  std::printf("INFO gpu_sync13: built with CUDA runtime %d\n", CUDART_VERSION);
  (void)cudaSetDeviceFlags(cudaDeviceMapHost);  // implied on 64-bit (unified addressing); a no-op there
  Bench b;
  gpu_check::check(b.waits([] { return cudaDeviceSynchronize() == cudaSuccess; }),
                   "cudaDeviceSynchronize waits for the kernel (runtime %d asks for cuCtxSynchronize at its version)",
                   CUDART_VERSION);
#if CUDA_VERSION >= 13000
  auto sync_v2 = gpu_check::driver_entry<CtxSyncV2>("cuCtxSynchronize", 13000);
  auto get_current = gpu_check::driver_entry<CtxGetCurrent>("cuCtxGetCurrent");
  CUcontext ctx = nullptr;
  GPU_CU(get_current(&ctx));
  CUresult r = CUDA_SUCCESS;
  gpu_check::check(b.waits([&] { return (r = sync_v2(ctx)) == CUDA_SUCCESS; }),
                   "cuCtxSynchronize at version 13000, explicit context: waits (CUresult %d)", static_cast<int>(r));
  gpu_check::check(b.waits([&] { return (r = sync_v2(nullptr)) == CUDA_SUCCESS; }),
                   "cuCtxSynchronize at version 13000, NULL (current) context: waits (CUresult %d)", static_cast<int>(r));
#else
  std::printf("SKIP gpu_sync13: cuCtxSynchronize_v2(CUcontext) needs CUDA 13 headers (built with %d)\n", CUDA_VERSION);
#endif
  auto sync_v1 = gpu_check::driver_entry<CtxSyncV1>("cuCtxSynchronize", 12000);
  CUresult r1 = CUDA_SUCCESS;
  gpu_check::check(b.waits([&] { return (r1 = sync_v1()) == CUDA_SUCCESS; }),
                   "cuCtxSynchronize at version 12000 (void form): waits (CUresult %d)", static_cast<int>(r1));
  gpu_check::check(cudaDeviceSynchronize() == cudaSuccess && cudaGetLastError() == cudaSuccess,
                   "no error left behind");
  unsigned last = 0;
  GPU_CK(cudaMemcpy(&last, b.dev, sizeof last, cudaMemcpyDeviceToHost));
  std::printf("CHECKSUM sync13 %u\n", last);
  std::printf("EXPECT kernel spin_then_write count_min 2 touch_min 1\n");
  return gpu_check::finish("gpu_sync13");
}
