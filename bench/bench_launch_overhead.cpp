// bench_launch_overhead: the cost libcapuchin.so adds to one kernel launch, in ns (median),
// measured against calling the driver directly in the same run.
//
// The driver is a trivial in-process stub (cuLaunchKernel returns at once): simcuda's launch
// takes a lock and wakes a worker thread (microseconds, jittery), which would bury a ~100 ns
// difference in noise. The interposer is loaded with dlopen and its wrapper obtained through
// capuchin_wrap_driver_proc: exactly the wrapper cuGetProcAddress hands a program (vendor
// libraries launch through it), with capture on (CAPUCHIN_SINK=null: events go through the
// rings and the drain thread, then are discarded; set CAPUCHIN_RECORD to write a file).
// Three kernels: 4 pointer arguments; one 256-byte by-value struct (32 words scanned); and a
// multi-tensor launch as PyTorch's optimizer steps make with 32 KB kernel arguments
// (MultiTensorApply.cuh's TensorListMetadata<3>: three lists of 336 tensor addresses, their
// element counts, each of 2,240 blocks' tensor and chunk; 24,200 bytes), 3,025 words scanned,
// 1,008 distinct pointers. 1000 live allocations are registered first (the span
// test then passes the pointer words).
//
// Output: per kernel, the median direct and intercepted ns per launch and the median added
// ns; the capture summary; the last line `added_ns_per_launch_median <ns>` (the largest of the
// two small kernels' medians; the multi-tensor launch is reported on its own line).
#include <cuda.h>
#include <dlfcn.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>
#include <vector>

namespace {

std::uint64_t g_next_address = 0x7f0000000000ull;
volatile std::uint64_t g_launches = 0;

struct Big {  // 256 bytes: 4 device pointers among scalars
  float* in;
  float* out;
  int n, m;
  float scale[20];
  float* bias;
  double eps[10];
  float* w;
  long long pad[7];
};
static_assert(sizeof(Big) == 256);

struct MultiTensor {  // MultiTensorApply.cuh's TensorListMetadata<3> with 32 KB arguments
  void* addresses[3][336];
  std::int64_t numel[336];
  std::uint16_t block_to_tensor[2240];
  std::int32_t block_to_chunk[2240];
  std::int32_t start_tensor_this_launch;
};

CUresult stub_mem_alloc(CUdeviceptr* p, size_t bytes) {
  *p = g_next_address;
  g_next_address += (bytes + 4095) / 4096 * 4096 + 4096;
  return CUDA_SUCCESS;
}
CUresult stub_launch(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, CUstream,
                     void**, void**) {
  g_launches = g_launches + 1;
  return CUDA_SUCCESS;
}
// Three fake functions: 1 = four pointers, 2 = one 256-byte struct, 3 = one MultiTensor.
CUresult stub_param_info(CUfunction f, size_t i, size_t* off, size_t* size) {
  const auto id = reinterpret_cast<std::uintptr_t>(f);
  if (id == 1 && i < 4) return *off = i * 8, *size = 8, CUDA_SUCCESS;
  if (id == 2 && i < 1) return *off = 0, *size = sizeof(Big), CUDA_SUCCESS;
  if (id == 3 && i < 1) return *off = 0, *size = sizeof(MultiTensor), CUDA_SUCCESS;
  return CUDA_ERROR_INVALID_VALUE;
}
CUresult stub_name(const char** name, CUfunction f) {
  const auto id = reinterpret_cast<std::uintptr_t>(f);
  *name = id == 1 ? "four_pointers" : id == 2 ? "big_struct" : "multi_tensor_apply";
  return CUDA_SUCCESS;
}

using LaunchFn = CUresult (*)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                              CUstream, void**, void**);
using AllocFn = CUresult (*)(CUdeviceptr*, size_t);
using WrapFn = void* (*)(const char*, void*, int, unsigned long long);

