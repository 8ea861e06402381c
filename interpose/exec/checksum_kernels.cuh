// checksum_kernels.cuh: the probation's device kernels (issue 15, write_sets.hpp): the checksum
// of a range (capuchin/checksum.hpp's, bit for bit) and the complement of a range's bytes (the
// probation's scramble, undone by applying it again). checksum_kernels.cu compiles them to the
// PTX libcapuchin.so embeds and loads with cuModuleLoadData; tests/gpu/gpu_checksum.cu compiles
// them into a program that checks them against the host on a real GPU.
//
// Contract (both): any grid of blocks whose size is a multiple of 32 (the launcher uses 256
// threads); a grid-stride loop covers the range whatever the grid; `data` may have any
// alignment (an unaligned range is read byte by byte). capuchin_checksum adds the range's
// terms to *sum (which the caller zeroes first and finishes on the host with
// checksum::finish): one atomic add per warp, so the result does not depend on the order.
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
                                             unsigned long long* sum) {
  using namespace capuchin::checksum;
  const bool aligned = (reinterpret_cast<std::uintptr_t>(data) % kWordBytes) == 0;
  const unsigned long long words = (bytes + kWordBytes - 1) / kWordBytes;
  const unsigned long long stride = static_cast<unsigned long long>(gridDim.x) * blockDim.x;
  unsigned long long local = 0;
  for (unsigned long long i = static_cast<unsigned long long>(blockIdx.x) * blockDim.x + threadIdx.x; i < words;
       i += stride)
    local += term(load_word(data, bytes, i, aligned), i);
  // Every lane reaches the shuffle (no early return): the warp's partial sums meet in lane 0.
  for (int offset = 16; offset > 0; offset /= 2) local += __shfl_down_sync(0xffffffffu, local, offset);
  if ((threadIdx.x % 32) == 0 && local != 0) atomicAdd(sum, local);
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
