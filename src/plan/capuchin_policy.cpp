// The `capuchin` policies in the simulator: the executor's policy (policy::Controller and
// policy::order_victims, the code libcapuchin.so runs) driven by simulated events, so that
// `capuchin sim` predicts what the executor does.
//   - Each trace event (but `iter` markers, which a job does not have) is fed to the
//     controller as the executor would feed it: it learns the iteration from the
//     event-signature period and asks for a plan at an iteration boundary.
//   - A request is planned at once with plan::plan_segment on the simulation's own profile
//     and efficiencies, and offered to the controller at the next event: as in the job, where
//     a planner thread answers while the next iteration runs, a plan is followed from the
//     first boundary after it arrived.
//   - Commands are issued as actions where they apply (an eviction of a resident tensor, a
//     prefetch of one on the host, ...), as the executor skips commands that do not apply.
//   - Memory pressure (passive mode, and what a plan leaves over budget): victims in
//     policy::order_victims' order; a tensor is dropped instead of swapped when recomputing
//     it is allowed, its inputs are resident and it is cheaper than the swap round trip.
//   - Feedback: a planned swap-in still in flight (or skipped) when its access begins is
//     reported to the controller with its lateness.
// `capuchin` plans and recomputes what the trace says can be recomputed; `capuchin-swap`
// swaps only, as the executor does without declared kernel outputs; `capuchin-paper` plans as
// the paper did (SegmentJob::paper) and swaps least recently used tensors under pressure.
// Contract: uses only what the runtime would know (events issued so far, the profile's
// durations, which the executor measures).
#include <algorithm>
#include <cstdlib>
#include <optional>

#include "capuchin/controller.hpp"
#include "capuchin/learn.hpp"
#include "capuchin/plan.hpp"
#include "capuchin/segment_plan.hpp"
#include "capuchin/victims.hpp"
#include "sim_actions.hpp"

namespace capuchin::plan {
namespace {

using sim::Action;
using sim::ActionKind;
using sim::Residence;
using trace::kNone;
using trace::Op;

class CapuchinPolicy final : public sim::Policy {
 public:
  explicit CapuchinPolicy(CapuchinVariant v) : variant_(v), allow_recompute_(v != CapuchinVariant::Swap) {}
  std::string_view name() const override {
    switch (variant_) {
      case CapuchinVariant::Swap: return "capuchin-swap";
      case CapuchinVariant::Paper: return "capuchin-paper";
      case CapuchinVariant::Full: break;
    }
    return "capuchin";
  }

  void start(const sim::SimState& s) override {
    controller_.emplace();  // (not assignable: its pool)
    last_tick_.assign(s.residence.size(), 0);
    held_.reset();
    model_.gpu = s.prep->gpu;
    model_.eff = s.prep->eff;
  }

  void before_event(const sim::SimState& s, std::vector<Action>& out) override {
    const trace::Trace& t = *s.prep->trace;
    const std::uint32_t i = s.event;
    const trace::Event& e = t.events[i];
    if (e.op == Op::Iter) return;
    if (held_) {  // planned during the previous event: it arrives now
      controller_->offer(held_->first, std::move(held_->second));
      held_.reset();
    }
    for (std::uint32_t a = e.access_begin; a < e.access_end; ++a) check_late(s, t.accesses[a].tensor);
    const policy::Event ev = to_event(s, i, ids_);
    cmds_.clear();
    controller_->on_event(ev, ids_, cmds_);
    for (const policy::Command& c : cmds_) issue(s, c, out);
    if (auto r = controller_->take_request()) {
      r->job.names = t.names;
      r->job.budget = s.budget_bytes;
      r->job.allow_recompute = allow_recompute_;
      r->job.paper = variant_ == CapuchinVariant::Paper;
      if (const char* dump = std::getenv("CAPUCHIN_PLAN_DUMP"); dump != nullptr && dump[0] != '\0') r->job.dump_dir = dump;
      auto made = plan_segment(r->job, &model_);
      std::shared_ptr<const SegmentPlan> p;
      if (made) p = std::make_shared<const SegmentPlan>(std::move(*made));
      held_.emplace(r->serial, std::move(p));
    }
    for (std::uint32_t a = e.access_begin; a < e.access_end; ++a) last_tick_[t.accesses[a].tensor] = controller_->tick();
    if (e.op == Op::Alloc) last_tick_[e.tensor] = controller_->tick();
  }

