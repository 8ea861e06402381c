// live_map.hpp: the interval map of live allocations, read lock-free from the launch path.
//
// Design (RCU-style copy-on-write with hazard pointers): the map is an immutable sorted
// array (a Snapshot: bases[] for a cache-friendly binary search, then {end, id, kind}).
// Writers (allocation and free hooks: not the launch path) serialise on a mutex, build a
// new snapshot, publish it with one atomic pointer store and retire the old one. A reader
// announces the snapshot it uses in its ThreadSlot's hazard pointer (store, then re-check
// the published pointer); a retired snapshot is freed only when no hazard names it.
//
// Contract: Reader never locks, allocates or waits (its retry loop only repeats when a
// writer published in between, which is finite); a Snapshot stays valid for the Reader's
// lifetime. Writers cost O(live allocations) per call, which is fine for cudaMalloc-rate
// events (allocators cache). Entries never overlap: inserting over a stale range (a free we
// missed) evicts the stale entries and reports them so the caller can emit their frees.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <vector>

#include "ring.hpp"

namespace capuchin::interpose {

enum class MemKind : std::uint32_t { Device, Managed, Vmm, Host };

struct LiveEntry {
  std::uint64_t base = 0, end = 0, id = 0;
  MemKind kind = MemKind::Device;
};

struct Snapshot {
  std::size_t n = 0;
  std::uint64_t lo = 0, hi = 0;  // smallest base, largest end (fast reject)
  std::uint64_t* bases = nullptr;
  LiveEntry* entries = nullptr;
};

class LiveMap {
 public:
  explicit LiveMap(RingPool& pool);
  ~LiveMap();
  LiveMap(const LiveMap&) = delete;
  LiveMap& operator=(const LiveMap&) = delete;

  // Writers. `evicted` receives up to `cap` stale entries removed by the insert.
  std::size_t insert(const LiveEntry& e, LiveEntry* evicted, std::size_t cap);
  bool remove(std::uint64_t base, LiveEntry* out);
  // Removes every entry that starts in [lo, hi) (a VMM unmap); returns how many (up to cap reported).
  std::size_t remove_range(std::uint64_t lo, std::uint64_t hi, LiveEntry* out, std::size_t cap);
  std::size_t size() const;
  // After fork, in the child: the writer mutex may have been held by a thread that no
  // longer exists; re-create it. Retired snapshots are leaked (they may be mid-use).
  void reset_after_fork();

  class Reader {
   public:
    Reader(const LiveMap& map, ThreadSlot* slot);
    ~Reader() { slot_->hazard.store(nullptr, std::memory_order_release); }
    Reader(const Reader&) = delete;
    Reader& operator=(const Reader&) = delete;
    // The entry containing addr (interior pointers included), or nullptr.
    const LiveEntry* find(std::uint64_t addr) const {
      if (addr < snap_->lo || addr >= snap_->hi) return nullptr;
      // Branchless search (cmov) for the last base <= addr: no mispredictions on the
      // launch path, ~log2(n) dependent loads from one contiguous array.
      const std::uint64_t* b = snap_->bases;
      std::size_t n = snap_->n;
      if (n == 0 || addr < b[0]) return nullptr;
      while (n > 1) {
        const std::size_t half = n / 2;
        b = b[half] <= addr ? b + half : b;
        n -= half;
      }
      const std::size_t first = static_cast<std::size_t>(b - snap_->bases) + 1;
      if (first == 0) return nullptr;
      const LiveEntry* e = &snap_->entries[first - 1];
      return addr < e->end ? e : nullptr;
    }
    bool in_span(std::uint64_t addr) const { return addr >= snap_->lo && addr < snap_->hi; }
    const Snapshot& snapshot() const { return *snap_; }

   private:
    const Snapshot* snap_;
    ThreadSlot* slot_;
  };

 private:
  void publish(std::vector<LiveEntry>&& next);  // under mu_
  void reclaim();                               // under mu_

  RingPool& pool_;
  std::mutex* mu_;
  std::atomic<const Snapshot*> current_;
  std::vector<LiveEntry> entries_;  // writer's copy, sorted by base
  std::vector<const Snapshot*> retired_;
};

}  // namespace capuchin::interpose
