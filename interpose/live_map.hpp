// live_map.hpp: the interval map of live allocations, read lock-free from the launch path.
//
// Design: a persistent (copy-on-write) B+tree published RCU-style. A Snapshot names a root,
// its height and the span of every entry [lo, hi); nodes are immutable once published. A
// writer (allocation and free hooks: not the launch path) serialises on a mutex, copies the
// root-to-leaf path it changes (O(log n) nodes, a few KiB at 100k live allocations), publishes
// the new Snapshot with one atomic store and retires what it replaced. A lookup is one range
// test, then a branchless search of <= 32 keys per level: 3 levels at 10k allocations, 4 at
// 300k (inner fan-out 32, leaves of 16 entries).
//
// Reclamation (hazard pointers, "sticky"): a reader announces the Snapshot it uses in its
// ThreadSlot's hazard (store, then re-check the published pointer); the hazard stays set
// after the Reader ends, so the next Reader on that thread skips the fenced store while
// nothing was published. Every retired object is tagged with the version that replaced it
// and is reachable only from older versions; it is freed once no hazard names an older
// Snapshot. A thread that stops looking up pins its last Snapshot until its next lookup or
// its exit (RingPool::recycle clears the hazard): when the retired objects outgrow the live
// tree, the writer frees every one that no pinned Snapshot still reaches (a walk of the
// pinned trees), so an idle thread pins at most one tree's worth of nodes.
//
// Contract: Reader never locks, allocates or waits (its retry loop only repeats when a
// writer published in between, which is finite); a Snapshot and every node under it stay
// valid for the Reader's lifetime. Writers cost O(log n) time and memory per call (amortised:
// reclamation runs every kReclaimEvery retirements). Entries never overlap: inserting over a
// stale range (a free we missed) evicts the stale entries and reports them so the caller can
// emit their frees.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <map>
#include <mutex>
#include <vector>

#include "ring.hpp"

namespace capuchin::interpose {

enum class MemKind : std::uint32_t { Device, Managed, Vmm, Host };

struct LiveEntry {
  std::uint64_t base = 0, end = 0, id = 0;
  MemKind kind = MemKind::Device;
};

namespace live_tree {
inline constexpr unsigned kLeafFan = 16, kInnerFan = 32;
inline constexpr std::uint64_t kUnused = ~std::uint64_t{0};  // keys past n (never <= a real address)
struct Leaf {
  std::uint32_t n = 0;
  std::uint64_t key[kLeafFan];  // entry bases, ascending
  LiveEntry entry[kLeafFan];
};
struct Inner {
  std::uint32_t n = 0;
  std::uint64_t key[kInnerFan];  // each child's smallest base, ascending
  const void* child[kInnerFan];  // Inner at height > 1, Leaf at height 1
};
// Index of the last of `keys` (ascending, padded with kUnused) that is <= addr, or -1.
template <unsigned N>
inline int last_le(const std::uint64_t* keys, std::uint64_t addr) {
  const std::uint64_t* b = keys;
  if (addr < b[0]) return -1;
  unsigned count = N;
  while (count > 1) {  // branchless (cmov): the last key <= addr
    const unsigned half = count / 2;
    b = b[half] <= addr ? b + half : b;
    count -= half;
  }
  return static_cast<int>(b - keys);
}
}  // namespace live_tree

struct Snapshot {
  const void* root = nullptr;  // nullptr when empty
  unsigned height = 0;         // inner levels above the leaves
  std::size_t n = 0;
  std::uint64_t lo = 0, hi = 0;  // smallest base, largest end (fast reject; 0, 0 when empty)
  std::uint64_t version = 0;
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
  // Retired objects not yet freed (tests: reclamation keeps up).
  std::size_t retired() const;
  // After fork, in the child: the writer mutex may have been held by a thread that no
  // longer exists; re-create it. Retired objects are leaked (they may be mid-use).
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
      using namespace live_tree;
      const Snapshot& s = *snap_;
      if (addr - s.lo >= s.hi - s.lo) return nullptr;  // also rejects everything when empty
      const void* node = s.root;
      for (unsigned level = s.height; level > 0; --level) {
        const Inner* in = static_cast<const Inner*>(node);
        const int i = last_le<kInnerFan>(in->key, addr);
        if (i < 0) return nullptr;
        node = in->child[i];
      }
      const Leaf* leaf = static_cast<const Leaf*>(node);
      const int i = last_le<kLeafFan>(leaf->key, addr);
      if (i < 0) return nullptr;
      const LiveEntry* e = &leaf->entry[i];
      return addr < e->end ? e : nullptr;
    }
    bool in_span(std::uint64_t addr) const { return addr >= snap_->lo && addr < snap_->hi; }
    const Snapshot& snapshot() const { return *snap_; }

   private:
    static const Snapshot* announce(const LiveMap& map, ThreadSlot* slot, const Snapshot* p);
    const Snapshot* snap_;
  };

 private:
  struct Retired {
    const void* object;
    std::uint64_t tag;  // the version that replaced it: reachable from older versions only
    enum class What : std::uint8_t { Leaf, Inner, Snapshot } what;
  };
  struct Path;  // one copy-on-write update (live_map.cpp)

  // Under mu_.
  void insert_one(const LiveEntry& e);
  void remove_one(std::uint64_t base);
  void publish(const void* root, unsigned height, std::vector<Retired>& replaced);
  void reclaim();
  void free_unreachable(const std::vector<const Snapshot*>& pinned);

  RingPool& pool_;
  std::mutex* mu_;
  std::atomic<const Snapshot*> current_;
  std::map<std::uint64_t, LiveEntry> entries_;  // the writer's view, by base (overlap queries)
  std::vector<Retired> retired_;
  std::size_t nodes_ = 0;                 // nodes reachable from the current snapshot
  std::size_t walk_above_ = 4096;         // retired count that triggers a walk of pinned trees
};

}  // namespace capuchin::interpose
