// live_map.cpp: the persistent B+tree, its copy-on-write updates and the reclamation of what
// they replace (see live_map.hpp).
#include "live_map.hpp"

#include <algorithm>
#include <new>
#include <unordered_set>

namespace capuchin::interpose {

using namespace live_tree;

namespace {

constexpr std::size_t kReclaimEvery = 64;  // retirements between reclamation passes

Leaf* new_leaf() {
  auto* l = new Leaf;
  std::fill(std::begin(l->key), std::end(l->key), kUnused);
  return l;
}
Inner* new_inner() {
  auto* in = new Inner;
  std::fill(std::begin(in->key), std::end(in->key), kUnused);
  std::fill(std::begin(in->child), std::end(in->child), nullptr);
  return in;
}

const Leaf* as_leaf(const void* p) { return static_cast<const Leaf*>(p); }
const Inner* as_inner(const void* p) { return static_cast<const Inner*>(p); }

std::uint64_t first_key(const void* node, unsigned level) {
  return level == 0 ? as_leaf(node)->key[0] : as_inner(node)->key[0];
}

// The largest end: entries never overlap, so it is the last entry's.
std::uint64_t last_end(const void* node, unsigned level) {
  for (; level > 0; --level) node = as_inner(node)->child[as_inner(node)->n - 1];
  return as_leaf(node)->entry[as_leaf(node)->n - 1].end;
}

void free_node(const void* p, bool leaf) {
  if (leaf) delete as_leaf(p);
  else delete as_inner(p);
}

void free_tree(const void* node, unsigned level) {
  if (node == nullptr) return;
  if (level > 0)
    for (std::uint32_t i = 0; i < as_inner(node)->n; ++i) free_tree(as_inner(node)->child[i], level - 1);
  free_node(node, level == 0);
}

void collect(const void* node, unsigned level, std::unordered_set<const void*>& into) {
  if (node == nullptr || !into.insert(node).second) return;
  if (level > 0)
    for (std::uint32_t i = 0; i < as_inner(node)->n; ++i) collect(as_inner(node)->child[i], level - 1, into);
}

struct Split {
  const void* right = nullptr;  // the new right sibling, when the node overflowed
  std::uint64_t key = 0;        // its smallest base
};

}  // namespace

// One copy-on-write update: the nodes it replaced (retired with the new version's tag) and
// the ones it made (unpublished until publish(): freed directly if dropped before).
struct LiveMap::Path {
  std::vector<Retired>& replaced;
  std::uint64_t tag;
  std::size_t& nodes;
  std::vector<const void*> fresh;

  void retire(const void* old, unsigned level) {
    if (std::find(fresh.begin(), fresh.end(), old) != fresh.end()) {
      fresh.erase(std::find(fresh.begin(), fresh.end(), old));
      free_node(old, level == 0);
    } else {
      replaced.push_back({old, tag, level == 0 ? Retired::What::Leaf : Retired::What::Inner});
    }
    --nodes;
  }
  template <class T>
  T* made(T* p) {
    fresh.push_back(p);
    ++nodes;
    return p;
  }

  // `node` with e added (e.base not present, nothing overlapping it).
  const void* insert(const void* node, unsigned level, const LiveEntry& e, Split* split) {
    if (level == 0) return insert_leaf(as_leaf(node), e, split);
    const Inner* old = as_inner(node);
    const int i = std::max(0, last_le<kInnerFan>(old->key, e.base));
    Split sub;
    const void* c = insert(old->child[i], level - 1, e, &sub);
    std::uint64_t keys[kInnerFan + 1];
    const void* kids[kInnerFan + 1];
    std::uint32_t n = 0;
    for (std::uint32_t j = 0; j < old->n; ++j) {
      keys[n] = j == static_cast<std::uint32_t>(i) ? first_key(c, level - 1) : old->key[j];
      kids[n++] = j == static_cast<std::uint32_t>(i) ? c : old->child[j];
      if (j == static_cast<std::uint32_t>(i) && sub.right != nullptr) keys[n] = sub.key, kids[n++] = sub.right;
    }
    retire(old, level);
    return fill_inner(keys, kids, n, split);
  }

  const void* insert_leaf(const Leaf* old, const LiveEntry& e, Split* split) {
    const std::uint32_t at = static_cast<std::uint32_t>(last_le<kLeafFan>(old->key, e.base) + 1);
    LiveEntry es[kLeafFan + 1];
    std::uint32_t n = 0;
    for (std::uint32_t j = 0; j < old->n; ++j) {
      if (j == at) es[n++] = e;
      es[n++] = old->entry[j];
    }
    if (at == old->n) es[n++] = e;
    retire(old, 0);
    return fill_leaf(es, n, split);
  }

