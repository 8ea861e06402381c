// The executor's block table (interpose/exec/block.hpp) against a plain std::map of what it
// should hold: blocks created, allocated, freed into the cache, reused at the same base and
// deleted in a random order, with lookups of exact bases, interior pointers, ends and words
// that are no block's; the FlatMap it uses alone under many inserts and erases (its backward-shift
// deletion must never hide an entry behind a hole); the ledger's list of charged blocks, where
// victims are looked for; and the pool that refills producers no one else holds.
#include <gtest/gtest.h>

#include <algorithm>
#include <iterator>
#include <map>
#include <memory>
#include <random>
#include <vector>

#include "exec/block.hpp"
#include "exec/ledger.hpp"

namespace capuchin::interpose::exec {
namespace {

TEST(FlatMap, AgreesWithAMapUnderChurn) {
  FlatMap<Block*> index;
  auto found = [&](std::uint64_t key) -> Block* {
    Block* const* b = index.find(key);
    return b != nullptr ? *b : nullptr;
  };
  std::map<CUdeviceptr, Block*> truth;
  std::vector<std::unique_ptr<Block>> owned;
  std::mt19937_64 rng(7);
  // Bases from a small set of 4 KiB-aligned addresses: many collide in the table's slots.
  auto pick = [&] { return (1ull << 40) + (rng() % 3000) * 4096; };
  for (int step = 0; step < 200000; ++step) {
    const CUdeviceptr base = pick();
    if (rng() % 3 != 0) {
      owned.push_back(std::make_unique<Block>());
      index.insert_or_assign(base, owned.back().get());
      truth[base] = owned.back().get();
    } else {
      index.erase(base);
      truth.erase(base);
    }
    if (step % 997 == 0)
      for (int probe = 0; probe < 3000; ++probe) {
        const CUdeviceptr b = (1ull << 40) + static_cast<CUdeviceptr>(probe) * 4096;
        auto it = truth.find(b);
        ASSERT_EQ(found(b), it == truth.end() ? nullptr : it->second) << "step " << step << " base " << b;
      }
  }
  EXPECT_GT(truth.size(), 1000u);  // the table grew and held many at once
  // Emptied again in a random order: it shrinks on the way down and never loses an entry.
  std::vector<CUdeviceptr> keys;
  for (const auto& [k, b] : truth) keys.push_back(k);
  std::shuffle(keys.begin(), keys.end(), rng);
  for (std::size_t i = 0; i < keys.size(); ++i) {
    index.erase(keys[i]);
    truth.erase(keys[i]);
    if (i % 97 == 0)
      for (const auto& [k, b] : truth) ASSERT_EQ(found(k), b) << "after erasing " << i + 1;
  }
  EXPECT_EQ(index.size(), 0u);
  int visited = 0;
  index.for_each([&](std::uint64_t, Block*) { ++visited; });
  EXPECT_EQ(visited, 0);
}

// What the policy's live set relies on: a present key keeps its first value, an erase hands the
// value back, the empty key is refused, and a lookup never finds an erased key.
TEST(FlatMap, TryEmplaceKeepsTheFirstValueAndEraseHandsItBack) {
  FlatMap<std::uint64_t> live;
  auto [first, fresh] = live.try_emplace(7, 100);
  ASSERT_TRUE(fresh);
  ASSERT_NE(first, nullptr);
  auto [again, fresh_again] = live.try_emplace(7, 200);
  EXPECT_FALSE(fresh_again);
  EXPECT_EQ(*again, 100u);
  EXPECT_EQ(live.try_emplace(FlatMap<std::uint64_t>::kEmpty, 1).first, nullptr);
  EXPECT_EQ(live.size(), 1u);
  // The empty key is no entry's: not found (an empty slot's value is no answer) and not erased
  // (an erase of it must not take an empty slot for an entry and lose count).
  EXPECT_EQ(live.find(FlatMap<std::uint64_t>::kEmpty), nullptr);
  EXPECT_FALSE(live.erase(FlatMap<std::uint64_t>::kEmpty));
  EXPECT_EQ(live.size(), 1u);
  ASSERT_NE(live.find(7), nullptr);
  std::uint64_t out = 0;
  EXPECT_TRUE(live.erase(7, &out));
  EXPECT_EQ(out, 100u);
  EXPECT_FALSE(live.erase(7));
  EXPECT_EQ(live.find(7), nullptr);
  EXPECT_TRUE(live.empty());
}

// A block of `span` at a base of its own (1 << 24 apart), owned by `owned`.
Block* new_block(std::vector<std::unique_ptr<Block>>& owned, std::size_t span, Where where) {
  owned.push_back(std::make_unique<Block>());
  Block* b = owned.back().get();
  b->base = (1ull << 42) + owned.size() * (1ull << 24);
  b->span = span;
  b->where = where;
  return b;
}

// The cache of freed blocks: by span, those cached on the device before the others, oldest
// first; a reuse takes the oldest usable one of its span and kind (device-resident first); a
// deleted block leaves the cache; spans no block holds any more go with their last block.
TEST(BlockTable, CachesFreedBlocksBySpanOldestFirst) {
  BlockTable table;
  std::vector<std::unique_ptr<Block>> blocks;
  auto make = [&](std::size_t span, Where where) { return new_block(blocks, span, where); };
  Block* a = make(4096, Where::Device);
  Block* h = make(4096, Where::Host);
  Block* c = make(4096, Where::Device);
  Block* big = make(8192, Where::Device);
  Block* small = make(2048, Where::Device);
  for (Block* b : {a, h, c, big, small}) table.cache(b);
  std::vector<Block*> order;
  table.for_each_cached([&](Block& b) { order.push_back(&b); });
  EXPECT_EQ(order, (std::vector<Block*>{small, a, c, h, big}));
  auto any = [](Block&) { return true; };
  EXPECT_EQ(table.take_cached(4096, Kind::Managed, [&](Block& b) { return &b != a; }), c);  // a refused
  EXPECT_EQ(table.take_cached(4096, Kind::Vmm, any), nullptr);                               // kind differs
  EXPECT_EQ(table.take_cached(4096, Kind::Managed, any), a);
  EXPECT_EQ(table.take_cached(4096, Kind::Managed, any), h);  // on the host: only when no resident one is
  EXPECT_EQ(table.take_cached(4096, Kind::Managed, any), nullptr);
  table.cache(c);
  table.forget(c);  // deleted while cached: unlinked
  EXPECT_EQ(table.take_cached(4096, Kind::Managed, any), nullptr);
  EXPECT_FALSE(c->cached);
  auto gone = table.take_cached_if([&](const Block& b) { return &b == big; });
  EXPECT_EQ(gone, std::vector<Block*>{big});
  order.clear();
  table.for_each_cached([&](Block& b) { order.push_back(&b); });
  EXPECT_EQ(order, std::vector<Block*>{small});
  EXPECT_EQ(table.take_cached(2048, Kind::Managed, any), small);
  // Spans whose buckets take_cached_if dropped (8192, and 4096 left empty) are cached again into
  // new buckets, found by span (a stale index would point at a node the map has given back to
  // its pool, which ASan does not watch: the listing below is what fails then).
  table.cache(big);
  table.cache(a);
  order.clear();
  table.for_each_cached([&](Block& b) { order.push_back(&b); });
  EXPECT_EQ(order, (std::vector<Block*>{a, big}));
  EXPECT_EQ(table.take_cached(8192, Kind::Managed, any), big);
  EXPECT_EQ(table.take_cached(4096, Kind::Managed, any), a);
  EXPECT_EQ(table.take_cached(4096, Kind::Managed, any), nullptr);
}

TEST(BlockTable, ABlockMovedOutWhileCachedIsListedWithTheOthersOfItsSpan) {
  // Allocations walk a span's device-resident blocks first, and shortages walk only those
  // (for_each_cached_on_device): a block whose memory left the device while cached (cool) is
  // listed with the others, after the host ones cached before it, and is still reused when no
  // device-resident block is usable; one whose move out failed stays listed on the device.
  BlockTable table;
  std::vector<std::unique_ptr<Block>> blocks;
  Block* h = new_block(blocks, 4096, Where::Host);
  Block* d1 = new_block(blocks, 4096, Where::Device);
  Block* d2 = new_block(blocks, 4096, Where::Device);
  Block* in = new_block(blocks, 4096, Where::Incoming);  // a move in still running: on the device
  for (Block* b : {h, d1, d2, in}) table.cache(b);
  std::vector<Block*> on_device;
  table.for_each_cached_on_device([&](Block& b) { on_device.push_back(&b); });
  EXPECT_EQ(on_device, (std::vector<Block*>{d1, d2, in}));
  d2->where = Where::Device;  // a move out that failed: still where shortages look
  table.cool(*d2);
  on_device.clear();
  table.for_each_cached_on_device([&](Block& b) { on_device.push_back(&b); });
  EXPECT_EQ(on_device, (std::vector<Block*>{d1, d2, in}));
  d1->where = Where::Host;  // moved out while cached
  table.cool(*d1);
  table.cool(*d1);  // once only
  on_device.clear();
  table.for_each_cached_on_device([&](Block& b) { on_device.push_back(&b); });
  EXPECT_EQ(on_device, (std::vector<Block*>{d2, in}));
  std::vector<Block*> all;
  table.for_each_cached([&](Block& b) { all.push_back(&b); });
  EXPECT_EQ(all, (std::vector<Block*>{d2, in, h, d1}));
  auto any = [](Block&) { return true; };
  EXPECT_EQ(table.take_cached(4096, Kind::Managed, any), d2);  // resident first
  EXPECT_EQ(table.take_cached(4096, Kind::Managed, any), h);   // then the oldest elsewhere
  EXPECT_EQ(table.take_cached(4096, Kind::Managed, any), d1);
  EXPECT_EQ(table.take_cached(4096, Kind::Managed, any), in);  // listed on the device, not there yet
  EXPECT_EQ(table.take_cached(4096, Kind::Managed, any), nullptr);
  for (Block* b : {h, d1, d2, in}) EXPECT_FALSE(b->cached);
  d1->where = Where::Device;  // reused, filled, freed again: cached on the device again
  table.cache(d1);
  on_device.clear();
  table.for_each_cached_on_device([&](Block& b) { on_device.push_back(&b); });
  EXPECT_EQ(on_device, std::vector<Block*>{d1});
  table.forget(d1);
  EXPECT_EQ(table.take_cached(4096, Kind::Managed, any), nullptr);
}

TEST(BlockTable, CountsTheWarmBlocksOfASpanUntilTakenCooledOrForgotten) {
  // The free path keeps a few freed blocks per span on the device once the budget binds
  // (Block::warm) and asks how many its span has: taking one for a reuse, moving one out while
  // cached (cool) or deleting one ends its count, whichever comes first, once.
  BlockTable table;
  std::vector<std::unique_ptr<Block>> blocks;
  auto make = [&](std::size_t span, bool warm) {
    Block* b = new_block(blocks, span, Where::Device);
    b->warm = warm;
    table.cache(b);
    return b;
  };
  EXPECT_EQ(table.warm(4096), 0u) << "no bucket yet";
  Block* w1 = make(4096, true);
  Block* w2 = make(4096, true);
  make(4096, false);
  Block* other = make(8192, true);
  EXPECT_EQ(table.warm(4096), 2u);
  EXPECT_EQ(table.warm(8192), 1u);
  EXPECT_EQ(table.warm_bytes(), 4096u + 4096u + 8192u);
  auto any = [](Block&) { return true; };
  EXPECT_EQ(table.take_cached(4096, Kind::Managed, any), w1);  // the oldest
  EXPECT_FALSE(w1->warm);
  EXPECT_EQ(table.warm(4096), 1u);
  table.cool(*w2);  // moved out while cached
  table.cool(*w2);  // once only
  EXPECT_FALSE(w2->warm);
  EXPECT_EQ(table.warm(4096), 0u);
  EXPECT_EQ(table.warm_bytes(), 8192u);
  table.forget(other);
  EXPECT_EQ(table.warm(8192), 0u);
  EXPECT_EQ(table.warm_bytes(), 0u);
  w1->warm = true;  // freed again, kept warm
  table.cache(w1);
  EXPECT_EQ(table.warm(4096), 1u);
  EXPECT_EQ(table.warm_bytes(), 4096u);
}

TEST(BlockTable, FindsLiveBlocksOnlyByIdBaseAndInteriorAddress) {
  BlockTable table;
  std::vector<std::unique_ptr<Block>> blocks;
  std::map<CUdeviceptr, Block*> live;  // base -> block
  std::mt19937_64 rng(11);
  std::uint64_t next_id = 1;
  for (int i = 0; i < 400; ++i) {
    auto b = std::make_unique<Block>();
    b->base = (1ull << 41) + static_cast<CUdeviceptr>(i) * (1u << 20);
    b->span = 1u << 20;
    blocks.push_back(std::move(b));
  }
  std::vector<bool> deleted(blocks.size(), false);
  for (int step = 0; step < 20000; ++step) {
    const std::size_t k = rng() % blocks.size();
    Block* b = blocks[k].get();
    if (deleted[k]) continue;
    const int what = static_cast<int>(rng() % 10);
    if (!b->live && what < 6) {  // allocated (new, or reused from the cache at the same base)
      b->id = next_id++;
      b->bytes = 1 + rng() % b->span;
      table.add_live(b);
      live[b->base] = b;
    } else if (b->live && what < 9) {  // freed into the cache
      table.remove_live(b);
      b->id = kNoBlockId;
      live.erase(b->base);
    } else if (what == 9) {  // given back to the driver
      table.forget(b);
      live.erase(b->base);
      deleted[k] = true;
    }
    for (const auto& other : blocks) {
      const auto it = live.find(other->base);
      Block* expect = it == live.end() ? nullptr : it->second;
      ASSERT_EQ(table.by_base(other->base), expect);
      ASSERT_EQ(table.by_addr(other->base), expect);
      if (expect != nullptr) {
        ASSERT_EQ(table.by_id(expect->id), expect);
        ASSERT_EQ(table.by_addr(other->base + expect->bytes - 1), expect);  // its last byte
        ASSERT_EQ(table.by_addr(other->base + expect->bytes), nullptr);     // just past what it asked for
      } else {
        ASSERT_EQ(table.by_addr(other->base + 8), nullptr);
      }
    }
  }
  EXPECT_EQ(table.by_addr(0), nullptr);
  EXPECT_EQ(table.by_addr(42), nullptr);
  EXPECT_EQ(table.by_addr(~std::uint64_t{0}), nullptr);
}

}  // namespace
}  // namespace capuchin::interpose::exec

