// block.hpp: the executor's blocks (one per device allocation it serves), where their data
// is, and the table that finds them by allocation id and by address.
//
// Contract: blocks are created, changed and deleted only under the executor's lock. A block
// with pins > 0 is in use by a call in flight (a launch, a copy, a replay being set up, a move
// waited for outside the lock): it is never chosen to move out, never trimmed, never deleted.
// A block with forwarded > 0 is used by the job's work already handed to the driver by another
// thread and not yet recorded: its memory is not remapped meanwhile (it is used where it is).
// `where` changes only through Ledger::move, which keeps the resident bytes equal to the
// spans of the blocks whose memory is on the device.
#pragma once

#include <cuda.h>

#include <cstdint>
#include <map>
#include <memory>
#include <memory_resource>
#include <string>
#include <unordered_map>
#include <vector>

#include "capuchin/flat_map.hpp"
#include "device_chunks.hpp"
#include "event_pool.hpp"
#include "host_pool.hpp"

namespace capuchin::interpose::exec {

inline constexpr std::uint64_t kNoBlockId = ~std::uint64_t{0};

// How a block is backed (memory.hpp): uvm serves every block as Managed; pinned serves blocks
// the granularity wastes little of as Vmm, the others as Managed (charged what they use).
enum class Kind : std::uint8_t {
  Managed,  // one cuMemAllocManaged allocation; moves are cuMemPrefetchAsync
  Vmm,      // a VMM reservation: device chunk or host pieces mapped at base; moves are copies
};

// Where a block's data is. A live block's whole range is mapped and accessible in every
// state but Dropped, so any access, even one capture missed, reaches it.
enum class Where : std::uint8_t {
  Fresh,     // Managed: never touched since its allocation; contents undefined
  Device,    // resident
  Incoming,  // a prefetch (or a replay) is in flight; `ready` marks its end
  Evicting,  // Vmm: being copied out (device memory still held); `ready` marks its end
  Host,      // on the host only (Managed: pages on the host; Vmm: host pieces mapped at base)
  Dropped,   // Vmm: nothing mapped; recomputed from its producer when needed
};
// Whether a block in this state holds device memory (counts against the budget).
inline bool charged(Where w) { return w == Where::Device || w == Where::Incoming || w == Where::Evicting; }

struct UseMark {
  CUstream stream = nullptr;
  Ev ev;  // recorded on `stream` after the last use there
};

struct KernelInfo;

// A block the producer read (by id) and its version then.
struct ProducerInput {
  std::uint64_t id = 0;
  std::uint32_t version = 0;
};

// The launch that last wrote a block, kept so it can be replayed (recompute). Made at every
// launch with a replayable output, on the launch path: three allocations (this, the parameter
// buffer, the inputs), its name and parameter offsets read from the kernel table instead of copied.
struct Producer {
  CUfunction func = nullptr;
  unsigned grid[3] = {1, 1, 1}, block[3] = {1, 1, 1}, shmem = 0;
  CUstream stream = nullptr;
  // Its function's name and parameter offsets (kernels.hpp): the executor's kernel table, whose
  // entries live as long as the executor and so outlive every producer.
  const KernelInfo* kernel = nullptr;
  std::vector<std::uint8_t> params;     // the parameter buffer
  std::vector<ProducerInput> inputs;    // blocks read
  std::uint64_t launch = 0;  // the launch it replays (Executor::next_launch_stamp): one per launch, shared by its outputs
  std::uint64_t sig = 0;     // the launch's signature: its measured time prices a drop (Planning::duration_s)
};

// Producers that only a block held, kept when the block is written again or freed so the next
// capture refills one instead of allocating three buffers (a launch with a replayable output
// makes one, on the launch path). Under the executor's lock. Only there is a producer copied
// (a replay keeps its copy across the waits it leaves the lock for), so a use count of one
// there means no one else holds it or can take it. It counts the blocks holding a producer:
// a block's producer is set only through hand() and dropped only through give() (before the
// block is deleted too), so a shortage with none held knows no drop can be priced.
class ProducerPool {
 public:
  // Drops b's producer, keeping it when no one else holds it.
  void give(std::shared_ptr<Producer>& p) {
    if (p) give_held(p);  // many blocks a launch writes hold none: an inline test, no call
  }
  // b's producer becomes p (its old one given).
  void hand(std::shared_ptr<Producer>& slot, std::shared_ptr<Producer>&& p) {
    give(slot);
    if (p) ++held_by_blocks_;
    slot = std::move(p);
  }
  std::size_t held_by_blocks() const { return held_by_blocks_; }
  // A producer to fill (every field is set by the caller).
  std::shared_ptr<Producer> take() {
    if (spare_.empty()) return std::make_shared<Producer>();
    std::shared_ptr<Producer> p = std::move(spare_.back());
    spare_.pop_back();
    return p;
  }

