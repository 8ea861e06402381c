// live_map.hpp: the interval map of live allocations, read lock-free from the launch path.
//
// Design (RCU-style copy-on-write with hazard pointers): the map is an immutable sorted
// array (a Snapshot: bases[] for a cache-friendly search, then {end, id, kind}) with a
// bucket index over the span of device entries (equal-width buckets, each naming the
// entries that start before and inside it), so a lookup is one bucket load and a search of
// a handful of bases instead of ~log2(n) dependent loads. Writers (allocation and free
// hooks: not the launch path) serialise on a mutex, build a new snapshot, publish it with
// one atomic pointer store and retire the old one. A reader announces the snapshot it uses
// in its ThreadSlot's hazard pointer (store, then re-check the published pointer); a
// retired snapshot is freed only when no hazard names it. The hazard stays set after the
// Reader ends (it is "sticky"): the next Reader on that thread finds it already naming the
// current snapshot and skips the fenced store. A thread thus pins at most one retired
// snapshot until its next lookup or its exit (RingPool::recycle clears it).
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
  // Bucket index over [ilo, ilo + ispan) (the device entries' span; host entries live
  // elsewhere in the address space and would make buckets useless): bucket k covers
  // [ilo + (k << shift), ilo + ((k + 1) << shift)); first[k] = number of entries whose
  // base lies below the bucket's start. first has nbuckets + 1 elements.
  std::uint64_t ilo = 0, ispan = 0;
  unsigned shift = 0;
  std::uint32_t* first = nullptr;
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
    // Fast path: the thread's sticky hazard already names the published snapshot (one
    // acquire load, one relaxed load); otherwise the fenced announce-and-recheck.
    Reader(const LiveMap& map, ThreadSlot* slot) {
      const Snapshot* p = map.current_.load(std::memory_order_acquire);
      snap_ = slot->hazard.load(std::memory_order_relaxed) == p ? p : announce(map, slot, p);
    }
    Reader(const Reader&) = delete;
    Reader& operator=(const Reader&) = delete;
    // The entry containing addr (interior pointers included), or nullptr.
    const LiveEntry* find(std::uint64_t addr) const {
      const Snapshot& s = *snap_;
      std::size_t lo_idx, count;
      if (addr - s.ilo < s.ispan) [[likely]] {
        const std::uint64_t k = (addr - s.ilo) >> s.shift;
        const std::uint32_t f = s.first[k];
        lo_idx = f == 0 ? 0 : f - 1;  // the last entry starting before the bucket, if any
        count = s.first[k + 1] - lo_idx;
      } else {
        if (addr < s.lo || addr >= s.hi) return nullptr;
        lo_idx = 0;
        count = s.n;
      }
      // Branchless search (cmov) for the last base <= addr among bases[lo_idx, +count).
      const std::uint64_t* b = s.bases + lo_idx;
      if (count == 0 || addr < b[0]) return nullptr;
      while (count > 1) {
        const std::size_t half = count / 2;
        b = b[half] <= addr ? b + half : b;
        count -= half;
      }
      const LiveEntry* e = &s.entries[b - s.bases];
      return addr < e->end ? e : nullptr;
    }
    bool in_span(std::uint64_t addr) const { return addr >= snap_->lo && addr < snap_->hi; }
    const Snapshot& snapshot() const { return *snap_; }

   private:
    static const Snapshot* announce(const LiveMap& map, ThreadSlot* slot, const Snapshot* p);
    const Snapshot* snap_;
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
