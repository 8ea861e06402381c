// The planner's RangeMaxTree (src/plan/range_max_tree.hpp) against a plain array: random range
// adds and range max / argmax queries at sizes around powers of two, where the bottom-up walks
// change shape.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <random>
#include <vector>

#include "plan/range_max_tree.hpp"

namespace {

using capuchin::plan::RangeMaxTree;

TEST(RangeMaxTree, AgreesWithAPlainArrayOnRandomAddsAndQueries) {
  std::mt19937_64 rng(7);
  std::size_t queries = 0;
  for (std::size_t n : {1u, 2u, 3u, 7u, 8u, 9u, 31u, 64u, 100u, 257u}) {
    std::vector<std::int64_t> v(n);
    for (auto& x : v) x = static_cast<std::int64_t>(rng() % 2001) - 1000;
    RangeMaxTree tree;
    tree.build(v);
    for (int step = 0; step < 400; ++step) {
      std::size_t l = rng() % n, r = rng() % (n + 1);
      if (l > r) std::swap(l, r);
      if (rng() % 2 == 0) {
        const std::int64_t d = static_cast<std::int64_t>(rng() % 601) - 300;
        tree.add(l, r, d);
        for (std::size_t i = l; i < r; ++i) v[i] += d;
        continue;
      }
      if (l == r) {
        EXPECT_LT(tree.max(l, r), -(std::int64_t{1} << 60)) << "empty range [" << l << ", " << r << ")";
        continue;
      }
      const auto best = std::max_element(v.begin() + l, v.begin() + r);
      ASSERT_EQ(tree.max(l, r), *best) << "n " << n << " step " << step << " [" << l << ", " << r << ")";
      ASSERT_EQ(tree.argmax(l, r), static_cast<std::uint32_t>(best - v.begin())) << "n " << n << " step " << step;
      ++queries;
    }
    EXPECT_EQ(tree.max(0, n), *std::max_element(v.begin(), v.end())) << "n " << n;
  }
  EXPECT_GT(queries, 1500u);  // not vacuous: most steps that query a range did
}

}  // namespace