 private:
  void give_held(std::shared_ptr<Producer>& p) {
    if (held_by_blocks_ > 0) --held_by_blocks_;  // (one never handed to a block: not counted)
    if (p.use_count() == 1 && spare_.size() < kKeep) spare_.push_back(std::move(p));
    p.reset();
  }
  std::size_t held_by_blocks_ = 0;
  static constexpr std::size_t kKeep = 256;
  std::vector<std::shared_ptr<Producer>> spare_;
};

struct Block {
  std::uint64_t id = kNoBlockId;  // live allocation id; kNoBlockId while cached after a free
  CUdeviceptr base = 0;
  std::size_t bytes = 0;  // requested
  std::size_t span = 0;   // charged against the budget (the kind's granularity)
  Kind kind = Kind::Managed;
  Where where = Where::Fresh;
  std::uint32_t pins = 0;
  std::uint32_t exports = 0;  // handle requests in flight or granted (exec::exported): while > 0, one pin held (until its free)
  std::uint32_t forwarded = 0;  // the job's launches or copies using it, forwarded and not yet finished (after_*)
  std::uint64_t use_gen = 0;    // bumped by every use marked (a wait on the host knows what it covered)
  bool staging_stale = false;   // Vmm Incoming: written through its host copy meanwhile; the staged copy is not used
  std::uint64_t last_tick = 0;  // the policy clock at its last use (set through Ledger::touch)
  // VictimIndex's (victim_index.hpp): its node while on the device or coming in (beside
  // last_tick: a use writes both)
  std::uint32_t victim_node = ~0u;
  std::uint64_t launch_seen = 0;  // the last launch that resolved it (Executor::next_launch_stamp): found once per launch
  std::uint64_t stuck_tick = ~std::uint64_t{0};  // a move out failed at this tick: not a victim again then
  // ordering (ordering.cpp)
  UseMark uses[4];
  std::uint8_t nuses = 0;
  bool many_streams = false;  // used on more streams than `uses` holds: moves wait for the context
  Ev ready;                   // Incoming / Evicting: the move's (or replay's) completion
  std::uint64_t move_seq = 0; // Evicting: the order evictions started in (the out stream runs them in it)
  Ev exec;                    // the latest replay reading or writing it
  std::vector<Ev> free_events;  // after a free: the previous owner's work, kept until the next owner's first use
  CUstream free_stream = nullptr;
  bool free_stream_valid = false;
  std::uint64_t freed_iteration = 0;
  // recomputation
  std::uint32_t version = 0;  // bumped by every event that may write it
  bool holds_data = false;    // anything may have written it since its allocation (write_sets.hpp)
  // BlockTable's (block_table.cpp)
  bool live = false;     // allocated to the job (else cached after a free)
  bool indexed = false;  // in the table's address index (from its first allocation to its deletion)
  bool cached = false;   // in the table's cache of freed blocks, linked to the others of its span
  bool warm = false;     // cached on the device once the budget binds, for a reuse of its span (BlockTable::warm)
  bool cached_on_device = false;  // cached in its span's list of device-resident blocks (BlockTable)
  Block* cache_prev = nullptr;
  Block* cache_next = nullptr;
  // Ledger's: its place among the charged blocks (kUnlisted while its memory is not on the device)
  std::uint32_t charged_slot = ~0u;
  std::uint64_t tried_in_shortage = 0;  // start_victims: the shortage that last tried to move it out
  std::shared_ptr<Producer> producer;
  std::vector<std::uint64_t> dependents;  // dropped blocks whose producer reads this one
  // Vmm
  std::size_t reserved = 0;  // VA reserved at base: the tensor's span, then a staging span
  CUmemGenericAllocationHandle dev = 0;
  std::vector<HostPiece> host;      // the host copy's pieces (at base when Host; at staging while moving)
  bool staging_mapped = false;      // `host` (evicting) or `dev` (incoming) is mapped at the staging range
  std::vector<HostPiece> retiring;  // a cancelled eviction's pieces, still at staging until `retire_after`
  Ev retire_after;
};

// Blocks by allocation id and by address. A block keeps its base from its creation to its
// deletion (a cached block is reused at the same address), so the address index changes only
// then; an allocation or a free flips `live`, inserts or erases its id in a flat index and
// links or unlinks it in its span's cache list (no allocation per event once warm).
class BlockTable {
 public:
  Block* by_id(std::uint64_t id) const {
    if (id == kNoBlockId) return nullptr;
    Block* const* b = by_id_.find(id);
    return b != nullptr ? *b : nullptr;
  }
  // The live block holding `addr`, or null.
  Block* by_addr(std::uint64_t addr) const;
  // The live block at exactly `base`, or null.
  Block* by_base(CUdeviceptr base) const {
    Block* const* b = at_base_.find(base);
    return b != nullptr && (*b)->live ? *b : nullptr;
  }
  void add_live(Block* b);     // b->id and b->base set
  void remove_live(Block* b);  // b stays indexed by address (cached, or deleted: forget)
  void forget(Block* b);       // before b is deleted
  void cache(Block* b);  // freed: the newest of its span (b->warm: counted among its span's warm)
  // Cached blocks of `span` kept on the device while the budget binds (Block::warm), and the
  // end of b's warmth (its memory moved out while cached; uncaching ends it too).
  std::uint32_t warm(std::size_t span) const {
    CacheBucket* const* found = bucket_of_.find(span);
    return found != nullptr ? (*found)->warm : 0;
  }
  // A move out of cached b was started: no longer warm, and, unless it is still on the device
  // (the move failed), listed with its span's blocks elsewhere (walks for device-resident
  // blocks pass it by from now on). Harmless for a block not cached.
  void cool(Block& b);
  std::uint64_t warm_bytes() const { return warm_bytes_; }  // of every span
  // A cached block of `span` and `kind` that `usable` accepts (device-resident ones first,
  // oldest first), taken out of the cache; null when none.
  template <class F>
  Block* take_cached(std::size_t span, Kind kind, F&& usable) {
    CacheBucket* const* found = bucket_of_.find(span);
    if (found == nullptr) return nullptr;
    CacheBucket& bucket = **found;
    auto take = [&](CacheList& list, bool device_only) -> Block* {
      for (Block* c = list.oldest; c != nullptr; c = c->cache_next) {
        if (c->kind != kind || c->pins != 0 || (device_only && c->where != Where::Device)) continue;
        if (!usable(*c)) continue;
        uncache(bucket, c);
        return c;
      }
      return nullptr;
    };
    // A reuse walks only the device list first: under pressure most of a span's cached blocks
    // are on the host, and walking them all at every allocation was a tenth of the hooks' time.
    if (Block* c = take(bucket.on_device, true)) return c;
    if (Block* c = take(bucket.elsewhere, false)) return c;
    return take(bucket.on_device, false);  // listed on the device, since moved (not through cool)
  }
  template <class F>
  void for_each_live(F&& f) const {
    by_id_.for_each([&](std::uint64_t, Block* b) { f(*b); });
  }
  // Smallest span first; within a span the blocks cached while on the device oldest first,
  // then the others oldest first. f must not cache or uncache.
  template <class F>
  void for_each_cached(F&& f) const {
    for (const auto& [span, bucket] : cache_) {
      for (Block* c = bucket.on_device.oldest; c != nullptr; c = c->cache_next) f(*c);
      for (Block* c = bucket.elsewhere.oldest; c != nullptr; c = c->cache_next) f(*c);
    }
  }
  // The same, only the blocks cached while on the device and not since cooled: every cached
  // block whose memory may still be on the device (f checks where it is: a move not told to
  // cool leaves a block listed here).
  template <class F>
  void for_each_cached_on_device(F&& f) const {
    for (const auto& [span, bucket] : cache_)
      for (Block* c = bucket.on_device.oldest; c != nullptr; c = c->cache_next) f(*c);
  }
  // Removes the cached blocks `pick` selects and returns them.
  template <class F>
  std::vector<Block*> take_cached_if(F&& pick) {
    std::vector<Block*> out;
    for (auto bucket = cache_.begin(); bucket != cache_.end();) {
      for (CacheList* list : {&bucket->second.on_device, &bucket->second.elsewhere})
        for (Block* c = list->oldest; c != nullptr;) {
          Block* next = c->cache_next;
          if (c->pins == 0 && pick(*c)) {
            uncache(bucket->second, c);
            out.push_back(c);
          }
          c = next;
        }
      // A span no block of holds any more (shapes change) is dropped with its last block.
      if (bucket->second.on_device.oldest == nullptr && bucket->second.elsewhere.oldest == nullptr) {
        bucket_of_.erase(bucket->first);
        bucket = cache_.erase(bucket);
      } else {
        ++bucket;
      }
    }
    return out;
  }

