// victim_index.hpp: the executor's blocks on the device grouped by span, each group in the
// order of their last use, so that a shortage finds the passive order's next victim
// (policy::better_victim over swap-priced candidates, victims.hpp) by looking at the first
// blocks of each group instead of pricing every block on the device. Under pressure a shortage
// came about 25 times per mobilenet_v2 iteration and priced about 440 blocks each time; those
// blocks had about 16 spans.
//
// Why it is exact: a swap candidate's key is (fixed + span x per_byte) / (span x idle). Within
// one span it never rises as idle grows (the product's rounding is monotone), so a group's
// blocks in ascending last_tick are in ascending key, and equal keys are neighbours there. The
// handle breaks their tie: blocks of one tick are ordered by it (a multi-tensor launch gives
// hundreds of parameters one tick), and blocks of different ticks have different keys but where
// idle is clamped or huge (best_of compares such a run whole). A drop is priced by its
// producer's measured time, block by block: start_victims prices every block the old way when a
// drop is possible.
//
// Contract: once started, a block is indexed exactly while the Ledger has it on the device or
// coming in (Ledger calls add and remove); its last_tick changes only through Ledger::touch (which calls touched)
// or touch_all (reorder); its span does not change while indexed. Under the executor's lock,
// like the blocks. Allocates only while its nodes or spans outgrow their capacity, and in reorder.
#pragma once

#include <algorithm>
#include <cstdint>
#include <type_traits>
#include <vector>

#include "block.hpp"
#include "capuchin/flat_map.hpp"
#include "capuchin/victims.hpp"

namespace capuchin::interpose::exec {

// What moving a block out and back costs, per start_victims' link rates: fixed + bytes x per_byte.
struct SwapPrice {
  double fixed = 0;
  double per_byte = 0;
};

// The candidate start_victims makes of b for a swap (the same arithmetic, so the same key).
inline policy::VictimCandidate swap_candidate(const Block& b, SwapPrice price, std::uint64_t now) {
  const std::uint64_t idle = now - std::min(now, b.last_tick) + 1;
  const double swap = price.fixed + static_cast<double>(b.span) * price.per_byte;
  policy::VictimCandidate c{b.id, b.span, idle, swap, false};
  c.key = policy::victim_key(c);
  return c;
}

// The candidate a shortage that prices every block makes of b: a swap, or a drop where the
// shortage allows drops (the caller may wait, streams are idle, the plan allows them), b has a
// producer, and drop_cost(b, swap seconds) prices the drop (>= 0: Executor::pressure_drop_cost).
template <class DropCost>
policy::VictimCandidate priced_candidate(const Block& b, SwapPrice price, std::uint64_t now, bool drops, DropCost&& drop_cost) {
  policy::VictimCandidate c = swap_candidate(b, price, now);
  if (!drops || !b.producer) return c;  // no producer: no drop (the cheap test inline)
  if (const double drop = drop_cost(b, c.restore_s); drop >= 0) {
    c.restore_s = drop;
    c.drop = true;
    c.key = policy::victim_key(c);
  }
  return c;
}

class VictimIndex {
 public:
  // Off until start(): a use costs a relink here, which pays only where shortages price many
  // blocks (Executor::start_victims starts it once one priced kWorthFrom candidates; perf,
  // steady pressure at 0.5x: mobilenet_v2's shortages priced about 440, and the index took the
  // shortages' share of the job's thread from 0.37-0.55 to 0.21-0.25 of the program's own
  // samples; resnet18's and tiny_transformer's priced about 120 and 95, where the relinks cost
  // more than the pricing saved).
  static constexpr std::size_t kWorthFrom = 256;
  bool on() const { return on_; }
  // Indexes `blocks` (those on the device or coming in; each span's group sorted once) and
  // every block add() is given from now on.
  void start(const std::vector<Block*>& blocks);
  void add(Block& b);      // b is on the device or coming in now (nothing while off)
  void remove(Block& b);   // b is no longer on the device nor coming in (nothing when not indexed)
  // b.last_tick changed (nothing when b is not indexed). Inline: every use of a block on the
  // device under pressure comes here, and most move it to the newest end of its group.
  void touched(Block& b) {
    const std::uint32_t n = b.victim_node;
    if (n == kNone) return;
    Node& node = nodes_[n];
    node.tick = b.last_tick;
    node.order_id = b.id;
    if (groups_[node.group].last != n || (node.prev != kNone && !before(node.prev, node.tick, node.order_id))) relink(n);
  }
  void reorder();          // many blocks' last_tick changed: every group sorted again
  std::size_t size() const { return nodes_.size() - free_.size(); }

  // The best victim by policy::better_victim among the indexed blocks `eligible` accepts, each
  // priced as a swap at `now`; null when it accepts none.
  template <class F>
  Block* best(SwapPrice price, std::uint64_t now, F&& eligible) const {
    using Fn = std::remove_reference_t<F>;
    return best_of([](const void* f, const Block& b) { return (*static_cast<const Fn*>(f))(b); }, &eligible, price, now);
  }

  // Every group's blocks in order (tests): f(span, blocks least recently used first).
  template <class F>
  void for_each_group(F&& f) const {
    for (std::uint32_t g : active_) {
      std::vector<const Block*> in_order;
      for (std::uint32_t n = groups_[g].first; n != kNone; n = nodes_[n].next) in_order.push_back(nodes_[n].block);
      f(groups_[g].span, in_order);
    }
  }

 private:
  static constexpr std::uint32_t kNone = ~0u;
  // A block's place, apart from the block: a use relinks it among its neighbours' nodes, a few
  // kilobytes in all, where relinking the blocks themselves (hundreds of bytes each, scattered)
  // missed the cache at every neighbour.
  struct Node {
    Block* block = nullptr;
    std::uint64_t tick = 0;      // block->last_tick when placed
    std::uint64_t order_id = 0;  // block->id when placed (the order's tie-break)
    std::uint32_t prev = kNone, next = kNone, group = kNone;
  };
  struct Group {
    std::uint64_t span = 0;
    std::uint32_t first = kNone;  // the least recently used
    std::uint32_t last = kNone;
    std::uint32_t count = 0;
    std::uint32_t active_slot = kNone;  // its place in active_ while it has blocks
  };
  using Accepts = bool (*)(const void*, const Block&);
  Block* best_of(Accepts accepts, const void* ctx, SwapPrice price, std::uint64_t now) const;
  static bool distinct_keys(std::uint64_t span, std::uint64_t idle);
  std::uint32_t group_for(std::uint64_t span);
  std::uint32_t make_node(Block& b);  // b's node, in its group's count but not linked
  // Whether node x goes before a block of (tick, id): by last use, then by the handle at the
  // time (a freed block's id changes while it is listed; its place does not: it is no victim
  // until it is allocated again, and touched then).
  bool before(std::uint32_t x, std::uint64_t tick, std::uint64_t id) const {
    const Node& n = nodes_[x];
    return n.tick != tick ? n.tick < tick : n.order_id <= id;
  }
  void relink(std::uint32_t n);  // unlink, link
  void append(std::uint32_t n);  // at its group's newest end, whatever its tick (start, reorder)
  void link(std::uint32_t n);  // at its place by (tick, order_id), from the nearer end
  void unlink(std::uint32_t n);

  std::vector<Node> nodes_;
  std::vector<std::uint32_t> free_;   // nodes_ slots unused
  std::vector<Group> groups_;
  FlatMap<std::uint32_t> group_of_;   // span -> groups_ index
  std::vector<std::uint32_t> active_;  // groups with blocks
  bool on_ = false;
};

}  // namespace capuchin::interpose::exec
