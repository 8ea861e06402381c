// shapes.hpp: cudaPitchedPtr / cudaExtent / cudaPos builders for test programs (the CUDA
// headers' make_cuda* live in driver_functions.h, which pulls in an internal header that
// warns when included directly).
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>

namespace simcuda {

inline cudaPitchedPtr pitched(void* p, size_t pitch, size_t xsize, size_t ysize) {
  cudaPitchedPtr r{};
  r.ptr = p, r.pitch = pitch, r.xsize = xsize, r.ysize = ysize;
  return r;
}
inline cudaExtent extent(size_t w, size_t h, size_t d) {
  cudaExtent e{};
  e.width = w, e.height = h, e.depth = d;
  return e;
}
inline cudaPos pos(size_t x, size_t y, size_t z) {
  cudaPos q{};
  q.x = x, q.y = y, q.z = z;
  return q;
}

}  // namespace simcuda
