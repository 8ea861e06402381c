// victim_index_test.cpp: the executor's victim index (interpose/exec/victim_index.hpp) against
// the order it replaces: every candidate priced as a swap and ranked by policy::VictimOrder.
// Blocks come and go from the device, are used, pinned and refused as the executor's do, and
// at every step the index must name the same victims in the same order.
#include <gtest/gtest.h>

#include <algorithm>
#include <memory>
#include <random>
#include <vector>

#include "capuchin/victims.hpp"
#include "exec/block.hpp"
#include "exec/ledger.hpp"
#include "exec/victim_index.hpp"

namespace capuchin::interpose::exec {
namespace {

const SwapPrice kPrice{3e-6, 1.0 / 25e9 + 1.0 / 25e9};

bool eligible(const Block& b) { return b.live && b.pins == 0 && b.where == Where::Device; }

// The order start_victims used: every charged eligible block priced, then VictimOrder.
std::vector<const Block*> priced_order(const Ledger& ledger, std::uint64_t now, std::size_t n) {
  std::vector<policy::VictimCandidate> cand;
  for (Block* b : ledger.charged_blocks())
    if (eligible(*b)) cand.push_back(swap_candidate(*b, kPrice, now));
  std::vector<const Block*> out;
  for (policy::VictimOrder order(cand, policy::VictimOrder::KeysSet{}); !order.done() && out.size() < n;) {
    const std::uint64_t id = order.next().handle;
    for (Block* b : ledger.charged_blocks())
      if (b->id == id) out.push_back(b);
  }
  return out;
}

// The index's order: best() again and again, each pick refused afterwards (as a shortage does).
std::vector<const Block*> index_order(const Ledger& ledger, std::uint64_t now, std::size_t n) {
  std::vector<const Block*> out;
  auto accepts = [&](const Block& b) { return eligible(b) && std::find(out.begin(), out.end(), &b) == out.end(); };
  while (out.size() < n) {
    const Block* b = ledger.victims().best(kPrice, now, accepts);
    if (b == nullptr) break;
    out.push_back(b);
  }
  return out;
}

// Along each group, last_tick never falls, every charged block is in exactly one group of its
// span, and no other block is.
void expect_consistent(const Ledger& ledger, int step) {
  std::size_t seen = 0;
  ledger.victims().for_each_group([&](std::uint64_t span, const std::vector<const Block*>& in_order) {
    ASSERT_FALSE(in_order.empty()) << "step " << step;
    for (std::size_t i = 0; i < in_order.size(); ++i) {
      const Block* b = in_order[i];
      ASSERT_EQ(b->span, span) << "step " << step;
      ASSERT_TRUE(b->where == Where::Device || b->where == Where::Incoming) << "step " << step;
      if (i + 1 < in_order.size()) {
        const Block* next = in_order[i + 1];
        ASSERT_LE(b->last_tick, next->last_tick) << "step " << step;
        if (b->last_tick == next->last_tick && b->live && next->live)
          ASSERT_LT(b->id, next->id) << "step " << step;  // one tick's blocks by id
      }
      ++seen;
    }
  });
  std::size_t movable = 0;  // on the device or coming in: what the index holds of the charged
  for (const Block* b : ledger.charged_blocks()) movable += b->where == Where::Device || b->where == Where::Incoming;
  ASSERT_EQ(seen, movable) << "step " << step;
  ASSERT_EQ(ledger.victims().size(), seen) << "step " << step;
}

TEST(VictimIndex, NamesTheVictimsOfThePricedOrderUnderRandomUse) {
  Ledger ledger;  // started after a while (as start_victims starts it), with blocks in place
  std::vector<std::unique_ptr<Block>> blocks;
  std::mt19937_64 rng(11);
  const std::uint64_t spans[] = {512, 4096, 4096 * 3, 1 << 20, 1 << 20, 7u << 20, 64u << 20};
  for (int i = 0; i < 300; ++i) {
    blocks.push_back(std::make_unique<Block>());
    Block& b = *blocks.back();
    b.span = spans[rng() % std::size(spans)];
    b.id = 1000 + static_cast<std::uint64_t>(i) * 7 % 300;  // ids not in creation order
    b.live = rng() % 8 != 0;
    if (!b.live) b.id = kNoBlockId;
  }
  std::uint64_t now = 1, next_id = 2000;
  std::size_t compared = 0, ties = 0, touched_all = 0;
  const Where states[] = {Where::Device, Where::Device, Where::Device, Where::Incoming, Where::Evicting, Where::Host};
  for (int step = 0; step < 6000; ++step) {
    Block& b = *blocks[rng() % blocks.size()];
    switch (rng() % 8) {
      case 0: case 1: case 2:  // a launch uses it (several blocks share a tick: ties by id)
        ledger.touch(b, now);
        if (rng() % 3 != 0) ++now;
        break;
      case 3:  // moved in or out
        ledger.move(b, states[rng() % std::size(states)]);
        break;
      case 4:  // pinned by a call in flight, or let go
        b.pins = b.pins == 0 ? 1 : 0;
        break;
      case 5:  // freed (its id goes), or allocated again (a new id, used at once)
        if (b.live) {
          b.live = false;
          b.id = kNoBlockId;
        } else {
          b.live = true;
          b.id = next_id++;
          ledger.touch(b, now);
        }
        break;
      case 6:  // an old tick (a clock started anew: idle 1 for every block used since), or
               // every live block used at once (the executor's wake from standing by)
        if (rng() % 50 == 0) now = now / 2 + 1;
        if (rng() % 100 == 0) {
          ledger.touch_all([&](auto&& f) { for (auto& x : blocks) if (x->live) f(*x); }, now);
          ++touched_all;
        }
        break;
      default:
        if (rng() % 10 == 0) ledger.forget(b), b.where = Where::Fresh;
    }
    if (step == 500) ledger.index_victims();
    if (step < 500) {
      ASSERT_EQ(ledger.victims().size(), 0u);  // off: nothing indexed
      continue;
    }
    expect_consistent(ledger, step);
    if (step % 7 != 0) continue;
    const auto want = priced_order(ledger, now, 12);
    const auto got = index_order(ledger, now, 12);
    ASSERT_EQ(got, want) << "step " << step;
    compared += want.size();
    for (std::size_t i = 1; i < want.size(); ++i)
      ties += swap_candidate(*want[i], kPrice, now).key == swap_candidate(*want[i - 1], kPrice, now).key;
  }
  EXPECT_GT(compared, 5000u);  // not vacuous: victims were compared at most steps
  EXPECT_GT(ties, 50u);        // and equal keys (broken by the handle) among them
  EXPECT_GT(touched_all, 3u);
}

// A shortage that forbids drops (its caller may not wait, streams are busy, the plan followed
// was made without them) prices none, producer or not; one that allows them prices a drop for a
// block with a producer, and takes it where it is priced (>= 0). (start_victims_priced priced
// drops whatever the shortage allowed, once every shortage before the index started went there.)
TEST(VictimIndex, AShortageThatForbidsDropsPricesNone) {
  Block b;
  b.span = 1 << 20;
  b.id = 7;
  b.last_tick = 10;
  ProducerPool pool;
  pool.hand(b.producer, pool.take());
  int asked = 0;
  auto drop_cost = [&](const Block&, double swap_s) { return ++asked, swap_s / 4; };
  const policy::VictimCandidate forbidden = priced_candidate(b, kPrice, 100, /*drops=*/false, drop_cost);
  EXPECT_EQ(asked, 0);
  EXPECT_FALSE(forbidden.drop);
  EXPECT_EQ(forbidden.key, swap_candidate(b, kPrice, 100).key);
  const policy::VictimCandidate allowed = priced_candidate(b, kPrice, 100, /*drops=*/true, drop_cost);
  EXPECT_EQ(asked, 1);
  EXPECT_TRUE(allowed.drop);
  EXPECT_DOUBLE_EQ(allowed.restore_s, swap_candidate(b, kPrice, 100).restore_s / 4);
  EXPECT_LT(allowed.key, forbidden.key);
  pool.give(b.producer);
  EXPECT_FALSE(priced_candidate(b, kPrice, 100, /*drops=*/true, drop_cost).drop);  // no producer
  EXPECT_EQ(asked, 1);
}

// A producer handed to a block is counted until it is given back: a shortage with none counted
// prices no drop (start_victims takes the index then).
TEST(ProducerPool, CountsTheProducersBlocksHold) {
  ProducerPool pool;
  Block a, b;
  pool.hand(a.producer, pool.take());
  pool.hand(b.producer, pool.take());
  EXPECT_EQ(pool.held_by_blocks(), 2u);
  pool.hand(a.producer, pool.take());  // written again: the old one given, the new one counted
  EXPECT_EQ(pool.held_by_blocks(), 2u);
  pool.hand(b.producer, nullptr);  // written by a launch that left no producer
  EXPECT_EQ(pool.held_by_blocks(), 1u);
  pool.give(a.producer);
  pool.give(a.producer);  // nothing held: nothing counted
  EXPECT_EQ(pool.held_by_blocks(), 0u);
}

// A block used again becomes the newest of its span; one coming back to the device keeps the
// tick of its last use, and its place by it.
TEST(VictimIndex, ABlockComingBackWithAnOldTickIsOrderedByIt) {
  Ledger ledger;
  ledger.index_victims();
  std::vector<std::unique_ptr<Block>> blocks;
  for (int i = 0; i < 10; ++i) {
    blocks.push_back(std::make_unique<Block>());
    blocks.back()->span = 4096;
    blocks.back()->id = static_cast<std::uint64_t>(i);
    blocks.back()->live = true;
    ledger.touch(*blocks.back(), 10u * static_cast<std::uint64_t>(i));
    ledger.move(*blocks.back(), Where::Device);
  }
  ledger.move(*blocks[2], Where::Host);
  ledger.touch(*blocks[7], 95);  // the newest now
  ledger.move(*blocks[2], Where::Device);  // back with tick 20: between 1 (10) and 3 (30)
  std::vector<std::uint64_t> ids;
  ledger.victims().for_each_group([&](std::uint64_t, const std::vector<const Block*>& in_order) {
    for (const Block* b : in_order) ids.push_back(b->id);
  });
  EXPECT_EQ(ids, (std::vector<std::uint64_t>{0, 1, 2, 3, 4, 5, 6, 8, 9, 7}));
  expect_consistent(ledger, 0);
}

}  // namespace
}  // namespace capuchin::interpose::exec