  void on_memory_pressure(const sim::SimState& s, std::uint64_t bytes_short, std::vector<Action>& out) override {
    if (variant_ == CapuchinVariant::Paper) {  // the paper's passive mode: swap out, least recently used first
      cands_.clear();
      for (std::uint32_t tn : s.resident)
        if (!s.pinned(tn)) cands_.push_back({tn, s.bytes(tn), controller_->tick() - std::min(controller_->tick(), last_tick_[tn]) + 1, 0, false});
      std::sort(cands_.begin(), cands_.end(), [](const policy::VictimCandidate& a, const policy::VictimCandidate& b) {
        return a.idle != b.idle ? a.idle > b.idle : a.handle < b.handle;
      });
      std::uint64_t freed = 0;
      for (std::size_t k = 0; k < cands_.size() && freed < bytes_short; ++k) {
        out.push_back({static_cast<std::uint32_t>(cands_[k].handle), ActionKind::Evict});
        freed += cands_[k].bytes;
      }
      return;
    }
    // A plan chosen without recomputation was replayed with pressure victims swapped only.
    const bool drops = allow_recompute_ && !(controller_->following() && controller_->plan()->no_drops);
    pressure_victims(s, drops, last_tick_, controller_->tick(), bytes_short, cands_, out);
  }

 private:
  // The trace event as the executor would feed it; tensors are named by their trace index.
  static policy::Event to_event(const sim::SimState& s, std::uint32_t i, std::vector<std::uint64_t>& ids) {
    const trace::Trace& t = *s.prep->trace;
    const trace::Event& e = t.events[i];
    policy::Event ev;
    ev.op = static_cast<std::uint8_t>(e.op);
    ev.sig = learn::event_signature(t, i);
    ev.form = learn::event_form(t, i);
    ids.clear();
    switch (e.op) {
      case Op::Alloc:
        ev.id = e.tensor;
        ev.bytes = t.tensors[e.tensor].bytes;
        break;
      case Op::Free:
        ev.id = e.tensor;
        break;
      case Op::Kernel: {
        const bool touch = e.writes_end < e.access_end;
        for (std::uint32_t a = e.access_begin; a < e.access_end; ++a) ids.push_back(t.accesses[a].tensor);
        ev.touch = touch;
        ev.nreads = touch ? e.access_end - e.access_begin : e.reads_end - e.access_begin;
        ev.nwrites = touch ? 0 : e.writes_end - e.reads_end;
        if (touch) ids.resize(ev.nreads);
        ev.name = e.name;
        ev.bytes = e.bytes;
        ev.dur_ns = std::max<std::uint64_t>(1, static_cast<std::uint64_t>(s.prep->duration_s[i] * 1e9 + 0.5));
        break;
      }
      case Op::Copy:
        ev.dir = static_cast<std::uint8_t>(e.dir);
        ev.bytes = e.bytes;
        ev.id = (e.flags & trace::kHasSrc) != 0 ? e.tensor : kNoSegmentId;
        ev.id2 = (e.flags & trace::kHasDst) != 0 ? e.tensor2 : kNoSegmentId;
        break;
      default:
        break;
    }
    return ev;
  }

  void issue(const sim::SimState& s, const policy::Command& c, std::vector<Action>& out) const {
    if (c.id < s.residence.size()) issue_action(s, c.act, static_cast<std::uint32_t>(c.id), allow_recompute_, out);
  }

  // A planned swap-in whose access begins now: late by what is left of its copy, or by a
  // whole copy when it never started (no room).
  void check_late(const sim::SimState& s, std::uint32_t tn) {
    if (!controller_->awaits(tn)) return;
    double late = 0;
    if (s.residence[tn] == Residence::Resident) late = s.last_use_end_s[tn] - s.now_s;
    else late = 2 * s.prep->gpu.link_latency_s + static_cast<double>(s.bytes(tn)) / sim::swap_in_rate(s.prep->gpu, s.prep->eff);
    if (late > 1e-9) controller_->note_late(tn, late);
  }

  const CapuchinVariant variant_;
  const bool allow_recompute_;
  std::optional<policy::Controller> controller_;
  PlanModel model_;
  std::vector<std::uint64_t> last_tick_;  // controller tick of each tensor's last use
  std::vector<std::uint64_t> ids_;
  std::vector<policy::Command> cmds_;
  std::vector<policy::VictimCandidate> cands_;
  std::optional<std::pair<std::uint64_t, std::shared_ptr<const SegmentPlan>>> held_;  // (serial, plan)
};

}  // namespace

std::unique_ptr<sim::Policy> make_capuchin_policy(CapuchinVariant v) {
  return std::make_unique<CapuchinPolicy>(v);
}

}  // namespace capuchin::plan