  const void* fill_leaf(const LiveEntry* es, std::uint32_t n, Split* split) {
    const std::uint32_t left = n <= kLeafFan ? n : n / 2;
    Leaf* a = made(new_leaf());
    for (std::uint32_t j = 0; j < left; ++j) a->key[j] = es[j].base, a->entry[j] = es[j];
    a->n = left;
    if (left < n) {
      Leaf* b = made(new_leaf());
      for (std::uint32_t j = left; j < n; ++j) b->key[j - left] = es[j].base, b->entry[j - left] = es[j];
      b->n = n - left;
      *split = Split{b, b->key[0]};
    }
    return a;
  }

  const void* fill_inner(const std::uint64_t* keys, const void* const* kids, std::uint32_t n, Split* split) {
    const std::uint32_t left = n <= kInnerFan ? n : n / 2;
    Inner* a = made(new_inner());
    for (std::uint32_t j = 0; j < left; ++j) a->key[j] = keys[j], a->child[j] = kids[j];
    a->n = left;
    if (left < n) {
      Inner* b = made(new_inner());
      for (std::uint32_t j = left; j < n; ++j) b->key[j - left] = keys[j], b->child[j - left] = kids[j];
      b->n = n - left;
      *split = Split{b, b->key[0]};
    }
    return a;
  }

