// recompute_trial.cpp: the trial of recomputation against swaps alone (see recompute_trial.hpp).
#include "recompute_trial.hpp"

namespace capuchin::interpose::exec {

RecomputeTrial::Step RecomputeTrial::at_iteration_end(double now_s, bool following, std::uint32_t recomputes,
                                                      std::uint64_t adopted, std::uint64_t relearns) {
  Step st;
  const double dt = last_s_ >= 0 ? now_s - last_s_ : -1;
  last_s_ = now_s;
  if (relearns != relearns_) {  // a new iteration: what was measured is of another
    relearns_ = relearns;
    phase_ = Phase::Watching;
    if (!allow_) st.change = true, allow_ = true;
    st.allow = allow_;
    return st;
  }
  st.allow = allow_;
  auto measure = [&] {  // true once kTrialIterations have been counted
    if (skip_ > 0) {
      --skip_;
      return false;
    }
    if (dt >= 0) sum_s_ += dt, ++counted_;
    return counted_ >= kTrialIterations;
  };
  switch (phase_) {
    case Phase::Watching:
      if (following && recomputes > 0 && allow_) {
        phase_ = Phase::With;
        sum_s_ = 0, counted_ = 0, skip_ = 1;
      }
      break;
    case Phase::With:
      if (!following || recomputes == 0) {
        phase_ = Phase::Watching;
        break;
      }
      if (measure()) {
        with_s_ = sum_s_ / counted_;
        phase_ = Phase::Without;
        sum_s_ = 0, counted_ = 0, skip_ = 1;
        adopted_at_ = adopted;
        st.change = true, st.allow = allow_ = false;
      }
      break;
    case Phase::Without:
      if (adopted == adopted_at_ || !following) break;  // the plan without recomputations is not followed yet
      if (measure()) {
        const double without_s = sum_s_ / counted_;
        phase_ = Phase::Decided;
        st.decided = true, st.with_s = with_s_, st.without_s = without_s;
        if (with_s_ < without_s) st.change = true, st.allow = allow_ = true;
      }
      break;
    case Phase::Decided:
      break;
  }
  return st;
}

}  // namespace capuchin::interpose::exec
