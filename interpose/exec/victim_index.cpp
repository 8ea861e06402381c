// victim_index.cpp: see victim_index.hpp.
#include "victim_index.hpp"

#include <algorithm>

namespace capuchin::interpose::exec {

std::uint32_t VictimIndex::group_for(std::uint64_t span) {
  if (const std::uint32_t* g = group_of_.find(span)) return *g;
  const auto g = static_cast<std::uint32_t>(groups_.size());
  groups_.push_back(Group{span});
  group_of_.try_emplace(span, g);
  return g;
}

void VictimIndex::start(const std::vector<Block*>& blocks) {
  on_ = true;
  for (Block* b : blocks) {
    if ((b->where != Where::Device && b->where != Where::Incoming) || b->victim_node != kNone) continue;
    append(make_node(*b));  // in no order: reorder() sorts each group once
  }
  reorder();
}

void VictimIndex::add(Block& b) {
  if (!on_ || b.victim_node != kNone) return;  // off, or indexed already
  link(make_node(b));
}

std::uint32_t VictimIndex::make_node(Block& b) {
  std::uint32_t n = 0;
  if (free_.empty()) {
    n = static_cast<std::uint32_t>(nodes_.size());
    nodes_.emplace_back();
  } else {
    n = free_.back();
    free_.pop_back();
  }
  const std::uint32_t gi = group_for(b.span);
  nodes_[n] = Node{&b, b.last_tick, b.id, kNone, kNone, gi};
  b.victim_node = n;
  Group& g = groups_[gi];
  if (g.count++ == 0) {
    g.active_slot = static_cast<std::uint32_t>(active_.size());
    active_.push_back(gi);
  }
  return n;
}

void VictimIndex::remove(Block& b) {
  const std::uint32_t n = b.victim_node;
  if (n == kNone) return;
  Group& g = groups_[nodes_[n].group];
  unlink(n);
  nodes_[n].block = nullptr;
  free_.push_back(n);
  b.victim_node = kNone;
  if (--g.count != 0) return;
  const std::uint32_t moved = active_.back();  // the emptied group leaves active_ (swap with the last)
  active_[g.active_slot] = moved;
  groups_[moved].active_slot = g.active_slot;
  active_.pop_back();
  g.active_slot = kNone;
}

// Moved from where it was to its place by its new use: usually the newest end.
void VictimIndex::relink(std::uint32_t n) {
  unlink(n);
  link(n);
}

void VictimIndex::reorder() {
  std::vector<std::uint32_t> members;
  for (std::uint32_t gi : active_) {
    Group& g = groups_[gi];
    members.clear();
    for (std::uint32_t n = g.first; n != kNone; n = nodes_[n].next) {
      nodes_[n].tick = nodes_[n].block->last_tick;
      nodes_[n].order_id = nodes_[n].block->id;
      members.push_back(n);
    }
    std::sort(members.begin(), members.end(), [&](std::uint32_t x, std::uint32_t y) {
      return nodes_[x].tick != nodes_[y].tick ? nodes_[x].tick < nodes_[y].tick : nodes_[x].order_id < nodes_[y].order_id;
    });
    g.first = g.last = kNone;
    for (std::uint32_t n : members) append(n);
  }
}

void VictimIndex::append(std::uint32_t n) {
  Node& node = nodes_[n];
  Group& g = groups_[node.group];
  node.prev = g.last;
  node.next = kNone;
  (g.last != kNone ? nodes_[g.last].next : g.first) = n;
  g.last = n;
}

// A use makes a block the newest (one step from the newest end; a launch's blocks share its
// tick, and a multi-tensor launch's come in allocation order, mostly); a block coming back to
// the device keeps the tick of its last use, usually an old one: the walk starts at the nearer end.
void VictimIndex::link(std::uint32_t n) {
  Node& node = nodes_[n];
  Group& g = groups_[node.group];
  const std::uint64_t t = node.tick, id = node.order_id;
  std::uint32_t after = kNone;  // n goes right after this one (kNone: first)
  if (g.last != kNone && before(g.last, t, id)) {
    after = g.last;
  } else if (g.first != kNone && t - std::min(t, nodes_[g.first].tick) < nodes_[g.last].tick - t) {
    for (std::uint32_t x = g.first; x != kNone && before(x, t, id); x = nodes_[x].next) after = x;
  } else {
    after = g.last;
    while (after != kNone && !before(after, t, id)) after = nodes_[after].prev;
  }
  const std::uint32_t next = after != kNone ? nodes_[after].next : g.first;
  node.prev = after;
  node.next = next;
  (after != kNone ? nodes_[after].next : g.first) = n;
  (next != kNone ? nodes_[next].prev : g.last) = n;
}

void VictimIndex::unlink(std::uint32_t n) {
  Node& node = nodes_[n];
  Group& g = groups_[node.group];
  (node.prev != kNone ? nodes_[node.prev].next : g.first) = node.next;
  (node.next != kNone ? nodes_[node.next].prev : g.last) = node.prev;
  node.prev = node.next = kNone;
}

// Whether every idle below `idle` gives a span's swap another key than `idle` does: the key is
// restore / (span x idle), and where span x idle is below 2^52 the products are exact integers
// whose ratios (at least 1 + 1/idle) exceed the two roundings' error.
bool VictimIndex::distinct_keys(std::uint64_t span, std::uint64_t idle) {
  constexpr std::uint64_t kExact = std::uint64_t{1} << 52;
  return idle < kExact && span < kExact / idle;
}

Block* VictimIndex::best_of(Accepts accepts, const void* ctx, SwapPrice price, std::uint64_t now) const {
  Block* best = nullptr;
  policy::VictimCandidate best_c;
  for (std::uint32_t gi : active_) {
    // The group's first accepted block, or the smallest handle among the accepted blocks with
    // its key (a run: keys ascend along the group).
    Block* pick = nullptr;
    policy::VictimCandidate pick_c;
    for (std::uint32_t n = groups_[gi].first; n != kNone; n = nodes_[n].next) {
      Block* const b = nodes_[n].block;
      if (!accepts(ctx, *b)) continue;
      const policy::VictimCandidate c = swap_candidate(*b, price, now);
      if (pick != nullptr && c.key > pick_c.key) break;
      if (pick == nullptr || policy::better_victim(c, pick_c)) pick = b, pick_c = c;
      // The first accepted block is the group's best where no later block can have its key:
      // the later ones of its tick have larger handles (the order), and those of later ticks
      // have other keys (distinct_keys). Else (a clock set back, idle in the billions) the
      // run of its key is compared whole.
      if (b == pick && nodes_[n].order_id == b->id && b->last_tick < now && distinct_keys(b->span, c.idle)) break;
    }
    if (pick != nullptr && (best == nullptr || policy::better_victim(pick_c, best_c))) best = pick, best_c = pick_c;
  }
  return best;
}

}  // namespace capuchin::interpose::exec
