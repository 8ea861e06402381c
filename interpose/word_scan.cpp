// word_scan.cpp: skip_to_candidates, in AVX2 and word by word (see word_scan.hpp).
#include "word_scan.hpp"

#include <immintrin.h>

#include <cstddef>
#include <cstring>

namespace capuchin::interpose {
namespace {

// Whether the CPU runs AVX2: set once at load, before any hook can scan.
bool g_avx2 = false;
[[gnu::constructor]] void detect_avx2() {
  __builtin_cpu_init();  // a constructor may run before libgcc's own
  g_avx2 = __builtin_cpu_supports("avx2") != 0;
}

// Unsigned w - lo < span for the four words at q: flipping the sign bit turns the unsigned
// comparison into the signed one AVX2 has (vspan is span with its sign bit flipped).
[[gnu::target("avx2"), gnu::always_inline]] inline __m256i in_span4(const char* q, __m256i vlo, __m256i sign,
                                                                   __m256i vspan) {
  const __m256i w = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(q));
  return _mm256_cmpgt_epi64(vspan, _mm256_xor_si256(_mm256_sub_epi64(w, vlo), sign));
}

}  // namespace

namespace word_scan_detail {

bool cpu_has_avx2() { return g_avx2; }

[[gnu::target("avx2")]] std::uint32_t skip_avx2(const char* p, std::uint32_t from, std::uint32_t count,
                                               std::uint64_t lo, std::uint64_t span) {
  const __m256i vlo = _mm256_set1_epi64x(static_cast<long long>(lo));
  const __m256i sign = _mm256_set1_epi64x(static_cast<long long>(std::uint64_t{1} << 63));
  const __m256i vspan = _mm256_xor_si256(_mm256_set1_epi64x(static_cast<long long>(span)), sign);
  std::uint32_t i = from;
  for (; i + 16 <= count; i += 16) {
    const char* q = p + 8 * std::size_t{i};
    const __m256i lo_half = _mm256_or_si256(in_span4(q, vlo, sign, vspan), in_span4(q + 32, vlo, sign, vspan));
    const __m256i hi_half = _mm256_or_si256(in_span4(q + 64, vlo, sign, vspan), in_span4(q + 96, vlo, sign, vspan));
    const __m256i any = _mm256_or_si256(lo_half, hi_half);
    if (!_mm256_testz_si256(any, any)) return i;
  }
  return i;
}

std::uint32_t skip_scalar(const char* p, std::uint32_t from, std::uint32_t count, std::uint64_t lo,
                          std::uint64_t span) {
  std::uint32_t i = from;
  for (; i + 16 <= count; i += 16) {
    bool any = false;
    for (std::uint32_t j = 0; j < 16; ++j) {
      std::uint64_t x;
      std::memcpy(&x, p + 8 * (std::size_t{i} + j), sizeof x);
      any |= x - lo < span;
    }
    if (any) return i;
  }
  return i;
}

}  // namespace word_scan_detail

std::uint32_t skip_to_candidates(const char* p, std::uint32_t from, std::uint32_t count, std::uint64_t lo,
                                 std::uint64_t span) {
  return g_avx2 ? word_scan_detail::skip_avx2(p, from, count, lo, span)
                : word_scan_detail::skip_scalar(p, from, count, lo, span);
}

}  // namespace capuchin::interpose
