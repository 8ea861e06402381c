// Sanity relations of every baseline on real-model traces (tests/data always, and
// ../shared/traces when present): ideal <= every feasible policy; `none` feasible exactly
// from the natural peak on; feasible runs never hold more than the budget; each baseline
// feasible where it should be; no policy issues actions the simulator must reject; the lower
// bound (sim.hpp) never above any policy, infeasible only where every policy is, never rising
// with the budget (checked on the same runs: a second sweep of every policy cost 56 s of CI).
// Each trace runs as the steady run a job settles into (its last iteration repeated).
#include <gtest/gtest.h>

#include <filesystem>

#include "capuchin/sim.hpp"
#include "capuchin/trace_repeat.hpp"
#include "trace_files.hpp"

namespace capuchin::sim {
namespace {

// The most bytes one kernel touches (the smallest budget any policy could meet).
std::uint64_t max_kernel_working_set(const trace::Trace& t) {
  std::uint64_t best = 0;
  for (const auto& e : t.events) {
    std::uint64_t sum = 0;
    std::vector<std::uint32_t> seen;
    for (std::uint32_t a = e.access_begin; a < e.access_end; ++a) {
      const auto ti = t.accesses[a].tensor;
      if (std::find(seen.begin(), seen.end(), ti) == seen.end()) seen.push_back(ti), sum += t.tensors[ti].bytes;
    }
    best = std::max(best, sum);
  }
  return best;
}

SimResult run(const PreparedTrace& p, const std::string& policy, std::uint64_t budget) {
  auto pol = make_policy(policy);
  EXPECT_TRUE(pol);
  SimOptions o;
  o.budget_bytes = budget;
  return simulate(p, **pol, o);
}

class SharedTraces : public ::testing::TestWithParam<std::string> {};

TEST_P(SharedTraces, SanityRelations) {
  const auto files = trace_files();
  ASSERT_GE(files.size(), 1u);
  int bound_compared = 0, bound_binds = 0;
  auto gpu = find_gpu_profile(GetParam());
  ASSERT_TRUE(gpu);
  for (const auto& file : files) {
    SCOPED_TRACE(file);
    auto raw = trace::load_trace(file);
    ASSERT_TRUE(raw) << raw.error().message();
    // The steady run a job settles into (`sim --iters 4`): the lower bound is a bound there
    // (sim.hpp: not strictly on a finite run of the raw trace's differing iterations).
    auto t = trace::repeat_last_iteration(*raw, 4);
    ASSERT_TRUE(t) << t.error().message;
    auto p = prepare(*t, *gpu);
    ASSERT_TRUE(p);
    const std::uint64_t peak = p->liveness.peak_bytes;
    const double ideal = ideal_time_s(*p);
    ASSERT_GT(ideal, 0);

    auto ri = run(*p, "ideal", 1);
    EXPECT_TRUE(ri.feasible);
    EXPECT_EQ(ri.peak_bytes, peak);

    auto at_peak = run(*p, "none", peak);
    EXPECT_TRUE(at_peak.feasible);
    EXPECT_DOUBLE_EQ(at_peak.time_s, ideal);
    EXPECT_EQ(at_peak.peak_bytes, peak);
    auto below = run(*p, "none", peak - 1);
    EXPECT_FALSE(below.feasible);
    EXPECT_GT(below.where.line, 1u);
    EXPECT_NE(below.where.tensor, trace::kNone);

    // The lower bound (sim.hpp) at each budget: never above any policy's result, infeasible only
    // where every policy is, never rising as the budget grows, and binding somewhere.
    double last_bound = 0;
    for (double frac : kSanitized ? std::vector<double>{1.0, 0.5, 0.3} : std::vector<double>{1.0, 0.8, 0.6, 0.5, 0.4, 0.3}) {
      const auto budget = static_cast<std::uint64_t>(frac * static_cast<double>(peak));
      const Bound b = lower_bound(*p, budget);
      const double bound = b.feasible ? b.ratio(ideal) : 1e300;
      EXPECT_GE(bound, last_bound) << "the bound rose with the budget at " << frac;
      last_bound = bound;
      bound_binds += b.feasible && bound > 1.0;
      for (const auto& pol : policy_names()) {
        SCOPED_TRACE(pol + " at " + std::to_string(frac));
        auto r = run(*p, pol, budget);
        EXPECT_EQ(r.rejected_actions, 0u);
        if (!r.feasible) {
          EXPECT_FALSE(r.where.reason.empty());
          continue;
        }
        EXPECT_GE(r.time_s, ideal * (1 - 1e-12));
        if (pol != "ideal") {  // `ideal` ignores the budget
          EXPECT_LE(r.peak_bytes, budget);
          EXPECT_TRUE(b.feasible) << pol << " runs where the bound says none can";
          EXPECT_LE(bound, r.time_s / ideal * (1 + 1e-9)) << "the bound is above " << pol;
          ++bound_compared;
        }
        EXPECT_GE(r.stall_s, 0);
        // No cause takes negative time; the sites are the run's own waits, largest first.
        for (double d : r.stall_by_cause_s) EXPECT_GE(d, 0);
        EXPECT_LE(r.stall_sites.size(), SimResult::kStallSites);
        if (r.stall_s == 0) EXPECT_TRUE(r.stall_sites.empty());  // the last iteration is a steady one
        for (std::size_t k = 0; k < r.stall_sites.size(); ++k) {
          EXPECT_GT(r.stall_sites[k].stall_s, 0);
          EXPECT_LT(r.stall_sites[k].event, t->events.size());
          if (k > 0) EXPECT_LE(r.stall_sites[k].stall_s, r.stall_sites[k - 1].stall_s);
        }
      }
    }
    // Where each baseline must be feasible.
    for (const char* pol : {"lru-uvm", "vdnn", "dtr", "checkpoint-sqrt"}) {
      SCOPED_TRACE(pol);
      EXPECT_TRUE(run(*p, pol, peak).feasible);
    }
    // With enough memory, the on-pressure policies do nothing.
    EXPECT_DOUBLE_EQ(run(*p, "lru-uvm", peak).time_s, ideal);
    EXPECT_DOUBLE_EQ(run(*p, "dtr", peak).time_s, ideal);
    // vDNN swaps whatever the budget; checkpointing recomputes and lowers the peak.
    auto v = run(*p, "vdnn", peak);
    // (a swap-out still in flight when backward needs the tensor is cancelled: no swap-in)
    EXPECT_GT(v.swap_out_bytes, 0);
    EXPECT_GT(v.swap_in_bytes, 0);
    EXPECT_LE(v.swap_in_bytes, v.swap_out_bytes);
    auto c = run(*p, "checkpoint-sqrt", peak);
    EXPECT_GT(c.recompute_s, 0);
    EXPECT_LT(c.peak_bytes, peak);
    // LRU paging fits any budget that holds every kernel's working set.
    const std::uint64_t ws = max_kernel_working_set(*t);
    auto lru = run(*p, "lru-uvm", ws);
    EXPECT_TRUE(lru.feasible) << lru.where.reason << " at line " << lru.where.line;
    EXPECT_GT(lru.stall_s, 0);
    EXPECT_FALSE(run(*p, "lru-uvm", ws - 1).feasible);
  }
  // Not vacuous: policies ran at most budgets, and the bound exceeds 1 at the tighter ones
  // (about once per trace under a sanitizer's three budgets; without ../shared, resnet18 only).
  const int traces = static_cast<int>(files.size());
  EXPECT_GT(bound_compared, (kSanitized ? 8 : 15) * traces);
  EXPECT_GE(bound_binds, traces);
  std::printf("compared %d policy runs with the lower bound, which binds at %d budgets\n", bound_compared, bound_binds);
}

// Under a sanitizer one profile (trace_files.hpp: the p100 sweep runs the same code as h200's).
INSTANTIATE_TEST_SUITE_P(Gpus, SharedTraces,
                         ::testing::ValuesIn(kSanitized ? std::vector<std::string>{"h200"}
                                                        : std::vector<std::string>{"h200", "p100"}));

TEST(SimTraces, LowerBudgetNeverHelpsLruUvm) {
  auto t = trace::load_trace(std::string(CAPUCHIN_TEST_DATA) + "/resnet18-b16.jsonl.gz");
  ASSERT_TRUE(t);
  auto p = prepare(*t, *find_gpu_profile("h200"));
  ASSERT_TRUE(p);
  double prev = 0;
  for (double frac : {1.0, 0.8, 0.6, 0.4}) {
    auto r = run(*p, "lru-uvm", static_cast<std::uint64_t>(frac * static_cast<double>(p->liveness.peak_bytes)));
    ASSERT_TRUE(r.feasible);
    EXPECT_GE(r.time_s, prev);
    prev = r.time_s;
  }
}

}  // namespace
}  // namespace capuchin::sim
