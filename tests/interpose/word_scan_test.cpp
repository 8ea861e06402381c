// skip_to_candidates (interpose/word_scan.hpp): both implementations (AVX2, word by word) give
// the block a word-by-word reference gives, on buffers of scalars with candidate words (a span's
// first and last word, words just outside it) at every position, from every start, and on
// buffers that do not end on a whole block.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "word_scan.hpp"

namespace capuchin::interpose {
namespace {

using Skip = std::uint32_t (*)(const char*, std::uint32_t, std::uint32_t, std::uint64_t, std::uint64_t);

std::uint32_t reference(const std::vector<std::uint64_t>& w, std::uint32_t from, std::uint64_t lo, std::uint64_t span) {
  const auto count = static_cast<std::uint32_t>(w.size());
  std::uint32_t i = from;
  for (; i + 16 <= count; i += 16)
    for (std::uint32_t j = i; j < i + 16; ++j)
      if (w[j] - lo < span) return i;
  return i;
}

void expect_agrees(Skip skip, const std::vector<std::uint64_t>& w, std::uint64_t lo, std::uint64_t span) {
  const auto count = static_cast<std::uint32_t>(w.size());
  // The buffer one byte off 8-byte alignment too: parameter values need not be aligned.
  std::vector<char> shifted(8 * w.size() + 1);
  std::memcpy(shifted.data() + 1, w.data(), 8 * w.size());
  for (std::uint32_t from = 0; from <= count; from += 16) {
    ASSERT_EQ(skip(reinterpret_cast<const char*>(w.data()), from, count, lo, span), reference(w, from, lo, span))
        << "from " << from << " of " << count;
    ASSERT_EQ(skip(shifted.data() + 1, from, count, lo, span), reference(w, from, lo, span));
  }
}

std::vector<Skip> implementations() {
  std::vector<Skip> out{&word_scan_detail::skip_scalar, &skip_to_candidates};
  if (word_scan_detail::cpu_has_avx2()) out.push_back(&word_scan_detail::skip_avx2);
  return out;
}

TEST(WordScan, FindsTheBlockOfEachCandidateAtEveryPosition) {
  const std::uint64_t lo = 0x7f0000000000ull, span = 1ull << 30;
  // In the span: its first and last word. Outside: just below and at its end, zero, small
  // scalars, a word with the sign bit set (where a signed comparison would go wrong).
  const std::uint64_t inside[] = {lo, lo + span - 1, lo + 4096};
  const std::uint64_t outside[] = {lo - 1, lo + span, 0, 7, ~std::uint64_t{0}, std::uint64_t{1} << 63, lo + (std::uint64_t{1} << 63)};
  for (Skip skip : implementations()) {
    for (std::uint32_t count : {16u, 31u, 32u, 47u, 64u, 100u}) {
      std::vector<std::uint64_t> w(count);
      for (std::uint32_t i = 0; i < count; ++i) w[i] = outside[i % std::size(outside)];
      expect_agrees(skip, w, lo, span);  // none: every whole block skipped
      for (std::uint32_t at = 0; at < count; ++at)
        for (std::uint64_t c : inside) {
          std::vector<std::uint64_t> v = w;
          v[at] = c;
          expect_agrees(skip, v, lo, span);
        }
    }
  }
}

TEST(WordScan, AgreesWithTheReferenceOnRandomMultiTensorLikeBuffers) {
  std::mt19937_64 rng(7);
  for (Skip skip : implementations()) {
    for (int round = 0; round < 200; ++round) {
      const std::uint64_t lo = rng() >> 1, span = 1 + (rng() >> (20 + rng() % 40));
      std::vector<std::uint64_t> w(16 + rng() % 600);
      for (auto& x : w) x = rng() % 4 == 0 ? rng() % 1000 : rng();  // scalars and random words
      for (int k = static_cast<int>(rng() % 4); k > 0; --k) w[rng() % w.size()] = lo + rng() % span;
      expect_agrees(skip, w, lo, span);
    }
  }
}

}  // namespace
}  // namespace capuchin::interpose
