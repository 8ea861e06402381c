// block_table.cpp: finding blocks by address (see block.hpp).
#include <algorithm>

#include "block.hpp"

namespace capuchin::interpose::exec {

namespace {
bool base_before(const std::pair<CUdeviceptr, Block*>& e, CUdeviceptr addr) { return e.first < addr; }
}  // namespace

Block* BlockTable::by_addr(std::uint64_t addr) const {
  // Most candidate words of a launch are not ours (scalars, other memory): one range check
  // against the lowest base and the highest block's end (blocks never overlap; a reused block
  // may be asked for more bytes than at first, up to its span).
  if (by_base_.empty() || addr < by_base_.front().first) return nullptr;
  if (const Block* last = by_base_.back().second; addr >= last->base + last->span) return nullptr;
  if (Block* const* exact = at_base_.find(addr)) return (*exact)->live ? *exact : nullptr;
  auto it = std::lower_bound(by_base_.begin(), by_base_.end(), addr, base_before);  // first base >= addr
  if (it == by_base_.begin()) return nullptr;
  Block* b = std::prev(it)->second;
  return b->live && addr < b->base + b->bytes ? b : nullptr;
}

void BlockTable::add_live(Block* b) {
  by_id_.insert_or_assign(b->id, b);
  b->live = true;
  if (b->indexed) return;
  by_base_.insert(std::lower_bound(by_base_.begin(), by_base_.end(), b->base, base_before), {b->base, b});
  at_base_.insert_or_assign(b->base, b);
  b->indexed = true;
}

void BlockTable::remove_live(Block* b) {
  by_id_.erase(b->id);
  b->live = false;
}

void BlockTable::forget(Block* b) {
  if (b->live) remove_live(b);
  if (b->cached) uncache(bucket_for(b->span), b);
  if (!b->indexed) return;
  auto it = std::lower_bound(by_base_.begin(), by_base_.end(), b->base, base_before);
  if (it != by_base_.end() && it->second == b) by_base_.erase(it);
  at_base_.erase(b->base);
  b->indexed = false;
}

BlockTable::CacheBucket& BlockTable::bucket_for(std::size_t span) {
  if (CacheBucket* const* found = bucket_of_.find(span)) return **found;
  CacheBucket& bucket = cache_[span];
  bucket_of_.insert_or_assign(span, &bucket);
  return bucket;
}

void BlockTable::link(CacheList& list, Block* b) {
  b->cache_prev = list.newest;
  b->cache_next = nullptr;
  (list.newest != nullptr ? list.newest->cache_next : list.oldest) = b;
  list.newest = b;
}

void BlockTable::unlink(CacheList& list, Block* b) {
  (b->cache_prev != nullptr ? b->cache_prev->cache_next : list.oldest) = b->cache_next;
  (b->cache_next != nullptr ? b->cache_next->cache_prev : list.newest) = b->cache_prev;
  b->cache_prev = b->cache_next = nullptr;
}

void BlockTable::cache(Block* b) {
  CacheBucket& bucket = bucket_for(b->span);
  // Incoming and Evicting too: their memory is on the device until the move ends.
  b->cached_on_device = b->where == Where::Device || b->where == Where::Incoming || b->where == Where::Evicting;
  link(b->cached_on_device ? bucket.on_device : bucket.elsewhere, b);
  b->cached = true;
  if (b->warm) ++bucket.warm, warm_bytes_ += b->span;
}

void BlockTable::unwarm(CacheBucket& bucket, Block& b) {
  b.warm = false;
  --bucket.warm;
  warm_bytes_ -= b.span;
}

void BlockTable::cool(Block& b) {
  if (!b.cached) {
    b.warm = false;
    return;
  }
  CacheBucket& bucket = **bucket_of_.find(b.span);  // cached: its span has a bucket
  if (b.warm) unwarm(bucket, b);
  // Still on the device (a move out that failed): it stays where shortages look for it.
  if (!b.cached_on_device || b.where == Where::Device || b.where == Where::Incoming) return;
  unlink(bucket.on_device, &b);
  link(bucket.elsewhere, &b);
  b.cached_on_device = false;
}

void BlockTable::uncache(CacheBucket& bucket, Block* b) {
  unlink(b->cached_on_device ? bucket.on_device : bucket.elsewhere, b);
  b->cached_on_device = false;
  b->cached = false;
  if (b->warm) unwarm(bucket, *b);
}

}  // namespace capuchin::interpose::exec
