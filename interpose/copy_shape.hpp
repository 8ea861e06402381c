// copy_shape.hpp: what a strided (2D/3D) copy touches, from its CUDA description: each side's
// first byte and covering span (first byte to last), the bytes it moves and its direction.
//
// Contract: pure functions of the description (nothing is dereferenced but the struct), never
// called with a null description (the hooks forward those to CUDA untouched). A host side is
// addressed by its host pointer, a device or unified side by its device pointer; a CUDA array
// side has no address (start 0, `array` set), so its allocation is unknown. Positions count x in
// bytes, as CUDA does for pitched memory.
#pragma once

#include <cuda.h>
#include <cuda_runtime_api.h>

#include <cstdint>

#include "capture.hpp"

namespace capuchin::interpose {

struct CopySide {
  std::uint64_t start = 0;  // first byte (0 for an array)
  std::uint64_t span = 0;   // first byte to last byte
  bool device = false;      // device, unified or array memory (a side the trace may name)
  bool array = false;
};

struct CopyShape {
  CopySide dst, src;
  std::uint64_t bytes = 0;  // moved: width * height * depth
  CopyHint hint = CopyHint::Infer;
  bool host_to_host = false;  // nothing on the device: not recorded
};

namespace copy_shape_detail {

inline CopySide side(CUmemorytype type, const void* host, CUdeviceptr dev, std::uint64_t x, std::uint64_t y,
                     std::uint64_t z, std::uint64_t pitch, std::uint64_t slice_height, std::uint64_t width,
                     std::uint64_t height, std::uint64_t depth) {
  CopySide s;
  s.device = type != CU_MEMORYTYPE_HOST;
  s.array = type == CU_MEMORYTYPE_ARRAY;
  if (width == 0 || height == 0 || depth == 0) return s;
  const std::uint64_t slice = pitch * slice_height;
  s.span = (depth - 1) * slice + (height - 1) * pitch + width;
  if (s.array) return s;
  const std::uint64_t base = type == CU_MEMORYTYPE_HOST ? reinterpret_cast<std::uint64_t>(host) : dev;
  s.start = base + z * slice + y * pitch + x;
  return s;
}

inline CopyHint hint_of(CUmemorytype dst, CUmemorytype src) {
  if (dst == CU_MEMORYTYPE_UNIFIED || src == CU_MEMORYTYPE_UNIFIED) return CopyHint::Infer;
  const bool d = dst != CU_MEMORYTYPE_HOST, s = src != CU_MEMORYTYPE_HOST;
  return d && s ? CopyHint::D2D : d ? CopyHint::H2D : s ? CopyHint::D2H : CopyHint::Infer;
}

template <class Desc>
CopyShape shape_3d_like(const Desc& c, std::uint64_t src_height, std::uint64_t dst_height, std::uint64_t depth,
                        std::uint64_t src_z, std::uint64_t dst_z) {
  CopyShape sh;
  sh.src = side(c.srcMemoryType, c.srcHost, c.srcDevice, c.srcXInBytes, c.srcY, src_z, c.srcPitch, src_height,
                c.WidthInBytes, c.Height, depth);
  sh.dst = side(c.dstMemoryType, c.dstHost, c.dstDevice, c.dstXInBytes, c.dstY, dst_z, c.dstPitch, dst_height,
                c.WidthInBytes, c.Height, depth);
  sh.bytes = static_cast<std::uint64_t>(c.WidthInBytes) * c.Height * depth;
  sh.hint = hint_of(c.dstMemoryType, c.srcMemoryType);
  sh.host_to_host = c.dstMemoryType == CU_MEMORYTYPE_HOST && c.srcMemoryType == CU_MEMORYTYPE_HOST;
  return sh;
}

}  // namespace copy_shape_detail

inline CopyShape shape_of(const CUDA_MEMCPY2D& c) {
  return copy_shape_detail::shape_3d_like(c, 0, 0, 1, 0, 0);
}
inline CopyShape shape_of(const CUDA_MEMCPY3D& c) {
  return copy_shape_detail::shape_3d_like(c, c.srcHeight, c.dstHeight, c.Depth, c.srcZ, c.dstZ);
}
inline CopyShape shape_of(const CUDA_MEMCPY3D_PEER& c) {
  return copy_shape_detail::shape_3d_like(c, c.srcHeight, c.dstHeight, c.Depth, c.srcZ, c.dstZ);
}

// The driver memory type a runtime copy kind gives a side (cudaMemcpyDefault: unified).
inline CUmemorytype runtime_side_type(cudaMemcpyKind kind, bool dst) {
  switch (kind) {
    case cudaMemcpyHostToHost: return CU_MEMORYTYPE_HOST;
    case cudaMemcpyHostToDevice: return dst ? CU_MEMORYTYPE_DEVICE : CU_MEMORYTYPE_HOST;
    case cudaMemcpyDeviceToHost: return dst ? CU_MEMORYTYPE_HOST : CU_MEMORYTYPE_DEVICE;
    case cudaMemcpyDeviceToDevice: return CU_MEMORYTYPE_DEVICE;
    default: return CU_MEMORYTYPE_UNIFIED;
  }
}

// cudaMemcpy2D(Async)'s arguments.
inline CopyShape shape_of_2d(void* dst, size_t dpitch, const void* src, size_t spitch, size_t width, size_t height,
                             cudaMemcpyKind kind) {
  CUDA_MEMCPY2D c{};
  c.dstMemoryType = runtime_side_type(kind, true);
  c.srcMemoryType = runtime_side_type(kind, false);
  c.dstHost = dst;
  c.dstDevice = reinterpret_cast<CUdeviceptr>(dst);
  c.srcHost = src;
  c.srcDevice = reinterpret_cast<CUdeviceptr>(src);
  c.dstPitch = dpitch;
  c.srcPitch = spitch;
  c.WidthInBytes = width;
  c.Height = height;
  return shape_of(c);
}

// cudaMemcpy3D(Async) / cudaMemcpy3DPeer(Async)'s description (peer: device memory on both sides).
template <class Parms>
CopyShape shape_of_3d(const Parms& p, CUmemorytype dst_type, CUmemorytype src_type) {
  CUDA_MEMCPY3D c{};
  c.dstMemoryType = p.dstArray != nullptr ? CU_MEMORYTYPE_ARRAY : dst_type;
  c.srcMemoryType = p.srcArray != nullptr ? CU_MEMORYTYPE_ARRAY : src_type;
  c.dstHost = p.dstPtr.ptr;
  c.dstDevice = reinterpret_cast<CUdeviceptr>(p.dstPtr.ptr);
  c.srcHost = p.srcPtr.ptr;
  c.srcDevice = reinterpret_cast<CUdeviceptr>(p.srcPtr.ptr);
  c.srcXInBytes = p.srcPos.x, c.srcY = p.srcPos.y, c.srcZ = p.srcPos.z;
  c.dstXInBytes = p.dstPos.x, c.dstY = p.dstPos.y, c.dstZ = p.dstPos.z;
  c.srcPitch = p.srcPtr.pitch, c.srcHeight = p.srcPtr.ysize;
  c.dstPitch = p.dstPtr.pitch, c.dstHeight = p.dstPtr.ysize;
  c.WidthInBytes = p.extent.width, c.Height = p.extent.height, c.Depth = p.extent.depth;
  return shape_of(c);
}

}  // namespace capuchin::interpose
