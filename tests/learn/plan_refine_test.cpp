// The planner's refinements by replay (plan.hpp): replay_plan times an iteration as the simulator
// runs it; refine_prefetches moves late in-triggers earlier; refine_from_replay plans the pressure
// rules' victims and leaves out swaps whose eviction the replay cancelled. On the toy
// (plan_toy.hpp) and hand-made traces, with exact efficiencies, so the times are exact.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>

#include "capuchin/plan.hpp"
#include "plan_toy.hpp"

namespace capuchin::plan {
namespace {

using namespace toy;

// kLastReason names the last Reason: the wire decoders refuse codes above it, so a reason added
// after it without moving it would make a daemon's plans unreadable to its jobs.
TEST(Plan, TheLastReasonIsKLastReason) {
  EXPECT_NE(to_string(static_cast<Reason>(kLastReason)), "?");
  EXPECT_EQ(to_string(static_cast<Reason>(kLastReason + 1)), "?");
}

// refine_prefetches: A's swap-in moved to just before bwd arrives 1 ms late (its copy takes
// 1 ms); the refinement moves the in-trigger earlier until the replay hides the copy again,
// never before A's swap-out, and reports the replayed time.
TEST(Plan, RefinementMovesALateSwapInEarlierByItsReplay) {
  Fixture f = prepare_toy(2, 1.0, 2.0, 4.0, 2.0);
  const learn::Pattern pat = second_iteration(f);
  const PlanOptions opt = toy_options();
  Plan plan = make_plan(f.p, pat, opt);
  ASSERT_EQ(plan.decisions.size(), 2u);
  ASSERT_EQ(plan.decisions[1].act, Act::Prefetch);
  plan.decisions[1].at = 8;  // bwd itself: the copy starts as bwd should
  plan.replay_s = replay_plan(f.p, pat, plan, opt.budget_bytes, true);
  EXPECT_NEAR(plan.replay_s, 0.011, 1e-9);  // 10 ms of kernels + 1 ms waiting for A
  const Plan refined = refine_prefetches(f.p, pat, plan, opt.budget_bytes, true);
  EXPECT_NEAR(refined.replay_s, 0.010, 1e-9);
  EXPECT_NEAR(replay_plan(f.p, pat, refined, opt.budget_bytes, true), refined.replay_s, 1e-12);
  ASSERT_EQ(refined.decisions.size(), 2u);
  EXPECT_EQ(refined.decisions[0].act, Act::Evict);
  EXPECT_EQ(refined.decisions[1].act, Act::Prefetch);
  EXPECT_GT(refined.decisions[1].at, refined.decisions[0].at);
  EXPECT_LT(refined.decisions[1].at, 8u);
  // With no replays allowed it is returned as it was.
  RefineLimits none;
  none.max_replays = 0;
  EXPECT_EQ(refine_prefetches(f.p, pat, plan, opt.budget_bytes, true, none).decisions[1].at, 8u);
}

// refine_from_replay: with no plan and no recomputation, the pressure rules swap A out at B's
// allocation, which waits for the 1 ms copy, and bwd waits for A's copy back in. The replay's
// victim becomes a planned swap: out after fwd (hidden by pre), back in before post (hidden by
// post, once B is freed), so the iteration replays in its 10 ms of kernels.
TEST(Plan, ReplayVictimsBecomePlannedSwaps) {
  Fixture f = prepare_toy(2, 1.0, 2.0, 4.0, 2.0);
  const learn::Pattern pat = second_iteration(f);
  const PlanOptions opt = swap_only_toy_options();
  Plan passive;
  ReplayNotes notes;
  passive.replay_s = replay_plan(f.p, pat, passive, opt.budget_bytes, false, &notes);
  EXPECT_GT(passive.replay_s, 0.0115);
  const std::uint32_t a = pat.local_tensors[0];
  ASSERT_TRUE(std::any_of(notes.victims.begin(), notes.victims.end(), [&](const ReplayNotes::Victim& v) { return v.tensor == a && !v.dropped; }));
  const Plan refined = refine_from_replay(f.p, pat, passive, opt.budget_bytes, false);
  EXPECT_NEAR(refined.replay_s, 0.010, 1e-9);
  EXPECT_NEAR(replay_plan(f.p, pat, refined, opt.budget_bytes, false), refined.replay_s, 1e-12);
  EXPECT_EQ(refined.refined_moves, 1u);
  EXPECT_EQ(refined.swaps, 1u);
  ASSERT_EQ(refined.decisions.size(), 2u);
  const Decision& out = refined.decisions[0];
  const Decision& in = refined.decisions[1];
  EXPECT_EQ(out.act, Act::Evict);
  EXPECT_EQ(out.at, 2u);  // after fwd (position 1)
  EXPECT_EQ(out.access, 1u);
  EXPECT_EQ(in.act, Act::Prefetch);
  EXPECT_EQ(in.at, 7u);  // post: 2 ms before bwd
  EXPECT_EQ(in.access, 8u);  // the access it serves: what late-arrival feedback names
  for (const Decision* d : {&out, &in}) {
    EXPECT_TRUE(d->tensor.local);
    EXPECT_EQ(d->tensor.index, 0u);
    EXPECT_EQ(d->reason, Reason::ReplayVictim);
    EXPECT_EQ(d->bytes, 1'000'000u);
  }
  RefineLimits none;
  none.max_replays_from_notes = 0;
  EXPECT_TRUE(refine_from_replay(f.p, pat, passive, opt.budget_bytes, false, none).decisions.empty());
}

// refine_from_replay leaves out a swap whose eviction the replay cancels: X (2 MB) leaves before
// k2 and is asked back at Z's allocation while its copy out still runs, which keeps the link
// until 4 ms for nothing; Y's eviction behind it ends at 5 ms, and Z's allocation (at 3.5 ms,
// which needs Y's room with X back) waits 1.5 ms. Without X's swap, Y's copy ends at 3 ms.
TEST(Plan, ReplayDropsSwapsWhoseEvictionItCancelled) {
  const auto k = [](const char* name, const std::string& r, const std::string& w, int us) {
    return std::string(R"({"op":"kernel","name":")") + name + R"(","reads":[)" + r + R"(],"writes":[)" + w +
           R"(],"dur_ns":)" + std::to_string(us * 1000) + "}\n";
  };
  const auto op = [](const char* what, int id, int bytes = 0) {
    return std::string(R"({"op":")") + what + R"(","id":)" + std::to_string(id) + (bytes ? R"(,"bytes":)" + std::to_string(bytes) : "") + "}\n";
  };
  std::string s = std::string(R"({"format":"capuchin-trace","version":1})") + "\n" + op("alloc", 0, 1000);
  for (int i = 0, id = 1; i < 2; ++i, id += 3) {
    const std::string x = std::to_string(id), y = std::to_string(id + 1), z = std::to_string(id + 2);
    s += op("alloc", id, 2000000) + k("kx", "0", x, 1000) + op("alloc", id + 1, 1000000) + k("ky", "0", y, 1000);
    s += k("k2", "0", "", 1500) + op("alloc", id + 2, 1000000) + k("kz", "0", z, 1000) + op("free", id + 2);
    s += k("k3", x, "", 1000) + op("free", id) + op("free", id + 1) + std::string(R"({"op":"sync"})") + "\n";
  }
  const Fixture f = prepare_text(s);
  ASSERT_EQ(f.t.events.size(), 25u);
  const learn::Pattern pat = learn::make_pattern(f.t, trace::Iteration{2, 13, 25});
  ASSERT_EQ(pat.events.size(), 12u);
  const std::uint64_t budget = 3'100'000;
  Plan plan;
  plan.decisions = {{4, Act::Evict, {true, 0}, 2000000, 1}, {5, Act::Prefetch, {true, 0}, 2000000, 8},
                    {4, Act::Evict, {true, 1}, 1000000, 3}};
  std::stable_sort(plan.decisions.begin(), plan.decisions.end(), issued_before<Decision>);
  plan.swaps = 2;
  ReplayNotes notes;
  plan.replay_s = replay_plan(f.p, pat, plan, budget, false, &notes);
  EXPECT_NEAR(plan.replay_s, 0.007, 1e-9);  // 5.5 ms of kernels, 1.5 ms waiting for room
  ASSERT_EQ(notes.cancelled.size(), 1u);
  EXPECT_EQ(notes.cancelled[0].second, pat.local_tensors[0]);
  const Plan refined = refine_from_replay(f.p, pat, plan, budget, false);
  EXPECT_NEAR(refined.replay_s, 0.0055, 1e-9);
  ASSERT_EQ(refined.decisions.size(), 1u);
  EXPECT_EQ(refined.decisions[0].act, Act::Evict);
  EXPECT_EQ(refined.decisions[0].tensor.index, 1u);  // Y's, as it was
  EXPECT_EQ(refined.decisions[0].at, 4u);
  EXPECT_EQ(refined.swaps, 1u);
  EXPECT_EQ(refined.refined_moves, 1u);
}

// cancelled_swaps pairs a cancellation with the planned swap whose eviction it cancelled, and
// with nothing where no swap of the plan was cancelled there. A is the toy's tensor (accessed at
// positions 1 and 8); the decision lists are made by hand, one per case.
TEST(Plan, ACancellationIsPairedWithTheSwapItCancelled) {
  const Fixture f = prepare_toy(2, 1.0, 2.0, 4.0, 2.0);
  const learn::Pattern pat = second_iteration(f);
  const std::vector<TensorRef> refs = tensor_refs(pat, f.t.tensors.size());
  const std::uint32_t a = pat.local_tensors[0];
  const auto pairs = [&](std::vector<Decision> decisions, std::vector<std::uint32_t> cancelled_at) {
    Plan plan;
    for (Decision& d : decisions) d.tensor = refs[a], d.bytes = 1'000'000;
    plan.decisions = std::move(decisions);
    ReplayNotes notes;
    for (std::uint32_t pos : cancelled_at) notes.cancelled.emplace_back(pat.events[pos].trace_event, a);
    return cancelled_swaps(pat, refs, plan, notes);
  };
  using Pairs = std::vector<SwapIndices>;
  // Out after fwd, back before bwd; cancelled while out (twice: listed once).
  EXPECT_EQ(pairs({{2, Act::Evict, {}, 0, 1}, {7, Act::Prefetch, {}, 0, 8}}, {5, 5}), (Pairs{{0, 1}}));
  // The swap ran its course (back at 4) before the cancellation at 6: the pressure rules evicted
  // A again and cancelled that. Not the plan's swap.
  EXPECT_EQ(pairs({{2, Act::Evict, {}, 0, 1}, {4, Act::Prefetch, {}, 0, 8}}, {6}), Pairs{});
  // An eviction with no prefetch before the next one (brought back on demand), cancelled at 3:
  // the prefetch at 7 brings back the later swap (out at 5), not this one.
  EXPECT_EQ(pairs({{2, Act::Evict, {}, 0, 1}, {5, Act::Evict, {}, 0, 1}, {7, Act::Prefetch, {}, 0, 8}}, {3}), Pairs{});
  // ... while a cancellation at 6 is the later swap's.
  EXPECT_EQ(pairs({{2, Act::Evict, {}, 0, 1}, {5, Act::Evict, {}, 0, 1}, {7, Act::Prefetch, {}, 0, 8}}, {6}), (Pairs{{1, 2}}));
  // A swap across the boundary (out after bwd, back at 1 of the next iteration), cancelled at
  // 10: never taken, since its prefetch serves the next iteration.
  EXPECT_EQ(pairs({{1, Act::Prefetch, {}, 0, 1}, {9, Act::Evict, {}, 0, 8}}, {10}), Pairs{});
}

// The simulator's replay of a plan times the iteration as the simulated job would run it: the
// hidden swap costs nothing (the iteration's 10 ms of kernels), while with no plan the pressure
// rules drop A at B's allocation and bwd waits for fwd to be re-run.
TEST(Plan, ReplayTimesAPlanAsTheSimulatorRunsIt) {
  Fixture f = prepare_toy(2, 1.0, 2.0, 4.0, 2.0);
  const learn::Pattern pat = second_iteration(f);
  const PlanOptions opt = toy_options();
  const Plan plan = make_plan(f.p, pat, opt);
  ASSERT_TRUE(plan.fits);
  const double planned = replay_plan(f.p, pat, plan, opt.budget_bytes, true);
  EXPECT_NEAR(planned, 0.010, 1e-9);
  const double passive = replay_plan(f.p, pat, Plan{}, opt.budget_bytes, true);
  EXPECT_GE(passive, planned + 0.001 - 1e-9);  // A dropped at B's allocation, fwd re-run for bwd
  EXPECT_LT(passive, 1.0);  // finite: the pressure rules alone are feasible, only slower
}

}  // namespace
}  // namespace capuchin::plan
