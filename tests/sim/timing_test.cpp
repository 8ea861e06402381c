// Simulated times of hand-made traces, every figure computed by hand in the comments:
// copy/compute overlap, prefetch hidden behind compute, allocations waiting for a swap-out,
// on-demand swap-in and recompute stalls, LRU faults, budget violations, the roofline.
// The test profile moves 1 byte per ns over the link with no latency and runs at its peaks.
#include <gtest/gtest.h>

#include <map>
#include <utility>
#include <vector>

#include "capuchin/sim.hpp"

namespace capuchin::sim {
namespace {

GpuProfile test_gpu() {
  GpuProfile g;
  g.name = "test";
  g.fp32_flops = 1e12;
  g.tf32_flops = 4e12;
  g.bf16_flops = 8e12;
  g.hbm_bytes_per_s = 1e12;
  g.link_bytes_per_s = 1e9;  // 1 byte per ns
  g.link_latency_s = 0;
  return g;
}

Efficiency exact() {
  Efficiency e;
  e.compute = e.memory = e.link = 1.0;
  e.launch_latency_s = 0;
  e.uvm_fault_latency_s = 500e-9;
  return e;
}

// Scripted policy: actions before given events.
class Script final : public Policy {
 public:
  explicit Script(std::multimap<std::uint32_t, Action> at) : at_(std::move(at)) {}
  std::string_view name() const override { return "script"; }
  void before_event(const SimState& s, std::vector<Action>& out) override {
    auto [b, e] = at_.equal_range(s.event);
    for (auto it = b; it != e; ++it) out.push_back(it->second);
  }

