// recompute_trial.hpp: whether recomputation pays in this job, measured rather than believed.
// The planner's cost model can be wrong about a job (a recomputation waits for inputs that were
// swapped out, or for room): once a plan with recomputations has been followed for
// kTrialIterations iterations, a plan without them is asked for and followed as long, and the
// faster of the two is kept until the iteration is learned again. Each side's first followed
// iteration is not counted (it starts from the other plan's state).
//
// Iteration times are the host's clock between iteration ends: steady_clock on a GPU; on
// simcuda its host virtual clock (simcuda_host_virtual_ns), since simulated time is what a run
// there measures and the wall clock says nothing about it.
//
// Contract: called at iteration ends under the executor's lock; no allocation, no CUDA call.
// The decision is the caller's to apply (Planning::set_allow_recompute and a new plan).
#pragma once

#include <cstdint>

namespace capuchin::interpose::exec {

inline constexpr int kTrialIterations = 3;

class RecomputeTrial {
 public:
  struct Step {
    bool change = false;        // the planner's allow_recompute becomes `allow` (a new plan is needed)
    bool allow = true;
    bool decided = false;       // the trial ended now: with_s / without_s are its means
    double with_s = 0, without_s = 0;
  };
  // now_s: the clock at this iteration end; following: a plan is followed; recomputes: its
  // recomputations; adopted / relearns: the controller's counts of plans adopted and relearns.
  Step at_iteration_end(double now_s, bool following, std::uint32_t recomputes, std::uint64_t adopted,
                        std::uint64_t relearns);
  bool allows() const { return allow_; }

 private:
  enum class Phase : std::uint8_t { Watching, With, Without, Decided };
  Phase phase_ = Phase::Watching;
  bool allow_ = true;
  double last_s_ = -1, sum_s_ = 0, with_s_ = 0;
  int counted_ = 0, skip_ = 0;
  std::uint64_t adopted_at_ = 0, relearns_ = 0;
};

}  // namespace capuchin::interpose::exec
