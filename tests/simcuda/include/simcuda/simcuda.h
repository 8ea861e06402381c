/* simcuda.h: the public extension API of simcuda, the device-free CUDA driver used by the tests.
 *
 * Contract: exported from libcuda.so.1 (simcuda's), callable from any thread, C ABI, never
 * throws. Kernels are host functions registered here with their parameter layout and a cost
 * model; the registered host stub is what cudaLaunchKernel receives (as with nvcc's stubs) and
 * simcuda_register_kernel's result is the CUfunction cuLaunchKernel takes. A kernel body runs on
 * a stream's worker thread and must declare every device range it touches with simcuda_access()
 * BEFORE touching it, using the pointer simcuda_access returns. The declaration drives Unified
 * Memory faults and is where an access to an unmapped/freed range stops the kernel: the context
 * becomes sticky-failed with CUDA_ERROR_ILLEGAL_ADDRESS (simcuda_access does not return then).
 *
 * Units and constants of the simulated device ("simcuda reference GPU"): */
#ifndef SIMCUDA_SIMCUDA_H
#define SIMCUDA_SIMCUDA_H

#include <stddef.h>
#include <stdint.h>
#include <cuda.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Device-memory accounting: every cudaMalloc/cudaMallocAsync/cuMemAlloc allocation is placed at
 * a 4 KiB-aligned address and charged round_up(bytes, SIMCUDA_ALLOC_GRANULE) against capacity. */
#define SIMCUDA_ALLOC_GRANULE 4096u
/* Unified Memory residency is tracked per 64 KiB block (managed allocations are rounded up to
 * whole blocks; a device-resident block is charged a whole block against capacity). */
#define SIMCUDA_UVM_BLOCK (64u * 1024u)
/* VMM granularity reported by cuMemGetAllocationGranularity (minimum and recommended). */
#define SIMCUDA_VMM_GRANULARITY (2u * 1024u * 1024u)
/* Default capacity when SIMCUDA_DEVICE_BYTES is unset: 16 GiB (each device's; SIMCUDA_DEVICES
 * sets how many devices there are, 1 to 8, default 1; see tests/simcuda/README.md). */
#define SIMCUDA_DEFAULT_DEVICE_BYTES (16ull << 30)

/* Virtual-time cost model (nanoseconds of virtual device time). */
#define SIMCUDA_KERNEL_LAUNCH_NS 2000.0      /* fixed cost of any kernel */
#define SIMCUDA_FLOPS_PER_NS 10000.0         /* 10 TFLOP/s */
#define SIMCUDA_DEVICE_BYTES_PER_NS 900.0    /* 900 GB/s device memory */
#define SIMCUDA_PINNED_BYTES_PER_NS 25.0     /* 25 GB/s host<->device, pinned host memory */
#define SIMCUDA_PAGEABLE_BYTES_PER_NS 10.0   /* 10 GB/s host<->device, pageable host memory */
#define SIMCUDA_COPY_LATENCY_NS 1500.0       /* fixed cost of any copy or memset */
#define SIMCUDA_FAULT_LATENCY_NS 20000.0     /* per faulted UVM block, plus its transfer */

static inline uint64_t simcuda_accounted_bytes(uint64_t bytes) {
  return (bytes + SIMCUDA_ALLOC_GRANULE - 1) / SIMCUDA_ALLOC_GRANULE * SIMCUDA_ALLOC_GRANULE;
}

/* What a kernel body learns about its launch. */
typedef struct simcuda_launch_info {
  unsigned grid[3];
  unsigned block[3];
  unsigned shared_mem_bytes;
  const char* kernel_name;
} simcuda_launch_info;

/* A kernel body: args[i] points at the value of parameter i (as cuLaunchKernel's kernelParams). */
typedef void (*simcuda_kernel_body)(void** args, const simcuda_launch_info* launch);

typedef struct simcuda_kernel_desc {
  const char* name;             /* the (mangled or plain) kernel name cuFuncGetName reports */
  const void* host_stub;        /* the symbol cudaLaunchKernel receives; may be NULL */
  size_t num_params;
  const size_t* param_offsets;  /* num_params entries, as cuFuncGetParamInfo reports them */
  const size_t* param_sizes;    /* num_params entries */
  simcuda_kernel_body body;
  double fixed_ns;              /* added to SIMCUDA_KERNEL_LAUNCH_NS for every launch */
} simcuda_kernel_desc;

/* Registers a kernel (the name and layout arrays are copied). Registering the same host_stub
 * twice returns the first registration. Returns NULL on invalid input. */
CUfunction simcuda_register_kernel(const simcuda_kernel_desc* desc);
/* The CUfunction registered for a host stub, or NULL (what cudaGetFuncBySymbol uses). */
CUfunction simcuda_function_for_stub(const void* host_stub);
// The registered kernel's CUkernel (what cudaGetKernel gives for the stub); nullptr if none.
CUkernel simcuda_kernel_for_stub(const void* host_stub);

