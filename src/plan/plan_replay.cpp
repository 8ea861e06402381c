// plan_replay.cpp: a candidate plan judged by the simulator (see plan.hpp, replay_plan).
// The planner's own model runs the iteration on its ideal timeline and cannot see what a
// plan's stalls do to the moves after them; replaying the plan through the simulator, with
// the rules the simulated job follows (sim_actions.hpp), can. The replay covers one iteration:
// it starts at the pattern's first event with what is live then resident, except the
// tensors the plan keeps off the device across the iteration boundary, which start on the
// host (their copies out belong to the iteration before).
#include <algorithm>
#include <limits>

#include "capuchin/plan.hpp"
#include "sim_actions.hpp"

namespace capuchin::plan {

namespace {

class PlanReplay final : public sim::Policy {
 public:
  PlanReplay(const Plan& plan, const learn::Pattern& pat, bool allow_recompute, ReplayNotes* notes)
      : allow_recompute_(allow_recompute), notes_(notes) {
    for (const Decision& d : plan.decisions) {
      if (d.at >= pat.events.size()) continue;
      const std::uint32_t tn = d.tensor.local ? (d.tensor.index < pat.local_tensors.size() ? pat.local_tensors[d.tensor.index] : trace::kNone)
                                              : d.tensor.index;
      if (tn != trace::kNone) steps_.push_back({pat.events[d.at].trace_event, tn, d.act});
    }
    std::stable_sort(steps_.begin(), steps_.end(), [](const Step& a, const Step& b) { return a.event < b.event; });
  }
  std::string_view name() const override { return "plan-replay"; }
  void start(const sim::SimState& s) override {
    idle_since_.assign(s.residence.size(), 0);
    next_ = 0;
    tick_ = 0;
  }
  void before_event(const sim::SimState& s, std::vector<sim::Action>& out) override {
    const std::uint32_t i = s.event;
    ++tick_;
    while (next_ < steps_.size() && steps_[next_].event < i) ++next_;
    for (; next_ < steps_.size() && steps_[next_].event == i; ++next_) issue_action(s, steps_[next_].act, steps_[next_].tensor, allow_recompute_, out);
    const trace::Trace& t = *s.prep->trace;
    const trace::Event& e = t.events[i];
    for (std::uint32_t a = e.access_begin; a < e.access_end; ++a) idle_since_[t.accesses[a].tensor] = tick_;
    if (e.op == trace::Op::Alloc) idle_since_[e.tensor] = tick_;
  }
  void on_memory_pressure(const sim::SimState& s, std::uint64_t bytes_short, std::vector<sim::Action>& out) override {
    const std::size_t first = out.size();
    pressure_victims(s, allow_recompute_, idle_since_, tick_, bytes_short, cands_, out);
    if (notes_ != nullptr)
      for (std::size_t k = first; k < out.size(); ++k)
        notes_->victims.push_back({s.event, out[k].tensor, s.last_access(out[k].tensor), s.next_access(out[k].tensor),
                                   out[k].kind == sim::ActionKind::Drop});
  }

 private:
  struct Step {
    std::uint32_t event, tensor;
    Act act;
  };
  const bool allow_recompute_;
  ReplayNotes* notes_;
  std::vector<Step> steps_;
  std::size_t next_ = 0;
  std::uint64_t tick_ = 0;
  std::vector<std::uint64_t> idle_since_;
  std::vector<policy::VictimCandidate> cands_;
};

}  // namespace

double replay_plan(const sim::PreparedTrace& p, const learn::Pattern& pattern, const Plan& plan, std::uint64_t budget,
                   bool allow_recompute, ReplayNotes* notes) {
  if (pattern.events.empty()) return 0;
  PlanReplay policy(plan, pattern, allow_recompute, notes);
  sim::SimOptions o;
  o.budget_bytes = budget;
  o.first_event = pattern.events.front().trace_event;
  o.start_on_host = plan.off_at_start;
  if (notes != nullptr) o.cancelled = &notes->cancelled;
  const sim::SimResult r = sim::simulate(p, policy, o);
  if (!r.feasible) return std::numeric_limits<double>::infinity();
  // The next iteration starts as this one did: what the run leaves off the device that it
  // found there (the pressure rules' victims late in the iteration) comes back on demand,
  // one copy or recomputation at a time. Without this, a candidate that evicts what it will
  // not read again this iteration would look free.
  double back = 0;
  std::vector<std::uint32_t> started_off = r.started_off_device;
  std::sort(started_off.begin(), started_off.end());
  for (std::uint32_t tn : r.off_device_at_end) {
    if (std::binary_search(started_off.begin(), started_off.end(), tn)) continue;
    back += sim::swap_in_s(p.gpu, p.eff, p.trace->tensors[tn].bytes);
  }
  return r.time_s + back;
}

}  // namespace capuchin::plan
