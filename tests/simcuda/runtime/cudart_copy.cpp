// cudart_copy.cpp: simcuda's libcudart.so.13 strided, peer and symbol copies and strided memsets:
// cudaMemcpy2D(+Async), cudaMemcpy3D(+Async), cudaMemcpy3DPeer(+Async), cudaMemcpyPeer(+Async),
// cudaMemcpyToSymbol / cudaMemcpyFromSymbol (+Async), cudaGetSymbolAddress, cudaGetSymbolSize,
// cudaMemset2D(+Async) and cudaMemset3D(+Async), with the _ptds/_ptsz twins the CUDA 13 header
// declares, each forwarded to the driver entry point the real runtime uses (cuMemcpy2D_v2,
// cuMemcpy3D_v2, cuMemcpy3DPeer, cuMemcpyPeer, the plain copies for symbols, cuMemsetD2D8_v2 per
// slice for memsets).
//
// Contract: as cudart_core.cpp. A memcpy kind picks the driver memory types (host, device, or
// unified for cudaMemcpyDefault); an unknown kind is cudaErrorInvalidMemcpyDirection. A pitch
// below the row width is cudaErrorInvalidPitchValue. CUDA arrays (simcuda has none) are
// cudaErrorNotSupported. Devices other than 0 are cudaErrorInvalidDevice. A symbol is a host
// shadow registered with simcuda_register_global; an unregistered one is cudaErrorInvalidSymbol,
// and a range past the variable's end is cudaErrorInvalidValue.
#include <cstring>

#include "driver_table.hpp"

using namespace simcudart;

