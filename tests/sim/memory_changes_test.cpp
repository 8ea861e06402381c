// SimOptions::memory (the record `capuchin export memory-viz` draws from): on a real model's
// trace, replaying the recorded changes in time order gives the natural peak for the ideal
// run and never more than the budget for capuchin's; each tensor alternates taking and
// releasing memory, starting with its allocation; what is held at the end is exactly the
// tensors the trace never frees; capuchin's run shows swap-outs, swap-ins and recomputations.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>

#include "capuchin/plan.hpp"
#include "capuchin/sim.hpp"

namespace capuchin::sim {
namespace {

using K = MemoryChange::Kind;

bool takes(K k) { return k == K::Alloc || k == K::SwapIn || k == K::Recompute; }

struct Replay {
  std::uint64_t peak = 0, end = 0;
  std::map<K, int> count;
  std::vector<std::uint32_t> held_at_end;
};

// Replays the changes in time order, checking each tensor's alternation.
Replay replay(const trace::Trace& t, std::vector<MemoryChange> ch) {
  std::stable_sort(ch.begin(), ch.end(), [](const auto& a, const auto& b) { return a.t_s < b.t_s; });
  Replay r;
  std::vector<int> held(t.tensors.size(), -1);  // -1: not allocated yet
  std::uint64_t live = 0;
  for (const auto& c : ch) {
    ++r.count[c.kind];
    const std::uint64_t b = t.tensors[c.tensor].bytes;
    if (takes(c.kind)) {
      EXPECT_NE(held[c.tensor], 1) << "tensor " << c.tensor << " takes memory twice";
      EXPECT_EQ(held[c.tensor] == -1, c.kind == K::Alloc) << "tensor " << c.tensor;
      held[c.tensor] = 1, live += b;
    } else {
      EXPECT_EQ(held[c.tensor], 1) << "tensor " << c.tensor << " releases memory it does not hold";
      held[c.tensor] = 0, live -= b;
    }
    r.peak = std::max(r.peak, live);
  }
  r.end = live;
  for (std::uint32_t i = 0; i < held.size(); ++i)
    if (held[i] == 1) r.held_at_end.push_back(i);
  return r;
}

std::vector<std::uint32_t> never_freed(const trace::Trace& t) {
  std::vector<std::uint32_t> v;
  for (std::uint32_t i = 0; i < t.tensors.size(); ++i)
    if (t.tensors[i].free_event == trace::kNone) v.push_back(i);
  return v;
}

class MemoryChanges : public ::testing::Test {
 protected:
  void SetUp() override {
    auto t = trace::load_trace(std::string(CAPUCHIN_TEST_DATA) + "/resnet18-b16.jsonl.gz");
    ASSERT_TRUE(t) << t.error().message();
    trace_ = std::move(*t);
    auto p = prepare(trace_, *find_gpu_profile("h200"));
    ASSERT_TRUE(p);
    prep_ = std::move(*p);
  }
  trace::Trace trace_;
  PreparedTrace prep_;
};

TEST_F(MemoryChanges, IdealRunIsTheTracesAllocationsAndFrees) {
  std::vector<MemoryChange> ch;
  SimOptions o;
  o.memory = &ch;
  auto ideal = make_policy("ideal");
  ASSERT_TRUE(simulate(prep_, **ideal, o).feasible);
  Replay r = replay(trace_, ch);
  EXPECT_EQ(r.peak, prep_.liveness.peak_bytes);
  EXPECT_EQ(r.end, prep_.liveness.persistent_bytes);
  EXPECT_EQ(r.count[K::Alloc], static_cast<int>(trace_.tensors.size()));
  EXPECT_EQ(r.count.size(), 2u);  // Alloc and Free only
  EXPECT_EQ(r.held_at_end, never_freed(trace_));
}

TEST_F(MemoryChanges, CapuchinRunStaysWithinItsBudgetAndShowsItsActions) {
  const std::uint64_t budget = prep_.liveness.peak_bytes / 2;
  std::vector<MemoryChange> ch;
  SimOptions o;
  o.memory = &ch;
  o.budget_bytes = budget;
  auto pol = plan::make_capuchin_policy();
  const SimResult res = simulate(prep_, *pol, o);
  ASSERT_TRUE(res.feasible) << res.where.reason;
  Replay r = replay(trace_, ch);
  EXPECT_LE(r.peak, budget);
  EXPECT_GT(r.count[K::SwapOut], 0);
  EXPECT_GT(r.count[K::SwapIn], 0);
  EXPECT_EQ(r.count[K::Alloc], static_cast<int>(trace_.tensors.size()));
  // Every tensor the trace never frees is either on the device or swapped out at the end.
  for (std::uint32_t i : r.held_at_end) EXPECT_EQ(trace_.tensors[i].free_event, trace::kNone) << i;
  // Without recording, the run is the same.
  SimOptions plain;
  plain.budget_bytes = budget;
  auto pol2 = plan::make_capuchin_policy();
  const SimResult again = simulate(prep_, *pol2, plain);
  EXPECT_EQ(again.total_time_s, res.total_time_s);
  EXPECT_EQ(again.peak_bytes, res.peak_bytes);
}

TEST_F(MemoryChanges, TightBudgetRecomputesWhatItDrops) {
  // Find a budget where capuchin drops and recomputes (it prefers that to swapping when the
  // link is the bottleneck); each recomputation follows a drop of the same tensor.
  for (double f : {0.5, 0.4, 0.35, 0.3}) {
    std::vector<MemoryChange> ch;
    SimOptions o;
    o.memory = &ch;
    o.budget_bytes = static_cast<std::uint64_t>(static_cast<double>(prep_.liveness.peak_bytes) * f);
    auto pol = plan::make_capuchin_policy();
    if (!simulate(prep_, *pol, o).feasible) continue;
    Replay r = replay(trace_, ch);
    EXPECT_LE(r.peak, o.budget_bytes);
    if (r.count[K::Recompute] == 0) continue;
    EXPECT_GE(r.count[K::Drop], r.count[K::Recompute]);
    return;
  }
  GTEST_SKIP() << "capuchin recomputed nothing at 0.3-0.5 of resnet18's peak";
}

}  // namespace
}  // namespace capuchin::sim
