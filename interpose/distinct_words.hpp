// distinct_words.hpp: a launch's candidate parameter words, each kept once, in the order first
// seen, in a caller's buffer (scan_launch, on the launch hook: no allocation, no lock).
//
// Contract: add() every candidate word, then count(); the buffer then holds exactly the
// distinct words in first-seen order, at most `kCapacity` of them, and truncated() says whether
// a distinct word did not fit. The first kLinear words are searched one by one (most launches
// name a handful of pointers), and only when a 64-bit filter says the word may be among them.
// Past them an open-addressing table of positions on the stack (kSlots, at most half full)
// answers "seen already?" in O(1), so a multi-tensor launch naming a thousand pointers
// (PyTorch's optimizer steps: 336 tensors per list with CUDA 13's 32 KB kernel arguments) costs
// O(n) instead of the O(n^2) of a search per word (157 us per launch of 1,008 pointers here
// before, 4 us now; bench_launch_overhead). The table puts 8 KiB on the hook's stack, beside
// scan_launch's callers' 14 KiB words buffer: a thread calling CUDA needs about 24 KiB of stack
// for a launch (glibc's threads have 8 MiB by default).
#pragma once

#include <bit>
#include <cstdint>
#include <cstring>

namespace capuchin::interpose {

template <unsigned kCapacity>
class DistinctWords {
 public:
  static constexpr unsigned kLinear = 32;
  static constexpr unsigned kSlots = 4096;  // a power of two, at least twice kCapacity
  static_assert(kSlots >= 2 * kCapacity && (kSlots & (kSlots - 1)) == 0 && kCapacity < 0xffffu);
  static_assert(kCapacity >= kLinear, "the linear phase writes up to kLinear words");

  explicit DistinctWords(std::uint64_t* out) : out_(out) {}

  void add(std::uint64_t w) {
    if (n_ < kLinear) [[likely]] {
      // A word whose filter bit is clear was not seen: most of a launch's pointers are
      // distinct, so most adds skip the search of the words kept so far.
      const std::uint64_t bit = std::uint64_t{1} << (mix(w) >> 58);
      if ((filter_ & bit) != 0) {
        for (unsigned j = 0; j < n_; ++j)
          if (out_[j] == w) return;
      }
      filter_ |= bit;
      out_[n_++] = w;
      return;
    }
    if (!hashed_) [[unlikely]] start_table();
    std::uint16_t* slot = find(w);
    if (*slot != kEmpty) return;  // seen
    if (n_ == kCapacity) {
      truncated_ = true;
      return;
    }
    *slot = static_cast<std::uint16_t>(n_);
    out_[n_++] = w;
  }

  unsigned count() const { return n_; }
  bool truncated() const { return truncated_; }

 private:
  static constexpr std::uint16_t kEmpty = 0xffffu;

  // Fibonacci hashing: the product's top bits depend on every bit of w (allocations differ in
  // their middle bits; their low bits are often all zero).
  static std::uint64_t mix(std::uint64_t w) { return w * 0x9e3779b97f4a7c15ull; }

  // The slot holding w's position, or the empty slot where it would go.
  std::uint16_t* find(std::uint64_t w) {
    unsigned i = static_cast<unsigned>(mix(w) >> (64 - std::countr_zero(kSlots)));
    while (table_[i] != kEmpty && out_[table_[i]] != w) i = (i + 1) & (kSlots - 1);
    return &table_[i];
  }
  // The table starts when the words outgrow the linear search, with the (distinct) words so far.
  void start_table() {
    std::memset(table_, 0xff, sizeof table_);
    for (unsigned j = 0; j < n_; ++j) *find(out_[j]) = static_cast<std::uint16_t>(j);
    hashed_ = true;
  }

  std::uint64_t* out_;
  unsigned n_ = 0;
  std::uint64_t filter_ = 0;  // one bit per word kept in the linear phase (mix's top 6 bits)
  bool hashed_ = false, truncated_ = false;
  std::uint16_t table_[kSlots];  // positions in out_; left uninitialised until start_table()
};

}  // namespace capuchin::interpose