namespace {

// The driver memory types a runtime copy kind implies, for (dst, src).
bool memory_types(cudaMemcpyKind kind, CUmemorytype* dst, CUmemorytype* src) {
  switch (kind) {
    case cudaMemcpyHostToHost: *dst = *src = CU_MEMORYTYPE_HOST; return true;
    case cudaMemcpyHostToDevice: *dst = CU_MEMORYTYPE_DEVICE, *src = CU_MEMORYTYPE_HOST; return true;
    case cudaMemcpyDeviceToHost: *dst = CU_MEMORYTYPE_HOST, *src = CU_MEMORYTYPE_DEVICE; return true;
    case cudaMemcpyDeviceToDevice: *dst = *src = CU_MEMORYTYPE_DEVICE; return true;
    case cudaMemcpyDefault: *dst = *src = CU_MEMORYTYPE_UNIFIED; return true;
  }
  return false;
}

// Sets the pointer field the memory type reads (host for HOST, device otherwise).
void place(CUmemorytype type, const void* p, const void** host, CUdeviceptr* dev) {
  if (type == CU_MEMORYTYPE_HOST) *host = p;
  else *dev = dp(p);
}

cudaError_t copy_2d(void* dst, size_t dpitch, const void* src, size_t spitch, size_t width, size_t height,
                    cudaMemcpyKind kind, cudaStream_t s, bool async, bool per_thread) {
  SIMCUDART_READY();
  CUDA_MEMCPY2D c{};
  if (!memory_types(kind, &c.dstMemoryType, &c.srcMemoryType)) return record(cudaErrorInvalidMemcpyDirection);
  if (height > 1 && (dpitch < width || spitch < width)) return record(cudaErrorInvalidPitchValue);
  const void* dst_host = nullptr;
  place(c.dstMemoryType, dst, &dst_host, &c.dstDevice);
  c.dstHost = const_cast<void*>(dst_host);
  place(c.srcMemoryType, src, &c.srcHost, &c.srcDevice);
  c.dstPitch = dpitch;
  c.srcPitch = spitch;
  c.WidthInBytes = width;
  c.Height = height;
  const DriverTable& t = rt();
  if (async) return check((per_thread ? t.memcpy_2d_async_ptsz : t.memcpy_2d_async)(&c, s));
  return check((per_thread ? t.memcpy_2d_ptds : t.memcpy_2d)(&c));
}

// A runtime 3D description (pitched pointers, positions with x in bytes) as the driver's.
// Returns cudaSuccess or the error to report.
template <class Parms>
cudaError_t to_driver_3d(const Parms* p, CUmemorytype dst_type, CUmemorytype src_type, CUDA_MEMCPY3D_PEER* c) {
  if (p == nullptr) return cudaErrorInvalidValue;
  if (p->srcArray != nullptr || p->dstArray != nullptr) return cudaErrorNotSupported;  // no CUDA arrays
  if (p->srcPtr.ptr == nullptr || p->dstPtr.ptr == nullptr) return cudaErrorInvalidValue;
  *c = CUDA_MEMCPY3D_PEER{};
  c->dstMemoryType = dst_type;
  c->srcMemoryType = src_type;
  const void* dst_host = nullptr;
  place(dst_type, p->dstPtr.ptr, &dst_host, &c->dstDevice);
  c->dstHost = const_cast<void*>(dst_host);
  place(src_type, p->srcPtr.ptr, &c->srcHost, &c->srcDevice);
  c->srcXInBytes = p->srcPos.x, c->srcY = p->srcPos.y, c->srcZ = p->srcPos.z;
  c->dstXInBytes = p->dstPos.x, c->dstY = p->dstPos.y, c->dstZ = p->dstPos.z;
  c->srcPitch = p->srcPtr.pitch, c->srcHeight = p->srcPtr.ysize;
  c->dstPitch = p->dstPtr.pitch, c->dstHeight = p->dstPtr.ysize;
  c->WidthInBytes = p->extent.width, c->Height = p->extent.height, c->Depth = p->extent.depth;
  if ((c->Height > 1 || c->Depth > 1) && (c->srcPitch < c->WidthInBytes || c->dstPitch < c->WidthInBytes))
    return cudaErrorInvalidPitchValue;
  return cudaSuccess;
}

cudaError_t copy_3d(const cudaMemcpy3DParms* p, cudaStream_t s, bool async, bool per_thread) {
  SIMCUDART_READY();
  if (p == nullptr) return record(cudaErrorInvalidValue);
  CUmemorytype dst_type, src_type;
  if (!memory_types(p->kind, &dst_type, &src_type)) return record(cudaErrorInvalidMemcpyDirection);
  CUDA_MEMCPY3D_PEER peer;
  if (cudaError_t e = to_driver_3d(p, dst_type, src_type, &peer); e != cudaSuccess) return record(e);
  CUDA_MEMCPY3D c{};
  c.srcXInBytes = peer.srcXInBytes, c.srcY = peer.srcY, c.srcZ = peer.srcZ;
  c.srcMemoryType = peer.srcMemoryType, c.srcHost = peer.srcHost, c.srcDevice = peer.srcDevice;
  c.srcPitch = peer.srcPitch, c.srcHeight = peer.srcHeight;
  c.dstXInBytes = peer.dstXInBytes, c.dstY = peer.dstY, c.dstZ = peer.dstZ;
  c.dstMemoryType = peer.dstMemoryType, c.dstHost = peer.dstHost, c.dstDevice = peer.dstDevice;
  c.dstPitch = peer.dstPitch, c.dstHeight = peer.dstHeight;
  c.WidthInBytes = peer.WidthInBytes, c.Height = peer.Height, c.Depth = peer.Depth;
  const DriverTable& t = rt();
  if (async) return check((per_thread ? t.memcpy_3d_async_ptsz : t.memcpy_3d_async)(&c, s));
  return check((per_thread ? t.memcpy_3d_ptds : t.memcpy_3d)(&c));
}

cudaError_t current_context(int device, CUcontext* ctx) {
  if (device != 0) return cudaErrorInvalidDevice;
  if (rt().ctx_get_current(ctx) != CUDA_SUCCESS || *ctx == nullptr) return cudaErrorDeviceUninitialized;
  return cudaSuccess;
}

cudaError_t copy_3d_peer(const cudaMemcpy3DPeerParms* p, cudaStream_t s, bool async, bool per_thread) {
  SIMCUDART_READY();
  if (p == nullptr) return record(cudaErrorInvalidValue);
  CUDA_MEMCPY3D_PEER c;
  // Peer copies are between device memories (the runtime passes no kind).
  if (cudaError_t e = to_driver_3d(p, CU_MEMORYTYPE_DEVICE, CU_MEMORYTYPE_DEVICE, &c); e != cudaSuccess)
    return record(e);
  if (cudaError_t e = current_context(p->dstDevice, &c.dstContext); e != cudaSuccess) return record(e);
  if (cudaError_t e = current_context(p->srcDevice, &c.srcContext); e != cudaSuccess) return record(e);
  const DriverTable& t = rt();
  if (async) return check((per_thread ? t.memcpy_3d_peer_async_ptsz : t.memcpy_3d_peer_async)(&c, s));
  return check((per_thread ? t.memcpy_3d_peer_ptds : t.memcpy_3d_peer)(&c));
}

cudaError_t copy_peer(void* dst, int dst_device, const void* src, int src_device, size_t n, cudaStream_t s,
                      bool async) {
  SIMCUDART_READY();
  CUcontext dst_ctx = nullptr, src_ctx = nullptr;
  if (cudaError_t e = current_context(dst_device, &dst_ctx); e != cudaSuccess) return record(e);
  if (cudaError_t e = current_context(src_device, &src_ctx); e != cudaSuccess) return record(e);
  if (async) return check(rt().memcpy_peer_async(dp(dst), dst_ctx, dp(src), src_ctx, n, s));
  return check(rt().memcpy_peer(dp(dst), dst_ctx, dp(src), src_ctx, n));
}

// The device range [offset, offset + n) of a registered global, checked against its size.
cudaError_t symbol_range(const void* symbol, size_t n, size_t offset, CUdeviceptr* out) {
  CUdeviceptr base = 0;
  size_t bytes = 0;
  const CUresult r = rt().global_for_symbol(symbol, &base, &bytes);
  if (r == CUDA_ERROR_NOT_FOUND) return cudaErrorInvalidSymbol;
  if (r != CUDA_SUCCESS) return to_runtime(r);
  if (offset > bytes || n > bytes - offset) return cudaErrorInvalidValue;
  *out = base + offset;
  return cudaSuccess;
}

// A linear copy between a symbol's device range and `other`; to_symbol: other is the source.
cudaError_t symbol_copy(bool to_symbol, const void* symbol, void* other, size_t n, size_t offset,
                        cudaMemcpyKind kind, cudaStream_t s, bool async, bool per_thread) {
  SIMCUDART_READY();
  const bool kind_ok = kind == cudaMemcpyDeviceToDevice || kind == cudaMemcpyDefault ||
                       kind == (to_symbol ? cudaMemcpyHostToDevice : cudaMemcpyDeviceToHost);
  if (!kind_ok) return record(cudaErrorInvalidMemcpyDirection);
  CUdeviceptr sym = 0;
  if (cudaError_t e = symbol_range(symbol, n, offset, &sym); e != cudaSuccess) return record(e);
  if (n == 0) return cudaSuccess;
  const DriverTable& t = rt();
  const CUdeviceptr dst = to_symbol ? sym : dp(other);
  const CUdeviceptr src = to_symbol ? dp(other) : sym;
  if (kind == cudaMemcpyDefault) {
    if (async) return check((per_thread ? t.memcpy_async_ptsz : t.memcpy_async)(dst, src, n, s));
    return check((per_thread ? t.memcpy_ptds : t.memcpy)(dst, src, n));
  }
  if (kind == cudaMemcpyDeviceToDevice) {
    if (async) return check((per_thread ? t.memcpy_dtod_async_ptsz : t.memcpy_dtod_async)(dst, src, n, s));
    return check((per_thread ? t.memcpy_dtod_ptds : t.memcpy_dtod)(dst, src, n));
  }
  if (to_symbol) {
    if (async) return check((per_thread ? t.memcpy_htod_async_ptsz : t.memcpy_htod_async)(dst, other, n, s));
    return check((per_thread ? t.memcpy_htod_ptds : t.memcpy_htod)(dst, other, n));
  }
  if (async) return check((per_thread ? t.memcpy_dtoh_async_ptsz : t.memcpy_dtoh_async)(other, src, n, s));
  return check((per_thread ? t.memcpy_dtoh_ptds : t.memcpy_dtoh)(other, src, n));
}

// A 3D memset: one cuMemsetD2D8 per slice (slices pitch x ysize bytes apart).
cudaError_t memset_3d(cudaPitchedPtr p, int value, cudaExtent e, cudaStream_t s, bool async, bool per_thread) {
  SIMCUDART_READY();
  if (e.width == 0 || e.height == 0 || e.depth == 0) return cudaSuccess;
  if (p.ptr == nullptr) return record(cudaErrorInvalidValue);
  if (e.height > 1 && p.pitch < e.width) return record(cudaErrorInvalidPitchValue);
  if (e.depth > 1 && p.ysize < e.height) return record(cudaErrorInvalidValue);
  const DriverTable& t = rt();
  for (size_t z = 0; z < e.depth; ++z) {
    const CUdeviceptr slice = dp(p.ptr) + z * p.pitch * p.ysize;
    const unsigned char v = static_cast<unsigned char>(value);
    const CUresult r = async ? (per_thread ? t.memset_d2d8_async_ptsz : t.memset_d2d8_async)(slice, p.pitch, v, e.width,
                                                                                             e.height, s)
                             : (per_thread ? t.memset_d2d8_ptds : t.memset_d2d8)(slice, p.pitch, v, e.width, e.height);
    if (r != CUDA_SUCCESS) return check(r);
  }
  return cudaSuccess;
}

}  // namespace

