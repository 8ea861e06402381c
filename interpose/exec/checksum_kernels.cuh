// checksum_kernels.cuh: the probation's device kernels (issue 15, write_sets.hpp): the checksum
// of a range (capuchin/checksum.hpp's, bit for bit) and the complement of a range's bytes (the
// probation's scramble, undone by applying it again). checksum_kernels.cu compiles them to the
// PTX libcapuchin.so embeds and loads with cuModuleLoadData; tests/gpu/gpu_checksum.cu compiles
// them into a program that checks them against the host on a real GPU.
//
// Contract (both): any grid of blocks of 32 to 1024 threads, a multiple of 32 (the launcher
// uses 256); a grid-stride loop covers the range whatever the grid; `data` may have any
// alignment (an unaligned range is read byte by byte). capuchin_checksum stores in
// partials[b] the sum of the terms block b covered, for every block b of the grid (no atomics,
// nothing to zero first): the caller adds the grid's partials and finishes the checksum with
// checksum::finish. The sum is order-free, so the result does not depend on the geometry.
// partials may be mapped host memory (the executor's: no device memory of its own).
#pragma once

#include <cstdint>

#include "capuchin/checksum.hpp"

namespace capuchin::checksum {

// Word i of the range: an aligned load where the whole word lies inside it, else byte by byte
// (little-endian, zero-padded, as add_words reads the last word).
__device__ inline std::uint64_t load_word(const unsigned char* data, unsigned long long bytes, unsigned long long i,
                                          bool aligned) {
  const unsigned long long at = i * kWordBytes;
  if (aligned && at + kWordBytes <= bytes) return reinterpret_cast<const std::uint64_t*>(data)[i];
  std::uint64_t w = 0;
  for (unsigned k = 0; k < kWordBytes && at + k < bytes; ++k) w |= std::uint64_t{data[at + k]} << (8 * k);
  return w;
}

}  // namespace capuchin::checksum

extern "C" __global__ void capuchin_checksum(const unsigned char* data, unsigned long long bytes,
                                             unsigned long long* partials) {
  using namespace capuchin::checksum;
  __shared__ unsigned long long warp_sums[32];
  const bool aligned = (reinterpret_cast<std::uintptr_t>(data) % kWordBytes) == 0;
  const unsigned long long words = (bytes + kWordBytes - 1) / kWordBytes;
  const unsigned long long stride = static_cast<unsigned long long>(gridDim.x) * blockDim.x;
  unsigned long long local = 0;
  for (unsigned long long i = static_cast<unsigned long long>(blockIdx.x) * blockDim.x + threadIdx.x; i < words;
       i += stride)
    local += term(load_word(data, bytes, i, aligned), i);
  // Every thread reaches the shuffles and the barrier (no early return): the warps' sums meet in
  // shared memory, the first warp adds them, and thread 0 stores the block's sum.
  for (int offset = 16; offset > 0; offset /= 2) local += __shfl_down_sync(0xffffffffu, local, offset);
  if (threadIdx.x % 32 == 0) warp_sums[threadIdx.x / 32] = local;
  __syncthreads();
  if (threadIdx.x < 32) {
    local = threadIdx.x < blockDim.x / 32 ? warp_sums[threadIdx.x] : 0;
    for (int offset = 16; offset > 0; offset /= 2) local += __shfl_down_sync(0xffffffffu, local, offset);
    if (threadIdx.x == 0) partials[blockIdx.x] = local;
  }
}

extern "C" __global__ void capuchin_complement(unsigned char* data, unsigned long long bytes) {
  using namespace capuchin::checksum;
  const bool aligned = (reinterpret_cast<std::uintptr_t>(data) % kWordBytes) == 0;
  const unsigned long long words = (bytes + kWordBytes - 1) / kWordBytes;
  const unsigned long long stride = static_cast<unsigned long long>(gridDim.x) * blockDim.x;
  for (unsigned long long i = static_cast<unsigned long long>(blockIdx.x) * blockDim.x + threadIdx.x; i < words;
       i += stride) {
    const unsigned long long at = i * kWordBytes;
    if (aligned && at + kWordBytes <= bytes) {
      std::uint64_t* w = reinterpret_cast<std::uint64_t*>(data) + i;
      *w = ~*w;
    } else {
      for (unsigned k = 0; k < kWordBytes && at + k < bytes; ++k) data[at + k] = static_cast<unsigned char>(~data[at + k]);
    }
  }
}
