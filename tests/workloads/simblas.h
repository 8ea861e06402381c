/* simblas.h: a small "vendor library" (like cuBLAS) for simcuda workloads: row-major SGEMM.
 *
 * Contract: simblas finds the driver the way vendor libraries do: dlopen("libcuda.so.1"), one
 * dlsym(handle, "cuGetProcAddress_v2"), and every other entry point (cuLaunchKernel, and the
 * simcuda kernel-registration call, its cuModuleLoad equivalent) through cuGetProcAddress_v2.
 * It never links libcuda or libcudart. Its kernels are named simblas_sgemm_{nn,tn,nt}.
 * Functions return 0 on success, else a CUresult. */
#ifndef SIMBLAS_H
#define SIMBLAS_H

#include <cuda.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct simblas_context* simblas_handle;

int simblas_create(simblas_handle* handle);
void simblas_destroy(simblas_handle handle);

/* C[m x n] = alpha * op(A)[m x k] * op(B)[k x n] + beta * C, row-major, on `stream`.
 * op(A) = A (m x k, row stride lda) when trans_a == 'N', else A^T with A stored k x m;
 * likewise for B. Supported: NN, TN, NT. Each output element accumulates over k in order. */
int simblas_sgemm(simblas_handle handle, char trans_a, char trans_b, int m, int n, int k, float alpha,
                  const float* a, int lda, const float* b, int ldb, float beta, float* c, int ldc,
                  CUstream stream);

/* Number of cuLaunchKernel calls simblas made (for tests). */
unsigned long long simblas_launch_count(simblas_handle handle);

#ifdef __cplusplus
}
#endif
#endif
