// gpu_param_info: cuFuncGetParamInfo on real kernels (what the interposer's parameter-layout
// cache asks the driver on a kernel's first launch), against the layout the C++ ABI gives
// the same parameter list; then launches whose pointers hide in by-value structs, interior
// pointers and a 256-byte struct, with EXPECT lines for what a recorded trace must show.
// Exit 0 / 1, or 77 with no GPU.
#include <cstddef>
#include <vector>

#include "gpu_common.cuh"

namespace {

struct Pair {
  float* a;
  float* b;
};
struct Mixed {
  char c;
  double d;
  int i;
  float* p;
};
struct Big {  // 256 bytes: 8 pointers among 24 words of other data
  long long pad0[4];
  float* ptr[8];
  long long pad1[20];
};
static_assert(sizeof(Big) == 256);

__global__ void pi_ptrs(float* a, const float* b, int n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) a[i] += b[i];
}
__global__ void pi_pair(Pair p, int n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) p.a[i] += p.b[i];
}
__global__ void pi_mixed(char c, Mixed m, short s, float* out) {
  if (threadIdx.x == 0 && blockIdx.x == 0) {
    out[0] = static_cast<float>(c + m.c + m.d + m.i + s);
    m.p[0] = 1.0f;
  }
}
__global__ void pi_big(Big b) {
  if (threadIdx.x < 8 && blockIdx.x == 0) b.ptr[threadIdx.x][0] = static_cast<float>(threadIdx.x + b.pad0[0]);
}
__global__ void pi_none() {}

using ParamInfo = CUresult (*)(CUfunction, size_t, size_t*, size_t*);
using FuncName = CUresult (*)(const char**, CUfunction);
using KernelParamInfo = CUresult (*)(CUkernel, size_t, size_t*, size_t*);
using KernelName = CUresult (*)(const char**, CUkernel);
using KernelFunction = CUresult (*)(CUfunction*, CUkernel);
using FuncIsLoaded = CUresult (*)(CUfunctionLoadingState*, CUfunction);
using FuncLoad = CUresult (*)(CUfunction);

struct Expected {
  std::size_t offset, size;
};

// The ABI layout: each parameter at the next multiple of its alignment.
template <class... T>
std::vector<Expected> abi_layout() {
  std::vector<Expected> out;
  std::size_t off = 0;
  ((off = (off + alignof(T) - 1) / alignof(T) * alignof(T), out.push_back({off, sizeof(T)}), off += sizeof(T)), ...);
  return out;
}

void check_layout(ParamInfo info, const void* kernel, const char* name, const std::vector<Expected>& want) {
  cudaFunction_t rf = nullptr;
  GPU_CK(cudaGetFuncBySymbol(&rf, kernel));
  CUfunction f = reinterpret_cast<CUfunction>(rf);
  bool ok = true;
  for (std::size_t i = 0; i < want.size(); ++i) {
    std::size_t off = 0, size = 0;
    const CUresult r = info(f, i, &off, &size);
    if (r != CUDA_SUCCESS || off != want[i].offset || size != want[i].size) {
      std::printf("  %s param %zu: driver (%d) offset %zu size %zu, ABI offset %zu size %zu\n", name, i,
                  static_cast<int>(r), off, size, want[i].offset, want[i].size);
      ok = false;
    }
  }
  std::size_t off = 0, size = 0;
  const CUresult past = info(f, want.size(), &off, &size);
  gpu_check::check(ok && past != CUDA_SUCCESS,
                   "cuFuncGetParamInfo %s: %zu parameters at the ABI offsets; index %zu refused (%d)", name,
                   want.size(), want.size(), static_cast<int>(past));
}