  // `node` without the entry at `base` (present); nullptr when nothing is left.
  const void* remove(const void* node, unsigned level, std::uint64_t base) {
    if (level == 0) {
      const Leaf* old = as_leaf(node);
      const int at = last_le<kLeafFan>(old->key, base);
      LiveEntry es[kLeafFan];
      std::uint32_t n = 0;
      for (std::uint32_t j = 0; j < old->n; ++j)
        if (static_cast<int>(j) != at) es[n++] = old->entry[j];
      retire(old, 0);
      Split none;
      return n == 0 ? nullptr : fill_leaf(es, n, &none);
    }
    const Inner* old = as_inner(node);
    const int i = last_le<kInnerFan>(old->key, base);
    const void* c = remove(old->child[i], level - 1, base);
    std::uint64_t keys[kInnerFan];
    const void* kids[kInnerFan];
    std::uint32_t n = 0;
    for (std::uint32_t j = 0; j < old->n; ++j) {
      if (static_cast<int>(j) != i) keys[n] = old->key[j], kids[n++] = old->child[j];
      else if (c != nullptr) keys[n] = first_key(c, level - 1), kids[n++] = c;
    }
    retire(old, level);
    Split none;
    return n == 0 ? nullptr : fill_inner(keys, kids, n, &none);
  }
};

LiveMap::LiveMap(RingPool& pool) : pool_(pool), mu_(new std::mutex) {
  current_.store(new Snapshot, std::memory_order_release);
}

LiveMap::~LiveMap() {
  const Snapshot* s = current_.load();
  free_tree(s->root, s->height);
  delete s;
  for (const Retired& r : retired_) {
    if (r.what == Retired::What::Snapshot) delete static_cast<const Snapshot*>(r.object);
    else free_node(r.object, r.what == Retired::What::Leaf);
  }
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

void LiveMap::insert_one(const LiveEntry& e) {
  const Snapshot* cur = current_.load(std::memory_order_relaxed);
  std::vector<Retired> replaced;
  Path path{replaced, cur->version + 1, nodes_, {}};
  const void* root;
  unsigned height = cur->height;
  if (cur->root == nullptr) {
    Split none;
    root = path.fill_leaf(&e, 1, &none);
  } else {
    Split split;
    root = path.insert(cur->root, height, e, &split);
    if (split.right != nullptr) {  // the root overflowed: a new level
      const std::uint64_t keys[2] = {first_key(root, height), split.key};
      const void* kids[2] = {root, split.right};
      Split none;
      root = path.fill_inner(keys, kids, 2, &none);
      ++height;
    }
  }
  publish(root, height, replaced);
}

void LiveMap::remove_one(std::uint64_t base) {
  const Snapshot* cur = current_.load(std::memory_order_relaxed);
  std::vector<Retired> replaced;
  Path path{replaced, cur->version + 1, nodes_, {}};
  const void* root = path.remove(cur->root, cur->height, base);
  unsigned height = root == nullptr ? 0 : cur->height;
  while (height > 0 && as_inner(root)->n == 1) {  // a root with one child: one level less
    const void* only = as_inner(root)->child[0];
    path.retire(root, height);
    root = only;
    --height;
  }
  publish(root, height, replaced);
}

void LiveMap::publish(const void* root, unsigned height, std::vector<Retired>& replaced) {
  const Snapshot* old = current_.load(std::memory_order_relaxed);
  auto* s = new Snapshot;
  s->root = root;
  s->height = height;
  s->n = entries_.size();
  s->version = old->version + 1;
  if (root != nullptr) {
    s->lo = first_key(root, height);
    s->hi = last_end(root, height);
  }
  current_.store(s, std::memory_order_seq_cst);
  replaced.push_back({old, s->version, Retired::What::Snapshot});
  const std::size_t before = retired_.size();
  retired_.insert(retired_.end(), replaced.begin(), replaced.end());
  if (retired_.size() / kReclaimEvery != before / kReclaimEvery) reclaim();
}

void LiveMap::reclaim() {
  if (!pool_.ready()) {  // no slots, no readers: nothing can be pinned
    for (const Retired& r : retired_) {
      if (r.what == Retired::What::Snapshot) delete static_cast<const Snapshot*>(r.object);
      else free_node(r.object, r.what == Retired::What::Leaf);
    }
    retired_.clear();
    return;
  }
  std::vector<const void*> hazards;
  for (std::uint32_t i = 0; i < pool_.size(); ++i)
    if (const void* h = pool_.slot(i).hazard.load(std::memory_order_seq_cst)) hazards.push_back(h);
  std::sort(hazards.begin(), hazards.end());
  // Retired snapshots a reader still names (compared by address: a hazard is never
  // dereferenced, it may name something long freed); every other one can go.
  std::vector<const Snapshot*> pinned;
  std::uint64_t oldest = ~std::uint64_t{0};
  for (const Retired& r : retired_) {
    if (r.what != Retired::What::Snapshot || !std::binary_search(hazards.begin(), hazards.end(), r.object)) continue;
    pinned.push_back(static_cast<const Snapshot*>(r.object));
    oldest = std::min(oldest, pinned.back()->version);
  }
  std::size_t keep = 0;
  for (const Retired& r : retired_) {
    const bool is_pinned = r.what == Retired::What::Snapshot &&
                           std::find(pinned.begin(), pinned.end(), r.object) != pinned.end();
    // A node replaced by version `tag` is reachable from versions below it only.
    const bool reachable = r.what != Retired::What::Snapshot && r.tag > oldest;
    if (is_pinned || reachable) {
      retired_[keep++] = r;
    } else if (r.what == Retired::What::Snapshot) {
      delete static_cast<const Snapshot*>(r.object);
    } else {
      free_node(r.object, r.what == Retired::What::Leaf);
    }
  }
  retired_.resize(keep);
  if (retired_.size() > walk_above_) {
    free_unreachable(pinned);
    walk_above_ = std::max<std::size_t>(4096, 2 * (retired_.size() + nodes_));
  }
}

// An idle thread's old snapshot keeps every node retired since by the version rule; free
// those its tree (or another pinned one) does not actually reach.
void LiveMap::free_unreachable(const std::vector<const Snapshot*>& pinned) {
  std::unordered_set<const void*> reachable;
  for (const Snapshot* s : pinned) collect(s->root, s->height, reachable);
  std::size_t keep = 0;
  for (const Retired& r : retired_) {
    if (r.what == Retired::What::Snapshot || reachable.count(r.object) != 0) retired_[keep++] = r;
    else free_node(r.object, r.what == Retired::What::Leaf);
  }
  retired_.resize(keep);
}

std::size_t LiveMap::insert(const LiveEntry& e, LiveEntry* evicted, std::size_t cap) {
  std::lock_guard<std::mutex> lock(*mu_);
  std::size_t n_evicted = 0;
  // Stale entries overlapping [base, end): the one starting below base that reaches over it,
  // then every one starting inside.
  auto it = entries_.lower_bound(e.base);
  if (it != entries_.begin() && std::prev(it)->second.end > e.base) --it;
  while (it != entries_.end() && it->second.base < e.end) {
    if (n_evicted < cap) evicted[n_evicted] = it->second;
    ++n_evicted;
    const std::uint64_t base = it->first;
    it = entries_.erase(it);
    remove_one(base);
  }
  entries_.emplace(e.base, e);
  insert_one(e);
  return std::min(n_evicted, cap);
}

bool LiveMap::remove(std::uint64_t base, LiveEntry* out) {
  std::lock_guard<std::mutex> lock(*mu_);
  auto it = entries_.find(base);
  if (it == entries_.end()) return false;
  if (out != nullptr) *out = it->second;
  entries_.erase(it);
  remove_one(base);
  return true;
}

std::size_t LiveMap::remove_range(std::uint64_t lo, std::uint64_t hi, LiveEntry* out, std::size_t cap) {
  std::lock_guard<std::mutex> lock(*mu_);
  std::size_t n = 0;
  for (auto it = entries_.lower_bound(lo); it != entries_.end() && it->first < hi;) {
    if (n < cap) out[n] = it->second;
    ++n;
    const std::uint64_t base = it->first;
    it = entries_.erase(it);
    remove_one(base);
  }
  return std::min(n, cap);
}

std::size_t LiveMap::size() const {
  std::lock_guard<std::mutex> lock(*mu_);
  return entries_.size();
}

std::size_t LiveMap::retired() const {
  std::lock_guard<std::mutex> lock(*mu_);
  return retired_.size();
}

void LiveMap::reset_after_fork() {
  mu_ = new (std::nothrow) std::mutex;  // the old one may be locked forever; leak it
  retired_.clear();                     // leaked: a parent thread may have been reading
}

}  // namespace capuchin::interpose
