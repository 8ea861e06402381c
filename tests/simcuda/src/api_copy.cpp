// api_copy.cpp: the exported driver calls for strided and cross-context copies of simcuda's
// libcuda.so.1: cuMemcpy2D(+Unaligned, +Async), cuMemcpy3D(+Async), cuMemcpyPeer(+Async) and
// cuMemcpy3DPeer(+Async), with their _v2/_ptds/_ptsz variants, and module globals
// (simcuda_register_global / simcuda_global_for_symbol, what cudaMemcpyToSymbol & co. use).
//
// Contract: definitions match the real CUDA 13 cuda.h declarations (compiled with
// __CUDA_API_VERSION_INTERNAL). Host, device and unified operands are supported; a CUDA array
// operand (simcuda has no arrays) is CUDA_ERROR_NOT_SUPPORTED. A pitch below the row width, a
// slice height below the copy height, a non-zero LOD or reserved field is CUDA_ERROR_INVALID_VALUE;
// each device side's covering range (first byte to last) must lie inside one allocation. The
// contexts are the devices' primary contexts: a peer copy between any of them is a
// device-to-device copy (unified addressing finds each side); any other context is
// CUDA_ERROR_INVALID_CONTEXT. A module global lives on the device current at its first use
// (simcuda keeps one copy per process, where the real driver keeps one per context).
#include <cstring>
#include <string>
#include <unordered_map>

#include "internal.hpp"

using namespace simcuda;

