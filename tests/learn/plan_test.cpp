// The capuchin planner and policy: plans that fit the budget in simulation, swaps hidden
// behind compute on hand-made traces, recomputation when swapping cannot hide, feedback
// moving a late in-trigger, relearning after a changed pattern, and the evaluation goals
// on the real traces (simulated, GPU profiles h200 and p100).
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <optional>
#include <string>

#include "capuchin/plan.hpp"
#include "capuchin/segment_plan.hpp"
#include "capuchin/trace_repeat.hpp"
#include "capuchin/victims.hpp"
#include "../sim/trace_files.hpp"  // kSanitized
#include "plan_toy.hpp"

namespace capuchin::plan {
namespace {

namespace fs = std::filesystem;
using namespace toy;

TEST(Plan, HidesASwapBehindALongMiddle) {
  Fixture f = prepare_toy(2, 1.0, 2.0, 4.0, 2.0);
  // Iteration 2 = events after the first sync.
  const learn::Pattern pat = learn::make_pattern(f.t, trace::Iteration{2, 13, 24});
  PlanOptions opt;
  opt.budget_bytes = 1'600'000;  // A and B (2 MB) do not fit together: A must leave
  opt.baseline_bytes = 2000;
  opt.margin = 0;
  const Plan plan = make_plan(f.p, pat, opt);
  EXPECT_TRUE(plan.fits);
  EXPECT_EQ(plan.natural_peak_bytes, 2'002'000u);
  ASSERT_EQ(plan.decisions.size(), 2u);
  EXPECT_EQ(plan.decisions[0].act, Act::Evict);
  EXPECT_EQ(plan.decisions[0].reason, Reason::FreeTime);
  EXPECT_EQ(plan.decisions[1].act, Act::Prefetch);
  // Free time: 2 + 4 + 2 ms between the accesses - 1 ms out - 1 ms in = 6 ms.
  EXPECT_NEAR(plan.decisions[0].free_time_s, 0.006, 1e-9);
  EXPECT_EQ(plan.decisions[0].at, 2u);  // right after fwd
  EXPECT_EQ(plan.decisions[1].at, 7u);  // in-trigger: post, once B is freed
  EXPECT_EQ(plan.expected_overhead_s, 0.0);
  EXPECT_LE(plan.planned_peak_bytes, 1'600'000u);
}

TEST(Plan, TimesSwapsAtTheLinkEachWayAsMeasured) {
  // HidesASwapBehindALongMiddle's iteration, with copies to the host at a measured share of the
  // link. A must be off before B is allocated, 2 ms (pre) after fwd ends. At 0.8 of the link
  // its copy out takes 1.25 ms: the swap is planned, its free time 8 - 1.25 - 1 = 5.75 ms, and
  // the plan fits. At a quarter it takes 4 ms: A is still on the device when B is allocated
  // (position 3), which the plan now knows (at the profile's rate it would believe it fits).
  Fixture f = prepare_toy(2, 1.0, 2.0, 4.0, 2.0);
  const learn::Pattern pat = learn::make_pattern(f.t, trace::Iteration{2, 13, 24});
  PlanOptions opt;
  opt.budget_bytes = 1'600'000;
  opt.baseline_bytes = 2000;
  opt.margin = 0;
  f.p.eff.swap_out_link = 0.8;
  const Plan measured = make_plan(f.p, pat, opt);
  EXPECT_TRUE(measured.fits);
  ASSERT_EQ(measured.swaps, 1u);
  EXPECT_NEAR(measured.decisions[0].free_time_s, 0.00575, 1e-9);
  f.p.eff.swap_out_link = 0.25;
  const Plan slow = make_plan(f.p, pat, opt);
  EXPECT_FALSE(slow.fits);
  EXPECT_EQ(slow.unfit_position, 3u);
}

TEST(Plan, RecomputesWhenSwappingCannotHide) {
  Fixture f = prepare_toy(2, 0.5, 0.25, 0.5, 0.25);  // a 2 ms round trip cannot hide in 1 ms
  const learn::Pattern pat = learn::make_pattern(f.t, trace::Iteration{2, 13, 24});
  PlanOptions opt;
  opt.budget_bytes = 1'600'000;
  opt.baseline_bytes = 2000;
  opt.margin = 0;
  const Plan plan = make_plan(f.p, pat, opt);
  EXPECT_TRUE(plan.fits);
  ASSERT_EQ(plan.recomputes, 1u);
  EXPECT_EQ(plan.swaps, 0u);
  // Re-running fwd (0.5 ms) is cheaper than a swap that would stall about 1 ms.
  EXPECT_NEAR(plan.expected_overhead_s, 0.0005, 1e-9);
  EXPECT_NE(plan_to_json(plan, pat, f.t).find("\"action\":\"recompute\""), std::string::npos);
}

TEST(Plan, ReportsAnImpossibleBudget) {
  Fixture f = prepare_toy(2, 1.0, 2.0, 4.0, 2.0);
  const learn::Pattern pat = learn::make_pattern(f.t, trace::Iteration{2, 13, 24});
  PlanOptions opt;
  opt.budget_bytes = 900'000;  // below what one kernel needs at once
  opt.baseline_bytes = 2000;
  const Plan plan = make_plan(f.p, pat, opt);
  EXPECT_FALSE(plan.fits);
}

TEST(Plan, FeedbackMovesALateInTriggerEarlier) {
  // A (1 MB) is swapped out during `gap` and `mid` and must be back for `use`; two 1 ms kernels precede
  // `use`, so a just-in-time swap-in starts at `late2`, and 1 ms of learned lead moves it
  // to `late1`.
  auto t = trace::parse_trace(R"({"format":"capuchin-trace","version":1}
{"op":"alloc","id":0,"bytes":1000}
{"op":"alloc","id":1,"bytes":1000000}
{"op":"kernel","name":"make","reads":[0],"writes":[1],"dur_ns":1000000}
{"op":"kernel","name":"gap","reads":[0],"writes":[0],"dur_ns":1500000}
{"op":"alloc","id":2,"bytes":1000000}
{"op":"kernel","name":"mid","reads":[0],"writes":[2],"dur_ns":4000000}
{"op":"free","id":2}
{"op":"kernel","name":"late1","reads":[0],"writes":[0],"dur_ns":1000000}
{"op":"kernel","name":"late2","reads":[0],"writes":[0],"dur_ns":1000000}
{"op":"kernel","name":"use","reads":[1],"writes":[0],"dur_ns":1000000}
{"op":"free","id":1}
{"op":"sync"}
)");
  ASSERT_TRUE(t) << t.error().message();
  auto p = sim::prepare(*t, toy_gpu(), exact());
  ASSERT_TRUE(p);
  const learn::Pattern pat = learn::make_pattern(*t, trace::Iteration{1, 1, static_cast<std::uint32_t>(t->events.size())});
  PlanOptions opt;
  opt.budget_bytes = 1'500'000;
  opt.baseline_bytes = 1000;
  opt.margin = 0;
  opt.allow_recompute = false;  // `make` reads 0, which later kernels write: not recomputable anyway
  const Plan before = make_plan(*p, pat, opt);
  ASSERT_TRUE(before.fits);
  ASSERT_EQ(before.swaps, 1u);
  const Decision in = before.decisions.back();
  ASSERT_EQ(in.act, Act::Prefetch);
  EXPECT_EQ(t->names[t->events[pat.events[in.at].trace_event].name], "late2");
  opt.extra_lead_s[{in.tensor, in.access}] = 0.001;  // it arrived 1 ms late last time
  const Plan after = make_plan(*p, pat, opt);
  ASSERT_EQ(after.swaps, 1u);
  EXPECT_EQ(t->names[t->events[pat.events[after.decisions.back().at].trace_event].name], "late1");
}

// A chain A -> B -> C of cheap activations. Dropping A, then B (whose recomputation before
// `bwd_b` must recompute A first) fits a 3 MB budget only if A is dropped again after serving
// B's recomputation: A's own use is after a 2.5 MB tensor that leaves no room for it. Kept
// from there on (as the paper's lineage recomputation leaves it), A puts `late` over budget.
TEST(Plan, DropsARecomputedInputAgainAfterTheRecomputationItServed) {
  auto t = trace::parse_trace(R"({"format":"capuchin-trace","version":1}
{"op":"alloc","id":0,"bytes":1000}
{"op":"alloc","id":1,"bytes":1000}
{"op":"alloc","id":2,"bytes":1000000}
{"op":"kernel","name":"kA","reads":[0],"writes":[2],"dur_ns":100000}
{"op":"alloc","id":3,"bytes":1000000}
{"op":"kernel","name":"kB","reads":[2],"writes":[3],"dur_ns":100000}
{"op":"alloc","id":4,"bytes":1000000}
{"op":"kernel","name":"kC","reads":[3],"writes":[4],"dur_ns":500000}
{"op":"alloc","id":5,"bytes":1500000}
{"op":"kernel","name":"kM1","reads":[0],"writes":[5],"dur_ns":100000}
{"op":"kernel","name":"kM2","reads":[5],"writes":[1],"dur_ns":100000}
{"op":"free","id":5}
{"op":"kernel","name":"bwd_c","reads":[4],"writes":[1],"dur_ns":100000}
{"op":"free","id":4}
{"op":"alloc","id":6,"bytes":2000000}
{"op":"kernel","name":"kN1","reads":[0],"writes":[6],"dur_ns":100000}
{"op":"kernel","name":"kN2","reads":[6],"writes":[1],"dur_ns":100000}
{"op":"free","id":6}
{"op":"kernel","name":"bwd_b","reads":[3],"writes":[1],"dur_ns":100000}
{"op":"free","id":3}
{"op":"alloc","id":7,"bytes":2500000}
{"op":"kernel","name":"late1","reads":[0],"writes":[7],"dur_ns":100000}
{"op":"kernel","name":"late2","reads":[7],"writes":[1],"dur_ns":100000}
{"op":"free","id":7}
{"op":"kernel","name":"bwd_a","reads":[2],"writes":[1],"dur_ns":100000}
{"op":"free","id":2}
{"op":"sync"}
)");
  ASSERT_TRUE(t) << t.error().message();
  auto p = sim::prepare(*t, toy_gpu(), exact());
  ASSERT_TRUE(p);
  const learn::Pattern pat = learn::make_pattern(*t, trace::Iteration{1, 2, static_cast<std::uint32_t>(t->events.size())});
  PlanOptions opt;
  opt.budget_bytes = 3'000'000;
  opt.baseline_bytes = 2000;
  opt.margin = 0;
  opt.allow_swap = false;
  opt.redrop_chains = false;
  const Plan kept = make_plan(*p, pat, opt);
  EXPECT_FALSE(kept.fits);
  opt.redrop_chains = true;
  const Plan plan = make_plan(*p, pat, opt);
  EXPECT_TRUE(plan.fits);
  EXPECT_LE(plan.planned_peak_bytes, 3'000'000u);
  EXPECT_EQ(plan.recomputes, 2u);  // A and B; A is recomputed twice (for B, then for bwd_a)
  int drops_of_a = 0;
  for (const Decision& d : plan.decisions)
    if (d.act == Act::Drop && d.tensor.local && pat.local_tensors[d.tensor.index] == 2) ++drops_of_a;
  EXPECT_EQ(drops_of_a, 2);
}

// Appends events to a segment as the executor records them: each its own signature; a
// kernel's reads then writes (or, as a touch, every tensor it touched) in the job's id list.
struct SegmentBuilder {
  SegmentJob& j;
  void event(trace::Op op, std::uint64_t id, std::uint64_t bytes) {
    SegmentEvent e;
    e.op = static_cast<std::uint8_t>(op);
    e.id = id;
    e.bytes = bytes;
    e.sig = j.events.size() + 1;
    j.events.push_back(e);
  }
  void kernel(std::uint32_t name, const std::vector<std::uint64_t>& r, const std::vector<std::uint64_t>& w, double ms, bool touch) {
    SegmentEvent e;
    e.op = static_cast<std::uint8_t>(trace::Op::Kernel);
    e.name = name;
    e.ids_off = static_cast<std::uint32_t>(j.ids.size());
    e.touch = touch;
    e.nreads = static_cast<std::uint32_t>(r.size());
    e.nwrites = static_cast<std::uint32_t>(w.size());
    e.dur_ns = static_cast<std::uint64_t>(ms * 1e6);
    e.sig = j.events.size() + 1;
    j.ids.insert(j.ids.end(), r.begin(), r.end());
    j.ids.insert(j.ids.end(), w.begin(), w.end());
    j.events.push_back(e);
  }
};

// A segment as the executor sends it: A (1 MB, made by `make`) must be off the device while
// `mid`'s 1 MB lives (a 1.5 MB budget), and back for `use`.
SegmentJob late_use_job() {
  using trace::Op;
  SegmentJob j;
  j.names = {"make", "gap", "mid", "late1", "late2", "use"};
  j.carried = {{0, 1000}};
  j.budget = 1'500'000;
  SegmentBuilder b{j};
  auto ev = [&](Op op, std::uint64_t id, std::uint64_t bytes) { b.event(op, id, bytes); };
  auto kernel = [&](std::uint32_t name, std::vector<std::uint64_t> r, std::vector<std::uint64_t> w, double ms) {
    b.kernel(name, r, w, ms, false);
  };
  ev(Op::Alloc, 1, 1'000'000);  // 0
  kernel(0, {0}, {1}, 1.0);       // 1
  kernel(1, {0}, {0}, 1.5);       // 2
  ev(Op::Alloc, 2, 1'000'000);  // 3
  kernel(2, {0}, {2}, 4.0);       // 4
  ev(Op::Free, 2, 0);           // 5
  kernel(3, {0}, {0}, 1.0);       // 6
  kernel(4, {0}, {0}, 1.0);       // 7
  kernel(5, {1}, {0}, 1.0);       // 8: the access A's swap-in serves
  ev(Op::Free, 1, 0);           // 9
  ev(Op::Sync, 0, 0);           // 10
  return j;
}

// The same through plan_segment, as the executor and the simulator's policy ask for plans:
// a late arrival reported at a segment position moves that swap-in earlier.
TEST(Plan, SegmentFeedbackMovesALateInTriggerEarlier) {
  SegmentJob j = late_use_job();
  const PlanModel model{toy_gpu(), exact()};
  auto prefetch_at = [&](const SegmentJob& job) -> int {
    auto p = plan_segment(job, &model);
    if (!p) return -1;
    for (const SegmentDecision& d : p->decisions)
      if (d.act == Act::Prefetch && d.local && !d.prev && d.k == 0) return static_cast<int>(d.at);
    return -2;
  };
  EXPECT_EQ(prefetch_at(j), 7);
  j.late.push_back(LateArrival{true, false, 0, 0, 8, 0.001});
  EXPECT_EQ(prefetch_at(j), 6);
}

// Anytime: plan_segment hands the replay-chosen plan to on_chosen before refining it, once,
// and returns a plan that replays no slower; a quick job (the planner's own plan) has no
// choice to hand over.
TEST(Plan, SegmentHandsOverTheChosenPlanBeforeRefiningIt) {
  SegmentJob j = late_use_job();
  const PlanModel model{toy_gpu(), exact()};
  std::vector<SegmentPlan> chosen;
  j.on_chosen = [&](const SegmentPlan& p) { chosen.push_back(p); };
  auto final_plan = plan_segment(j, &model);
  ASSERT_TRUE(final_plan) << final_plan.error();
  ASSERT_EQ(chosen.size(), 1u);
  EXPECT_EQ(chosen[0].refined_moves, 0u);
  EXPECT_GT(chosen[0].replay_s, 0.0);
  EXPECT_FALSE(chosen[0].decisions.empty());
  EXPECT_LE(final_plan->replay_s, chosen[0].replay_s);
  EXPECT_EQ(final_plan->refined_moves == 0, final_plan->replay_s == chosen[0].replay_s);
  chosen.clear();
  j.quick = true;
  ASSERT_TRUE(plan_segment(j, &model));
  EXPECT_TRUE(chosen.empty());
}

// A segment where recomputing A (made in 0.01 ms from a carried tensor) beats swapping it
// out and back (1 ms each way) around `mid`, which needs its room. With `touched`, a kernel
// whose writes the executor does not know touches A after its producer; `for_good`: they will
// stay unknown (no verdict can come for its launch shape), so the executor keeps no producer
// for A (write_sets.hpp) and a drop of A could only become a swap-out whose swap-in comes on
// demand. Seen: the executor ran resnet18 at 0.5 with such plans at 60 ms per iteration against
// their replayed 33. A verdict still to come (a probation pending) is planned as replayable.
SegmentJob recompute_job(bool touched, bool for_good = false) {
  using trace::Op;
  SegmentJob j;
  j.names = {"make", "bump", "mid", "use"};
  j.carried = {{0, 1000}};
  j.budget = 1'500'000;
  j.allow_recompute = true;
  SegmentBuilder b{j};
  auto kernel = [&](std::uint32_t name, std::vector<std::uint64_t> r, std::vector<std::uint64_t> w, double ms, bool touch) {
    b.kernel(name, r, w, ms, touch);
  };
  auto ev = [&](Op op, std::uint64_t id, std::uint64_t bytes) { b.event(op, id, bytes); };
  ev(Op::Alloc, 1, 1'000'000);
  kernel(0, {0}, {1}, 0.01, false);
  if (touched) {
    kernel(1, {1}, {}, 0.01, true);
    j.events.back().unreplayable = for_good;
  }
  ev(Op::Alloc, 2, 1'000'000);
  kernel(2, {0}, {2}, 4.0, false);
  ev(Op::Free, 2, 0);
  kernel(3, {1}, {0}, 1.0, false);
  ev(Op::Free, 1, 0);
  ev(Op::Sync, 0, 0);
  return j;
}

TEST(Plan, NothingAKernelOfUnknownWritesTouchedIsRecomputed) {
  const PlanModel model{toy_gpu(), exact()};
  auto drops = [&](const SegmentJob& j) -> int {
    auto p = plan_segment(j, &model);
    if (!p) return -1;
    return static_cast<int>(std::count_if(p->decisions.begin(), p->decisions.end(), [](const SegmentDecision& d) { return d.act == Act::Drop; }));
  };
  for (bool keep : {true, false}) {
    SegmentJob plain = recompute_job(false), pending = recompute_job(true), never = recompute_job(true, true);
    plain.keep_plan = pending.keep_plan = never.keep_plan = keep;
    EXPECT_GT(drops(plain), 0) << "keep_plan " << keep;  // the control: recomputing A is planned
    EXPECT_GT(drops(pending), 0) << "keep_plan " << keep;
    EXPECT_EQ(drops(never), 0) << "keep_plan " << keep;
  }
}

// tests/data's resnet18 trace, its last iteration repeated `iters` times, prepared for `gpu`;
// the prepared trace points at the trace, so both live in one object (null when a step fails).
struct PreparedRun {
  trace::Trace trace;
  sim::PreparedTrace prep;
};
std::unique_ptr<PreparedRun> repeated(const fs::path& path, unsigned iters, const char* gpu) {
  auto t = trace::load_trace(path.string());
  if (!t) return nullptr;
  auto rep = trace::repeat_last_iteration(*t, iters);
  auto g = sim::find_gpu_profile(gpu);
  if (!rep || !g) return nullptr;
  auto run = std::make_unique<PreparedRun>();
  run->trace = std::move(*rep);
  auto p = sim::prepare(run->trace, *g);
  if (!p) return nullptr;
  run->prep = std::move(*p);
  return run;
}
std::unique_ptr<PreparedRun> resnet18_repeated(unsigned iters, const char* gpu) {
  return repeated(fs::path(CAPUCHIN_TEST_DATA) / "resnet18-b16.jsonl.gz", iters, gpu);
}

// At one position a plan issues its swap-ins last: a swap-in issued before the eviction
// beside it found no room and was skipped (the executor on simcuda, resnet18 at 0.5:
// eight 9 MiB swap-ins at one position, each then served on demand). The plans the `capuchin`
// policy follows (plan_segment, written out by CAPUCHIN_PLAN_DUMP) for a real model on the
// simcuda profile, which put both kinds at some positions (so the check is not vacuous).
TEST(Plan, SwapInsComeLastAtTheirPosition) {
  const auto run = resnet18_repeated(4, "simcuda");
  ASSERT_TRUE(run);
  const sim::PreparedTrace* p = &run->prep;
  const fs::path dir = fs::temp_directory_path() / ("capuchin-plan-order-" + std::to_string(::getpid()));
  fs::remove_all(dir);
  // The user's own setting, if any, comes back afterwards (ctest runs each test in a process
  // of its own; a direct run of the binary does not).
  const char* user_dump = std::getenv("CAPUCHIN_PLAN_DUMP");
  const std::string kept_dump = user_dump != nullptr ? user_dump : "";
  // A folder each: plans are named by segment. Under a sanitizer the middle budget only (CI
  // time: 21 s under ASan for the three; the order is checked the same way at each).
  const std::vector<int> percents = sim::kSanitized ? std::vector<int>{50} : std::vector<int>{60, 50, 40};
  for (int percent : percents) {
    const fs::path sub = dir / std::to_string(percent);
    fs::create_directories(sub);
    ::setenv("CAPUCHIN_PLAN_DUMP", sub.c_str(), 1);
    auto pol = make_capuchin_policy();
    sim::SimOptions o;
    o.budget_bytes = p->liveness.peak_bytes / 100 * static_cast<std::uint64_t>(percent);
    (void)sim::simulate(*p, *pol, o);
  }
  if (user_dump != nullptr) ::setenv("CAPUCHIN_PLAN_DUMP", kept_dump.c_str(), 1);
  else ::unsetenv("CAPUCHIN_PLAN_DUMP");
  auto out = [](const nlohmann::json& d) { return d["action"] != "prefetch"; };
  int plans = 0, shared_positions = 0;
  for (const auto& f : fs::recursive_directory_iterator(dir)) {
    if (f.path().filename().string().rfind("plan-", 0) != 0) continue;
    std::ifstream in(f.path());
    const nlohmann::json d = nlohmann::json::parse(in)["decisions"];
    ++plans;
    for (std::size_t i = 1; i < d.size(); ++i) {
      if (d[i - 1]["at"] != d[i]["at"]) continue;
      if (out(d[i - 1]) != out(d[i])) ++shared_positions;
      EXPECT_FALSE(!out(d[i - 1]) && out(d[i])) << f.path() << " at " << d[i]["at"] << ": " << d[i - 1]["action"] << " before " << d[i]["action"];
    }
  }
  fs::remove_all(dir);
  EXPECT_GT(plans, 0);
  EXPECT_GT(shared_positions, 0);
}

sim::SimResult run(const sim::PreparedTrace& p, std::uint64_t budget) {
  auto pol = make_capuchin_policy();
  sim::SimOptions o;
  o.budget_bytes = budget;
  return sim::simulate(p, *pol, o);
}

TEST(Policy, FollowsThePlanOnceTheIterationIsLearned) {
  // The iteration is learned once it has repeated (during iteration 3), planned then, and the
  // plan is followed from the next boundary: iterations 1-3 are passive (one on-demand
  // swap-in of A each), iterations 4-6 hide the swap entirely.
  Fixture f = prepare_toy(6, 1.0, 2.0, 4.0, 2.0);
  const sim::SimResult r = run(f.p, 1'600'000);
  ASSERT_TRUE(r.feasible) << r.where.reason;
  ASSERT_EQ(r.iteration_time_s.size(), 0u);  // the toy trace has no iter markers
  const double ideal = sim::ideal_time_s(f.p);
  EXPECT_LE(r.total_time_s, ideal + 3 * 0.001 + 1e-9);
  EXPECT_GT(r.total_time_s, ideal + 2 * 0.001);  // the passive iterations did stall
  EXPECT_LE(r.peak_bytes, 1'600'000u);
  EXPECT_EQ(r.rejected_actions, 0u);
}

TEST(Policy, AChangedPatternStaysWithinTheBudget) {
  // Iterations 1-3 as before, then B grows to 1.3 MB: the plan for iteration 4 was made for
  // 1 MB. The policy must notice (the allocation differs: a few places followed on, or learned
  // again) and stay within the budget whatever plan it follows.
  std::string text = toy_trace(3, 1.0, 2.0, 4.0, 2.0);
  std::string more = toy_trace(5, 1.0, 2.0, 4.0, 2.0).substr(text.size());
  // toy_trace(5) = toy_trace(3) + two more iterations; resize their B allocations.
  std::size_t pos = 0;
  int n = 0;
  const std::string from = R"(,"bytes":1000000})", to = R"(,"bytes":1300000})";
  while ((pos = more.find(from, pos)) != std::string::npos) {
    if (n++ % 2 == 1) more.replace(pos, from.size(), to);
    pos += from.size();
  }
  auto t = trace::parse_trace(text + more);
  ASSERT_TRUE(t) << t.error().message();
  auto p = sim::prepare(*t, toy_gpu(), exact());
  ASSERT_TRUE(p);
  const sim::SimResult r = run(*p, 1'900'000);
  ASSERT_TRUE(r.feasible) << r.where.reason;
  EXPECT_EQ(r.rejected_actions, 0u);
  EXPECT_LE(r.peak_bytes, 1'900'000u);
}

// A swap that cannot hide (fwd 0.5 ms, then 0.75 ms until B's allocation and 0.25 ms after B's
// free: a 1 ms copy fits neither) leaves the plan over the budget; waits where the copies need
// them (before B's allocation for A's copy out, before bwd for its copy in) let the same swap
// fit, and the plan counts them as its cost.
TEST(Plan, PlannedStallsLetASwapFitWhereTheTimelineHasNoRoom) {
  Fixture f = prepare_toy(2, 0.5, 0.25, 0.5, 0.25);
  const learn::Pattern pat = second_iteration(f);
  PlanOptions opt = swap_only_toy_options();
  const Plan without = make_plan(f.p, pat, opt);
  EXPECT_FALSE(without.fits);
  opt.stall_s.assign(pat.events.size(), 0.0);
  // Before alloc B: A's copy out ends at 1.751 ms (it queues behind the weights' 1 us swap,
  // planned first for its larger free time).
  opt.stall_s[3] = 0.0013;
  opt.stall_s[7] = 0.001;  // before post, once B is freed: A's copy in lands before bwd
  const Plan with = make_plan(f.p, pat, opt);
  EXPECT_TRUE(with.fits);
  EXPECT_GE(with.swaps, 1u);
  EXPECT_NEAR(with.planned_stall_s, 0.0023, 1e-12);
  EXPECT_GE(with.expected_overhead_s, 0.0023 - 1e-12);
  EXPECT_LE(with.planned_peak_bytes, 1'600'000u);
}

// The same toy with the kernels 4 times as long (PlanOptions::time_scale): on that timeline
// A's 1 ms copy out ends (3 ms) as B is allocated and its copy in runs while post does, so the
// swap that the ideal timeline cannot place is planned, hidden there; the replay (which runs the
// kernels at their own times) then says what it costs.
TEST(Plan, AStretchedTimelinePlacesTheSwapTheLinkCannotHideInTheComputeTime) {
  Fixture f = prepare_toy(2, 0.5, 0.25, 0.5, 0.25);
  PlanOptions opt = swap_only_toy_options();
  const auto evicts_a = [](const Plan& p) {
    return std::any_of(p.decisions.begin(), p.decisions.end(),
                       [](const Decision& d) { return d.act == Act::Evict && d.bytes == 1'000'000; });
  };
  for (const double scale : {1.0, 4.0}) {
    SCOPED_TRACE(scale);
    opt.time_scale = scale;
    const Plan plan = make_plan(f.p, second_iteration(f), opt);
    EXPECT_EQ(plan.time_scale, scale);
    EXPECT_EQ(plan.fits, scale == 4.0);
    EXPECT_EQ(evicts_a(plan), scale == 4.0);
    if (scale == 1.0) continue;
    EXPECT_LE(plan.planned_peak_bytes, 1'600'000u);
    EXPECT_EQ(plan.expected_overhead_s, 0.0) << "hidden on its own timeline";
    // Replayed at the kernels' own times the copies make the job wait, but it runs in the budget.
    EXPECT_TRUE(std::isfinite(replay_plan(f.p, second_iteration(f), plan, opt.budget_bytes, false)));
  }
}

// Optimizer state S (1 MB, carried across iterations) is read and written by the step at the
// iteration's end, then only a sync follows: a copy out after the step cannot end within the
// iteration. Mid-iteration, A and B (1 MB each, gaps of 0.05 ms) meet S over a 2.2 MB budget.
// Without delay_wrap_evictions S's swap is not planned, and only late swaps of A or B are left;
// with it, S is evicted at the next iteration's start (its copy out ends within `pre`, 2 ms) and
// brought back during `post` (2 ms), hidden: the plan fits at no cost.
TEST(Plan, OptimizerStateIsEvictedInTheNextIterationWhenItsCopyOutCannotEndBefore) {
  std::string s = R"({"format":"capuchin-trace","version":1})" "\n";
  const auto k = [](const char* name, const std::string& r, const std::string& w, const char* ns) {
    return std::string(R"({"op":"kernel","name":")") + name + R"(","reads":[)" + r + R"(],"writes":[)" + w +
           R"(],"dur_ns":)" + ns + "}\n";
  };
  s += R"({"op":"alloc","id":0,"bytes":1000})" "\n";     // w, small
  s += R"({"op":"alloc","id":1,"bytes":1000000})" "\n";  // S
  for (int i = 0; i < 2; ++i) {
    const std::string a = std::to_string(2 + 2 * i), b = std::to_string(3 + 2 * i);
    s += R"({"op":"alloc","id":)" + a + R"(,"bytes":1000000})" "\n";
    s += k("pre", "0", "0", "2000000");
    s += k("k1", "0", a, "50000");
    s += R"({"op":"alloc","id":)" + b + R"(,"bytes":1000000})" "\n";
    s += k("k2", a, b, "50000");
    s += k("k3", a + "," + b, "0", "50000");
    s += R"({"op":"free","id":)" + a + "}\n";
    s += R"({"op":"free","id":)" + b + "}\n";
    s += k("post", "0", "0", "2000000");
    s += k("step1", "1", "0", "50000");
    s += k("step2", "0", "1", "50000");
    s += R"({"op":"sync"})" "\n";
  }
  Fixture f = prepare_text(s);
  const learn::Pattern pat = learn::make_pattern(f.t, trace::Iteration{2, 14, 26});
  PlanOptions opt;
  opt.budget_bytes = 2'200'000;
  opt.baseline_bytes = 1'001'000;
  opt.margin = 0;
  opt.allow_recompute = false;
  const auto evicts_s = [](const Plan& p) {
    return std::find_if(p.decisions.begin(), p.decisions.end(),
                        [](const Decision& d) { return d.act == Act::Evict && !d.tensor.local; });
  };
  const Plan without = make_plan(f.p, pat, opt);
  EXPECT_EQ(evicts_s(without), without.decisions.end());
  EXPECT_EQ(without.delayed_evictions, 0u);
  EXPECT_TRUE(!without.fits || without.expected_overhead_s > 0);
  opt.delay_wrap_evictions = true;
  const Plan with = make_plan(f.p, pat, opt);
  EXPECT_TRUE(with.fits);
  EXPECT_EQ(with.expected_overhead_s, 0.0);
  EXPECT_EQ(with.delayed_evictions, 1u);
  EXPECT_EQ(nlohmann::json::parse(plan_to_json(with, pat, f.t)).value("delayed_evictions", -1), 1);  // what the plan dump says
  EXPECT_LE(with.planned_peak_bytes, 2'200'000u);
  const auto ev = evicts_s(with);
  ASSERT_NE(ev, with.decisions.end());
  EXPECT_EQ(ev->at, 1u);        // before `pre`: the last position issued when its copy can start (0 s)
  EXPECT_EQ(ev->access, 10u);   // the access it follows: step2, in the iteration before
  EXPECT_EQ(ev->reason, Reason::CrossIteration);
  const auto in = std::find_if(with.decisions.begin(), with.decisions.end(),
                               [](const Decision& d) { return d.act == Act::Prefetch && !d.tensor.local; });
  ASSERT_NE(in, with.decisions.end());
  EXPECT_EQ(in->access, 9u);    // served: step1
  EXPECT_GT(in->at, 5u);        // after k3, the last position that needs the room
  EXPECT_LE(in->at, 9u);
  // The simulator's replay of the iteration (S resident as it starts, evicted and brought back
  // by the plan): feasible, as fast as the kernels alone (nothing waits), and faster than the
  // plan without the option.
  EXPECT_TRUE(with.off_at_start.empty());
  const double replayed = replay_plan(f.p, pat, with, opt.budget_bytes, false);
  ASSERT_TRUE(std::isfinite(replayed));
  EXPECT_NEAR(replayed, 0.00425, 1e-9);  // pre 2 + k1..k3 0.15 + post 2 + step1, step2 0.1 ms: no wait
  EXPECT_LT(replayed, replay_plan(f.p, pat, without, opt.budget_bytes, false));
}

// The link priced (PlanOptions::link_price): the toy's swap of A hides behind the middle, so
// the free-time phase takes it, and the link moves 2 MB for it; priced at a second of compute
// per second of copy, re-running fwd (1 ms) costs less than its two 1 ms copies, and A is
// recomputed instead, with the link left free.
TEST(Plan, APricedLinkRecomputesWhatAHiddenSwapWouldTakeTheLinkFrom) {
  Fixture f = prepare_toy(2, 1.0, 2.0, 4.0, 2.0);
  const learn::Pattern pat = second_iteration(f);
  PlanOptions opt = toy_options();
  const Plan free_link = make_plan(f.p, pat, opt);
  ASSERT_TRUE(free_link.fits);
  EXPECT_EQ(free_link.swaps, 1u);
  EXPECT_EQ(free_link.recomputes, 0u);
  opt.link_price = 1.0;
  const Plan priced = make_plan(f.p, pat, opt);
  ASSERT_TRUE(priced.fits);
  EXPECT_EQ(priced.swaps, 0u);
  EXPECT_EQ(priced.recomputes, 1u);
  EXPECT_NEAR(priced.expected_overhead_s, 0.001, 1e-9);  // fwd re-run
  opt.link_price = 0.25;  // 0.5 ms of copies priced: the swap is cheaper again
  EXPECT_EQ(make_plan(f.p, pat, opt).swaps, 1u);
}

// PlanOptions::cover_weighted. One iteration (positions): 0 alloc X, 1 kx writes X (1 ms),
// 2 alloc Y, 3 ky writes Y (1.2 ms), 4 alloc Z, 5 kz writes Z, 6-9 k1..k4 read X and Z, 10
// free Z, 11 kend reads X and Y, 12 free X, 13 free Y (1 MB each; W, the weights every
// kernel reads, live throughout). X, Y and Z (3 MB) exceed a 2.5 MB budget at the 6 positions
// 4-9. X is read at 6-9, so only its gap after kx (positions 2-5: two of them over) can go;
// Y's gap after ky covers all six. Per byte, recomputing X (1 ms) ranks before Y (1.2 ms),
// and the plan drops both (2.2 ms); per byte and over-target position covered, Y goes first
// (0.2 against 0.5 ms per MB and position) and alone fits (1.2 ms).
TEST(Plan, CoverWeightedRankingPrefersTheDropThatSpansThePeak) {
  std::string s = R"({"format":"capuchin-trace","version":1})" "\n";
  s += R"({"op":"alloc","id":0,"bytes":1000})" "\n";
  const auto k = [](const char* name, const std::string& r, const std::string& w, int us) {
    return std::string(R"({"op":"kernel","name":")") + name + R"(","reads":[)" + r + R"(],"writes":[)" + w +
           R"(],"dur_ns":)" + std::to_string(us * 1000) + "}\n";
  };
  int id = 1;
  for (int i = 0; i < 2; ++i) {
    const std::string x = std::to_string(id++), y = std::to_string(id++), z = std::to_string(id++);
    s += R"({"op":"alloc","id":)" + x + R"(,"bytes":1000000})" "\n";
    s += k("kx", "0", x, 1000);
    s += R"({"op":"alloc","id":)" + y + R"(,"bytes":1000000})" "\n";
    s += k("ky", "0", y, 1200);
    s += R"({"op":"alloc","id":)" + z + R"(,"bytes":1000000})" "\n";
    s += k("kz", "0", z, 100);
    for (const char* n : {"k1", "k2", "k3", "k4"}) s += k(n, x + "," + z, "", 100);
    s += R"({"op":"free","id":)" + z + "}\n";
    s += k("kend", x + "," + y, "", 100);
    for (const std::string& t : {x, y}) s += R"({"op":"free","id":)" + t + "}\n";
    s += R"({"op":"sync"})" "\n";
  }
  const Fixture f = prepare_text(s);
  const learn::Pattern pat = learn::make_pattern(f.t, trace::Iteration{2, 16, 31});  // the second iteration
  ASSERT_EQ(f.t.events.size(), 31u);
  ASSERT_EQ(pat.events.size(), 15u);
  PlanOptions opt;
  opt.budget_bytes = 2'500'000;
  opt.baseline_bytes = 1000;
  opt.margin = 0;
  opt.allow_swap = false;
  const Plan per_byte = make_plan(f.p, pat, opt);
  EXPECT_TRUE(per_byte.fits);
  EXPECT_EQ(per_byte.recomputes, 2u);
  EXPECT_NEAR(per_byte.expected_overhead_s, 0.0022, 1e-9);
  opt.cover_weighted = true;
  const Plan covered = make_plan(f.p, pat, opt);
  EXPECT_TRUE(covered.fits);
  ASSERT_EQ(covered.recomputes, 1u);
  EXPECT_NEAR(covered.expected_overhead_s, 0.0012, 1e-9);  // ky re-run
  EXPECT_LE(covered.planned_peak_bytes, 2'500'000u);
}

// A forward pass of n activations, each made cheaply from the one before (0.01 ms) from an input
// that is costly to remake (5 ms), then a backward pass reading them in reverse, one iteration:
// the pressure rules alone. The toy link's 1 MB round trip (2 ms) costs far more than any
// activation's recomputation.
std::string chain_trace(int n) {
  std::string s = R"({"format":"capuchin-trace","version":1})" "\n";
  auto alloc = [&](int id, int bytes) { s += R"({"op":"alloc","id":)" + std::to_string(id) + R"(,"bytes":)" + std::to_string(bytes) + "}\n"; };
  auto kernel = [&](const std::string& name, const std::string& r, int w, int ns) {
    s += R"({"op":"kernel","name":")" + name + R"(","reads":[)" + r + R"(],"writes":[)" + std::to_string(w) + R"(],"dur_ns":)" +
         std::to_string(ns) + "}\n";
  };
  alloc(0, 1000);  // the gradient
  alloc(1, 1000000);
  kernel("load", "", 1, 5000000);
  for (int i = 2; i <= n + 1; ++i) {
    alloc(i, 1000000);
    kernel("fwd" + std::to_string(i), std::to_string(i - 1), i, 10000);
  }
  for (int i = n + 1; i >= 1; --i) {
    kernel("bwd" + std::to_string(i), std::to_string(i), 0, 10000);
    s += R"({"op":"free","id":)" + std::to_string(i) + "}\n";
  }
  s += R"({"op":"sync"})" "\n";
  return s;
}

// Under pressure a tensor is dropped, as DTR does, even where its producer's input is dropped as
// well (a chain, recomputed first): swapping it instead would take the link for a round trip
// that costs 200 times its recomputation. A chain whose recomputation would not fit the budget
// on its own is not made (the long pass: a first version dropped along chains that did not,
// and the run was infeasible where the rule without chains ran).
TEST(Policy, PressureDropsAlongChainsOfDroppedInputs) {
  for (const int n : {6, 3 * policy::kMaxRecomputeChain}) {
    auto t = trace::parse_trace(chain_trace(n));
    ASSERT_TRUE(t) << t.error().message();
    auto p = sim::prepare(*t, toy_gpu(), exact());
    ASSERT_TRUE(p);
    p->trace = &*t;
    sim::SimOptions o;
    o.budget_bytes = 3'500'000;  // the input and two activations, or one plus a recomputation's input
    auto pol = make_capuchin_policy();
    const sim::SimResult r = sim::simulate(*p, *pol, o);
    ASSERT_TRUE(r.feasible) << n << ": " << r.where.reason;
    EXPECT_GT(r.recompute_s, 0) << n;
    EXPECT_LE(r.peak_bytes, o.budget_bytes);
    // Six activations: each is dropped, only the costly input and the gradient may be swapped
    // (the rule without chains swapped two activations as well).
    if (n == 6) EXPECT_LE(r.swap_out_bytes, 1'001'000) << "an activation was swapped";
  }
}

// A run over a sub-range starts within the budget: when the tensors live at its start exceed
// it, the policy's victims start off the device (what the iteration before would have left
// there), and the run says which.
TEST(Sim, ASubRangeRunStartsWithinTheBudget) {
  Fixture f = prepare_toy(2, 1.0, 2.0, 4.0, 2.0);
  auto pol = make_capuchin_policy(CapuchinVariant::Swap);
  sim::SimOptions o;
  o.budget_bytes = 1'100'000;
  o.first_event = 13 + 6;  // iteration 2's mid2: A and B (2 MB) live
  const sim::SimResult r = sim::simulate(f.p, *pol, o);
  ASSERT_TRUE(r.feasible) << r.where.reason;
  EXPECT_FALSE(r.started_off_device.empty());
  EXPECT_LE(r.peak_bytes, 1'100'000u);
}

// The evaluation on the real traces (simulated, GPU profiles h200 and p100): capuchin is
// feasible wherever a baseline is, and faster than the paging and vDNN baselines wherever
// they are feasible. (The full table with dtr and checkpoint-sqrt: scripts/sim_sweep.sh.)
TEST(Policy, BeatsPagingAndVdnnOnRealTraces) {
  // Under a sanitizer one profile and one trace (CI time; the others take the same code paths).
  std::vector<fs::path> paths;
  for (const std::string& f : sim::trace_files()) paths.emplace_back(f);
  const std::vector<const char*> gpus = sim::kSanitized ? std::vector<const char*>{"h200"} : std::vector<const char*>{"h200", "p100"};
  for (const char* gpu_name : gpus) {
    auto gpu = sim::find_gpu_profile(gpu_name);
    ASSERT_TRUE(gpu);
    for (const auto& path : paths) {
      auto t = trace::load_trace(path.string());
      ASSERT_TRUE(t);
      auto p = sim::prepare(*t, *gpu);
      ASSERT_TRUE(p);
      const double ideal = sim::ideal_time_s(*p);
      for (double frac : {0.8, 0.5}) {
        SCOPED_TRACE(path.filename().string() + " " + gpu_name + " " + std::to_string(frac));
        const std::uint64_t budget = static_cast<std::uint64_t>(frac * static_cast<double>(p->liveness.peak_bytes));
        const sim::SimResult mine = run(*p, budget);
        ASSERT_TRUE(mine.feasible) << mine.where.reason;
        EXPECT_EQ(mine.rejected_actions, 0u);
        EXPECT_LE(mine.peak_bytes, budget);
        EXPECT_GE(mine.time_s, ideal * (1 - 1e-9));
        for (const char* base : {"lru-uvm", "vdnn"}) {
          auto pol = sim::make_policy(base);
          sim::SimOptions o;
          o.budget_bytes = budget;
          const sim::SimResult r = sim::simulate(*p, **pol, o);
          if (r.feasible) EXPECT_LT(mine.time_s, r.time_s) << base;
        }
      }
    }
  }
}

// A repeated trace's settled iteration under a capuchin policy at `budget` (feasible and within
// the budget, or the test fails).
double settled_time(const sim::PreparedTrace& p, std::uint64_t budget, CapuchinVariant v) {
  auto pol = make_capuchin_policy(v);
  sim::SimOptions o;
  o.budget_bytes = budget;
  o.repeated = true;
  const sim::SimResult r = sim::simulate(p, *pol, o);
  EXPECT_TRUE(r.feasible) << r.where.reason;
  EXPECT_LE(r.peak_bytes, budget);
  return r.time_s;
}

// Issue 18's yardstick, simulated on profile h200 at half of resnet18's peak, its last
// iteration repeated 8 times: capuchin's settled iteration is faster than Capuchin as published
// (capuchin-paper) and than swapping alone (capuchin-swap). Before plans were judged by the
// simulator's replay, with planned stalls and no swaps a link's latency dominates: capuchin
// 4.12 against capuchin-paper 3.79 and capuchin-swap 7.17 (ratios to the ideal); with them,
// 2.54; with recomputation-first candidates and refined in-triggers, 2.10; with the optimizer
// state's swaps evicted in the next iteration (delay_wrap_evictions), 1.94.
TEST(Policy, BeatsCapuchinAsPublishedOnResnet18AtHalfThePeak) {
  const auto run = resnet18_repeated(8, "h200");
  ASSERT_TRUE(run);
  const sim::PreparedTrace* p = &run->prep;
  const std::uint64_t budget = p->liveness.peak_bytes / 2;
  auto steady = [&](CapuchinVariant v) { return settled_time(*p, budget, v); };
  const double mine = steady(CapuchinVariant::Full);
  EXPECT_LT(mine, steady(CapuchinVariant::Paper));
  EXPECT_LT(mine, steady(CapuchinVariant::Swap));
  EXPECT_LT(mine, 2.3 * sim::ideal_time_s(*p));
}

// The transformer (../shared) repeated 8 times on `gpu` at half its peak: capuchin's settled
// iteration over the ideal one, or nothing when the trace is not there.
std::optional<double> transformer_at_half_peak(const char* gpu) {
  const fs::path path = fs::path(CAPUCHIN_SHARED_TRACES) / "tiny_transformer-b8.jsonl.gz";
  if (!fs::exists(path)) return std::nullopt;
  const auto run = repeated(path, 8, gpu);
  EXPECT_TRUE(run);
  if (!run) return std::nullopt;
  const sim::PreparedTrace& p = run->prep;
  return settled_time(p, p.liveness.peak_bytes / 2, CapuchinVariant::Full) / sim::ideal_time_s(p);
}

// Where the link cannot move in the compute time what must be off the device (the
// transformer on h200 at half its peak: about 125 MB off by the end of forward, which computes
// for about 1 ms), plans made on a stretched compute timeline (kTimeScales in segment_plan.cpp)
// are among the candidates: simulated, its settled iteration went from 2.793x the ideal to
// 2.436x. Without them this fails (2.793).
TEST(Policy, StretchedTimelinesServeALinkBoundTransformer) {
  const auto ratio = transformer_at_half_peak("h200");
  if (!ratio) GTEST_SKIP() << "tiny_transformer-b8 is not in ../shared/traces beside the checkout";
  EXPECT_LT(*ratio, 2.6);
}

// Among the stretched candidates, the plan ranked per byte and per over-target position
// covered with the link priced (Variant::CoveredPriced in segment_plan.cpp): the transformer on
// p100 at half its peak settled at 2.120x the ideal without it and 2.041x with it (simulated).
// Without it this fails.
TEST(Policy, CoveredPricedPlansOnAStretchedTimelineServeTheTransformer) {
  const auto ratio = transformer_at_half_peak("p100");
  if (!ratio) GTEST_SKIP() << "tiny_transformer-b8 is not in ../shared/traces beside the checkout";
  EXPECT_LT(*ratio, 2.08);
}

}  // namespace
}  // namespace capuchin::plan