 private:
  std::multimap<std::uint32_t, Action> at_;
};

struct Fixture {
  trace::Trace t;
  PreparedTrace p;
};
std::unique_ptr<Fixture> load(const std::string& text) {
  auto f = std::make_unique<Fixture>();
  auto t = trace::parse_trace(text, "hand");
  EXPECT_TRUE(t) << t.error().message();
  f->t = std::move(*t);
  auto p = prepare(f->t, test_gpu(), exact());
  EXPECT_TRUE(p);
  f->p = std::move(*p);
  return f;
}

SimResult run(const Fixture& f, Policy& pol, std::uint64_t budget, std::vector<TimelineEntry>* tl = nullptr) {
  SimOptions o;
  o.budget_bytes = budget;
  o.timeline = tl;
  return simulate(f.p, pol, o);
}

// The timeline's intervals on one lane, as {start, end} in ns.
std::vector<std::pair<double, double>> on_lane(const std::vector<TimelineEntry>& tl, TimelineEntry::Lane lane) {
  std::vector<std::pair<double, double>> out;
  for (const auto& e : tl)
    if (e.lane == lane) out.emplace_back(e.start_s * 1e9, e.end_s * 1e9);
  return out;
}

constexpr double ns = 1e-9;
const std::string kHeader = R"({"format":"capuchin-trace","version":1})" "\n";

// Tensors A (id 0) and B (id 1), 1000 bytes each: k1 writes A, k2 (k2_ns long) writes B, then
// `rest` (by default k3, reading A).
const std::string kK3 = R"({"op":"kernel","name":"k3","reads":[0],"writes":[],"dur_ns":100})" "\n";
std::string swap_trace(unsigned k2_ns, const std::string& rest = kK3) {
  return kHeader + R"({"op":"alloc","id":0,"bytes":1000}
{"op":"kernel","name":"k1","reads":[],"writes":[0],"dur_ns":100}
{"op":"alloc","id":1,"bytes":1000}
{"op":"kernel","name":"k2","reads":[],"writes":[1],"dur_ns":)" +
         std::to_string(k2_ns) + "}\n" + rest;
}
const std::string kSwapTrace = swap_trace(2000);

TEST(SimTiming, SwapOutOverlapsComputeAndSwapInStalls) {
  // k1 0-100. Evict A before k2: D2H 100-1100 while k2 runs 100-2100 (hidden). k3 needs A:
  // on-demand H2D 2100-3100, compute stalls 1000; k3 3100-3200.
  auto f = load(kSwapTrace);
  Script pol({{3, {0, ActionKind::Evict}}});
  std::vector<TimelineEntry> tl;
  auto r = run(*f, pol, 2000, &tl);
  ASSERT_TRUE(r.feasible) << r.where.reason;
  EXPECT_NEAR(r.time_s, 3200 * ns, 1e-15);
  EXPECT_NEAR(r.stall_s, 1000 * ns, 1e-15);
  EXPECT_EQ(r.swap_out_bytes, 1000);
  EXPECT_EQ(r.swap_in_bytes, 1000);
  EXPECT_EQ(r.peak_bytes, 2000u);
  EXPECT_EQ(r.faults, 1u);
  const auto d2h = on_lane(tl, TimelineEntry::Lane::D2H);
  ASSERT_EQ(d2h.size(), 1u);
  EXPECT_NEAR(d2h[0].first, 100, 1e-6);
  EXPECT_NEAR(d2h[0].second, 1100, 1e-6);
}

TEST(SimTiming, SwapsRunAtTheirOwnRateEachWay) {
  // kSwapTrace with k2 5000 ns long and the policy's moves to the host at a quarter of the link
  // (Unified Memory on an H200), to the device at half: k1 0-100; A's copy out 100-4100 (1000
  // bytes at 0.25 byte per ns) while k2 runs 100-5100; k3 needs A: H2D 5100-7100 (0.5 byte per
  // ns), a 2000 ns stall; k3 7100-7200.
  auto f = load(swap_trace(5000));
  f->p.eff.swap_out_link = 0.25;
  f->p.eff.swap_in_link = 0.5;
  Script pol({{3, {0, ActionKind::Evict}}});
  std::vector<TimelineEntry> tl;
  auto r = run(*f, pol, 2000, &tl);
  ASSERT_TRUE(r.feasible) << r.where.reason;
  const auto d2h = on_lane(tl, TimelineEntry::Lane::D2H), h2d = on_lane(tl, TimelineEntry::Lane::H2D);
  ASSERT_EQ(d2h.size(), 1u);
  ASSERT_EQ(h2d.size(), 1u);
  EXPECT_NEAR(d2h[0].first, 100, 1e-6);
  EXPECT_NEAR(d2h[0].second, 4100, 1e-6);
  EXPECT_NEAR(h2d[0].first, 5100, 1e-6);
  EXPECT_NEAR(h2d[0].second, 7100, 1e-6);
  EXPECT_NEAR(r.stall_s, 2000 * ns, 1e-15);
  EXPECT_NEAR(r.time_s, 7200 * ns, 1e-15);
}

TEST(SimTiming, PrefetchHiddenBehindCompute) {
  // As above plus k2b (reads B, 2000 ns) before k3. Prefetch A before k2b: H2D 2100-3100
  // while k2b runs 2100-4100; k3 4100-4200 without a stall.
  auto f = load(swap_trace(2000, R"({"op":"kernel","name":"k2b","reads":[1],"writes":[],"dur_ns":2000}
{"op":"kernel","name":"k3","reads":[0,1],"writes":[],"dur_ns":100}
)"));
  Script pol({{3, {0, ActionKind::Evict}}, {4, {0, ActionKind::Prefetch}}});
  auto r = run(*f, pol, 2000);
  ASSERT_TRUE(r.feasible) << r.where.reason;
  EXPECT_NEAR(r.time_s, 4200 * ns, 1e-15);
  EXPECT_EQ(r.stall_s, 0.0);
  EXPECT_EQ(r.swap_in_bytes, 1000);
  EXPECT_EQ(r.faults, 0u);
}

TEST(SimTiming, AllocationWaitsForSwapOutToRelease) {
  // Budget 1000. Evict A before alloc B: D2H 100-1100; B's memory exists only at 1100
  // (stall 1000); k2 1100-1200; free B; k3 needs A: H2D 1200-2200 (stall 1000); k3 2200-2300.
  auto f = load(swap_trace(100, R"({"op":"free","id":1})" "\n" + kK3));
  Script pol({{2, {0, ActionKind::Evict}}});
  auto r = run(*f, pol, 1000);
  ASSERT_TRUE(r.feasible) << r.where.reason;
  EXPECT_NEAR(r.time_s, 2300 * ns, 1e-15);
  EXPECT_NEAR(r.stall_s, 2000 * ns, 1e-15);
  EXPECT_EQ(r.peak_bytes, 1000u);
}

double by(const SimResult& r, StallCause c) { return r.stall_by_cause_s[static_cast<std::size_t>(c)]; }

TEST(SimStallCauses, RoomAndOnDemandSwapInSplitOneWait) {
  // A is 2000 bytes, B 1000, budget 2000. Evict A before alloc B: D2H 100-2100, B's memory only
  // at 2100 (waiting for room, 2000); k2 2100-2200. Evict B before k3: D2H 2200-3200. k3 needs A:
  // no room until B's copy lands at 3200 (room, 1000), then H2D 3200-5200 (on demand, 2000); k3
  // 5200-5300.
  auto f = load(kHeader + R"({"op":"alloc","id":0,"bytes":2000}
{"op":"kernel","name":"k1","reads":[],"writes":[0],"dur_ns":100}
{"op":"alloc","id":1,"bytes":1000}
{"op":"kernel","name":"k2","reads":[],"writes":[1],"dur_ns":100}
{"op":"kernel","name":"k3","reads":[0],"writes":[],"dur_ns":100}
)");
  Script pol({{2, {0, ActionKind::Evict}}, {4, {1, ActionKind::Evict}}});
  std::vector<TimelineEntry> tl;
  auto r = run(*f, pol, 2000, &tl);
  ASSERT_TRUE(r.feasible) << r.where.reason;
  EXPECT_NEAR(r.time_s, 5300 * ns, 1e-15);
  EXPECT_NEAR(r.stall_s, 5000 * ns, 1e-15);
  // One timeline entry per wait, however its time is split (`capuchin report` counts them).
  std::vector<std::pair<double, double>> stalls;
  for (const auto& e : tl)
    if (e.kind == TimelineEntry::Kind::Stall) stalls.emplace_back(e.start_s * 1e9, e.end_s * 1e9);
  ASSERT_EQ(stalls.size(), 2u);
  EXPECT_NEAR(stalls[0].first, 100, 1e-6);
  EXPECT_NEAR(stalls[0].second, 2100, 1e-6);
  EXPECT_NEAR(stalls[1].first, 2200, 1e-6);
  EXPECT_NEAR(stalls[1].second, 5200, 1e-6);
  EXPECT_NEAR(by(r, StallCause::Room), 3000 * ns, 1e-15);
  EXPECT_NEAR(by(r, StallCause::OnDemandSwapIn), 2000 * ns, 1e-15);
  EXPECT_EQ(by(r, StallCause::LatePrefetch), 0.0);
  EXPECT_EQ(by(r, StallCause::CopyEngine), 0.0);
  EXPECT_NEAR(r.swap_out_link_s, 3000 * ns, 1e-15);  // A's copy out and B's
  EXPECT_NEAR(r.swap_in_link_s, 2000 * ns, 1e-15);   // A's back
  EXPECT_EQ(r.cancelled_out_link_s, 0.0);
  // One site per event, largest first, under its largest cause (no iterations: the whole run's).
  ASSERT_EQ(r.stall_sites.size(), 2u);
  EXPECT_EQ(r.stall_sites[0].event, 4u);
  EXPECT_NEAR(r.stall_sites[0].stall_s, 3000 * ns, 1e-15);
  EXPECT_EQ(r.stall_sites[0].cause, StallCause::OnDemandSwapIn);
  EXPECT_EQ(r.stall_sites[1].event, 2u);
  EXPECT_NEAR(r.stall_sites[1].stall_s, 2000 * ns, 1e-15);
  EXPECT_EQ(r.stall_sites[1].cause, StallCause::Room);
  EXPECT_EQ(describe_site(f->t, r.stall_sites[0]), "line 6 (k3): 0.003 ms, on-demand swap-ins");
  EXPECT_EQ(describe_site(f->t, r.stall_sites[1]), "line 4 (alloc): 0.002 ms, waiting for room");
}

TEST(SimStallCauses, APrefetchIssuedTooLateIsLate) {
  // kSwapTrace, A evicted before k2 (D2H 100-1100) and prefetched only before k3, which reads
  // it: H2D 2100-3100, a 1000 ns wait for a late prefetch; k3 3100-3200.
  auto f = load(kSwapTrace);
  Script pol({{3, {0, ActionKind::Evict}}, {4, {0, ActionKind::Prefetch}}});
  auto r = run(*f, pol, 2000);
  ASSERT_TRUE(r.feasible) << r.where.reason;
  EXPECT_NEAR(r.time_s, 3200 * ns, 1e-15);
  EXPECT_NEAR(by(r, StallCause::LatePrefetch), 1000 * ns, 1e-15);
  EXPECT_NEAR(r.stall_s, 1000 * ns, 1e-15);
  ASSERT_EQ(r.stall_sites.size(), 1u);
  EXPECT_EQ(r.stall_sites[0].cause, StallCause::LatePrefetch);
}

TEST(SimStallCauses, TheJobsOwnCopyWaitsBehindASwapIn) {
  // A evicted before k2 (D2H 100-1100, hidden by k2 100-2100) and prefetched before the job's
  // own upload into B: the prefetch takes the H2D engine 2100-3100, so the upload (1000 bytes)
  // waits 1000 for it and runs 3100-4100; k3 reads A, long there: 4100-4200.
  auto f = load(swap_trace(2000, R"({"op":"copy","dir":"h2d","bytes":1000,"dst":1})" "\n" + kK3));
  Script pol({{3, {0, ActionKind::Evict}}, {4, {0, ActionKind::Prefetch}}});
  auto r = run(*f, pol, 2000);
  ASSERT_TRUE(r.feasible) << r.where.reason;
  EXPECT_NEAR(r.time_s, 4200 * ns, 1e-15);
  EXPECT_NEAR(r.stall_s, 1000 * ns, 1e-15);
  EXPECT_NEAR(by(r, StallCause::CopyEngine), 1000 * ns, 1e-15);
  ASSERT_EQ(r.stall_sites.size(), 1u);
  EXPECT_EQ(r.stall_sites[0].event, 4u);
  EXPECT_EQ(describe_site(f->t, r.stall_sites[0]), "line 6 (copy): 0.001 ms, the job's own copies behind swaps");
}

TEST(SimStallCauses, AnEvictionCancelledBeforeItsCopyLandedSpentItsLinkTime) {
  // A evicted before k2: its copy out runs 100-1100, but k3 reads A at 200, before it landed:
  // the eviction is cancelled (A never left), no wait, and the copy's 1000 ns were for nothing.
  auto f = load(swap_trace(100));
  Script pol({{3, {0, ActionKind::Evict}}});
  auto r = run(*f, pol, 2000);
  ASSERT_TRUE(r.feasible) << r.where.reason;
  EXPECT_NEAR(r.time_s, 300 * ns, 1e-15);
  EXPECT_EQ(r.stall_s, 0.0);
  EXPECT_NEAR(r.swap_out_link_s, 1000 * ns, 1e-15);
  EXPECT_NEAR(r.cancelled_out_link_s, 1000 * ns, 1e-15);
  EXPECT_EQ(r.swap_in_link_s, 0.0);
}

TEST(SimStallCauses, AnEvictionCancelledByAFreeSpentItsLinkTimeToo) {
  // A evicted before k2 (copy out 100-1100), then freed at 200 before the copy landed.
  auto f = load(swap_trace(100, R"({"op":"free","id":0})" "\n"));
  Script pol({{3, {0, ActionKind::Evict}}});
  auto r = run(*f, pol, 2000);
  ASSERT_TRUE(r.feasible) << r.where.reason;
  EXPECT_NEAR(r.cancelled_out_link_s, 1000 * ns, 1e-15);
  EXPECT_EQ(r.stall_s, 0.0);
}

TEST(SimStallCauses, APrefetchWaitingForRoomSplitsItsWait) {
  // Budget 1000, A and B 1000 bytes each. A evicted before alloc B: copy out 100-1100, B waits
  // for room until 1100 (room, 1000); k2 1100-1200 writes B. Evict B before k3, prefetch A
  // there too: B's copy out 1200-2200, so A's memory is granted at 2200, its copy 2200-3200;
  // k3 reads A and waits 1200-3200: 1000 for room, 1000 for the late prefetch. k3 3200-3300.
  auto f = load(swap_trace(100));
  Script pol({{2, {0, ActionKind::Evict}}, {4, {1, ActionKind::Evict}}, {4, {0, ActionKind::Prefetch}}});
  auto r = run(*f, pol, 1000);
  ASSERT_TRUE(r.feasible) << r.where.reason;
  EXPECT_NEAR(r.time_s, 3300 * ns, 1e-15);
  EXPECT_NEAR(by(r, StallCause::Room), 2000 * ns, 1e-15);
  EXPECT_NEAR(by(r, StallCause::LatePrefetch), 1000 * ns, 1e-15);
  EXPECT_EQ(by(r, StallCause::OnDemandSwapIn), 0.0);
}

TEST(SimStallCauses, SitesAreTheLastIterations) {
  // Two iterations of kSwapTrace's shape; A evicted before k2 in each, so each k3 waits 1000
  // on demand: the sites name the second iteration's k3 only, the causes count both.
  auto f = load(kHeader + R"({"op":"alloc","id":0,"bytes":1000}
{"op":"iter","n":1}
{"op":"kernel","name":"k1","reads":[],"writes":[0],"dur_ns":100}
{"op":"alloc","id":1,"bytes":1000}
{"op":"kernel","name":"k2","reads":[],"writes":[1],"dur_ns":2000}
{"op":"kernel","name":"k3","reads":[0],"writes":[],"dur_ns":100}
{"op":"free","id":1}
{"op":"iter","n":2}
{"op":"kernel","name":"k1","reads":[],"writes":[0],"dur_ns":100}
{"op":"alloc","id":2,"bytes":1000}
{"op":"kernel","name":"k2","reads":[],"writes":[2],"dur_ns":2000}
{"op":"kernel","name":"k3","reads":[0],"writes":[],"dur_ns":100}
{"op":"free","id":2}
)");
  Script pol({{4, {0, ActionKind::Evict}}, {10, {0, ActionKind::Evict}}});
  auto r = run(*f, pol, 2000);
  ASSERT_TRUE(r.feasible) << r.where.reason;
  EXPECT_NEAR(r.stall_s, 1000 * ns, 1e-15);  // per steady iteration: the second
  EXPECT_NEAR(by(r, StallCause::OnDemandSwapIn), 1000 * ns, 1e-15);
  ASSERT_EQ(r.stall_sites.size(), 1u);
  EXPECT_EQ(r.stall_sites[0].event, 11u);
}

TEST(SimTiming, BudgetViolationIsInfeasibleWithWhere) {
  auto f = load(kSwapTrace);
  auto none = make_policy("none");
  auto r = run(*f, **none, 1500);
  EXPECT_FALSE(r.feasible);
  EXPECT_EQ(r.where.event, 2u);  // alloc of id 1
  EXPECT_EQ(r.where.line, 4u);
  EXPECT_EQ(r.where.tensor_id, 1u);
  EXPECT_NE(r.where.reason.find("budget 1500"), std::string::npos) << r.where.reason;
  // At the natural peak it fits, and `ideal` ignores any budget.
  EXPECT_TRUE(run(*f, **none, 2000).feasible);
  auto ideal = make_policy("ideal");
  auto ri = run(*f, **ideal, 1);
  EXPECT_TRUE(ri.feasible);
  EXPECT_EQ(ri.peak_bytes, 2000u);
  EXPECT_NEAR(ri.time_s, 2200 * ns, 1e-15);
}

// X (id 0, 100 B) feeds f, which writes A (id 1, 1000 B); C (id 2) needs A's room.
const std::string kRecomputeTrace = kHeader + R"({"op":"alloc","id":0,"bytes":100}
{"op":"kernel","name":"init","reads":[],"writes":[0],"dur_ns":50}
{"op":"alloc","id":1,"bytes":1000}
{"op":"kernel","name":"f","reads":[0],"writes":[1],"dur_ns":300}
{"op":"alloc","id":2,"bytes":1000}
{"op":"kernel","name":"c","reads":[],"writes":[2],"dur_ns":200}
{"op":"free","id":2}
{"op":"kernel","name":"g","reads":[1],"writes":[],"dur_ns":100}
)";

TEST(SimTiming, DropAndRecomputeOnDemand) {
  // init 0-50, f 50-350; drop A before alloc C (budget 1100 = X + C); c 350-550; free C;
  // g needs A: re-run f 550-850 (recompute 300); g 850-950.
  auto f = load(kRecomputeTrace);
  Script pol({{4, {1, ActionKind::Drop}}});
  auto r = run(*f, pol, 1100);
  ASSERT_TRUE(r.feasible) << r.where.reason;
  EXPECT_NEAR(r.time_s, 950 * ns, 1e-15);
  EXPECT_NEAR(r.recompute_s, 300 * ns, 1e-15);
  EXPECT_EQ(r.stall_s, 0.0);
  EXPECT_EQ(r.rejected_actions, 0u);
  EXPECT_EQ(r.peak_bytes, 1100u);
}

TEST(SimTiming, DropOfUnrecomputableTensorIsRejected) {
  // X is freed before A's next use, so f cannot be re-run: the drop is rejected and the
  // allocation of C then fails.
  auto f = load(kHeader + R"({"op":"alloc","id":0,"bytes":100}
{"op":"kernel","name":"init","reads":[],"writes":[0],"dur_ns":50}
{"op":"alloc","id":1,"bytes":1000}
{"op":"kernel","name":"f","reads":[0],"writes":[1],"dur_ns":300}
{"op":"free","id":0}
{"op":"alloc","id":2,"bytes":1000}
{"op":"kernel","name":"g","reads":[1],"writes":[],"dur_ns":100}
)");
  Script pol({{5, {1, ActionKind::Drop}}});
  auto r = run(*f, pol, 1100);
  EXPECT_FALSE(r.feasible);
  EXPECT_EQ(r.rejected_actions, 1u);
  EXPECT_EQ(r.where.tensor_id, 2u);
}

// What a replay would not reproduce is never recomputed (include/capuchin/replayable.hpp): f
// marked `"replay": false`, or named after a PyTorch operator known not to be replayable
// (random numbers, running statistics) with no mark, or marked so explicitly: the drop of A is
// rejected and C cannot be allocated. `"replay": true` overrides the name.
TEST(SimTiming, DropOfWhatAReplayWouldNotReproduceIsRejected) {
  auto with_f = [](const std::string& f_line) {
    std::string t = kRecomputeTrace;
    const std::string plain = R"({"op":"kernel","name":"f","reads":[0],"writes":[1],"dur_ns":300})";
    t.replace(t.find(plain), plain.size(), f_line);
    return t;
  };
  for (const char* line : {R"({"op":"kernel","name":"f","reads":[0],"writes":[1],"dur_ns":300,"replay":false})",
                           R"({"op":"kernel","name":"aten::native_dropout","reads":[0],"writes":[1],"dur_ns":300})",
                           R"({"op":"kernel","name":"aten::native_batch_norm","reads":[0],"writes":[1],"dur_ns":300})"}) {
    auto f = load(with_f(line));
    Script pol({{4, {1, ActionKind::Drop}}});
    auto r = run(*f, pol, 1100);
    EXPECT_FALSE(r.feasible) << line;
    EXPECT_EQ(r.rejected_actions, 1u) << line;
  }
  auto f = load(with_f(R"({"op":"kernel","name":"aten::native_dropout","reads":[0],"writes":[1],"dur_ns":300,"replay":true})"));
  Script pol({{4, {1, ActionKind::Drop}}});
  auto r = run(*f, pol, 1100);
  ASSERT_TRUE(r.feasible) << r.where.reason;
  EXPECT_NEAR(r.recompute_s, 300 * ns, 1e-15);
}

TEST(SimTiming, LruUvmEvictsAtFaultTimeAndPaysFaultLatency) {
  // Budget 1000 = one tensor. alloc B: LRU evicts A (D2H 100-1100), B granted at 1100
  // (stall 1000); k2 1100-3100. k3 needs A: LRU evicts B (D2H 3100-4100), then H2D
  // 4100-5100 plus a 500 ns fault (stall 2500); k3 5600-5700.
  auto f = load(kSwapTrace);
  auto lru = make_policy("lru-uvm");
  auto r = run(*f, **lru, 1000);
  ASSERT_TRUE(r.feasible) << r.where.reason;
  EXPECT_NEAR(r.time_s, 5700 * ns, 1e-15);
  EXPECT_NEAR(r.stall_s, 3500 * ns, 1e-15);
  EXPECT_EQ(r.swap_out_bytes, 2000);
  EXPECT_EQ(r.swap_in_bytes, 1000);
  EXPECT_EQ(r.peak_bytes, 1000u);
}

TEST(SimTiming, DtrDropsAndRecomputes) {
  // DTR drops A (the only recomputable, unpinned tensor) for C, then recomputes it: same
  // figures as the scripted drop.
  auto f = load(kRecomputeTrace);
  auto dtr = make_policy("dtr");
  auto r = run(*f, **dtr, 1100);
  ASSERT_TRUE(r.feasible) << r.where.reason;
  EXPECT_NEAR(r.time_s, 950 * ns, 1e-15);
  EXPECT_NEAR(r.recompute_s, 300 * ns, 1e-15);
}

TEST(SimTiming, RooflineAndMathModes) {
  // fp32 trace: convolution at TF32 (4e12), mm at FP32 (1e12); memory-bound at 1e12 B/s.
  auto f = load(R"({"format":"capuchin-trace","version":1,"dtype":"float32"}
{"op":"alloc","id":0,"bytes":8}
{"op":"kernel","name":"aten::convolution","reads":[],"writes":[0],"flops":4e9,"bytes":1000}
{"op":"kernel","name":"aten::mm","reads":[],"writes":[0],"flops":4e9,"bytes":1000}
{"op":"kernel","name":"aten::add_","reads":[],"writes":[0],"flops":1,"bytes":1000000000}
{"op":"kernel","name":"aten::mm","reads":[],"writes":[0],"flops":4e9,"dur_ns":7}
{"op":"copy","dir":"h2d","bytes":5000,"dst":0}
)");
  EXPECT_NEAR(f->p.duration_s[1], 1e-3, 1e-12);
  EXPECT_NEAR(f->p.duration_s[2], 4e-3, 1e-12);
  EXPECT_NEAR(f->p.duration_s[3], 1e-3, 1e-12);
  EXPECT_NEAR(f->p.duration_s[4], 7e-9, 1e-18);  // dur_ns wins
  EXPECT_NEAR(f->p.duration_s[5], 5000e-9, 1e-15);
  EXPECT_EQ(kernel_math_mode("aten::mm", "bfloat16"), MathMode::BF16);
  EXPECT_EQ(kernel_math_mode("aten::convolution_backward", "float32"), MathMode::TF32);
  EXPECT_EQ(kernel_math_mode("aten::addmm", "float32"), MathMode::FP32);
}

TEST(SimTiming, SteadyIterationsExcludeTheFirst) {
  // Iteration 1: 100 + 500 ns; iterations 2 and 3: 100 ns each. Steady time = 100 ns.
  auto f = load(kHeader + R"({"op":"alloc","id":0,"bytes":10}
{"op":"iter","n":1}
{"op":"kernel","name":"k","reads":[],"writes":[0],"dur_ns":100}
{"op":"kernel","name":"warmup","reads":[],"writes":[0],"dur_ns":500}
{"op":"iter","n":2}
{"op":"kernel","name":"k","reads":[],"writes":[0],"dur_ns":100}
{"op":"iter","n":3}
{"op":"kernel","name":"k","reads":[],"writes":[0],"dur_ns":100}
)");
  auto none = make_policy("none");
  auto r = run(*f, **none, 10);
  ASSERT_TRUE(r.feasible);
  EXPECT_EQ(r.steady_iterations, 2u);
  EXPECT_NEAR(r.time_s, 100 * ns, 1e-15);
  ASSERT_EQ(r.iteration_time_s.size(), 3u);
  EXPECT_NEAR(r.iteration_time_s[0], 600 * ns, 1e-15);
}

TEST(SimTiming, ARepeatedRunIsSteadyOnceSettledWithItsWarmUpApart) {
  // Iterations: 600 ns (set-up work), 500 ns (a policy still learning), 300, 100, 100, 100.
  std::string text = kHeader + R"({"op":"alloc","id":0,"bytes":10}
)";
  int n = 0;
  for (int ns_per : {600, 500, 300, 100, 100, 100})
    text += R"({"op":"iter","n":)" + std::to_string(++n) + R"(}
{"op":"kernel","name":"k","reads":[],"writes":[0],"dur_ns":)" + std::to_string(ns_per) + "}\n";
  auto f = load(text);
  auto none = make_policy("none");
  SimOptions o;
  o.budget_bytes = 10;
  o.repeated = true;
  const SimResult r = simulate(f->p, **none, o);
  ASSERT_TRUE(r.feasible);
  EXPECT_EQ(r.steady_iterations, 3u);  // 4..6: each within 1% of the last
  EXPECT_NEAR(r.time_s, 100 * ns, 1e-15);
  EXPECT_EQ(r.warmup_iterations, 2u);  // 2 and 3
  EXPECT_NEAR(r.warmup_time_s, 400 * ns, 1e-15);
  o.repeated = false;  // a trace as it is: every iteration but the first
  const SimResult plain = simulate(f->p, **none, o);
  EXPECT_EQ(plain.steady_iterations, 5u);
  EXPECT_NEAR(plain.time_s, 220 * ns, 1e-15);
  EXPECT_EQ(plain.warmup_iterations, 0u);
}

