// flat_map.hpp: a map from 64-bit keys (allocation ids, device addresses) to small values in one
// flat array: open addressing, Fibonacci hashing, linear probing, backward-shift deletion. The
// executor's block table and the policy controller's live set look keys up and insert or erase
// them on every allocation, free and launch; a node-based map took a node allocation per insert,
// a division and two or three dependent loads per lookup.
//
// Contract: any key but kEmpty (~0: no allocation id or address is); kEmpty is never found,
// erased or inserted (try_emplace says so). At most half full (short probe runs); shrinks
// to half when an eighth full, so a scan (for_each) costs about the entries, not a past peak.
// Pointers returned by find or try_emplace stay valid only until the next insert or erase.
// Not thread-safe: the owner's lock guards it.
#pragma once

#include <bit>
#include <cstddef>
#include <cstdint>
#include <utility>
#include <vector>

namespace capuchin {

template <class V>
class FlatMap {
 public:
  static constexpr std::uint64_t kEmpty = ~std::uint64_t{0};

  V* find(std::uint64_t key) {
    if (count_ == 0 || key == kEmpty) return nullptr;  // an empty slot's key: no entry's
    for (std::size_t i = slot(key);; i = (i + 1) & mask_) {
      Slot& s = slots_[i];
      if (s.key == key) return &s.value;
      if (s.key == kEmpty) return nullptr;
    }
  }
  const V* find(std::uint64_t key) const { return const_cast<FlatMap*>(this)->find(key); }

  // The value at key, inserted as `v` when absent (then second is true). {nullptr, false} for kEmpty.
  std::pair<V*, bool> try_emplace(std::uint64_t key, V v) {
    if (key == kEmpty) return {nullptr, false};
    std::size_t i = 0;
    if (!slots_.empty()) {
      i = probe(key);
      if (slots_[i].key == key) return {&slots_[i].value, false};  // present: no growth
    }
    if (2 * (count_ + 1) > slots_.size()) {
      rehash(slots_.empty() ? 64 : 2 * slots_.size());
      i = probe(key);
    }
    slots_[i] = Slot{key, std::move(v)};
    ++count_;
    return {&slots_[i].value, true};
  }
  void insert_or_assign(std::uint64_t key, V v) {
    auto [at, fresh] = try_emplace(key, v);
    if (at != nullptr && !fresh) *at = std::move(v);
  }

  // Removes key (its value into *out when given); false when absent.
  bool erase(std::uint64_t key, V* out = nullptr) {
    if (count_ == 0 || key == kEmpty) return false;
    std::size_t i = slot(key);
    while (slots_[i].key != key) {
      if (slots_[i].key == kEmpty) return false;
      i = (i + 1) & mask_;
    }
    if (out != nullptr) *out = std::move(slots_[i].value);
    // Later entries of the run move up into the hole, so no lookup stops early.
    for (std::size_t j = (i + 1) & mask_; slots_[j].key != kEmpty; j = (j + 1) & mask_) {
      const std::size_t home = slot(slots_[j].key);
      // j's entry may fill the hole at i when its home is not cyclically in (i, j].
      const bool stays = i <= j ? (i < home && home <= j) : (i < home || home <= j);
      if (stays) continue;
      slots_[i] = std::move(slots_[j]);
      i = j;
    }
    slots_[i] = Slot{};
    --count_;
    if (slots_.size() > 64 && 8 * count_ < slots_.size()) rehash(slots_.size() / 2);
    return true;
  }

  std::size_t size() const { return count_; }
  bool empty() const { return count_ == 0; }

  // f(key, value) for every entry, in slot order; f must not insert or erase.
  template <class F>
  void for_each(F&& f) const {
    if (count_ == 0) return;
    for (const Slot& s : slots_)
      if (s.key != kEmpty) f(s.key, s.value);
  }

 private:
  struct Slot {
    std::uint64_t key = kEmpty;
    V value{};
  };
  // The slot holding key, or the empty slot where it would go (slots_ not empty, never full).
  std::size_t probe(std::uint64_t key) const {
    std::size_t i = slot(key);
    while (slots_[i].key != kEmpty && slots_[i].key != key) i = (i + 1) & mask_;
    return i;
  }
  std::size_t slot(std::uint64_t key) const {
    return static_cast<std::size_t>((key * 0x9E3779B97F4A7C15ull) >> shift_) & mask_;
  }
  void rehash(std::size_t n) {
    std::vector<Slot> old(n);
    old.swap(slots_);
    mask_ = n - 1;
    shift_ = 64 - static_cast<unsigned>(std::countr_zero(n));
    count_ = 0;
    for (Slot& s : old)
      if (s.key != kEmpty) try_emplace(s.key, std::move(s.value));
  }

  std::vector<Slot> slots_;
  std::size_t mask_ = 0, count_ = 0;
  unsigned shift_ = 64;
};

}  // namespace capuchin