// What the interposer's layout cache depends on, as facts (INFO lines, never a FAIL): which
// handle the runtime gives for a kernel (cudaGetFuncBySymbol, cudaGetKernel), whether the
// driver's queries accept it before and after the kernel's first launch (lazy loading), and
// the CUresult of each.
void probe_handles(const void* kernel, const char* name, bool launched) {
  auto info = gpu_check::driver_entry<ParamInfo>("cuFuncGetParamInfo", 12040);
  auto fname = gpu_check::driver_entry<FuncName>("cuFuncGetName", 12030);
  auto kinfo = gpu_check::driver_entry<KernelParamInfo>("cuKernelGetParamInfo", 12040);
  auto kname = gpu_check::driver_entry<KernelName>("cuKernelGetName", 12030);
  auto kfunc = gpu_check::driver_entry<KernelFunction>("cuKernelGetFunction", 12000);
  auto loaded = gpu_check::driver_entry<FuncIsLoaded>("cuFuncIsLoaded", 12040);
  cudaFunction_t rf = nullptr;
  const cudaError_t ef = cudaGetFuncBySymbol(&rf, kernel);
  const auto f = reinterpret_cast<CUfunction>(rf);
  cudaKernel_t rk = nullptr;
  const cudaError_t ek = cudaGetKernel(&rk, kernel);
  const auto k = reinterpret_cast<CUkernel>(rk);
  std::size_t off = 0, size = 0;
  const char* n1 = nullptr;
  const char* n2 = nullptr;
  CUfunctionLoadingState st{};
  CUfunction kf = nullptr;
  const int r_loaded = f ? static_cast<int>(loaded(&st, f)) : -1;
  const int r_info = f ? static_cast<int>(info(f, 0, &off, &size)) : -1;
  const int r_name = f ? static_cast<int>(fname(&n1, f)) : -1;
  const int r_kinfo = k ? static_cast<int>(kinfo(k, 0, &off, &size)) : -1;
  const int r_kname = k ? static_cast<int>(kname(&n2, k)) : -1;
  const int r_kfunc = k ? static_cast<int>(kfunc(&kf, k)) : -1;
  const int r_kf_info = kf ? static_cast<int>(info(kf, 0, &off, &size)) : -1;
  std::printf("INFO handles %s (%s launch): stub %p cudaGetFuncBySymbol %d -> %p (loaded %d: %d), cuFuncGetParamInfo(0) %d, "
              "cuFuncGetName %d (%s); cudaGetKernel %d -> %p, cuKernelGetParamInfo(0) %d, cuKernelGetName %d (%s), "
              "cuKernelGetFunction %d -> %p (cuFuncGetParamInfo(0) %d)\n",
              name, launched ? "after its first" : "before any", kernel, static_cast<int>(ef), static_cast<void*>(f),
              r_loaded, static_cast<int>(st), r_info, r_name, n1 ? n1 : "-", static_cast<int>(ek), static_cast<void*>(k),
              r_kinfo, r_kname, n2 ? n2 : "-", r_kfunc, static_cast<void*>(kf), r_kf_info);
  std::fflush(stdout);
}

}  // namespace

int main() {
  gpu_check::require_gpu_or_skip("gpu_param_info");
  probe_handles(reinterpret_cast<const void*>(pi_ptrs), "pi_ptrs", false);
  // cuFuncGetParamInfo is CUDA 12.4's: asked at an older version the runtime refuses it
  // (cudaDriverEntryPointVersionNotSufficent).
  auto info = gpu_check::driver_entry<ParamInfo>("cuFuncGetParamInfo", 12040);
  check_layout(info, reinterpret_cast<const void*>(pi_ptrs), "pi_ptrs", abi_layout<float*, const float*, int>());
  check_layout(info, reinterpret_cast<const void*>(pi_pair), "pi_pair", abi_layout<Pair, int>());
  check_layout(info, reinterpret_cast<const void*>(pi_mixed), "pi_mixed", abi_layout<char, Mixed, short, float*>());
  check_layout(info, reinterpret_cast<const void*>(pi_big), "pi_big", abi_layout<Big>());
  check_layout(info, reinterpret_cast<const void*>(pi_none), "pi_none", {});

  // Launches for the capture check: pointers inside structs and interior pointers.
  const int n = 1 << 16;
  std::vector<float*> bufs(12);
  for (auto& b : bufs) {
    GPU_CK(cudaMalloc(&b, n * sizeof(float)));
    GPU_CK(cudaMemset(b, 0, n * sizeof(float)));
  }
  pi_ptrs<<<n / 256 / 2, 256>>>(bufs[0] + n / 2, bufs[1] + 3, n / 2 - 3);  // interior pointers
  pi_pair<<<n / 256, 256>>>(Pair{bufs[2], bufs[3]}, n);
  Mixed m{1, 2.0, 3, bufs[4]};
  pi_mixed<<<1, 32>>>(4, m, 5, bufs[5]);
  Big big{};
  // bufs 4..11, all interior (+1 at least: bufs[4][0] holds pi_mixed's flag, read below)
  for (int i = 0; i < 8; ++i) big.ptr[i] = bufs[4 + i] + i + 1;
  pi_big<<<1, 32>>>(big);
  pi_none<<<1, 1>>>();
  GPU_CK(cudaDeviceSynchronize());
  probe_handles(reinterpret_cast<const void*>(pi_ptrs), "pi_ptrs", true);
  float out = 0, flag = 0;
  GPU_CK(cudaMemcpy(&out, bufs[5], 4, cudaMemcpyDeviceToHost));
  GPU_CK(cudaMemcpy(&flag, bufs[4], 4, cudaMemcpyDeviceToHost));
  gpu_check::check(out == 15.0f && flag == 1.0f, "struct-passed parameters arrive intact (%.1f, %.1f)", out, flag);
  for (auto b : bufs) GPU_CK(cudaFree(b));
  std::printf("EXPECT kernel pi_ptrs count 1 touch 2\n");
  std::printf("EXPECT kernel pi_pair count 1 touch 2\n");
  std::printf("EXPECT kernel pi_mixed count 1 touch 2\n");
  std::printf("EXPECT kernel pi_big count 1 touch 8\n");
  std::printf("EXPECT kernel pi_none count 1 touch 0\n");
  return gpu_check::finish("gpu_param_info");
}