TEST(SimTiming, InvalidActionsAreCountedNotApplied) {
  auto f = load(kSwapTrace);
  // Evicting a tensor the current kernel uses (pinned), and an index out of range.
  Script pol({{4, {0, ActionKind::Evict}}, {4, {99, ActionKind::Drop}}});
  auto r = run(*f, pol, 2000);
  ASSERT_TRUE(r.feasible);
  EXPECT_EQ(r.rejected_actions, 2u);
  EXPECT_EQ(r.swap_out_bytes, 0);
}

TEST(SimBudget, ResolvesSizesSharesOfTheProfileAndMultiplesOfThePeak) {
  GpuProfile gpu;
  gpu.memory_bytes = 4000;
  EXPECT_EQ(*resolve_budget("0.5x", 1000, gpu), 500u);
  EXPECT_EQ(*resolve_budget("1x", 1000, gpu), 1000u);
  EXPECT_EQ(*resolve_budget("25%", 1000, gpu), 1000u);  // of the profile's memory
  EXPECT_EQ(*resolve_budget("12GiB", 1000, gpu), 12ull << 30);
  EXPECT_EQ(*resolve_budget("500MiB", 1, gpu), 500ull << 20);
  EXPECT_FALSE(resolve_budget("0.5", 1000, gpu));  // ambiguous
  EXPECT_FALSE(resolve_budget("1.5x", 1000, gpu));
  EXPECT_FALSE(resolve_budget("0", 1000, gpu));
  EXPECT_FALSE(resolve_budget("lots", 1000, gpu));
}

TEST(SimProfiles, TableHasTheIssuesProfilesWithSources) {
  for (const char* n : {"p100", "v100", "a100", "h100", "h200", "gh200"}) {
    auto g = find_gpu_profile(n);
    ASSERT_TRUE(g) << n;
    EXPECT_GT(g->fp32_flops, 0);
    EXPECT_GT(g->hbm_bytes_per_s, 0);
    EXPECT_GT(g->link_bytes_per_s, 0);
    EXPECT_FALSE(g->sources.empty());
  }
  auto h200 = find_gpu_profile("H200");
  ASSERT_TRUE(h200);
  EXPECT_EQ(h200->hbm_bytes_per_s, 4.8e12);
  EXPECT_EQ(h200->bf16_flops, 989e12);
  EXPECT_NEAR(h200->link_bytes_per_s * Efficiency{}.link, 55e9, 0.5e9);
  EXPECT_FALSE(find_gpu_profile("tpu"));
}

}  // namespace
}  // namespace capuchin::sim