extern "C" {

cudaError_t cudaMemset2D(void* p, size_t pitch, int value, size_t width, size_t height) {
  SIMCUDART_READY();
  return check(rt().memset_d2d8(dp(p), pitch, static_cast<unsigned char>(value), width, height));
}
cudaError_t cudaMemset2D_ptds(void* p, size_t pitch, int value, size_t width, size_t height) {
  SIMCUDART_READY();
  return check(rt().memset_d2d8_ptds(dp(p), pitch, static_cast<unsigned char>(value), width, height));
}
cudaError_t cudaMemset2DAsync(void* p, size_t pitch, int value, size_t width, size_t height, cudaStream_t s) {
  SIMCUDART_READY();
  return check(rt().memset_d2d8_async(dp(p), pitch, static_cast<unsigned char>(value), width, height, s));
}
cudaError_t cudaMemset2DAsync_ptsz(void* p, size_t pitch, int value, size_t width, size_t height, cudaStream_t s) {
  SIMCUDART_READY();
  return check(rt().memset_d2d8_async_ptsz(dp(p), pitch, static_cast<unsigned char>(value), width, height, s));
}
cudaError_t cudaMemset3D(struct cudaPitchedPtr p, int value, struct cudaExtent e) {
  return memset_3d(p, value, e, nullptr, false, false);
}
cudaError_t cudaMemset3D_ptds(struct cudaPitchedPtr p, int value, struct cudaExtent e) {
  return memset_3d(p, value, e, nullptr, false, true);
}
cudaError_t cudaMemset3DAsync(struct cudaPitchedPtr p, int value, struct cudaExtent e, cudaStream_t s) {
  return memset_3d(p, value, e, s, true, false);
}
cudaError_t cudaMemset3DAsync_ptsz(struct cudaPitchedPtr p, int value, struct cudaExtent e, cudaStream_t s) {
  return memset_3d(p, value, e, s, true, true);
}

cudaError_t cudaMemcpy2D(void* dst, size_t dpitch, const void* src, size_t spitch, size_t width, size_t height,
                         enum cudaMemcpyKind kind) {
  return copy_2d(dst, dpitch, src, spitch, width, height, kind, nullptr, false, false);
}
cudaError_t cudaMemcpy2D_ptds(void* dst, size_t dpitch, const void* src, size_t spitch, size_t width, size_t height,
                              enum cudaMemcpyKind kind) {
  return copy_2d(dst, dpitch, src, spitch, width, height, kind, nullptr, false, true);
}
cudaError_t cudaMemcpy2DAsync(void* dst, size_t dpitch, const void* src, size_t spitch, size_t width, size_t height,
                              enum cudaMemcpyKind kind, cudaStream_t s) {
  return copy_2d(dst, dpitch, src, spitch, width, height, kind, s, true, false);
}
cudaError_t cudaMemcpy2DAsync_ptsz(void* dst, size_t dpitch, const void* src, size_t spitch, size_t width,
                                   size_t height, enum cudaMemcpyKind kind, cudaStream_t s) {
  return copy_2d(dst, dpitch, src, spitch, width, height, kind, s, true, true);
}

cudaError_t cudaMemcpy3D(const struct cudaMemcpy3DParms* p) { return copy_3d(p, nullptr, false, false); }
cudaError_t cudaMemcpy3D_ptds(const struct cudaMemcpy3DParms* p) { return copy_3d(p, nullptr, false, true); }
cudaError_t cudaMemcpy3DAsync(const struct cudaMemcpy3DParms* p, cudaStream_t s) { return copy_3d(p, s, true, false); }
cudaError_t cudaMemcpy3DAsync_ptsz(const struct cudaMemcpy3DParms* p, cudaStream_t s) {
  return copy_3d(p, s, true, true);
}
cudaError_t cudaMemcpy3DPeer(const struct cudaMemcpy3DPeerParms* p) { return copy_3d_peer(p, nullptr, false, false); }
cudaError_t cudaMemcpy3DPeer_ptds(const struct cudaMemcpy3DPeerParms* p) {
  return copy_3d_peer(p, nullptr, false, true);
}
cudaError_t cudaMemcpy3DPeerAsync(const struct cudaMemcpy3DPeerParms* p, cudaStream_t s) {
  return copy_3d_peer(p, s, true, false);
}
cudaError_t cudaMemcpy3DPeerAsync_ptsz(const struct cudaMemcpy3DPeerParms* p, cudaStream_t s) {
  return copy_3d_peer(p, s, true, true);
}

cudaError_t cudaMemcpyPeer(void* dst, int dst_device, const void* src, int src_device, size_t n) {
  return copy_peer(dst, dst_device, src, src_device, n, nullptr, false);
}
cudaError_t cudaMemcpyPeerAsync(void* dst, int dst_device, const void* src, int src_device, size_t n, cudaStream_t s) {
  return copy_peer(dst, dst_device, src, src_device, n, s, true);
}

cudaError_t cudaMemcpyToSymbol(const void* symbol, const void* src, size_t n, size_t offset, enum cudaMemcpyKind kind) {
  return symbol_copy(true, symbol, const_cast<void*>(src), n, offset, kind, nullptr, false, false);
}
cudaError_t cudaMemcpyToSymbol_ptds(const void* symbol, const void* src, size_t n, size_t offset,
                                    enum cudaMemcpyKind kind) {
  return symbol_copy(true, symbol, const_cast<void*>(src), n, offset, kind, nullptr, false, true);
}
cudaError_t cudaMemcpyFromSymbol(void* dst, const void* symbol, size_t n, size_t offset, enum cudaMemcpyKind kind) {
  return symbol_copy(false, symbol, dst, n, offset, kind, nullptr, false, false);
}
cudaError_t cudaMemcpyFromSymbol_ptds(void* dst, const void* symbol, size_t n, size_t offset,
                                      enum cudaMemcpyKind kind) {
  return symbol_copy(false, symbol, dst, n, offset, kind, nullptr, false, true);
}
cudaError_t cudaMemcpyToSymbolAsync(const void* symbol, const void* src, size_t n, size_t offset,
                                    enum cudaMemcpyKind kind, cudaStream_t s) {
  return symbol_copy(true, symbol, const_cast<void*>(src), n, offset, kind, s, true, false);
}
cudaError_t cudaMemcpyToSymbolAsync_ptsz(const void* symbol, const void* src, size_t n, size_t offset,
                                         enum cudaMemcpyKind kind, cudaStream_t s) {
  return symbol_copy(true, symbol, const_cast<void*>(src), n, offset, kind, s, true, true);
}
cudaError_t cudaMemcpyFromSymbolAsync(void* dst, const void* symbol, size_t n, size_t offset,
                                      enum cudaMemcpyKind kind, cudaStream_t s) {
  return symbol_copy(false, symbol, dst, n, offset, kind, s, true, false);
}
cudaError_t cudaMemcpyFromSymbolAsync_ptsz(void* dst, const void* symbol, size_t n, size_t offset,
                                           enum cudaMemcpyKind kind, cudaStream_t s) {
  return symbol_copy(false, symbol, dst, n, offset, kind, s, true, true);
}

cudaError_t cudaGetSymbolAddress(void** dev_ptr, const void* symbol) {
  SIMCUDART_READY();
  if (dev_ptr == nullptr) return record(cudaErrorInvalidValue);
  CUdeviceptr p = 0;
  if (cudaError_t e = symbol_range(symbol, 0, 0, &p); e != cudaSuccess) return record(e);
  *dev_ptr = reinterpret_cast<void*>(p);
  return cudaSuccess;
}
cudaError_t cudaGetSymbolSize(size_t* size, const void* symbol) {
  SIMCUDART_READY();
  if (size == nullptr) return record(cudaErrorInvalidValue);
  CUdeviceptr base = 0;
  const CUresult r = rt().global_for_symbol(symbol, &base, size);
  if (r == CUDA_ERROR_NOT_FOUND) return record(cudaErrorInvalidSymbol);
  return check(r);
}

}  // extern "C"
