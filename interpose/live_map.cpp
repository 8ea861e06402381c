// live_map.cpp: copy-on-write snapshots with hazard-pointer reclamation (see live_map.hpp).
#include "live_map.hpp"

#include <algorithm>
#include <cstdlib>
#include <new>

namespace capuchin::interpose {
namespace {

constexpr std::size_t kMaxBuckets = std::size_t{1} << 16;

// Buckets for n entries: a power of two near 2n (most buckets then hold zero or one base).
std::size_t bucket_count(std::size_t n) {
  std::size_t b = 1;
  while (b < 2 * n && b < kMaxBuckets) b *= 2;
  return b;
}

// One malloc per snapshot: header, bases[], entries[], first[].
Snapshot* make_snapshot(const std::vector<LiveEntry>& es) {
  const std::size_t n = es.size();
  std::uint64_t dlo = ~std::uint64_t{0}, dhi = 0;  // the device entries' span
  for (const LiveEntry& e : es)
    if (e.kind != MemKind::Host) dlo = std::min(dlo, e.base), dhi = std::max(dhi, e.end);
  const std::size_t nb = dhi > dlo ? bucket_count(n) : 0;
  const std::size_t bytes = sizeof(Snapshot) + n * sizeof(std::uint64_t) + n * sizeof(LiveEntry) +
                            (nb + 1) * sizeof(std::uint32_t);
  void* mem = std::malloc(bytes);
  if (mem == nullptr) return nullptr;
  auto* s = new (mem) Snapshot();
  s->n = n;
  s->bases = reinterpret_cast<std::uint64_t*>(static_cast<char*>(mem) + sizeof(Snapshot));
  s->entries = reinterpret_cast<LiveEntry*>(s->bases + n);
  s->first = reinterpret_cast<std::uint32_t*>(s->entries + n);
  s->lo = ~std::uint64_t{0};
  s->hi = 0;
  for (std::size_t i = 0; i < n; ++i) {
    s->bases[i] = es[i].base;
    new (&s->entries[i]) LiveEntry(es[i]);
    s->lo = std::min(s->lo, es[i].base);
    s->hi = std::max(s->hi, es[i].end);
  }
  s->first[0] = 0;
  if (nb == 0) return s;  // ispan = 0: every lookup takes the full search
  // The smallest shift that puts the last byte of the span in bucket nb - 1.
  const std::uint64_t span = dhi - dlo;
  unsigned shift = 0;
  while (((span - 1) >> shift) >= nb) ++shift;
  s->ilo = dlo;
  s->ispan = span;
  s->shift = shift;
  std::size_t j = 0;
  // base < the start of bucket k  <=>  base < dlo, or (base - dlo) >> shift < k.
  auto below = [&](std::uint64_t b, std::size_t k) { return b < dlo || ((b - dlo) >> shift) < k; };
  for (std::size_t k = 0; k <= nb; ++k) {
    while (j < n && below(s->bases[j], k)) ++j;
    s->first[k] = static_cast<std::uint32_t>(j);
  }
  return s;
}

void free_snapshot(const Snapshot* s) { std::free(const_cast<Snapshot*>(s)); }

}  // namespace

LiveMap::LiveMap(RingPool& pool) : pool_(pool), mu_(new std::mutex) {
  current_.store(make_snapshot({}), std::memory_order_release);
}

LiveMap::~LiveMap() {
  free_snapshot(current_.load());
  for (const Snapshot* s : retired_) free_snapshot(s);
  delete mu_;
}

const Snapshot* LiveMap::Reader::announce(const LiveMap& map, ThreadSlot* slot, const Snapshot* p) {
  for (;;) {
    slot->hazard.store(p, std::memory_order_seq_cst);
    const Snapshot* q = map.current_.load(std::memory_order_seq_cst);
    if (q == p) return p;
    p = q;
  }
}

void LiveMap::publish(std::vector<LiveEntry>&& next) {
  Snapshot* s = make_snapshot(next);
  if (s == nullptr) return;  // out of memory: readers keep the old view (stale, still safe)
  entries_ = std::move(next);
  const Snapshot* old = current_.exchange(s, std::memory_order_seq_cst);
  retired_.push_back(old);
  reclaim();
}

void LiveMap::reclaim() {
  if (!pool_.ready()) {
    return;  // no readers can exist without slots
  }
  auto in_use = [&](const Snapshot* s) {
    for (std::uint32_t i = 0; i < pool_.size(); ++i)
      if (pool_.slot(i).hazard.load(std::memory_order_seq_cst) == s) return true;
    return false;
  };
  std::size_t keep = 0;
  for (const Snapshot* s : retired_) {
    if (in_use(s)) retired_[keep++] = s;
    else free_snapshot(s);
  }
  retired_.resize(keep);
}

std::size_t LiveMap::insert(const LiveEntry& e, LiveEntry* evicted, std::size_t cap) {
  std::lock_guard<std::mutex> lock(*mu_);
  std::vector<LiveEntry> next;
  next.reserve(entries_.size() + 1);
  std::size_t n_evicted = 0;
  bool placed = false;
  for (const LiveEntry& x : entries_) {
    if (x.base < e.end && e.base < x.end) {  // overlaps: a stale entry
      if (n_evicted < cap) evicted[n_evicted] = x;
      ++n_evicted;
      continue;
    }
    if (!placed && e.base < x.base) {
      next.push_back(e);
      placed = true;
    }
    next.push_back(x);
  }
  if (!placed) next.push_back(e);
  publish(std::move(next));
  return std::min(n_evicted, cap);
}

bool LiveMap::remove(std::uint64_t base, LiveEntry* out) {
  std::lock_guard<std::mutex> lock(*mu_);
  auto it = std::lower_bound(entries_.begin(), entries_.end(), base,
                             [](const LiveEntry& x, std::uint64_t b) { return x.base < b; });
  if (it == entries_.end() || it->base != base) return false;
  if (out != nullptr) *out = *it;
  std::vector<LiveEntry> next;
  next.reserve(entries_.size());
  next.insert(next.end(), entries_.begin(), it);
  next.insert(next.end(), it + 1, entries_.end());
  publish(std::move(next));
  return true;
}

std::size_t LiveMap::remove_range(std::uint64_t lo, std::uint64_t hi, LiveEntry* out, std::size_t cap) {
  std::lock_guard<std::mutex> lock(*mu_);
  std::vector<LiveEntry> next;
  next.reserve(entries_.size());
  std::size_t n = 0;
  for (const LiveEntry& x : entries_) {
    if (x.base >= lo && x.base < hi) {
      if (n < cap) out[n] = x;
      ++n;
    } else {
      next.push_back(x);
    }
  }
  if (n > 0) publish(std::move(next));
  return std::min(n, cap);
}

std::size_t LiveMap::size() const {
  std::lock_guard<std::mutex> lock(*mu_);
  return entries_.size();
}

void LiveMap::reset_after_fork() {
  mu_ = new (std::nothrow) std::mutex;  // the old one may be locked forever; leak it
  retired_.clear();                     // leaked: a parent thread may have been reading
}

}  // namespace capuchin::interpose
