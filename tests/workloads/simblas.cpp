// simblas.cpp: the "vendor library": row-major SGEMM kernels on simcuda, launched with
// cuLaunchKernel found through dlopen("libcuda.so.1") + dlsym("cuGetProcAddress_v2") only.
//
// Contract: see simblas.h. Kernel bodies declare A and B as read and C as written (read too when
// beta != 0) before touching them, and accumulate each output over k in increasing order, so
// results are bit-identical run to run.
#include "simblas.h"

#include <dlfcn.h>

#include <atomic>
#include <cstddef>
#include <new>
#include <vector>

#include "simcuda/simcuda.h"

namespace {

// Resolved through cuGetProcAddress_v2 in simblas_create (simcuda's kernel-side calls).
void* (*g_access)(const void*, size_t, int) = nullptr;
void (*g_add_flops)(double) = nullptr;

struct GemmParams {
  int m, n, k;
  float alpha;
  const float* a;
  int lda;
  const float* b;
  int ldb;
  float beta;
  float* c;
  int ldc;
};

template <bool TransA, bool TransB>
void gemm_body(void** args, const simcuda_launch_info*) {
  const int m = *static_cast<int*>(args[0]);
  const int n = *static_cast<int*>(args[1]);
  const int k = *static_cast<int*>(args[2]);
  const float alpha = *static_cast<float*>(args[3]);
  const float* a = *static_cast<const float**>(args[4]);
  const int lda = *static_cast<int*>(args[5]);
  const float* b = *static_cast<const float**>(args[6]);
  const int ldb = *static_cast<int*>(args[7]);
  const float beta = *static_cast<float*>(args[8]);
  float* c = *static_cast<float**>(args[9]);
  const int ldc = *static_cast<int*>(args[10]);
  const size_t a_rows = TransA ? k : m, a_cols = TransA ? m : k;
  const size_t b_rows = TransB ? n : k, b_cols = TransB ? k : n;
  a = static_cast<const float*>(g_access(a, ((a_rows - 1) * lda + a_cols) * sizeof(float), SIMCUDA_READ));
  b = static_cast<const float*>(g_access(b, ((b_rows - 1) * ldb + b_cols) * sizeof(float), SIMCUDA_READ));
  c = static_cast<float*>(g_access(c, ((static_cast<size_t>(m) - 1) * ldc + n) * sizeof(float),
                                         beta != 0.0f ? SIMCUDA_READ_WRITE : SIMCUDA_WRITE));
  g_add_flops(2.0 * m * n * k);
  std::vector<float> row(static_cast<size_t>(n));
  for (int i = 0; i < m; ++i) {
    for (int j = 0; j < n; ++j) row[j] = 0.0f;
    for (int p = 0; p < k; ++p) {
      const float av = TransA ? a[static_cast<size_t>(p) * lda + i] : a[static_cast<size_t>(i) * lda + p];
      if (TransB) {
        for (int j = 0; j < n; ++j) row[j] += av * b[static_cast<size_t>(j) * ldb + p];
      } else {
        const float* brow = b + static_cast<size_t>(p) * ldb;
        for (int j = 0; j < n; ++j) row[j] += av * brow[j];
      }
    }
    float* crow = c + static_cast<size_t>(i) * ldc;
    for (int j = 0; j < n; ++j) crow[j] = beta != 0.0f ? alpha * row[j] + beta * crow[j] : alpha * row[j];
  }
}

const size_t kOffsets[] = {offsetof(GemmParams, m), offsetof(GemmParams, n),   offsetof(GemmParams, k),
                           offsetof(GemmParams, alpha), offsetof(GemmParams, a), offsetof(GemmParams, lda),
                           offsetof(GemmParams, b), offsetof(GemmParams, ldb), offsetof(GemmParams, beta),
                           offsetof(GemmParams, c), offsetof(GemmParams, ldc)};
const size_t kSizes[] = {sizeof(int), sizeof(int), sizeof(int), sizeof(float), sizeof(void*), sizeof(int),
                         sizeof(void*), sizeof(int), sizeof(float), sizeof(void*), sizeof(int)};

}  // namespace

struct simblas_context {
  void* driver = nullptr;
  decltype(&cuLaunchKernel) launch = nullptr;
  CUfunction nn = nullptr, tn = nullptr, nt = nullptr;
  std::atomic<unsigned long long> launches{0};
};