namespace {


struct Side {
  uintptr_t base = 0;
  SidePlace place = SidePlace::Any;
};

CUresult side_of(CUmemorytype type, const void* host, CUdeviceptr dev, Side* out) {
  switch (type) {
    case CU_MEMORYTYPE_HOST: out->base = reinterpret_cast<uintptr_t>(host); return CUDA_SUCCESS;
    case CU_MEMORYTYPE_DEVICE: out->base = dev; out->place = SidePlace::Device; return CUDA_SUCCESS;
    case CU_MEMORYTYPE_UNIFIED: out->base = dev; return CUDA_SUCCESS;
    case CU_MEMORYTYPE_ARRAY: return CUDA_ERROR_NOT_SUPPORTED;  // simcuda has no CUDA arrays
  }
  return CUDA_ERROR_INVALID_VALUE;
}

CUresult check_context(CUcontext ctx) {
  return is_context(ctx) ? CUDA_SUCCESS : CUDA_ERROR_INVALID_CONTEXT;
}

// Every form is expressed as a CUDA_MEMCPY3D_PEER (2D: depth 1; non-peer: the current context).
CUresult copy3d(DefaultStream ds, CUstream h, const CUDA_MEMCPY3D_PEER* p, bool sync) {
  if (CUresult r = check_ready(); r != CUDA_SUCCESS) return r;
  if (p == nullptr) return CUDA_ERROR_INVALID_VALUE;
  Side dst, src;
  if (CUresult r = side_of(p->dstMemoryType, p->dstHost, p->dstDevice, &dst); r != CUDA_SUCCESS) return r;
  if (CUresult r = side_of(p->srcMemoryType, p->srcHost, p->srcDevice, &src); r != CUDA_SUCCESS) return r;
  if (p->srcLOD != 0 || p->dstLOD != 0) return CUDA_ERROR_INVALID_VALUE;
  if (p->WidthInBytes == 0 || p->Height == 0 || p->Depth == 0) return CUDA_SUCCESS;
  if ((p->Height > 1 || p->Depth > 1) && (p->srcPitch < p->WidthInBytes || p->dstPitch < p->WidthInBytes))
    return CUDA_ERROR_INVALID_VALUE;
  if (p->Depth > 1 && (p->srcHeight < p->Height || p->dstHeight < p->Height)) return CUDA_ERROR_INVALID_VALUE;
  CopyShape shape;
  shape.width = p->WidthInBytes;
  shape.rows = p->Height;
  shape.slices = p->Depth;
  shape.dst_pitch = p->dstPitch;
  shape.src_pitch = p->srcPitch;
  shape.dst_slice_pitch = p->dstPitch * p->dstHeight;
  shape.src_slice_pitch = p->srcPitch * p->srcHeight;
  if (dst.base == 0 || src.base == 0) return CUDA_ERROR_INVALID_VALUE;
  const uintptr_t dst_addr = dst.base + p->dstZ * shape.dst_slice_pitch + p->dstY * p->dstPitch + p->dstXInBytes;
  const uintptr_t src_addr = src.base + p->srcZ * shape.src_slice_pitch + p->srcY * p->srcPitch + p->srcXInBytes;
  return enqueue_copy(ds, h, dst_addr, src_addr, shape, sync, dst.place, src.place);
}

CUDA_MEMCPY3D_PEER from_3d(const CUDA_MEMCPY3D& c) {
  CUDA_MEMCPY3D_PEER p{};
  p.srcXInBytes = c.srcXInBytes, p.srcY = c.srcY, p.srcZ = c.srcZ, p.srcLOD = c.srcLOD;
  p.srcMemoryType = c.srcMemoryType, p.srcHost = c.srcHost, p.srcDevice = c.srcDevice, p.srcArray = c.srcArray;
  p.srcPitch = c.srcPitch, p.srcHeight = c.srcHeight;
  p.dstXInBytes = c.dstXInBytes, p.dstY = c.dstY, p.dstZ = c.dstZ, p.dstLOD = c.dstLOD;
  p.dstMemoryType = c.dstMemoryType, p.dstHost = c.dstHost, p.dstDevice = c.dstDevice, p.dstArray = c.dstArray;
  p.dstPitch = c.dstPitch, p.dstHeight = c.dstHeight;
  p.WidthInBytes = c.WidthInBytes, p.Height = c.Height, p.Depth = c.Depth;
  return p;
}

CUresult copy_3d(DefaultStream ds, CUstream h, const CUDA_MEMCPY3D* c, bool sync) {
  if (c == nullptr || c->reserved0 != nullptr || c->reserved1 != nullptr) return CUDA_ERROR_INVALID_VALUE;
  const CUDA_MEMCPY3D_PEER p = from_3d(*c);
  return copy3d(ds, h, &p, sync);
}

CUresult copy_2d(DefaultStream ds, CUstream h, const CUDA_MEMCPY2D* c, bool sync) {
  if (c == nullptr) return CUDA_ERROR_INVALID_VALUE;
  CUDA_MEMCPY3D_PEER p{};
  p.srcXInBytes = c->srcXInBytes, p.srcY = c->srcY, p.srcMemoryType = c->srcMemoryType;
  p.srcHost = c->srcHost, p.srcDevice = c->srcDevice, p.srcArray = c->srcArray, p.srcPitch = c->srcPitch;
  p.dstXInBytes = c->dstXInBytes, p.dstY = c->dstY, p.dstMemoryType = c->dstMemoryType;
  p.dstHost = c->dstHost, p.dstDevice = c->dstDevice, p.dstArray = c->dstArray, p.dstPitch = c->dstPitch;
  p.WidthInBytes = c->WidthInBytes, p.Height = c->Height, p.Depth = 1;
  return copy3d(ds, h, &p, sync);
}

CUresult copy_3d_peer(DefaultStream ds, CUstream h, const CUDA_MEMCPY3D_PEER* p, bool sync) {
  if (CUresult r = check_ready(); r != CUDA_SUCCESS) return r;
  if (p == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (p->srcMemoryType != CU_MEMORYTYPE_ARRAY)
    if (CUresult r = check_context(p->srcContext); r != CUDA_SUCCESS) return r;
  if (p->dstMemoryType != CU_MEMORYTYPE_ARRAY)
    if (CUresult r = check_context(p->dstContext); r != CUDA_SUCCESS) return r;
  return copy3d(ds, h, p, sync);
}

CUresult copy_peer(DefaultStream ds, CUstream h, CUdeviceptr dst, CUcontext dst_ctx, CUdeviceptr src,
                   CUcontext src_ctx, size_t n, bool sync) {
  if (CUresult r = check_ready(); r != CUDA_SUCCESS) return r;
  if (CUresult r = check_context(dst_ctx); r != CUDA_SUCCESS) return r;
  if (CUresult r = check_context(src_ctx); r != CUDA_SUCCESS) return r;
  return enqueue_copy(ds, h, dst, src, CopyShape::linear(n), sync, SidePlace::Device, SidePlace::Device);
}

// Module globals: registered by host shadow, their device copy made on first use.
struct Global {
  size_t bytes = 0;
  std::string name;
  CUdeviceptr dptr = 0;
};
std::mutex& g_globals_mu = *new std::mutex;
std::unordered_map<const void*, Global>& g_globals = *new std::unordered_map<const void*, Global>;

}  // namespace

extern "C" {

CUresult cuMemcpy2D_v2(const CUDA_MEMCPY2D* p) { return copy_2d(DefaultStream::Legacy, nullptr, p, true); }
CUresult cuMemcpy2D_v2_ptds(const CUDA_MEMCPY2D* p) { return copy_2d(DefaultStream::PerThread, nullptr, p, true); }
CUresult cuMemcpy2DUnaligned_v2(const CUDA_MEMCPY2D* p) { return copy_2d(DefaultStream::Legacy, nullptr, p, true); }
CUresult cuMemcpy2DUnaligned_v2_ptds(const CUDA_MEMCPY2D* p) {
  return copy_2d(DefaultStream::PerThread, nullptr, p, true);
}
CUresult cuMemcpy2DAsync_v2(const CUDA_MEMCPY2D* p, CUstream h) { return copy_2d(DefaultStream::Legacy, h, p, false); }
CUresult cuMemcpy2DAsync_v2_ptsz(const CUDA_MEMCPY2D* p, CUstream h) {
  return copy_2d(DefaultStream::PerThread, h, p, false);
}
CUresult cuMemcpy3D_v2(const CUDA_MEMCPY3D* p) { return copy_3d(DefaultStream::Legacy, nullptr, p, true); }
CUresult cuMemcpy3D_v2_ptds(const CUDA_MEMCPY3D* p) { return copy_3d(DefaultStream::PerThread, nullptr, p, true); }
CUresult cuMemcpy3DAsync_v2(const CUDA_MEMCPY3D* p, CUstream h) { return copy_3d(DefaultStream::Legacy, h, p, false); }
CUresult cuMemcpy3DAsync_v2_ptsz(const CUDA_MEMCPY3D* p, CUstream h) {
  return copy_3d(DefaultStream::PerThread, h, p, false);
}
CUresult cuMemcpy3DPeer(const CUDA_MEMCPY3D_PEER* p) { return copy_3d_peer(DefaultStream::Legacy, nullptr, p, true); }
CUresult cuMemcpy3DPeer_ptds(const CUDA_MEMCPY3D_PEER* p) {
  return copy_3d_peer(DefaultStream::PerThread, nullptr, p, true);
}
CUresult cuMemcpy3DPeerAsync(const CUDA_MEMCPY3D_PEER* p, CUstream h) {
  return copy_3d_peer(DefaultStream::Legacy, h, p, false);
}
CUresult cuMemcpy3DPeerAsync_ptsz(const CUDA_MEMCPY3D_PEER* p, CUstream h) {
  return copy_3d_peer(DefaultStream::PerThread, h, p, false);
}
CUresult cuMemcpyPeer(CUdeviceptr dst, CUcontext dst_ctx, CUdeviceptr src, CUcontext src_ctx, size_t n) {
  return copy_peer(DefaultStream::Legacy, nullptr, dst, dst_ctx, src, src_ctx, n, true);
}
CUresult cuMemcpyPeer_ptds(CUdeviceptr dst, CUcontext dst_ctx, CUdeviceptr src, CUcontext src_ctx, size_t n) {
  return copy_peer(DefaultStream::PerThread, nullptr, dst, dst_ctx, src, src_ctx, n, true);
}
CUresult cuMemcpyPeerAsync(CUdeviceptr dst, CUcontext dst_ctx, CUdeviceptr src, CUcontext src_ctx, size_t n,
                           CUstream h) {
  return copy_peer(DefaultStream::Legacy, h, dst, dst_ctx, src, src_ctx, n, false);
}
CUresult cuMemcpyPeerAsync_ptsz(CUdeviceptr dst, CUcontext dst_ctx, CUdeviceptr src, CUcontext src_ctx, size_t n,
                                CUstream h) {
  return copy_peer(DefaultStream::PerThread, h, dst, dst_ctx, src, src_ctx, n, false);
}

int simcuda_register_global(const void* host_shadow, size_t bytes, const char* name) {
  if (host_shadow == nullptr || bytes == 0) return -1;
  std::lock_guard<std::mutex> lock(g_globals_mu);
  auto [it, fresh] = g_globals.try_emplace(host_shadow);
  if (!fresh) return it->second.bytes == bytes ? 0 : -1;
  it->second.bytes = bytes;
  it->second.name = name != nullptr ? name : "";
  return 0;
}

CUresult simcuda_global_for_symbol(const void* host_shadow, CUdeviceptr* dptr, size_t* bytes) {
  if (CUresult r = check_ready(); r != CUDA_SUCCESS) return r;
  std::lock_guard<std::mutex> lock(g_globals_mu);
  auto it = g_globals.find(host_shadow);
  if (it == g_globals.end()) return CUDA_ERROR_NOT_FOUND;
  Global& g = it->second;
  if (g.dptr == 0) {
    // The module is loaded lazily, as the real runtime does: the device copy starts with the
    // variable's initial value (the host shadow's contents at first use).
    if (CUresult r = d().memory.alloc_device(current_device(), g.bytes, nullptr, false, &g.dptr); r != CUDA_SUCCESS) return r;
    std::memcpy(reinterpret_cast<void*>(g.dptr), host_shadow, g.bytes);
  }
  if (dptr != nullptr) *dptr = g.dptr;
  if (bytes != nullptr) *bytes = g.bytes;
  return CUDA_SUCCESS;
}

}  // extern "C"
