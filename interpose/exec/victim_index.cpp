// victim_index.cpp: see victim_index.hpp.
#include "victim_index.hpp"

namespace capuchin::interpose::exec {

std::uint32_t VictimIndex::group_for(std::uint64_t span) {
  if (const std::uint32_t* g = group_of_.find(span)) return *g;
  const auto g = static_cast<std::uint32_t>(groups_.size());
  groups_.push_back(Group{span});
  group_of_.try_emplace(span, g);
  return g;
}

void VictimIndex::add(Block& b) {
  if (b.use_group != kNoGroup) return;  // indexed already
  const std::uint32_t gi = group_for(b.span);
  Group& g = groups_[gi];
  b.use_group = gi;
  link(g, b);
  if (g.count++ == 0) {
    g.active_slot = static_cast<std::uint32_t>(active_.size());
    active_.push_back(gi);
  }
  ++size_;
}

void VictimIndex::remove(Block& b) {
  if (b.use_group == kNoGroup) return;
  Group& g = groups_[b.use_group];
  unlink(g, b);
  b.use_group = kNoGroup;
  --size_;
  if (--g.count != 0) return;
  const std::uint32_t moved = active_.back();  // the emptied group leaves active_ (swap with the last)
  active_[g.active_slot] = moved;
  groups_[moved].active_slot = g.active_slot;
  active_.pop_back();
  g.active_slot = kNoGroup;
}

namespace {
// The group order: last use, then the handle at the time (a freed block's id changes while it
// is listed; its place does not: it is no victim until allocated again, and touched then).
bool before(const Block& x, std::uint64_t tick, std::uint64_t id) {
  return x.last_tick != tick ? x.last_tick < tick : x.use_order_id <= id;
}
}  // namespace

void VictimIndex::touched(Block& b) {
  if (b.use_group == kNoGroup) return;
  Group& g = groups_[b.use_group];
  if (&b == g.last && b.use_order_id == b.id && (b.by_use_prev == nullptr || before(*b.by_use_prev, b.last_tick, b.id)))
    return;  // the newest still
  unlink(g, b);
  link(g, b);
}

// A use makes b the newest (one step from the newest end; a launch's blocks share its tick, and
// a multi-tensor launch's come in allocation order, mostly); a block coming back to the device
// keeps the tick of its last use, usually an old one: the walk starts at the nearer end.
void VictimIndex::link(Group& g, Block& b) {
  const std::uint64_t t = b.last_tick, id = b.id;
  b.use_order_id = id;
  Block* after = nullptr;  // b goes right after this one (null: first)
  if (g.last != nullptr && before(*g.last, t, id)) {
    after = g.last;
  } else if (g.first != nullptr && t - std::min(t, g.first->last_tick) < g.last->last_tick - t) {
    for (Block* x = g.first; x != nullptr && before(*x, t, id); x = x->by_use_next) after = x;
  } else {
    after = g.last;
    while (after != nullptr && !before(*after, t, id)) after = after->by_use_prev;
  }
  Block* before = after != nullptr ? after->by_use_next : g.first;
  b.by_use_prev = after;
  b.by_use_next = before;
  (after != nullptr ? after->by_use_next : g.first) = &b;
  (before != nullptr ? before->by_use_prev : g.last) = &b;
}

void VictimIndex::unlink(Group& g, Block& b) {
  (b.by_use_prev != nullptr ? b.by_use_prev->by_use_next : g.first) = b.by_use_next;
  (b.by_use_next != nullptr ? b.by_use_next->by_use_prev : g.last) = b.by_use_prev;
  b.by_use_prev = b.by_use_next = nullptr;
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
    for (Block* b = groups_[gi].first; b != nullptr; b = b->by_use_next) {
      if (!accepts(ctx, *b)) continue;
      const policy::VictimCandidate c = swap_candidate(*b, price, now);
      if (pick != nullptr && c.key > pick_c.key) break;
      if (pick == nullptr || policy::better_victim(c, pick_c)) pick = b, pick_c = c;
      // The first accepted block is the group's best where no later block can have its key:
      // the later ones of its tick have larger handles (the order), and those of later ticks
      // have other keys (distinct_keys). Else (a clock set back, idle in the billions) the
      // run of its key is compared whole.
      if (b == pick && b->use_order_id == b->id && b->last_tick < now && distinct_keys(b->span, c.idle)) break;
    }
    if (pick != nullptr && (best == nullptr || policy::better_victim(pick_c, best_c))) best = pick, best_c = pick_c;
  }
  return best;
}

}  // namespace capuchin::interpose::exec