extern "C" {

int simblas_create(simblas_handle* handle) {
  if (handle == nullptr) return CUDA_ERROR_INVALID_VALUE;
  void* driver = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (driver == nullptr) return CUDA_ERROR_NOT_INITIALIZED;
  using GetProc = CUresult (*)(const char*, void**, int, cuuint64_t, CUdriverProcAddressQueryResult*);
  auto get_proc = reinterpret_cast<GetProc>(dlsym(driver, "cuGetProcAddress_v2"));
  if (get_proc == nullptr) return CUDA_ERROR_NOT_FOUND;
  void* launch = nullptr;
  void* reg = nullptr;
  CUdriverProcAddressQueryResult status;
  if (CUresult r = get_proc("cuLaunchKernel", &launch, 12000, CU_GET_PROC_ADDRESS_DEFAULT, &status); r != CUDA_SUCCESS)
    return r;
  if (CUresult r = get_proc("simcuda_register_kernel", &reg, 12000, CU_GET_PROC_ADDRESS_DEFAULT, &status); r != CUDA_SUCCESS)
    return r;
  auto register_kernel = reinterpret_cast<CUfunction (*)(const simcuda_kernel_desc*)>(reg);
  void* access = nullptr;
  void* flops = nullptr;
  if (CUresult r = get_proc("simcuda_access", &access, 12000, CU_GET_PROC_ADDRESS_DEFAULT, &status); r != CUDA_SUCCESS)
    return r;
  if (CUresult r = get_proc("simcuda_add_flops", &flops, 12000, CU_GET_PROC_ADDRESS_DEFAULT, &status); r != CUDA_SUCCESS)
    return r;
  g_access = reinterpret_cast<decltype(g_access)>(access);
  g_add_flops = reinterpret_cast<decltype(g_add_flops)>(flops);
  auto* ctx = new (std::nothrow) simblas_context;
  if (ctx == nullptr) return CUDA_ERROR_OUT_OF_MEMORY;
  ctx->driver = driver;
  ctx->launch = reinterpret_cast<decltype(&cuLaunchKernel)>(launch);
  simcuda_kernel_desc d{};
  d.num_params = sizeof(kSizes) / sizeof(kSizes[0]);
  d.param_offsets = kOffsets;
  d.param_sizes = kSizes;
  d.name = "simblas_sgemm_nn";
  d.body = gemm_body<false, false>;
  ctx->nn = register_kernel(&d);
  d.name = "simblas_sgemm_tn";
  d.body = gemm_body<true, false>;
  ctx->tn = register_kernel(&d);
  d.name = "simblas_sgemm_nt";
  d.body = gemm_body<false, true>;
  ctx->nt = register_kernel(&d);
  if (!ctx->nn || !ctx->tn || !ctx->nt) {
    delete ctx;
    return CUDA_ERROR_INVALID_HANDLE;
  }
  *handle = ctx;
  return CUDA_SUCCESS;
}

void simblas_destroy(simblas_handle handle) {
  if (handle == nullptr) return;
  dlclose(handle->driver);
  delete handle;
}

int simblas_sgemm(simblas_handle h, char trans_a, char trans_b, int m, int n, int k, float alpha, const float* a,
                  int lda, const float* b, int ldb, float beta, float* c, int ldc, CUstream stream) {
  if (h == nullptr || m <= 0 || n <= 0 || k <= 0) return CUDA_ERROR_INVALID_VALUE;
  const bool ta = trans_a == 'T' || trans_a == 't';
  const bool tb = trans_b == 'T' || trans_b == 't';
  CUfunction f = !ta && !tb ? h->nn : ta && !tb ? h->tn : !ta && tb ? h->nt : nullptr;
  if (f == nullptr) return CUDA_ERROR_NOT_SUPPORTED;
  GemmParams p{m, n, k, alpha, a, lda, b, ldb, beta, c, ldc};
  void* args[] = {&p.m, &p.n, &p.k, &p.alpha, &p.a, &p.lda, &p.b, &p.ldb, &p.beta, &p.c, &p.ldc};
  const unsigned grid_x = static_cast<unsigned>((n + 63) / 64), grid_y = static_cast<unsigned>((m + 63) / 64);
  h->launches++;
  return h->launch(f, grid_x, grid_y, 1, 16, 16, 1, 0, stream, args, nullptr);
}

unsigned long long simblas_launch_count(simblas_handle handle) { return handle ? handle->launches.load() : 0; }

}  // extern "C"