enum { SIMCUDA_READ = 1, SIMCUDA_WRITE = 2, SIMCUDA_READ_WRITE = 3 };
/* Declares that the running kernel touches [ptr, ptr+bytes) with `mode`; returns the host
 * address to use for it. Only valid inside a kernel body. Faults managed blocks in. */
void* simcuda_access(const void* ptr, size_t bytes, int mode);
/* Adds arithmetic work to the running kernel's cost (flops / SIMCUDA_FLOPS_PER_NS). */
void simcuda_add_flops(double flops);

/* Registers a module global (a __device__ variable) of `bytes` bytes under its host shadow, the
 * symbol cudaMemcpyToSymbol / cudaMemcpyFromSymbol / cudaGetSymbolAddress receive (as nvcc's
 * shadow variables). Its device copy is allocated (charged against capacity) on first use in a
 * context and starts with the shadow's contents then. 0 on success; -1 on invalid input or a
 * second registration of the shadow with another size. */
int simcuda_register_global(const void* host_shadow, size_t bytes, const char* name);
/* The device address and size of a registered global (making its device copy on first use).
 * CUDA_ERROR_NOT_FOUND for an unregistered shadow; the context errors of any driver call. */
CUresult simcuda_global_for_symbol(const void* host_shadow, CUdeviceptr* dptr, size_t* bytes);

/* Memory figures are of all devices together (SIMCUDA_DEVICES; capacity is each device's);
 * simcuda_get_device_memory gives one device's. */
typedef struct simcuda_stats {
  uint64_t capacity_bytes;
  uint64_t device_bytes_in_use;     /* allocations + VMM device handles + resident managed */
  uint64_t peak_device_bytes;
  uint64_t managed_resident_bytes;
  uint64_t uvm_faults;              /* managed blocks faulted in by kernels */
  uint64_t uvm_evictions;           /* managed blocks evicted to make room */
  uint64_t bytes_htod;              /* copies + migrations host -> device */
  uint64_t bytes_dtoh;
  uint64_t bytes_dtod;
  uint64_t kernels_launched;
  uint64_t kernels_executed;
  uint64_t max_stream_virtual_ns;   /* latest virtual completion time of any stream */
  int sticky_error;                 /* CUresult; 0 when the context is healthy */
} simcuda_stats;

void simcuda_get_stats(simcuda_stats* out);
/* One device's memory in use and its peak (device allocations, VMM chunks located on it,
 * managed blocks resident on it). CUDA_ERROR_INVALID_DEVICE for an ordinal that names no
 * device. The JSON statistics list them as "devices": [{"device", "bytes_in_use",
 * "peak_bytes", "managed_resident_bytes"}, ...]. */
CUresult simcuda_get_device_memory(int device, uint64_t* bytes_in_use, uint64_t* peak_bytes);
/* Virtual completion time (ns) of everything enqueued so far on `stream` (CU_STREAM_LEGACY,
 * CU_STREAM_PER_THREAD or a created stream); 0 for an unknown handle. Does not wait. */
uint64_t simcuda_stream_virtual_ns(CUstream stream);
/* The host's virtual clock (ns): the latest virtual finish of any op the host has waited for
 * (a stream, event or device synchronize, a blocking copy, ...); 0 before the first wait. It
 * moves only when the host waits, and no op enqueued later starts before it, so it is the
 * time a program's host thread has reached, deterministic for a given sequence of calls
 * (unlike the stream clocks, which worker threads advance asynchronously). Queries
 * (cuStreamQuery, cuEventQuery) answer by it: work is done when its finish is not after it.
 * Does not wait. */
uint64_t simcuda_host_virtual_ns(void);
/* Host time (SIMCUDA_HOST_TIME=<scale>, or this call; 0 = off, the default): the host's
 * virtual clock also advances, at each submission of device work and each host wait, by the
 * wall time since the last such call returned (on any thread), times `scale` (the speed of
 * this CPU against a GPU server's: 0.5 when it is twice as slow). A GPU waiting for a slow
 * host then shows in virtual time: no op starts before the host submitted it. One host
 * timeline: threads taking turns count once; threads submitting concurrently overlap. */
void simcuda_set_host_time_scale(double scale);
/* Resets peak_device_bytes to the current use and zeroes the counters (not residency). */
void simcuda_reset_stats(void);
/* Writes the statistics as JSON to `path` (what SIMCUDA_STATS_FILE does at exit). 0 on success. */
int simcuda_write_stats_json(const char* path);

#ifdef __cplusplus
}
#endif
#endif /* SIMCUDA_SIMCUDA_H */
