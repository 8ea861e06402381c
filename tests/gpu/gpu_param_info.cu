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

}  // namespace

int main() {
  gpu_check::require_gpu_or_skip("gpu_param_info");
  auto info = gpu_check::driver_entry<ParamInfo>("cuFuncGetParamInfo");
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
  for (int i = 0; i < 8; ++i) big.ptr[i] = bufs[4 + i] + i;  // bufs 4..11, some interior
  pi_big<<<1, 32>>>(big);
  pi_none<<<1, 1>>>();
  GPU_CK(cudaDeviceSynchronize());
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