 private:
  // Freed blocks of one span, oldest first, in two lists through Block::cache_prev /
  // cache_next (a free or a reuse links or unlinks a block without a node; a span's bucket
  // stays): those cached while their memory was on the device (Block::cached_on_device), until
  // cooled, and the others.
  struct CacheList {
    Block* oldest = nullptr;
    Block* newest = nullptr;
  };
  struct CacheBucket {
    CacheList on_device, elsewhere;
    std::uint32_t warm = 0;  // its blocks with Block::warm
  };
  static void link(CacheList& list, Block* b);
  static void unlink(CacheList& list, Block* b);
  void uncache(CacheBucket& bucket, Block* b);
  void unwarm(CacheBucket& bucket, Block& b);  // b warm and cached in bucket: counted no more
  CacheBucket& bucket_for(std::size_t span);  // made when the span has none

  std::pmr::unsynchronized_pool_resource pool_;  // before the containers that use it
  FlatMap<Block*> by_id_;  // live blocks by id (include/capuchin/flat_map.hpp)
  // Every indexed block, live or cached, sorted by base: a binary search over contiguous
  // memory for interior pointers (inserted and erased only when a block is created or deleted).
  std::vector<std::pair<CUdeviceptr, Block*>> by_base_;
  // The same by exact base: most parameter words are a tensor's base, one hash probe instead
  // of a search (interior pointers fall back to by_base_).
  FlatMap<Block*> at_base_;
  std::pmr::map<std::size_t, CacheBucket> cache_{&pool_};  // freed blocks by span, for reuse
  // cache_'s buckets by span (map nodes stay put): a reuse or a free finds its bucket without
  // walking the tree; cache_ keeps the order for_each_cached promises.
  FlatMap<CacheBucket*> bucket_of_;
  std::uint64_t warm_bytes_ = 0;  // the spans of the blocks with Block::warm
};

}  // namespace capuchin::interpose::exec
