// api_memory.cpp: the exported driver memory calls of simcuda's libcuda.so.1: allocation
// (device, managed, stream-ordered, pinned host), copies and memsets (plain and 2D, sync and
// async, with their _v2/_ptds/_ptsz variants), prefetch/advise, VMM, pointer attributes and cuMemGetInfo.
//
// Contract: every definition matches its declaration in the real CUDA 13 cuda.h (compiled with
// __CUDA_API_VERSION_INTERNAL, so the compiler checks each signature). Synchronous copies and
// memsets run on the (legacy or per-thread) default stream and wait for it; they return the
// sticky error when the context has failed.
#include <cstring>

#include "internal.hpp"

using namespace simcuda;

namespace {


bool device_side(PointerClass c) {
  return c == PointerClass::Device || c == PointerClass::Managed || c == PointerClass::VmmDevice;
}

// Enqueues a copy; for sync copies also waits for the stream.
CUresult copy(DefaultStream ds, CUstream handle, uintptr_t dst, uintptr_t src, size_t bytes, bool sync) {
  return enqueue_copy(ds, handle, dst, src, CopyShape::linear(bytes), sync);
}

// A memset of `rows` rows of `count` elements, `pitch` bytes apart (cuMemsetD2D*: the pitch is
// at least the row and, like the address, a multiple of the element size).
CUresult memset_op(DefaultStream ds, CUstream handle, CUdeviceptr dst, uint32_t value, unsigned elem,
                   size_t count, bool sync, size_t rows = 1, size_t pitch = 0) {
  if (CUresult r = check_ready(); r != CUDA_SUCCESS) return r;
  if (count == 0 || rows == 0) return CUDA_SUCCESS;
  if (rows > 1 && (pitch < count * elem || pitch % elem != 0)) return CUDA_ERROR_INVALID_VALUE;
  const size_t span = (rows - 1) * pitch + count * elem;
  if (dst % elem != 0 || !d().memory.range_valid_for_copy(dst, span)) return CUDA_ERROR_INVALID_VALUE;
  CUresult err;
  CUstream_st* s = d().scheduler.resolve(sync ? nullptr : handle, ds, &err);
  if (s == nullptr) return err;
  OpPayload p;
  p.kind = OpKind::Memset;
  p.dst = dst;
  p.bytes = count;
  p.memset_elem = elem;
  p.memset_value = value;
  p.shape.rows = rows;
  p.shape.dst_pitch = pitch;
  if (CUresult r = d().scheduler.enqueue(s, std::move(p)); r != CUDA_SUCCESS) return r;
  return sync ? d().scheduler.synchronize_stream(s) : CUDA_SUCCESS;
}

CUresult alloc_async(DefaultStream ds, CUdeviceptr* dptr, size_t bytes, CUstream handle) {
  if (CUresult r = check_ready(); r != CUDA_SUCCESS) return r;
  if (dptr == nullptr || bytes == 0) return CUDA_ERROR_INVALID_VALUE;
  CUresult err;
  CUstream_st* s = d().scheduler.resolve(handle, ds, &err);
  if (s == nullptr) return err;
  if (d().scheduler.capturing(s)) {  // allocation nodes are not simulated
    d().scheduler.invalidate_capture(s);
    return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
  }
  return d().memory.alloc_device(current_device(), bytes, s, true, dptr);
}

CUresult free_async(DefaultStream ds, CUdeviceptr dptr, CUstream handle) {
  if (CUresult r = check_ready(); r != CUDA_SUCCESS) return r;
  CUresult err;
  CUstream_st* s = d().scheduler.resolve(handle, ds, &err);
  if (s == nullptr) return err;
  if (d().scheduler.capturing(s)) {
    d().scheduler.invalidate_capture(s);
    return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
  }
  // The free takes effect in stream order: the op's completion marks the range dead.
  OpPayload p;
  p.kind = OpKind::FreeAsync;
  p.dst = dptr;
  CompletionPtr enq;
  // Register first (so a bad pointer enqueues nothing), then enqueue and alias the completion.
  if (!d().memory.range_valid_for_copy(dptr, 1)) return CUDA_ERROR_INVALID_VALUE;
  if (CUresult r = d().scheduler.enqueue(s, std::move(p), &enq); r != CUDA_SUCCESS) return r;
  return d().memory.free_async(dptr, s, enq);
}

CUresult prefetch(DefaultStream ds, CUdeviceptr ptr, size_t count, CUmemLocation loc, unsigned flags, CUstream handle) {
  if (CUresult r = check_ready(); r != CUDA_SUCCESS) return r;
  if (flags != 0 || count == 0) return CUDA_ERROR_INVALID_VALUE;
  if (!d().memory.is_managed(ptr)) return CUDA_ERROR_INVALID_VALUE;
  // cuda.h, cuMemPrefetchAsync_v2: "If CUmemLocation::type is a CU_MEM_LOCATION_TYPE_DEVICE,
  // then CUmemLocation::id must be a valid device ordinal"; one naming no device is
  // CUDA_ERROR_INVALID_DEVICE.
  if (loc.type == CU_MEM_LOCATION_TYPE_DEVICE && !valid_device(loc.id)) return CUDA_ERROR_INVALID_DEVICE;
  CUresult err;
  CUstream_st* s = d().scheduler.resolve(handle, ds, &err);
  if (s == nullptr) return err;
  OpPayload p;
  p.kind = OpKind::Prefetch;
  p.dst = ptr;
  p.bytes = count;
  p.location = loc;
  return d().scheduler.enqueue(s, std::move(p));
}

// cuMemDiscardBatchAsync (CUDA 12.8): "The batch as a whole executes in stream order"; every
// range "must refer to managed memory"; flags "must be zero"; the stream "must not be legacy
// NULL stream" (cuda.h). One discard operation per range, enqueued together.
CUresult discard_batch(DefaultStream ds, CUdeviceptr* dptrs, size_t* sizes, size_t count, unsigned long long flags,
                       CUstream handle) {
  if (CUresult r = check_ready(); r != CUDA_SUCCESS) return r;
  if (flags != 0 || count == 0 || dptrs == nullptr || sizes == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (handle == CU_STREAM_LEGACY || (handle == nullptr && ds == DefaultStream::Legacy)) return CUDA_ERROR_INVALID_VALUE;
  for (size_t i = 0; i < count; ++i)
    if (sizes[i] == 0 || !d().memory.is_managed(dptrs[i]) || !d().memory.is_managed(dptrs[i] + sizes[i] - 1))
      return CUDA_ERROR_INVALID_VALUE;
  CUresult err;
  CUstream_st* s = d().scheduler.resolve(handle, ds, &err);
  if (s == nullptr) return err;
  for (size_t i = 0; i < count; ++i) {
    OpPayload p;
    p.kind = OpKind::Discard;
    p.dst = dptrs[i];
    p.bytes = sizes[i];
    if (CUresult r = d().scheduler.enqueue(s, std::move(p)); r != CUDA_SUCCESS) return r;
  }
  return CUDA_SUCCESS;
}

}  // namespace

namespace simcuda {

CUresult enqueue_copy(DefaultStream ds, CUstream handle, uintptr_t dst, uintptr_t src, const CopyShape& shape,
                      bool sync, SidePlace dst_place, SidePlace src_place) {
  if (CUresult r = check_ready(); r != CUDA_SUCCESS) return r;
  const size_t bytes = shape.moved();
  if (bytes == 0) return CUDA_SUCCESS;
  if (dst == 0 || src == 0) return CUDA_ERROR_INVALID_VALUE;
  CUresult err;
  CUstream_st* s = d().scheduler.resolve(sync ? nullptr : handle, ds, &err);
  if (s == nullptr) return err;
  Memory& mem = d().memory;
  const size_t dst_span = shape.dst_span(), src_span = shape.src_span();
  // Classified by the first byte; the span is checked against that allocation below (a range
  // running past its allocation is an invalid value, not host memory).
  const PointerClass dc = mem.classify(dst, 1);
  const PointerClass sc = mem.classify(src, 1);
  const bool dst_dev = device_side(dc) || dc == PointerClass::VmmHost;
  const bool src_dev = device_side(sc) || sc == PointerClass::VmmHost;
  // A side the caller typed as device memory must be device (or pinned, device-mapped) memory.
  if ((dst_place == SidePlace::Device && !dst_dev && dc != PointerClass::Pinned) ||
      (src_place == SidePlace::Device && !src_dev && sc != PointerClass::Pinned))
    return CUDA_ERROR_INVALID_VALUE;
  if ((dst_dev && !mem.range_valid_for_copy(dst, dst_span)) || (src_dev && !mem.range_valid_for_copy(src, src_span)))
    return CUDA_ERROR_INVALID_VALUE;
  OpPayload p;
  p.kind = OpKind::Copy;
  p.dst = dst;
  p.src = src;
  p.bytes = bytes;
  p.shape = shape;
  // Host-located VMM memory (CU_MEM_LOCATION_TYPE_HOST) is device-addressable but physically
  // host memory: moving data between it and device memory crosses the host link, at the rate
  // of pinned memory (it is pinned), like any host<->device copy.
  const bool dst_on_device = dst_dev && dc != PointerClass::VmmHost;
  const bool src_on_device = src_dev && sc != PointerClass::VmmHost;
  if (dst_on_device && src_on_device) p.route = CopyRoute::DeviceToDevice;
  else if (dst_on_device) p.route = CopyRoute::HostToDevice;
  else if (src_on_device) p.route = CopyRoute::DeviceToHost;
  else p.route = CopyRoute::HostToHost;
  p.pinned = (p.route == CopyRoute::HostToDevice && (sc == PointerClass::Pinned || sc == PointerClass::VmmHost)) ||
             (p.route == CopyRoute::DeviceToHost && (dc == PointerClass::Pinned || dc == PointerClass::VmmHost));
  if (CUresult r = d().scheduler.enqueue(s, std::move(p)); r != CUDA_SUCCESS) return r;
  return sync ? d().scheduler.synchronize_stream(s) : CUDA_SUCCESS;
}

}  // namespace simcuda

extern "C" {

CUresult cuMemGetInfo_v2(size_t* free_bytes, size_t* total) {
  if (CUresult r = check_ready(); r != CUDA_SUCCESS) return r;
  if (free_bytes == nullptr || total == nullptr) return CUDA_ERROR_INVALID_VALUE;
  // cuda.h, cuMemGetInfo: "Returns in *total the total amount of memory available to the the
  // current context": the current context's device's.
  const uint64_t capacity = d().memory.capacity();
  *total = capacity;
  *free_bytes = capacity - std::min(capacity, d().memory.device_use(current_device()).used);
  return CUDA_SUCCESS;
}

CUresult cuMemAlloc_v2(CUdeviceptr* dptr, size_t bytesize) {
  if (CUresult r = check_ready(); r != CUDA_SUCCESS) return r;
  if (dptr == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (CUresult r = check_unsafe_call(); r != CUDA_SUCCESS) return r;
  return d().memory.alloc_device(current_device(), bytesize, nullptr, false, dptr);
}

CUresult cuMemFree_v2(CUdeviceptr dptr) {
  if (CUresult r = check_ready(); r != CUDA_SUCCESS) return r;
  if (CUresult r = check_unsafe_call(); r != CUDA_SUCCESS) return r;
  // Like the real driver, freeing synchronises with outstanding work first.
  if (CUresult r = d().scheduler.synchronize_device(); r != CUDA_SUCCESS) return r;
  if (d().memory.is_managed(dptr)) return d().memory.free_managed(dptr);  // cuMemFree frees managed memory too
  return d().memory.free_device(dptr);
}

CUresult cuMemRetainAllocationHandle(CUmemGenericAllocationHandle* handle, void* addr) {
  if (CUresult r = check_ready(); r != CUDA_SUCCESS) return r;
  if (handle == nullptr) return CUDA_ERROR_INVALID_VALUE;
  return d().memory.retain_handle(reinterpret_cast<uintptr_t>(addr), handle);
}

// cuda.h, cuIpcGetMemHandle: "Base pointer to previously allocated device memory" (cuMemAlloc);
// managed, VMM-mapped and stream-ordered (pool) memory have no such handle here. The handle
// names the allocation; opening it in another process is not simulated.
CUresult cuIpcGetMemHandle(CUipcMemHandle* handle, CUdeviceptr dptr) {
  if (CUresult r = check_ready(); r != CUDA_SUCCESS) return r;
  if (handle == nullptr) return CUDA_ERROR_INVALID_VALUE;
  Allocation a;
  if (d().memory.classify(dptr, 1, &a) != PointerClass::Device || a.base != dptr || a.stream_ordered)
    return CUDA_ERROR_INVALID_VALUE;
  std::memset(handle, 0, sizeof *handle);
  std::memcpy(handle->reserved, &dptr, sizeof dptr);
  return CUDA_SUCCESS;
}

CUresult cuMemAllocManaged(CUdeviceptr* dptr, size_t bytesize, unsigned int flags) {
  if (CUresult r = check_ready(); r != CUDA_SUCCESS) return r;
  if (dptr == nullptr || (flags != CU_MEM_ATTACH_GLOBAL && flags != CU_MEM_ATTACH_HOST)) return CUDA_ERROR_INVALID_VALUE;
  if (CUresult r = check_unsafe_call(); r != CUDA_SUCCESS) return r;
  return d().memory.alloc_managed(bytesize, dptr);
}

CUresult cuMemAllocAsync(CUdeviceptr* dptr, size_t bytesize, CUstream h) {
  return alloc_async(DefaultStream::Legacy, dptr, bytesize, h);
}
CUresult cuMemAllocAsync_ptsz(CUdeviceptr* dptr, size_t bytesize, CUstream h) {
  return alloc_async(DefaultStream::PerThread, dptr, bytesize, h);
}
CUresult cuMemFreeAsync(CUdeviceptr dptr, CUstream h) { return free_async(DefaultStream::Legacy, dptr, h); }
CUresult cuMemFreeAsync_ptsz(CUdeviceptr dptr, CUstream h) { return free_async(DefaultStream::PerThread, dptr, h); }

CUresult cuMemHostAlloc(void** pp, size_t bytesize, unsigned int /*flags*/) {
  if (CUresult r = check_ready(); r != CUDA_SUCCESS) return r;
  if (pp == nullptr) return CUDA_ERROR_INVALID_VALUE;
  return d().memory.alloc_pinned(bytesize, pp);
}
CUresult cuMemAllocHost_v2(void** pp, size_t bytesize) { return cuMemHostAlloc(pp, bytesize, 0); }
CUresult cuMemFreeHost(void* p) {
  if (CUresult r = check_ready(); r != CUDA_SUCCESS) return r;
  if (CUresult r = d().scheduler.synchronize_device(); r != CUDA_SUCCESS) return r;
  return d().memory.free_pinned(p);
}

CUresult cuMemHostRegister_v2(void* p, size_t bytesize, unsigned int /*flags*/) {
  if (CUresult r = check_ready(); r != CUDA_SUCCESS) return r;
  return d().memory.register_host(p, bytesize);
}
CUresult cuMemHostUnregister(void* p) {
  if (CUresult r = check_ready(); r != CUDA_SUCCESS) return r;
  if (CUresult r = d().scheduler.synchronize_device(); r != CUDA_SUCCESS) return r;
  return d().memory.unregister_host(p);
}

// ---- copies --------------------------------------------------------------------------------
CUresult cuMemcpy(CUdeviceptr dst, CUdeviceptr src, size_t n) { return copy(DefaultStream::Legacy, nullptr, dst, src, n, true); }
CUresult cuMemcpy_ptds(CUdeviceptr dst, CUdeviceptr src, size_t n) { return copy(DefaultStream::PerThread, nullptr, dst, src, n, true); }
CUresult cuMemcpyAsync(CUdeviceptr dst, CUdeviceptr src, size_t n, CUstream h) { return copy(DefaultStream::Legacy, h, dst, src, n, false); }
CUresult cuMemcpyAsync_ptsz(CUdeviceptr dst, CUdeviceptr src, size_t n, CUstream h) { return copy(DefaultStream::PerThread, h, dst, src, n, false); }

CUresult cuMemcpyHtoD_v2(CUdeviceptr dst, const void* src, size_t n) {
  return copy(DefaultStream::Legacy, nullptr, dst, reinterpret_cast<uintptr_t>(src), n, true);
}
CUresult cuMemcpyHtoD_v2_ptds(CUdeviceptr dst, const void* src, size_t n) {
  return copy(DefaultStream::PerThread, nullptr, dst, reinterpret_cast<uintptr_t>(src), n, true);
}
CUresult cuMemcpyDtoH_v2(void* dst, CUdeviceptr src, size_t n) {
  return copy(DefaultStream::Legacy, nullptr, reinterpret_cast<uintptr_t>(dst), src, n, true);
}
CUresult cuMemcpyDtoH_v2_ptds(void* dst, CUdeviceptr src, size_t n) {
  return copy(DefaultStream::PerThread, nullptr, reinterpret_cast<uintptr_t>(dst), src, n, true);
}
CUresult cuMemcpyDtoD_v2(CUdeviceptr dst, CUdeviceptr src, size_t n) { return copy(DefaultStream::Legacy, nullptr, dst, src, n, true); }
CUresult cuMemcpyDtoD_v2_ptds(CUdeviceptr dst, CUdeviceptr src, size_t n) { return copy(DefaultStream::PerThread, nullptr, dst, src, n, true); }

CUresult cuMemcpyHtoDAsync_v2(CUdeviceptr dst, const void* src, size_t n, CUstream h) {
  return copy(DefaultStream::Legacy, h, dst, reinterpret_cast<uintptr_t>(src), n, false);
}
CUresult cuMemcpyHtoDAsync_v2_ptsz(CUdeviceptr dst, const void* src, size_t n, CUstream h) {
  return copy(DefaultStream::PerThread, h, dst, reinterpret_cast<uintptr_t>(src), n, false);
}
CUresult cuMemcpyDtoHAsync_v2(void* dst, CUdeviceptr src, size_t n, CUstream h) {
  return copy(DefaultStream::Legacy, h, reinterpret_cast<uintptr_t>(dst), src, n, false);
}
CUresult cuMemcpyDtoHAsync_v2_ptsz(void* dst, CUdeviceptr src, size_t n, CUstream h) {
  return copy(DefaultStream::PerThread, h, reinterpret_cast<uintptr_t>(dst), src, n, false);
}
CUresult cuMemcpyDtoDAsync_v2(CUdeviceptr dst, CUdeviceptr src, size_t n, CUstream h) {
  return copy(DefaultStream::Legacy, h, dst, src, n, false);
}
CUresult cuMemcpyDtoDAsync_v2_ptsz(CUdeviceptr dst, CUdeviceptr src, size_t n, CUstream h) {
  return copy(DefaultStream::PerThread, h, dst, src, n, false);
}

// ---- memsets -------------------------------------------------------------------------------
CUresult cuMemsetD8_v2(CUdeviceptr p, unsigned char v, size_t n) { return memset_op(DefaultStream::Legacy, nullptr, p, v, 1, n, true); }
CUresult cuMemsetD8_v2_ptds(CUdeviceptr p, unsigned char v, size_t n) { return memset_op(DefaultStream::PerThread, nullptr, p, v, 1, n, true); }
CUresult cuMemsetD16_v2(CUdeviceptr p, unsigned short v, size_t n) { return memset_op(DefaultStream::Legacy, nullptr, p, v, 2, n, true); }
CUresult cuMemsetD16_v2_ptds(CUdeviceptr p, unsigned short v, size_t n) { return memset_op(DefaultStream::PerThread, nullptr, p, v, 2, n, true); }
CUresult cuMemsetD32_v2(CUdeviceptr p, unsigned int v, size_t n) { return memset_op(DefaultStream::Legacy, nullptr, p, v, 4, n, true); }
CUresult cuMemsetD32_v2_ptds(CUdeviceptr p, unsigned int v, size_t n) { return memset_op(DefaultStream::PerThread, nullptr, p, v, 4, n, true); }
CUresult cuMemsetD8Async(CUdeviceptr p, unsigned char v, size_t n, CUstream h) { return memset_op(DefaultStream::Legacy, h, p, v, 1, n, false); }
CUresult cuMemsetD8Async_ptsz(CUdeviceptr p, unsigned char v, size_t n, CUstream h) { return memset_op(DefaultStream::PerThread, h, p, v, 1, n, false); }
CUresult cuMemsetD16Async(CUdeviceptr p, unsigned short v, size_t n, CUstream h) { return memset_op(DefaultStream::Legacy, h, p, v, 2, n, false); }
CUresult cuMemsetD16Async_ptsz(CUdeviceptr p, unsigned short v, size_t n, CUstream h) { return memset_op(DefaultStream::PerThread, h, p, v, 2, n, false); }
CUresult cuMemsetD32Async(CUdeviceptr p, unsigned int v, size_t n, CUstream h) { return memset_op(DefaultStream::Legacy, h, p, v, 4, n, false); }
CUresult cuMemsetD32Async_ptsz(CUdeviceptr p, unsigned int v, size_t n, CUstream h) { return memset_op(DefaultStream::PerThread, h, p, v, 4, n, false); }

#define SIMCUDA_MEMSET_2D(bits, type, elem)                                                                   \
  CUresult cuMemsetD2D##bits##_v2(CUdeviceptr p, size_t pitch, type v, size_t w, size_t h) {                  \
    return memset_op(DefaultStream::Legacy, nullptr, p, v, elem, w, true, h, pitch);                          \
  }                                                                                                           \
  CUresult cuMemsetD2D##bits##_v2_ptds(CUdeviceptr p, size_t pitch, type v, size_t w, size_t h) {             \
    return memset_op(DefaultStream::PerThread, nullptr, p, v, elem, w, true, h, pitch);                       \
  }                                                                                                           \
  CUresult cuMemsetD2D##bits##Async(CUdeviceptr p, size_t pitch, type v, size_t w, size_t h, CUstream s) {    \
    return memset_op(DefaultStream::Legacy, s, p, v, elem, w, false, h, pitch);                               \
  }                                                                                                           \
  CUresult cuMemsetD2D##bits##Async_ptsz(CUdeviceptr p, size_t pitch, type v, size_t w, size_t h, CUstream s) { \
    return memset_op(DefaultStream::PerThread, s, p, v, elem, w, false, h, pitch);                            \
  }
