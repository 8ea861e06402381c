// api.hpp: the real driver entry points the executor calls itself (never through our hooks).
//
// Contract: resolve() looks every entry up once by libcuda's exported name (driver_export:
// RTLD_NEXT, else the already loaded libcuda.so.1), so the executor's own allocations,
// prefetches and copies are never seen by capture and never re-enter the executor. Optional
// entries (discard, VMM) may be null; required ones missing make resolve() fail, and the
// executor then stays off (pass-through) with a warning.
#pragma once

#include <cuda.h>

namespace capuchin::interpose::exec {

struct Api {
  CUresult (*mem_alloc)(CUdeviceptr*, size_t) = nullptr;
  CUresult (*mem_free)(CUdeviceptr) = nullptr;
  CUresult (*mem_alloc_managed)(CUdeviceptr*, size_t, unsigned) = nullptr;
  CUresult (*mem_prefetch)(CUdeviceptr, size_t, CUmemLocation, unsigned, CUstream) = nullptr;
  CUresult (*mem_advise)(CUdeviceptr, size_t, CUmem_advise, CUmemLocation) = nullptr;
  CUresult (*mem_discard)(CUdeviceptr*, size_t*, size_t, unsigned long long, CUstream) = nullptr;  // optional
  CUresult (*mem_get_info)(size_t*, size_t*) = nullptr;
  CUresult (*stream_create)(CUstream*, unsigned) = nullptr;
  CUresult (*stream_wait_event)(CUstream, CUevent, unsigned) = nullptr;
  CUresult (*stream_synchronize)(CUstream) = nullptr;
  CUresult (*stream_query)(CUstream) = nullptr;  // optional: a deferred event's stream found idle (event_pool.hpp)
  CUresult (*event_create)(CUevent*, unsigned) = nullptr;
  CUresult (*event_destroy)(CUevent) = nullptr;  // optional
  CUresult (*event_record)(CUevent, CUstream) = nullptr;
  CUresult (*event_query)(CUevent) = nullptr;
  CUresult (*event_synchronize)(CUevent) = nullptr;
  CUresult (*event_elapsed)(float*, CUevent, CUevent) = nullptr;  // optional: measured kernel times
  CUresult (*ctx_synchronize)() = nullptr;  // optional: a deferred event that could not be recorded (event_pool.hpp)
  CUresult (*ctx_get_device)(CUdevice*) = nullptr;  // optional: device 0 without it
  CUresult (*device_get_count)(int*) = nullptr;     // optional: without it, devices are asked of each call
  CUresult (*driver_version)(int*) = nullptr;                          // optional: for messages
  CUresult (*device_attribute)(int*, CUdevice_attribute, CUdevice) = nullptr;  // optional
  // optional as a group: the executor's events are created in its own context
  CUresult (*ctx_get_current)(CUcontext*) = nullptr;
  CUresult (*ctx_push)(CUcontext) = nullptr;
  CUresult (*ctx_pop)(CUcontext*) = nullptr;
  CUresult (*launch_kernel)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                            CUstream, void**, void**) = nullptr;
  CUresult (*func_get_param_info)(CUfunction, size_t, size_t*, size_t*) = nullptr;
  CUresult (*func_get_name)(const char**, CUfunction) = nullptr;
  CUresult (*memcpy_async)(CUdeviceptr, CUdeviceptr, size_t, CUstream) = nullptr;
  // optional: probations of inferred write sets (write_sets.hpp) copy through the host, on the
  // launch's own stream
  CUresult (*memcpy_dtoh_async)(void*, CUdeviceptr, size_t, CUstream) = nullptr;
  CUresult (*memcpy_htod_async)(CUdeviceptr, const void*, size_t, CUstream) = nullptr;
  CUresult (*pointer_attribute)(void*, CUpointer_attribute, CUdeviceptr) = nullptr;  // optional: probations
  // optional: the probation's checksum kernels (device_checksum.hpp); without them it hashes on the host
  CUresult (*module_load_data)(CUmodule*, const void*) = nullptr;
  CUresult (*module_get_function)(CUfunction*, CUmodule, const char*) = nullptr;
  CUresult (*module_unload)(CUmodule) = nullptr;
  // pinned backend (VMM + pinned host memory); optional as a group
  CUresult (*address_reserve)(CUdeviceptr*, size_t, size_t, CUdeviceptr, unsigned long long) = nullptr;
  CUresult (*address_free)(CUdeviceptr, size_t) = nullptr;
  CUresult (*mem_create)(CUmemGenericAllocationHandle*, size_t, const CUmemAllocationProp*, unsigned long long) = nullptr;
  CUresult (*mem_release)(CUmemGenericAllocationHandle) = nullptr;
  CUresult (*mem_map)(CUdeviceptr, size_t, size_t, CUmemGenericAllocationHandle, unsigned long long) = nullptr;
  CUresult (*mem_unmap)(CUdeviceptr, size_t) = nullptr;
  CUresult (*mem_set_access)(CUdeviceptr, size_t, const CUmemAccessDesc*, size_t) = nullptr;
  CUresult (*mem_granularity)(size_t*, const CUmemAllocationProp*, CUmemAllocationGranularity_flags) = nullptr;
  CUresult (*host_alloc)(void**, size_t, unsigned) = nullptr;
  CUresult (*host_free)(void*) = nullptr;

  bool vmm() const {
    return address_reserve && address_free && mem_create && mem_release && mem_map && mem_unmap && mem_set_access &&
           mem_granularity && host_alloc && host_free;
  }
};

// Resolves the table; false (with `missing` naming the first absent entry) when a required
// entry is absent.
bool resolve(Api& api, const char** missing);

// The stream a hook's handle means for the driver: a NULL stream reached through a
// per-thread entry point is CU_STREAM_PER_THREAD.
inline CUstream driver_stream(CUstream s, bool per_thread) {
  return (s == nullptr && per_thread) ? CU_STREAM_PER_THREAD : s;
}

}  // namespace capuchin::interpose::exec
