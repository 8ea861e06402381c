// Recomputation chains among dropped blocks (interpose/exec/chains.hpp) on hand-made blocks:
// how deep a chain is, when a drop is allowed (depth, cycles, two outputs of one launch), and
// that a walk over shared chains works out each block once. Blocks are linked as the executor links them:
// each dropped block's producer lists every other block its launch touched, with versions, and
// each of those lists the dropped block among its dependents.
#include <gtest/gtest.h>

#include <memory>
#include <vector>

#include "exec/block.hpp"
#include "exec/chains.hpp"

namespace capuchin::interpose::exec {
namespace {

class ChainsTest : public ::testing::Test {
 protected:
  // A live block on the device, of `span` bytes.
  Block& add(std::size_t span = 1 << 20) {
    owned_.push_back(std::make_unique<Block>());
    Block& b = *owned_.back();
    b.id = next_id_++;
    b.base = (1ull << 40) + b.id * (1ull << 24);
    b.bytes = b.span = span;
    b.where = Where::Device;
    table_.add_live(&b);
    return b;
  }
  // b made by `launch` reading `inputs` (at their versions now).
  void produce(Block& b, const std::vector<Block*>& inputs, std::uint64_t launch) {
    auto p = std::make_shared<Producer>();
    p->func = reinterpret_cast<CUfunction>(0x1000 + launch);
    p->launch = launch;
    for (Block* in : inputs) p->inputs.push_back({in->id, in->version});
    b.producer = std::move(p);
  }
  // Dropped, as try_drop records it: a dependent of each of its producer's inputs.
  void drop(Block& b) {
    b.where = Where::Dropped;
    for (const ProducerInput& x : b.producer->inputs) table_.by_id(x.id)->dependents.push_back(b.id);
  }
  // A chain of n blocks, each made from the one before by its own launch; the first from a
  // resident source. Returns them, source first.
  std::vector<Block*> chain(int n) {
    std::vector<Block*> c{&add()};
    for (int i = 0; i < n; ++i) {
      Block& b = add();
      produce(b, {c.back()}, next_launch_++);
      c.push_back(&b);
    }
    return c;
  }
  bool allows(const Block& b) const { return chains::allows_drop(table_, b); }
  int under(const Block& b) const { return chains::dropped_under(table_, b, chains::kMaxChain - 1); }

