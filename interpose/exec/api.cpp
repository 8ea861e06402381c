// api.cpp: resolution of the executor's driver table (see api.hpp).
#include "api.hpp"

#include "real_api.hpp"

namespace capuchin::interpose::exec {

namespace {
template <class F>
bool get(F& slot, const char* name, bool required, const char** missing) {
  slot = reinterpret_cast<F>(driver_export(name));
  if (slot == nullptr && required && *missing == nullptr) *missing = name;
  return slot != nullptr || !required;
}
}  // namespace

bool resolve(Api& a, const char** missing) {
  *missing = nullptr;
  bool ok = true;
  ok &= get(a.mem_alloc, "cuMemAlloc_v2", true, missing);
  ok &= get(a.mem_free, "cuMemFree_v2", true, missing);
  ok &= get(a.mem_alloc_managed, "cuMemAllocManaged", true, missing);
  ok &= get(a.mem_prefetch, "cuMemPrefetchAsync_v2", true, missing);
  ok &= get(a.mem_advise, "cuMemAdvise_v2", false, missing);
  ok &= get(a.mem_discard, "cuMemDiscardBatchAsync", false, missing);
  ok &= get(a.mem_get_info, "cuMemGetInfo_v2", true, missing);
  ok &= get(a.stream_create, "cuStreamCreate", true, missing);
  ok &= get(a.stream_wait_event, "cuStreamWaitEvent", true, missing);
  ok &= get(a.stream_synchronize, "cuStreamSynchronize", true, missing);
  ok &= get(a.stream_query, "cuStreamQuery", false, missing);
  ok &= get(a.event_create, "cuEventCreate", true, missing);
  ok &= get(a.event_destroy, "cuEventDestroy_v2", false, missing);
  ok &= get(a.event_record, "cuEventRecord", true, missing);
  ok &= get(a.event_query, "cuEventQuery", true, missing);
  ok &= get(a.event_synchronize, "cuEventSynchronize", true, missing);
  if (!get(a.event_elapsed, "cuEventElapsedTime_v2", false, missing) || a.event_elapsed == nullptr)
    get(a.event_elapsed, "cuEventElapsedTime", false, missing);
  ok &= get(a.ctx_get_device, "cuCtxGetDevice", false, missing);
  ok &= get(a.device_get_count, "cuDeviceGetCount", false, missing);
  ok &= get(a.ctx_synchronize, "cuCtxSynchronize", false, missing);
  ok &= get(a.driver_version, "cuDriverGetVersion", false, missing);
  ok &= get(a.device_attribute, "cuDeviceGetAttribute", false, missing);
  ok &= get(a.ctx_get_current, "cuCtxGetCurrent", false, missing);
  ok &= get(a.ctx_push, "cuCtxPushCurrent_v2", false, missing);
  ok &= get(a.ctx_pop, "cuCtxPopCurrent_v2", false, missing);
  ok &= get(a.launch_kernel, "cuLaunchKernel", true, missing);
  ok &= get(a.func_get_param_info, "cuFuncGetParamInfo", false, missing);
  ok &= get(a.func_get_name, "cuFuncGetName", false, missing);
  ok &= get(a.memcpy_async, "cuMemcpyAsync", true, missing);
  ok &= get(a.memcpy_dtoh_async, "cuMemcpyDtoHAsync_v2", false, missing);
  ok &= get(a.memcpy_htod_async, "cuMemcpyHtoDAsync_v2", false, missing);
  ok &= get(a.pointer_attribute, "cuPointerGetAttribute", false, missing);
  ok &= get(a.module_load_data, "cuModuleLoadData", false, missing);
  ok &= get(a.module_get_function, "cuModuleGetFunction", false, missing);
  ok &= get(a.module_unload, "cuModuleUnload", false, missing);
  const char* ignore = nullptr;
  get(a.address_reserve, "cuMemAddressReserve", false, &ignore);
  get(a.address_free, "cuMemAddressFree", false, &ignore);
  get(a.mem_create, "cuMemCreate", false, &ignore);
  get(a.mem_release, "cuMemRelease", false, &ignore);
  get(a.mem_map, "cuMemMap", false, &ignore);
  get(a.mem_unmap, "cuMemUnmap", false, &ignore);
  get(a.mem_set_access, "cuMemSetAccess", false, &ignore);
  get(a.mem_granularity, "cuMemGetAllocationGranularity", false, &ignore);
  get(a.host_alloc, "cuMemHostAlloc", false, &ignore);
  get(a.host_free, "cuMemFreeHost", false, &ignore);
  return ok;
}

}  // namespace capuchin::interpose::exec
