// checksum.hpp: the checksum a probation (issue 15, interpose/exec/write_sets.hpp) takes of the
// blocks a launch touches, written once for the three places that compute it: the device kernel
// (interpose/exec/checksum_kernels.cuh, compiled to PTX and loaded with cuModuleLoadData), the
// host (the probation's fallback where that module cannot be loaded) and simcuda's equivalent
// of the kernel (tests/simcuda/src/equivalents.cpp).
//
// Contract: checksum(bytes) = finish(sum over i of term(w_i, i), n) mod 2^64, where w_i is the
// i-th 8-byte little-endian word of the n bytes (the last one zero-padded) and n the length.
// The sum is order-free, so a device's threads may add their terms in any order (one atomic add
// per warp) and still agree bit for bit with the host; every word is mixed with its index, so
// moving bytes around changes it. It detects changes (a probation asks "did these bytes change,
// are they the same as before"); it is no defence against an adversary.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>

#if defined(__CUDACC__)
#define CAPUCHIN_HOST_DEVICE __host__ __device__
#else
#define CAPUCHIN_HOST_DEVICE
#endif

namespace capuchin::checksum {

inline constexpr std::uint64_t kWordBytes = 8;

// splitmix64's finaliser over the word and its index.
CAPUCHIN_HOST_DEVICE inline std::uint64_t term(std::uint64_t word, std::uint64_t index) {
  std::uint64_t z = word ^ (index * 0x9e3779b97f4a7c15ull + 0x243f6a8885a308d3ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

// The length closes the sum (a range and the same range with zero bytes appended differ).
CAPUCHIN_HOST_DEVICE inline std::uint64_t finish(std::uint64_t sum, std::uint64_t bytes) {
  return sum + term(bytes, ~std::uint64_t{0});
}

// Adds the terms of `n` bytes at `p` (host memory) to `sum`, their first word being word
// `first_word` of the range: a range may be summed in chunks whose lengths are multiples of 8.
inline std::uint64_t add_words(std::uint64_t sum, const unsigned char* p, std::size_t n, std::uint64_t first_word) {
  std::size_t at = 0;
  std::uint64_t i = first_word;
  for (; at + kWordBytes <= n; at += kWordBytes, ++i) {
    std::uint64_t w;
    std::memcpy(&w, p + at, kWordBytes);  // x86-64 and every CUDA GPU are little-endian
    sum += term(w, i);
  }
  if (at < n) {
    std::uint64_t w = 0;
    for (std::size_t k = 0; at + k < n; ++k) w |= std::uint64_t{p[at + k]} << (8 * k);
    sum += term(w, i);
  }
  return sum;
}

// The checksum of `n` bytes of host memory.
inline std::uint64_t of_host(const void* p, std::size_t n) {
  return finish(add_words(0, static_cast<const unsigned char*>(p), n, 0), n);
}

}  // namespace capuchin::checksum