SIMCUDA_MEMSET_2D(8, unsigned char, 1)
SIMCUDA_MEMSET_2D(16, unsigned short, 2)
SIMCUDA_MEMSET_2D(32, unsigned int, 4)
#undef SIMCUDA_MEMSET_2D

// ---- Unified Memory ------------------------------------------------------------------------
CUresult cuMemPrefetchAsync_v2(CUdeviceptr p, size_t n, CUmemLocation loc, unsigned int flags, CUstream h) {
  return prefetch(DefaultStream::Legacy, p, n, loc, flags, h);
}
CUresult cuMemPrefetchAsync_v2_ptsz(CUdeviceptr p, size_t n, CUmemLocation loc, unsigned int flags, CUstream h) {
  return prefetch(DefaultStream::PerThread, p, n, loc, flags, h);
}
CUresult cuMemDiscardBatchAsync(CUdeviceptr* dptrs, size_t* sizes, size_t count, unsigned long long flags, CUstream h) {
  return discard_batch(DefaultStream::Legacy, dptrs, sizes, count, flags, h);
}
CUresult cuMemDiscardBatchAsync_ptsz(CUdeviceptr* dptrs, size_t* sizes, size_t count, unsigned long long flags, CUstream h) {
  return discard_batch(DefaultStream::PerThread, dptrs, sizes, count, flags, h);
}
CUresult cuMemAdvise_v2(CUdeviceptr p, size_t n, CUmem_advise advice, CUmemLocation loc) {
  if (CUresult r = check_ready(); r != CUDA_SUCCESS) return r;
  // cuda.h: the advices that name a location need "CUmemLocation::id representing a valid
  // device" when it is a device; CUDA_ERROR_INVALID_DEVICE otherwise.
  const bool names_location = advice == CU_MEM_ADVISE_SET_PREFERRED_LOCATION || advice == CU_MEM_ADVISE_SET_ACCESSED_BY ||
                              advice == CU_MEM_ADVISE_UNSET_ACCESSED_BY;
  if (names_location && loc.type == CU_MEM_LOCATION_TYPE_DEVICE && !valid_device(loc.id)) return CUDA_ERROR_INVALID_DEVICE;
  return d().memory.advise(p, n, advice, loc);
}

