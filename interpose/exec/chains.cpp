// chains.cpp: recomputation chains among dropped blocks (see chains.hpp).
#include "chains.hpp"

#include <algorithm>
#include <utility>
#include <vector>

namespace capuchin::interpose::exec::chains {

namespace {

// One walk over dropped blocks: each block's result is worked out once, however many chains
// share it (a concatenation of dropped branches), and looked up in a list: the work grows with
// the square of the dropped blocks reached, not with the number of paths to them. A block
// being walked holds kWalking: met again, the walk has gone round a cycle.
using Memo = std::vector<std::pair<const Block*, int>>;
constexpr int kWalking = -2;
constexpr int kTooTall = kMaxChain + 1;

const int* memo_find(const Memo& m, const Block* b) {
  for (const auto& [k, v] : m)
    if (k == b) return &v;
  return nullptr;
}

// The longest chain of dropped inputs under b, exact (see dropped_under); -1 when b
// cannot be recomputed, a cycle, or a chain deeper than kMaxChain (each step down is one more
// dropped block, so `depth` past it means a chain that long).
int walk_under(const BlockTable& blocks, const Block& b, const Block* dropping, int depth, Memo& memo) {
  if (depth > kMaxChain) return -1;
  const Producer* p = b.producer.get();
  if (p == nullptr || p->func == nullptr) return -1;
  int most = 0;
  for (const ProducerInput& x : p->inputs) {
    const Block* in = blocks.by_id(x.id);
    if (in == nullptr || in->version != x.version || in == dropping) return -1;
    if (in->where != Where::Dropped || co_output(*in, *p)) continue;  // there, or written by the same replay
    int under = 0;
    if (const int* known = memo_find(memo, in)) {
      under = *known == kWalking ? -1 : *known;
    } else {
      memo.emplace_back(in, kWalking);
      const std::size_t slot = memo.size() - 1;
      under = walk_under(blocks, *in, dropping, depth + 1, memo);
      memo[slot].second = under;
    }
    if (under < 0) return -1;
    most = std::max(most, under + 1);
  }
  return most;
}

// The longest chain of dropped dependents over b, exact up to kTooTall (also for a cycle: the
// dependents lists can hold entries of earlier drops). A dropped output of b's own launch is
// on b's level (one replay writes both); from it (`co_hop`) only dependents of other launches
// are followed, the launch's outputs being b's dependents already. Two steps of `depth` add
// one dropped block at least, so past twice kMaxChain the chain is too tall.
int walk_over(const BlockTable& blocks, const Block& b, bool co_hop, int depth, Memo& memo, Memo& co_memo) {
  if (depth > 2 * kMaxChain + 2) return kTooTall;
  int most = 0;
  for (std::uint64_t id : b.dependents) {
    const Block* d = blocks.by_id(id);
    if (d == nullptr || d->where != Where::Dropped) continue;
    const bool co = b.producer != nullptr && co_output(*d, *b.producer);
    if (co && co_hop) continue;
    Memo& m = co ? co_memo : memo;
    int over = 0;
    if (const int* known = memo_find(m, d)) {
      over = *known == kWalking ? kTooTall : *known;
    } else {
      m.emplace_back(d, kWalking);
      const std::size_t slot = m.size() - 1;
      over = walk_over(blocks, *d, co, depth + 1, memo, co_memo);
      m[slot].second = over;
    }
    most = std::max(most, co ? over : 1 + over);
    if (most >= kTooTall) return kTooTall;
  }
  return most;
}

// `dropping` is counted as dropped already.
std::uint64_t add_replay_bytes(const BlockTable& blocks, const Block& b, const Block* dropping, std::vector<const Block*>& seen) {
  std::uint64_t bytes = 0;
  if (std::find(seen.begin(), seen.end(), &b) == seen.end()) seen.push_back(&b), bytes += b.span;
  const Producer* p = b.producer.get();
  // A bound on the work (an optimizer's launch names hundreds of blocks): past it the count
  // is short, as it was when only direct inputs were counted.
  if (p == nullptr || seen.size() > 64 * kMaxChain) return bytes;
  for (const ProducerInput& x : p->inputs) {
    const Block* in = blocks.by_id(x.id);
    if (in == nullptr || std::find(seen.begin(), seen.end(), in) != seen.end()) continue;
    if ((in->where == Where::Dropped || in == dropping) && !co_output(*in, *p)) {
      bytes += add_replay_bytes(blocks, *in, dropping, seen);
    } else {
      seen.push_back(in);
      bytes += in->span;
    }
  }
  return bytes;
}

}  // namespace

int dropped_under(const BlockTable& blocks, const Block& b, int room, const Block* dropping) {
  Memo memo;
  const int under = walk_under(blocks, b, dropping, 0, memo);
  return under > room ? -1 : under;
}

bool input_dropped(const BlockTable& blocks, const Block& b) {
  const Producer* p = b.producer.get();
  if (p == nullptr) return false;
  for (const ProducerInput& x : p->inputs)
    if (const Block* in = blocks.by_id(x.id); in != nullptr && in->where == Where::Dropped && !co_output(*in, *p)) return true;
  return false;
}

int dropped_over(const BlockTable& blocks, const Block& b) {
  Memo memo, co_memo;
  return walk_over(blocks, b, false, 0, memo, co_memo);
}

bool allows_drop(const BlockTable& blocks, const Block& b) {
  // b counted as dropped already: a chain that leads back to it could never be recomputed.
  const int under = dropped_under(blocks, b, kMaxChain - 1, &b);
  return under >= 0 && under + 1 + dropped_over(blocks, b) <= kMaxChain;
}

std::uint64_t replay_bytes(const BlockTable& blocks, const Block& b) {
  std::vector<const Block*> seen;
  return add_replay_bytes(blocks, b, nullptr, seen);
}

namespace {

// b's replay, and those of the dropped blocks over it, each within `budget`, `dropping`
// counted as dropped.
bool walk_replays(const BlockTable& blocks, const Block& b, const Block* dropping, std::uint64_t budget, int depth,
                  std::vector<const Block*>& done) {
  if (std::find(done.begin(), done.end(), &b) != done.end()) return true;
  done.push_back(&b);
  std::vector<const Block*> seen;
  if (add_replay_bytes(blocks, b, dropping, seen) > budget) return false;
  if (depth >= kMaxChain) return true;  // deeper: refused by the chain's length
  for (std::uint64_t id : b.dependents) {
    const Block* d = blocks.by_id(id);
    if (d != nullptr && d != dropping && d->where == Where::Dropped && !walk_replays(blocks, *d, dropping, budget, depth + 1, done))
      return false;
  }
  return true;
}

}  // namespace

bool replays_fit(const BlockTable& blocks, const Block& b, std::uint64_t budget) {
  // The common case, priced for every live block on the device under pressure: no chain under b or over it.
  // Its replay then holds b and its producer's inputs (listed once each), and nothing else
  // would recompute b: no walk, no allocation.
  const Producer* p = b.producer.get();
  const bool dependent_dropped = std::any_of(b.dependents.begin(), b.dependents.end(), [&](std::uint64_t id) {
    const Block* d = blocks.by_id(id);
    return d != nullptr && d->where == Where::Dropped;
  });
  if (p != nullptr && !dependent_dropped && !input_dropped(blocks, b)) {
    std::uint64_t bytes = b.span;
    for (const ProducerInput& x : p->inputs)
      if (const Block* in = blocks.by_id(x.id); in != nullptr && in != &b) bytes += in->span;
    return bytes <= budget;
  }
  std::vector<const Block*> done;
  return walk_replays(blocks, b, &b, budget, 0, done);
}

}  // namespace capuchin::interpose::exec::chains
