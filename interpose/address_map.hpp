// address_map.hpp: the drain thread's map of live allocations by address, through which the
// raw addresses hooks record (launch parameter words, copy and memset ends, frees by base)
// become allocation ids, in the global event order.
//
// Contract: single-threaded (the drain thread only; it may allocate). Entries never overlap:
// inserting over a stale range (a free that was never seen) removes the stale entries and
// hands them to the caller, which emits their frees. An address that is an entry's base (most
// launch words, every free) is found in O(1) through a flat index of bases; an interior address
// in O(log n) through the ordered map. The ordered map's nodes come from a pool: a training job
// allocates and frees hundreds of tensors per iteration, and each took a malloc and a free.
#pragma once

#include <cstdint>
#include <map>
#include <memory_resource>

#include "capuchin/flat_map.hpp"

namespace capuchin::interpose {

class AddressMap {
 public:
  struct Entry {
    std::uint64_t end = 0;
    std::uint64_t id = 0;  // meaningless for host entries
    bool host = false;     // host memory the driver knows (pinned, registered): never an allocation of ours
    // The last launch whose words named it (the caller's stamp): each allocation counted once per
    // launch without searching what the launch named so far.
    mutable std::uint64_t seen = 0;
  };

  // Adds [base, base + bytes); `stale(base, entry)` is called for each overlapping entry removed.
  template <class Stale>
  void insert(std::uint64_t base, std::uint64_t bytes, std::uint64_t id, bool host, Stale&& stale) {
    auto it = entries_.lower_bound(base);
    if (it != entries_.begin() && std::prev(it)->second.end > base) --it;
    while (it != entries_.end() && it->first < base + bytes) {
      stale(it->first, it->second);
      it = remove(it);
    }
    at_base_.insert_or_assign(base, entries_.emplace_hint(it, base, Entry{base + bytes, id, host}));
  }
  // Removes the entry starting exactly at base, when there is one of that kind (host or not).
  bool erase(std::uint64_t base, bool host, Entry* out) {
    const Iter* at = at_base_.find(base);
    if (at == nullptr || (*at)->second.host != host) return false;
    if (out != nullptr) *out = (*at)->second;
    remove(*at);
    return true;
  }
  // Removes every entry starting in [lo, hi), calling gone(base, entry) for each.
  template <class Gone>
  void erase_range(std::uint64_t lo, std::uint64_t hi, Gone&& gone) {
    for (auto it = entries_.lower_bound(lo); it != entries_.end() && it->first < hi; it = remove(it))
      gone(it->first, it->second);
  }
  // The entry containing addr (interior addresses included), or nullptr.
  const Entry* find(std::uint64_t addr) const {
    if (const Iter* at = at_base_.find(addr)) return &(*at)->second;
    auto it = entries_.upper_bound(addr);
    if (it == entries_.begin()) return nullptr;
    --it;
    return addr < it->second.end ? &it->second : nullptr;
  }
  std::size_t size() const { return entries_.size(); }

 private:
  using Map = std::pmr::map<std::uint64_t, Entry>;
  using Iter = Map::iterator;
  Iter remove(Iter it) {
    at_base_.erase(it->first);
    return entries_.erase(it);
  }

  std::pmr::unsynchronized_pool_resource pool_;
  Map entries_{&pool_};
  FlatMap<Iter> at_base_;  // every entry by its base (map iterators stay valid until erased)
};

}  // namespace capuchin::interpose
