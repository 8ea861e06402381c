// DistinctWords (interpose/distinct_words.hpp), a launch's parameter words each kept once in
// first-seen order: the same result as a search per word, for launches of a few words and for
// multi-tensor launches of thousands, repeats and truncation included.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <random>
#include <vector>

#include "distinct_words.hpp"

namespace capuchin::interpose {
namespace {

// What scan_launch did before: a search of the kept words per word.
template <unsigned kCap>
std::pair<std::vector<std::uint64_t>, bool> by_search(const std::vector<std::uint64_t>& in) {
  std::vector<std::uint64_t> out;
  bool truncated = false;
  for (std::uint64_t w : in) {
    if (std::find(out.begin(), out.end(), w) != out.end()) continue;
    if (out.size() < kCap) out.push_back(w);
    else truncated = true;
  }
  return {out, truncated};
}

template <unsigned kCap>
void expect_same(const std::vector<std::uint64_t>& in) {
  std::vector<std::uint64_t> buf(kCap);
  DistinctWords<kCap> d(buf.data());
  for (std::uint64_t w : in) d.add(w);
  const unsigned n = d.count();
  const auto [want, truncated] = by_search<kCap>(in);
  ASSERT_EQ(n, want.size());
  EXPECT_TRUE(std::equal(want.begin(), want.end(), buf.begin()));
  EXPECT_EQ(d.truncated(), truncated);
}

TEST(DistinctWords, KeepsEachWordOnceInFirstSeenOrder) {
  expect_same<64>({});
  expect_same<64>({7, 3, 7, 9, 3, 3, 1});
  // An optimizer's multi-tensor launch: three lists of 336 addresses, the third list the first
  // again (an in-place op reading what it writes), then sizes repeating.
  std::vector<std::uint64_t> lists;
  for (int l = 0; l < 3; ++l)
    for (std::uint64_t t = 0; t < 336; ++t) lists.push_back(0x7f0000000000ull + (l == 2 ? 0 : l) * 0x100000000ull + t * 4096);
  for (int i = 0; i < 500; ++i) lists.push_back(64 + i % 7);
  expect_same<1785>(lists);
}

TEST(DistinctWords, AgreesWithASearchPerWordOnRandomLaunches) {
  std::mt19937_64 rng(42);
  for (int trial = 0; trial < 200; ++trial) {
    const unsigned len = static_cast<unsigned>(rng() % 3000), range = 1 + static_cast<unsigned>(rng() % 2500);
    std::vector<std::uint64_t> in(len);
    for (auto& w : in) w = 0x1000 + rng() % range;
    expect_same<1785>(in);
    expect_same<40>(in);  // a small buffer: truncation with repeats after it fills
  }
}

TEST(DistinctWords, TruncatesOnlyWhenADistinctWordDoesNotFit) {
  std::vector<std::uint64_t> in;
  for (std::uint64_t w = 0; w < 40; ++w) in.push_back(w);
  for (std::uint64_t w = 0; w < 40; ++w) in.push_back(w);  // repeats of a full buffer: not truncated
  expect_same<40>(in);
  in.push_back(99);  // one more distinct word: truncated
  expect_same<40>(in);
}

}  // namespace
}  // namespace capuchin::interpose