  BlockTable table_;
  std::vector<std::unique_ptr<Block>> owned_;
  std::uint64_t next_id_ = 1, next_launch_ = 1;
};

TEST_F(ChainsTest, AChainOfDroppedInputsIsRecomputableUpToTheLimit) {
  const std::vector<Block*> c = chain(chains::kMaxChain + 1);  // source, then kMaxChain + 1 made ones
  // Dropped from the source up: each drop lengthens the chain under the next one.
  for (int k = 1; k <= chains::kMaxChain; ++k) {
    ASSERT_TRUE(allows(*c[k])) << "drop " << k;
    drop(*c[k]);
    EXPECT_EQ(under(*c[k]), k - 1);
  }
  // Resident over a full chain: dropping it too would make one of kMaxChain + 1.
  EXPECT_EQ(chains::dropped_under(table_, *c[chains::kMaxChain + 1], chains::kMaxChain), chains::kMaxChain);
  EXPECT_EQ(under(*c[chains::kMaxChain + 1]), -1);
  EXPECT_FALSE(allows(*c[chains::kMaxChain + 1]));
  EXPECT_EQ(chains::dropped_under(table_, *c[chains::kMaxChain], chains::kMaxChain - 1), chains::kMaxChain - 1);
}

TEST_F(ChainsTest, ADropUnderDroppedDependentsCountsTheirChainToo) {
  const std::vector<Block*> c = chain(chains::kMaxChain + 1);
  // Dropped from the top down: the dependents over c[1] are the rest of the chain.
  for (int k = chains::kMaxChain + 1; k >= 3; --k) {
    ASSERT_TRUE(allows(*c[k])) << "drop " << k;
    drop(*c[k]);
  }
  EXPECT_EQ(chains::dropped_over(table_, *c[2]), chains::kMaxChain - 1);
  ASSERT_TRUE(allows(*c[2]));  // makes the chain over c[1] kMaxChain long
  drop(*c[2]);
  EXPECT_FALSE(allows(*c[1])) << "would make a chain of kMaxChain + 1";
}

TEST_F(ChainsTest, AnInputChangedOrGoneMakesTheChainOverItUnrecomputable) {
  const std::vector<Block*> c = chain(3);
  drop(*c[1]);
  drop(*c[2]);
  ASSERT_EQ(under(*c[2]), 1);
  ++c[0]->version;  // the source written (materialize_dependents would have recomputed c[1] first)
  EXPECT_EQ(under(*c[2]), -1);
  EXPECT_FALSE(allows(*c[3]));
}

TEST_F(ChainsTest, TwoOutputsOfOneLaunchAreOneLevelNotACycle) {
  Block& src = add();
  Block& x = add();
  Block& y = add();
  produce(x, {&src, &y}, 7);  // the executor lists a launch's other output among the inputs
  produce(y, {&src, &x}, 7);
  ASSERT_TRUE(allows(x));
  drop(x);
  ASSERT_TRUE(allows(y)) << "written by the same replay as x";
  drop(y);
  EXPECT_EQ(under(x), 0);
  EXPECT_EQ(under(y), 0);
  // A block made from y by another launch: a chain of one under it, not two.
  Block& z = add();
  produce(z, {&y}, 8);
  EXPECT_EQ(under(z), 1);
  EXPECT_TRUE(allows(z));
  EXPECT_EQ(chains::dropped_over(table_, src), 1) << "x and y are one level over src";
}

TEST_F(ChainsTest, TwoLaunchesReadingEachOthersOutputCannotBothBeDropped) {
  // Not outputs of one launch: b's producer read a, and a's producer read b (as the executor
  // records a launch that touched both, e.g. an in-place update of one from the other).
  Block& a = add();
  Block& b = add();
  produce(a, {&b}, 1);
  produce(b, {&a}, 2);
  ASSERT_TRUE(allows(a));
  drop(a);
  EXPECT_FALSE(allows(b)) << "a cycle: neither could be recomputed";
}

TEST_F(ChainsTest, ReplayBytesCountEachBlockOfTheChainOnce) {
  Block& src = add(1 << 20);
  Block& mid = add(2 << 20);
  produce(mid, {&src}, 1);
  Block& top = add(4 << 20);
  produce(top, {&mid, &src}, 2);  // reads src too: counted once
  EXPECT_EQ(chains::replay_bytes(table_, top), (4u << 20) + (2u << 20) + (1u << 20));
  drop(mid);
  EXPECT_EQ(chains::replay_bytes(table_, top), (4u << 20) + (2u << 20) + (1u << 20)) << "mid's replay needs src, held once";
}

TEST_F(ChainsTest, ReplaysFitCountsTheReplaysOverADropToo) {
  // 1 MiB blocks, each made from the one before: c[3] dropped, so its replay holds c[3] and c[2].
  const std::vector<Block*> c = chain(3);
  drop(*c[3]);
  const std::uint64_t mib = 1 << 20;
  // Dropping c[2]: its own replay holds c[2] and c[1] (2 MiB), but c[3]'s would then hold c[3],
  // c[2] and c[1] (3 MiB).
  EXPECT_EQ(chains::replay_bytes(table_, *c[2]), 2 * mib);
  EXPECT_TRUE(chains::replays_fit(table_, *c[2], 3 * mib));
  EXPECT_FALSE(chains::replays_fit(table_, *c[2], 3 * mib - 1)) << "c[3]'s replay over it";
  // c[3]'s replay reads c[2] where it is: dropping c[1] leaves it as it was.
  EXPECT_TRUE(chains::replays_fit(table_, *c[1], 2 * mib));
  drop(*c[2]);
  EXPECT_FALSE(chains::replays_fit(table_, *c[1], 3 * mib)) << "c[3] would recompute c[2], which recomputes c[1] (4 MiB)";
  EXPECT_TRUE(chains::replays_fit(table_, *c[1], 4 * mib));
}

TEST_F(ChainsTest, AWalkOverSharedChainsVisitsEachBlockOnce) {
  // Levels of 32 blocks, each made from all 32 of the level below, every level but the lowest
  // and the top dropped: 32^6 paths lead from the top down. A walk that followed each path
  // would not end within the test's timeout; one that works out each block once takes
  // microseconds.
  constexpr int kWidth = 32;
  std::vector<Block*> level;
  for (int k = 0; k < kWidth; ++k) level.push_back(&add());
  for (int depth = 0; depth < chains::kMaxChain - 1; ++depth) {
    std::vector<Block*> next;
    for (int k = 0; k < kWidth; ++k) {
      Block& b = add();
      produce(b, level, next_launch_++);
      next.push_back(&b);
    }
    if (depth > 0)
      for (Block* b : level) drop(*b);
    level = next;
  }
  EXPECT_EQ(under(*level[0]), chains::kMaxChain - 2);
  EXPECT_EQ(chains::dropped_over(table_, *owned_[0]), chains::kMaxChain - 2);
}

}  // namespace
}  // namespace capuchin::interpose::exec
