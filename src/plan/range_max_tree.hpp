// RangeMaxTree: range add and range max (and the first position of a range's maximum) over
// positions 0..n-1, O(log n) each. The planner keeps the memory in use at each event position
// in one, and asks it on every candidate it weighs (a fifth of a planning run's time when the
// tree was recursive).
//
// Layout: a bottom-up segment tree over size_ = 2^k >= n leaves, node x's children 2x and 2x+1,
// leaves at size_ + i. For an internal node, lz_[x] is what was added to its whole range and
// mx_[x] = max(mx_[2x], mx_[2x+1]) + lz_[x]; a leaf's mx_ is its value less its ancestors'
// lz_. So the true value of a node's range max is mx_[x] plus lz_ of its proper ancestors.
// Neither call recurses and a query writes nothing (the planner asks from const methods).
#pragma once

#include <algorithm>
#include <cstdint>
#include <limits>
#include <vector>

namespace capuchin::plan {

class RangeMaxTree {
 public:
  void build(const std::vector<std::int64_t>& v) {
    size_ = 1;
    while (size_ < std::max<std::size_t>(v.size(), 1)) size_ <<= 1;
    mx_.assign(2 * size_, kLow);
    lz_.assign(2 * size_, 0);
    std::copy(v.begin(), v.end(), mx_.begin() + static_cast<std::ptrdiff_t>(size_));
    for (std::size_t i = size_ - 1; i >= 1; --i) mx_[i] = std::max(mx_[2 * i], mx_[2 * i + 1]);
  }

  // Adds d to positions [l, r); r <= n (the size built).
  void add(std::size_t l, std::size_t r, std::int64_t d) {
    if (l >= r) return;
    const std::size_t l0 = l + size_, r0 = r - 1 + size_;
    for (l += size_, r += size_; l < r; l >>= 1, r >>= 1) {
      if (l & 1) apply(l++, d);
      if (r & 1) apply(--r, d);
    }
    pull_up(l0);
    pull_up(r0);
  }

  // Max over [l, r), r <= n; kLow when empty.
  std::int64_t max(std::size_t l, std::size_t r) const {
    if (l >= r) return kLow;
    // The nodes taken on the left all lie under node l - 1 of the level reached (the left end
    // only moves right, then up), those on the right under node r: each side's best is kept
    // relative to that node, gaining its lz_ as the walk goes up a level, and the ancestors'
    // lz_ are added once at the end.
    std::int64_t left = kLow, right = kLow;
    bool took_left = false, took_right = false;
    for (l += size_, r += size_; l < r; l >>= 1, r >>= 1) {
      if (took_left) left += lz_[l - 1];
      if (took_right) right += lz_[r];
      if (l & 1) {
        left = took_left ? std::max(left, mx_[l]) : mx_[l];
        took_left = true;
        ++l;
      }
      if (r & 1) {
        --r;
        right = took_right ? std::max(right, mx_[r]) : mx_[r];
        took_right = true;
      }
    }
    if (took_left) left += lz_[l - 1] + lazy_above(l - 1);
    if (took_right) right += lz_[r] + lazy_above(r);
    if (!took_left) return right;
    if (!took_right) return left;
    return std::max(left, right);
  }

  // First position in [l, r) holding the max.
  std::uint32_t argmax(std::size_t l, std::size_t r) const {
    const std::int64_t m = max(l, r);
    for (std::size_t i = l; i < r; ++i)
      if (max(i, i + 1) == m) return static_cast<std::uint32_t>(i);
    return static_cast<std::uint32_t>(l);
  }

 private:
  static constexpr std::int64_t kLow = std::numeric_limits<std::int64_t>::min() / 4;

  void apply(std::size_t x, std::int64_t d) {
    mx_[x] += d;
    if (x < size_) lz_[x] += d;  // a leaf's value carries it alone
  }
  // Recomputes the ancestors of x from their children, bottom up.
  void pull_up(std::size_t x) {
    for (x >>= 1; x >= 1; x >>= 1) mx_[x] = std::max(mx_[2 * x], mx_[2 * x + 1]) + lz_[x];
  }
  // The lz_ of x's proper ancestors.
  std::int64_t lazy_above(std::size_t x) const {
    std::int64_t s = 0;
    for (x >>= 1; x >= 1; x >>= 1) s += lz_[x];
    return s;
  }

  std::size_t size_ = 1;
  std::vector<std::int64_t> mx_, lz_;  // lz_ of leaves stays 0
};

}  // namespace capuchin::plan
