// The executor's block table (interpose/exec/block.hpp) against a plain std::map of what it
// should hold: blocks created, allocated, freed into the cache, reused at the same base and
// deleted in a random order, with lookups of exact bases, interior pointers, ends and words
// that are no block's; and BaseIndex alone under many inserts and erases (its backward-shift
// deletion must never hide an entry behind a hole).
#include <gtest/gtest.h>

#include <map>
#include <memory>
#include <random>
#include <vector>

#include "exec/block.hpp"

namespace capuchin::interpose::exec {
namespace {

TEST(BaseIndex, AgreesWithAMapUnderChurn) {
  BaseIndex index;
  std::map<CUdeviceptr, Block*> truth;
  std::vector<std::unique_ptr<Block>> owned;
  std::mt19937_64 rng(7);
  // Bases from a small set of 4 KiB-aligned addresses: many collide in the table's slots.
  auto pick = [&] { return (1ull << 40) + (rng() % 3000) * 4096; };
  for (int step = 0; step < 200000; ++step) {
    const CUdeviceptr base = pick();
    if (rng() % 3 != 0) {
      owned.push_back(std::make_unique<Block>());
      index.insert(base, owned.back().get());
      truth[base] = owned.back().get();
    } else {
      index.erase(base);
      truth.erase(base);
    }
    if (step % 997 == 0)
      for (int probe = 0; probe < 3000; ++probe) {
        const CUdeviceptr b = (1ull << 40) + static_cast<CUdeviceptr>(probe) * 4096;
        auto it = truth.find(b);
        ASSERT_EQ(index.find(b), it == truth.end() ? nullptr : it->second) << "step " << step << " base " << b;
      }
  }
  EXPECT_GT(truth.size(), 1000u);  // the table grew and held many at once
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