// ---- VMM -----------------------------------------------------------------------------------
CUresult cuMemAddressReserve(CUdeviceptr* ptr, size_t size, size_t alignment, CUdeviceptr addr, unsigned long long flags) {
  if (CUresult r = check_ready(); r != CUDA_SUCCESS) return r;
  if (ptr == nullptr || flags != 0) return CUDA_ERROR_INVALID_VALUE;
  return d().memory.address_reserve(size, alignment, addr, ptr);
}
CUresult cuMemAddressFree(CUdeviceptr ptr, size_t size) {
  if (CUresult r = check_ready(); r != CUDA_SUCCESS) return r;
  return d().memory.address_free(ptr, size);
}
CUresult cuMemCreate(CUmemGenericAllocationHandle* handle, size_t size, const CUmemAllocationProp* prop, unsigned long long flags) {
  if (CUresult r = check_ready(); r != CUDA_SUCCESS) return r;
  if (handle == nullptr || prop == nullptr || flags != 0) return CUDA_ERROR_INVALID_VALUE;
  return d().memory.create(size, *prop, handle);
}
CUresult cuMemRelease(CUmemGenericAllocationHandle handle) {
  if (CUresult r = check_ready(); r != CUDA_SUCCESS) return r;
  return d().memory.release(handle);
}
CUresult cuMemMap(CUdeviceptr ptr, size_t size, size_t offset, CUmemGenericAllocationHandle handle, unsigned long long flags) {
  if (CUresult r = check_ready(); r != CUDA_SUCCESS) return r;
  if (flags != 0) return CUDA_ERROR_INVALID_VALUE;
  return d().memory.map(ptr, size, offset, handle);
}
CUresult cuMemUnmap(CUdeviceptr ptr, size_t size) {
  if (CUresult r = check_ready(); r != CUDA_SUCCESS) return r;
  // Unmapping waits for work that may use the range, as the real driver does.
  if (CUresult r = d().scheduler.synchronize_device(); r != CUDA_SUCCESS) return r;
  return d().memory.unmap(ptr, size);
}
CUresult cuMemSetAccess(CUdeviceptr ptr, size_t size, const CUmemAccessDesc* desc, size_t count) {
  if (CUresult r = check_ready(); r != CUDA_SUCCESS) return r;
  if (desc == nullptr || count == 0) return CUDA_ERROR_INVALID_VALUE;
  // cuda.h: "set the access flags for the target locations" (each descriptor's device; the
  // others keep theirs). A location naming no device is CUDA_ERROR_INVALID_DEVICE.
  DeviceMask grant = 0, revoke = 0;
  for (size_t i = 0; i < count; ++i) {
    if (desc[i].location.type != CU_MEM_LOCATION_TYPE_DEVICE || !valid_device(desc[i].location.id))
      return CUDA_ERROR_INVALID_DEVICE;
    const DeviceMask bit = DeviceMask{1} << desc[i].location.id;
    const bool on = desc[i].flags == CU_MEM_ACCESS_FLAGS_PROT_READWRITE || desc[i].flags == CU_MEM_ACCESS_FLAGS_PROT_READ;
    grant = on ? grant | bit : grant & ~bit;
    revoke = on ? revoke & ~bit : revoke | bit;
  }
  return d().memory.set_access(ptr, size, grant, revoke);
}
CUresult cuMemGetAllocationGranularity(size_t* granularity, const CUmemAllocationProp* prop, CUmemAllocationGranularity_flags /*option*/) {
  if (!driver_initialized()) return CUDA_ERROR_NOT_INITIALIZED;
  if (granularity == nullptr || prop == nullptr) return CUDA_ERROR_INVALID_VALUE;
  // A device location must name a device (cuda.h lists CUDA_ERROR_INVALID_VALUE for a bad prop).
  if (prop->location.type == CU_MEM_LOCATION_TYPE_DEVICE && !valid_device(prop->location.id)) return CUDA_ERROR_INVALID_VALUE;
  *granularity = SIMCUDA_VMM_GRANULARITY;
  return CUDA_SUCCESS;
}

