// RangeMaxTree: a lazy segment tree over positions 0..n-1 with range add and range max
// (and the first position of a range's maximum), O(log n) each. The planner keeps the
// memory in use at each event position in one.
#pragma once

#include <algorithm>
#include <cstdint>
#include <limits>
#include <vector>

namespace capuchin::plan {

class RangeMaxTree {
 public:
  void build(const std::vector<std::int64_t>& v) {
    n_ = v.size();
    size_ = 1;
    while (size_ < std::max<std::size_t>(n_, 1)) size_ <<= 1;
    mx_.assign(2 * size_, kLow);
    lz_.assign(2 * size_, 0);
    for (std::size_t i = 0; i < n_; ++i) mx_[size_ + i] = v[i];
    for (std::size_t i = size_ - 1; i >= 1; --i) mx_[i] = std::max(mx_[2 * i], mx_[2 * i + 1]);
  }
  // Adds d to positions [l, r).
  void add(std::size_t l, std::size_t r, std::int64_t d) { add(1, 0, size_, l, r, d); }
  // Max over [l, r); kLow when empty.
  std::int64_t max(std::size_t l, std::size_t r) const { return query(1, 0, size_, l, r); }
  // First position in [l, r) holding the max.
  std::uint32_t argmax(std::size_t l, std::size_t r) const {
    const std::int64_t m = max(l, r);
    for (std::size_t i = l; i < r; ++i)
      if (max(i, i + 1) == m) return static_cast<std::uint32_t>(i);
    return static_cast<std::uint32_t>(l);
  }

 private:
  static constexpr std::int64_t kLow = std::numeric_limits<std::int64_t>::min() / 4;
  void add(std::size_t x, std::size_t lo, std::size_t hi, std::size_t l, std::size_t r, std::int64_t d) {
    if (r <= lo || hi <= l) return;
    if (l <= lo && hi <= r) {
      mx_[x] += d;
      lz_[x] += d;
      return;
    }
    const std::size_t mid = (lo + hi) / 2;
    add(2 * x, lo, mid, l, r, d);
    add(2 * x + 1, mid, hi, l, r, d);
    mx_[x] = std::max(mx_[2 * x], mx_[2 * x + 1]) + lz_[x];
  }
  std::int64_t query(std::size_t x, std::size_t lo, std::size_t hi, std::size_t l, std::size_t r) const {
    if (r <= lo || hi <= l) return kLow;
    if (l <= lo && hi <= r) return mx_[x];
    const std::size_t mid = (lo + hi) / 2;
    return std::max(query(2 * x, lo, mid, l, r), query(2 * x + 1, mid, hi, l, r)) + lz_[x];
  }
  std::size_t n_ = 0, size_ = 1;
  std::vector<std::int64_t> mx_, lz_;
};

}  // namespace capuchin::plan
