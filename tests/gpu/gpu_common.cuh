// gpu_common.cuh: what every real-GPU check program (tests/gpu, bench/gpu) shares: the
// "no GPU here" skip (exit 77, which ctest and scripts/gpu-check.sh treat as SKIP), CUDA
// error checks that name the failing call, PASS/FAIL lines and the final verdict, and
// driver entry points obtained the way libraries get them (cudart -> cuGetProcAddress), so
// the programs never link libcuda and exercise the interposer's cuGetProcAddress path.
//
// Contract: every check prints exactly one line starting with "PASS " or "FAIL "; finish()
// prints "RESULT <prog> PASS|FAIL (<n> failures)" and returns the exit status (0 / 1).
// A program run where no CUDA device answers prints "SKIP <prog>: ..." and exits 77; one
// whose driver is older than the CUDA runtime it was built with prints "SKIP <prog>: driver
// too old ..." and exits 78 (scripts/gpu-check.sh tells the two apart: a driver too old is no
// reason to skip the PyTorch step, whose runtime may be older).
//
// Builds with a CUDA 12.x toolkit too: calls that exist only in CUDA 13 (or changed form
// there) are guarded with CUDART_VERSION.
#pragma once

#include <cuda.h>
#include <cuda_runtime.h>

#include <cstdarg>
#include <cstdio>
#include <cstdlib>

namespace gpu_check {

inline constexpr int kSkipExit = 77;
inline constexpr int kDriverTooOldExit = 78;
inline int g_failures = 0;

// Exits 77 with a clear line when no CUDA device is usable; otherwise prints the device.
inline void require_gpu_or_skip(const char* prog) {
  int n = 0;
  const cudaError_t e = cudaGetDeviceCount(&n);
  int driver = 0;
  (void)cudaDriverGetVersion(&driver);  // 0: no driver (libcuda) at all, which is "no GPU"
  if (e == cudaErrorInsufficientDriver && driver > 0) {
    std::printf("SKIP %s: driver too old: it supports CUDA %d.%d, this program was built with runtime %d.%d "
                "(cudaErrorInsufficientDriver)\n",
                prog, driver / 1000, driver % 1000 / 10, CUDART_VERSION / 1000, CUDART_VERSION % 1000 / 10);
    std::fflush(stdout);
    std::exit(kDriverTooOldExit);
  }
  if (e != cudaSuccess || n == 0) {
    std::printf("SKIP %s: no CUDA GPU here (cudaGetDeviceCount: %s, %d devices)\n", prog,
                e == cudaSuccess ? "no error" : cudaGetErrorString(e), n);
    std::fflush(stdout);
    std::exit(kSkipExit);
  }
  cudaDeviceProp p{};
  int runtime = 0;
  (void)cudaGetDeviceProperties(&p, 0);
  (void)cudaRuntimeGetVersion(&runtime);
  std::printf("INFO %s: device 0 %s, sm_%d%d, %.1f GiB, driver API %d, runtime %d\n", prog, p.name, p.major,
              p.minor, static_cast<double>(p.totalGlobalMem) / (1024.0 * 1024.0 * 1024.0), driver, runtime);
}

inline void check(bool ok, const char* fmt, ...) __attribute__((format(printf, 2, 3)));
inline void check(bool ok, const char* fmt, ...) {
  std::printf("%s ", ok ? "PASS" : "FAIL");
  va_list ap;
  va_start(ap, fmt);
  std::vprintf(fmt, ap);
  va_end(ap);
  std::printf("\n");
  std::fflush(stdout);
  if (!ok) ++g_failures;
}

inline int finish(const char* prog) {
  std::printf("RESULT %s %s (%d failures)\n", prog, g_failures == 0 ? "PASS" : "FAIL", g_failures);
  std::fflush(stdout);
  return g_failures == 0 ? 0 : 1;
}

// A driver entry point through cudart (which asks cuGetProcAddress), as cuBLAS and PyTorch do.
// cudaGetDriverEntryPointByVersion exists from CUDA 12.5 (and alone in 13); before, the
// unversioned call gives the toolkit's default version of the entry point.
// driver_entry_or_null: null when the driver lacks it (*err, *q: what the runtime said);
// driver_entry: a FAIL line and exit 1 then.
template <class Fn>
Fn driver_entry_or_null(const char* name, unsigned version = 12000, cudaError_t* err = nullptr,
                        cudaDriverEntryPointQueryResult* query = nullptr) {
  void* p = nullptr;
  cudaDriverEntryPointQueryResult q{};
#if CUDART_VERSION >= 12050
  const cudaError_t e = cudaGetDriverEntryPointByVersion(name, &p, version, cudaEnableDefault, &q);
#else
  (void)version;
  const cudaError_t e = cudaGetDriverEntryPoint(name, &p, cudaEnableDefault, &q);
#endif
  if (err != nullptr) *err = e;
  if (query != nullptr) *query = q;
  return e == cudaSuccess && q == cudaDriverEntryPointSuccess ? reinterpret_cast<Fn>(p) : nullptr;
}
template <class Fn>
Fn driver_entry(const char* name, unsigned version = 12000) {
  cudaError_t e = cudaSuccess;
  cudaDriverEntryPointQueryResult q{};
  Fn f = driver_entry_or_null<Fn>(name, version, &e, &q);
  if (f == nullptr) {
    std::printf("FAIL driver entry %s: %s (query result %d)\n", name, cudaGetErrorString(e), static_cast<int>(q));
    std::fflush(stdout);
    std::exit(1);
  }
  return f;
}

}  // namespace gpu_check

// A failing CUDA runtime call is a FAIL line naming the call, then exit 1.
#define GPU_CK(call)                                                                                  \
  do {                                                                                                \
    const cudaError_t e_ = (call);                                                                    \
    if (e_ != cudaSuccess) {                                                                          \
      std::printf("FAIL %s:%d %s: %s\n", __FILE__, __LINE__, #call, cudaGetErrorString(e_));          \
      std::printf("RESULT %s FAIL (CUDA error)\n", __FILE__);                                         \
      std::fflush(stdout);                                                                            \
      std::exit(1);                                                                                   \
    }                                                                                                 \
  } while (0)

// The same for driver calls (CUresult).
#define GPU_CU(call)                                                                                  \
  do {                                                                                                \
    const CUresult r_ = (call);                                                                       \
    if (r_ != CUDA_SUCCESS) {                                                                         \
      std::printf("FAIL %s:%d %s: CUresult %d\n", __FILE__, __LINE__, #call, static_cast<int>(r_));    \
      std::printf("RESULT %s FAIL (driver error)\n", __FILE__);                                       \
      std::fflush(stdout);                                                                            \
      std::exit(1);                                                                                   \
    }                                                                                                 \
  } while (0)