// ---- pointer queries -----------------------------------------------------------------------
CUresult cuPointerGetAttribute(void* data, CUpointer_attribute attribute, CUdeviceptr ptr) {
  if (!driver_initialized()) return CUDA_ERROR_NOT_INITIALIZED;
  if (data == nullptr) return CUDA_ERROR_INVALID_VALUE;
  Allocation rec;
  rec.base = 0;
  const PointerClass c = d().memory.classify(ptr, 1, &rec);
  const Allocation* a = rec.base != 0 ? &rec : nullptr;
  if (c == PointerClass::Unknown) return CUDA_ERROR_INVALID_VALUE;
  if ((c == PointerClass::Device || c == PointerClass::VmmDevice || c == PointerClass::VmmHost) &&
      !d().memory.range_valid_for_copy(ptr, 1))
    return CUDA_ERROR_INVALID_VALUE;
  switch (attribute) {
    case CU_POINTER_ATTRIBUTE_MEMORY_TYPE:
      *static_cast<unsigned int*>(data) = c == PointerClass::Pinned ? CU_MEMORYTYPE_HOST : CU_MEMORYTYPE_DEVICE;
      return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_IS_MANAGED:
      *static_cast<bool*>(data) = c == PointerClass::Managed;
      return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_DEVICE_POINTER:
      *static_cast<CUdeviceptr*>(data) = ptr;
      return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_HOST_POINTER:
      if (c != PointerClass::Pinned && c != PointerClass::Managed) return CUDA_ERROR_INVALID_VALUE;
      *static_cast<void**>(data) = reinterpret_cast<void*>(ptr);
      return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL:
      // cuda.h: "A device ordinal of a device on which a pointer was allocated or registered":
      // device memory's own device; managed, pinned and VMM memory report the current context's.
      *static_cast<int*>(data) = a != nullptr && a->kind == AllocKind::Device ? a->device : current_device();
      return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_MAPPED:
      *static_cast<bool*>(data) = true;
      return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_RANGE_START_ADDR:
      if (a == nullptr) return CUDA_ERROR_INVALID_VALUE;
      *static_cast<CUdeviceptr*>(data) = a->base;
      return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_RANGE_SIZE:
      if (a == nullptr) return CUDA_ERROR_INVALID_VALUE;
      *static_cast<size_t*>(data) = a->bytes;
      return CUDA_SUCCESS;
    default:
      return CUDA_ERROR_INVALID_VALUE;
  }
}

CUresult cuMemGetAddressRange_v2(CUdeviceptr* pbase, size_t* psize, CUdeviceptr dptr) {
  if (CUresult r = check_ready(); r != CUDA_SUCCESS) return r;
  Allocation rec;
  d().memory.classify(dptr, 1, &rec);
  const Allocation* a = rec.base != 0 ? &rec : nullptr;
  if (a == nullptr || a->kind == AllocKind::Pinned || !d().memory.range_valid_for_copy(dptr, 1)) return CUDA_ERROR_NOT_FOUND;
  if (pbase) *pbase = a->base;
  if (psize) *psize = a->bytes;
  return CUDA_SUCCESS;
}

}  // extern "C"