double per_launch_ns(LaunchFn fn_in, CUfunction f, void** params, int n) {
  LaunchFn volatile fn = fn_in;  // a real indirect call, as through cuGetProcAddress (no inlining)
  const auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < n; ++i) fn(f, 1, 1, 1, 128, 1, 1, 0, nullptr, params, nullptr);
  const auto t1 = std::chrono::steady_clock::now();
  return std::chrono::duration<double, std::nano>(t1 - t0).count() / n;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  const char* lib = argc > 1 ? argv[1] : CAPUCHIN_INTERPOSER_PATH;
  if (std::getenv("CAPUCHIN_RECORD") == nullptr) setenv("CAPUCHIN_SINK", "null", 0);
  setenv("CAPUCHIN_DRAIN_US", "200", 0);
  void* h = dlopen(lib, RTLD_NOW | RTLD_LOCAL);
  if (h == nullptr) {
    std::fprintf(stderr, "bench_launch_overhead: cannot load %s: %s\n", lib, dlerror());
    return 1;
  }
  auto wrap = reinterpret_cast<WrapFn>(dlsym(h, "capuchin_wrap_driver_proc"));
  auto finish = reinterpret_cast<int (*)(char*, size_t)>(dlsym(h, "capuchin_finish"));
  if (wrap == nullptr || finish == nullptr) {
    std::fprintf(stderr, "bench_launch_overhead: %s lacks capuchin_wrap_driver_proc\n", lib);
    return 1;
  }
  // What cuGetProcAddress would have handed the program.
  wrap("cuFuncGetParamInfo", reinterpret_cast<void*>(&stub_param_info), CUDA_VERSION, 0);
  wrap("cuFuncGetName", reinterpret_cast<void*>(&stub_name), CUDA_VERSION, 0);
  auto alloc = reinterpret_cast<AllocFn>(wrap("cuMemAlloc", reinterpret_cast<void*>(&stub_mem_alloc), CUDA_VERSION, 0));
  auto launch = reinterpret_cast<LaunchFn>(wrap("cuLaunchKernel", reinterpret_cast<void*>(&stub_launch), CUDA_VERSION, 0));
  if (reinterpret_cast<void*>(launch) == reinterpret_cast<void*>(&stub_launch)) {
    std::fprintf(stderr, "bench_launch_overhead: cuLaunchKernel was not wrapped (capture disabled?)\n");
    return 1;
  }
  std::vector<CUdeviceptr> bufs(1000);
  for (auto& b : bufs) alloc(&b, 1 << 16);
  auto dev = [&](int i) { return reinterpret_cast<float*>(bufs[static_cast<std::size_t>(i)] + 128); };

  float* a = dev(10);
  float* b = dev(400);
  float* c = dev(700);
  float* d = dev(999);
  void* four[] = {&a, &b, &c, &d};
  Big big{};
  big.in = dev(1);
  big.out = dev(500);
  big.n = 1024;
  big.m = 3;
  for (int i = 0; i < 20; ++i) big.scale[i] = 0.5f * static_cast<float>(i);
  for (int i = 0; i < 10; ++i) big.eps[i] = 1e-5 * i;
  big.bias = dev(250);
  big.w = dev(750);
  void* one[] = {&big};
  static MultiTensor multi{};  // 10 KiB: not on the stack
  for (int l = 0; l < 3; ++l)
    for (int t = 0; t < 336; ++t) {
      const int k = l * 336 + t;  // 1,008 distinct addresses inside the 1000 allocations
      multi.addresses[l][t] = reinterpret_cast<void*>(bufs[static_cast<std::size_t>(k % 1000)] + 256 * static_cast<CUdeviceptr>(k / 1000));
    }
  for (int t = 0; t < 336; ++t) multi.numel[t] = 4096 + t;
  for (int b = 0; b < 2240; ++b) multi.block_to_tensor[b] = static_cast<std::uint16_t>(b % 336), multi.block_to_chunk[b] = b / 336;
  void* multi_params[] = {&multi};
  struct Case {
    const char* name;
    CUfunction f;
    void** params;
  } cases[] = {{"4_pointer_args", reinterpret_cast<CUfunction>(1), four},
               {"256_byte_struct", reinterpret_cast<CUfunction>(2), one},
               {"multi_tensor_1008", reinterpret_cast<CUfunction>(3), multi_params}};

  constexpr int kRounds = 41, kPerRound = 5000, kPerRoundMulti = 200;
  double worst = 0;
  const char* only = std::getenv("BENCH_ONLY");  // run one case (for profiling)
  for (const Case& k : cases) {
    if (only != nullptr && std::strcmp(only, k.name) != 0) continue;
    const int per_round = k.f == reinterpret_cast<CUfunction>(3) ? kPerRoundMulti : kPerRound;  // its events fill the ring sooner
    per_launch_ns(launch, k.f, k.params, per_round / 5);  // warm: layout query, ring pages, caches
    std::vector<double> direct, hooked, added;
    for (int r = 0; r < kRounds; ++r) {
      const double dn = per_launch_ns(&stub_launch, k.f, k.params, per_round);
      const double hn = per_launch_ns(launch, k.f, k.params, per_round);
      direct.push_back(dn);
      hooked.push_back(hn);
      added.push_back(hn - dn);
      // Let the drain thread empty the ring: this loop launches far faster than any real job
      // (a full ring would make the hook take its cheaper drop path and flatter the figure).
      std::this_thread::sleep_for(std::chrono::milliseconds(25));
    }
    const double m = median(added);
    if (k.f != reinterpret_cast<CUfunction>(3)) worst = std::max(worst, m);
    std::printf("%-16s direct_ns_median %.1f  intercepted_ns_median %.1f  added_ns_median %.1f\n", k.name,
                median(direct), median(hooked), m);
  }
  char summary[1024];
  finish(summary, sizeof summary);
  std::printf("capture: %s\n", summary);
  if (worst > 0) std::printf("added_ns_per_launch_median %.1f\n", worst);  // the small kernels' (not with BENCH_ONLY=multi_tensor_1008)
  return 0;
}