namespace capuchin::interpose::exec {
namespace {

// The ledger's list of charged blocks (where victims are looked for) against the set a scan of
// every block finds, and its bytes against their spans, under random moves and forgets.
TEST(Ledger, ListsExactlyTheChargedBlocksUnderRandomMoves) {
  Ledger ledger;
  std::vector<std::unique_ptr<Block>> blocks;
  for (int i = 0; i < 64; ++i) {
    blocks.push_back(std::make_unique<Block>());
    blocks.back()->span = 4096u * static_cast<unsigned>(i + 1);
  }
  const Where states[] = {Where::Fresh, Where::Device, Where::Incoming, Where::Evicting, Where::Host, Where::Dropped};
  std::mt19937_64 rng(5);
  std::size_t charged_seen = 0;
  for (int step = 0; step < 20000; ++step) {
    Block& b = *blocks[rng() % blocks.size()];
    if (rng() % 16 == 0) {
      ledger.forget(b);  // given back to the driver: charged no more, and unlisted
      b.where = Where::Fresh;  // as a new block starts (not through the ledger)
    } else {
      ledger.move(b, states[rng() % std::size(states)]);
    }
    std::vector<Block*> want;
    std::uint64_t bytes = 0;
    for (auto& x : blocks)
      if (charged(x->where)) want.push_back(x.get()), bytes += x->span;
    std::vector<Block*> got = ledger.charged_blocks();
    std::sort(want.begin(), want.end());
    std::sort(got.begin(), got.end());
    ASSERT_EQ(got, want) << "step " << step;
    ASSERT_EQ(ledger.resident(), bytes) << "step " << step;
    for (auto& x : blocks) ASSERT_EQ(Ledger::listed(*x), charged(x->where)) << "step " << step;
    charged_seen += want.size();
  }
  EXPECT_GT(charged_seen, 20000u * 16);  // not vacuous: about half the blocks charged at each step
}

// A producer no one else holds is refilled by the next capture; one still held elsewhere (a
// replay's copy) is never handed out again.
TEST(ProducerPool, ReusesOnlyProducersNoOneElseHolds) {
  ProducerPool pool;
  std::shared_ptr<Producer> alone = pool.take();
  ASSERT_NE(alone, nullptr);
  Producer* const alone_at = alone.get();
  std::shared_ptr<Producer> shared = pool.take();
  std::shared_ptr<Producer> replay_copy = shared;
  pool.give(shared);
  EXPECT_EQ(shared, nullptr);
  pool.give(alone);
  EXPECT_EQ(alone, nullptr);
  std::shared_ptr<Producer> next = pool.take();
  EXPECT_EQ(next.get(), alone_at);  // the one no one held
  std::shared_ptr<Producer> fresh = pool.take();
  EXPECT_NE(fresh.get(), replay_copy.get());  // the held one was not kept
  EXPECT_EQ(replay_copy.use_count(), 1);
}

}  // namespace
}  // namespace capuchin::interpose::exec
