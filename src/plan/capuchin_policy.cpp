// The `capuchin` policy in the simulator: what the runtime does, event by event.
//   - Iterations are delimited by host syncs (the loss read); the first one runs in passive
//     mode: when memory runs out, tensors are swapped out or dropped on demand, and brought
//     back (swap-in or recomputation) when accessed (Capuchin section 4.2; victims by DTR's
//     heuristic rather than the paper's LRU, see on_memory_pressure).
//   - At each boundary the iteration just seen becomes the pattern, and plans are made for
//     the next one (make_plan) from the memory live at that moment; the best of several
//     candidates, replayed in the simulator on the iteration just seen, is applied.
//   - The next iteration is matched against the pattern event by event; while it matches,
//     the plan's decisions are issued at their positions. A mismatch drops the plan (passive
//     until the next boundary, then relearn): a stale plan is never applied.
//   - Feedback: a swap-in that arrives late at its access gets its in-trigger moved earlier
//     by the lateness in the next plan (while the pattern is unchanged).
// Contract: uses only what the runtime would know: events already issued, the learned
// pattern, and kernel durations (measured on a GPU; the profile's in the simulator).
#include <algorithm>
#include <optional>

#include "capuchin/plan.hpp"

namespace capuchin::plan {
namespace {

using sim::Action;
using sim::ActionKind;
using sim::Residence;
using trace::kNone;
using trace::Op;

// A pattern and plan fixed in advance: the policy then only replays it (used to evaluate
// candidate plans on the iteration just observed).
struct Fixed {
  const learn::Pattern* pattern;
  const Plan* plan;
  bool prefer_drops = false;  // under pressure, recompute whatever can be (as DTR does)
};

class CapuchinPolicy final : public sim::Policy {
 public:
  explicit CapuchinPolicy(std::optional<Fixed> fixed = std::nullopt)
      : fixed_(fixed), prefer_drops_(fixed && fixed->prefer_drops) {}
  std::string_view name() const override { return "capuchin"; }

  void start(const sim::SimState& s) override {
    const std::size_t n = s.residence.size();
    last_touch_.assign(n, 0);
    live_bytes_ = 0;
    segment_begin_ = 0;
    boundary_ = false;
    owned_pattern_.reset();
    owned_plan_.reset();
    pattern_ = nullptr;
    plan_ = nullptr;
    matcher_.reset();
    feedback_.clear();
    late_since_plan_ = false;
    next_ = 0;
    if (fixed_) {
      pattern_ = fixed_->pattern;
      plan_ = fixed_->plan;
      matcher_ = std::make_unique<learn::PatternMatcher>(*pattern_, true);
    }
  }

  void before_event(const sim::SimState& s, std::vector<Action>& out) override {
    const trace::Trace& t = *s.prep->trace;
    const std::uint32_t i = s.event;
    if (boundary_ && !fixed_) begin_iteration(s, i, out);
    const trace::Event& e = t.events[i];

    if (matcher_ && !matcher_->diverged()) {
      if (matcher_->feed(t, i) && e.op != Op::Iter) {
        const std::uint32_t pos = matcher_->position() - 1;
        check_late(s, pos);
        while (next_ < plan_->decisions.size() && plan_->decisions[next_].at <= pos) {
          const Decision& d = plan_->decisions[next_++];
          if (d.at < pos) continue;  // positions skipped by alignment
          const std::uint32_t tn = resolve(d.tensor);
          if (tn == kNone) continue;
          switch (d.act) {
            case Act::Evict: out.push_back({tn, ActionKind::Evict}); break;
            case Act::Drop: out.push_back({tn, ActionKind::Drop}); break;
            case Act::Recompute:
              if (s.residence[tn] == Residence::Dropped) out.push_back({tn, ActionKind::Recompute});
              break;
            case Act::Prefetch:
              if (s.residence[tn] == Residence::Host || s.residence[tn] == Residence::Evicting) {
                out.push_back({tn, ActionKind::Prefetch});
                awaited_[d.access].push_back({d.tensor, tn});
              }
              break;
          }
        }
      }
    }

    if (e.op == Op::Alloc) live_bytes_ += t.tensors[e.tensor].bytes;
    if (e.op == Op::Free) live_bytes_ -= t.tensors[e.tensor].bytes;
    for (std::uint32_t a = e.access_begin; a < e.access_end; ++a) last_touch_[t.accesses[a].tensor] = i + 1;
    if (e.op == Op::Sync) boundary_ = true;  // the next event starts an iteration
  }

  void on_memory_pressure(const sim::SimState& s, std::uint64_t bytes_short, std::vector<Action>& out) override {
    // Whatever is least costly to restore per byte and longest unused goes first (DTR's
    // h = cost / (bytes x staleness), with a swap round trip as the cost where recomputing
    // is dearer or impossible). This replaces the paper's plain LRU, which stalls far more
    // in simulation. Keys trusting the pattern's next uses (a swap counted free when it
    // hides before the next use) were tried and stalled more: they ignore link contention.
    order_.clear();
    for (std::uint32_t tn : s.resident) {
      if (s.pinned(tn)) continue;
      const double swap_cost = 2 * copy_time(s, s.bytes(tn));
      // prefer_drops: DTR's own choice (any recomputable tensor, chains allowed); else
      // recompute only from resident inputs and only when cheaper than the swap.
      const bool drop = s.can_recompute(tn) &&
                        (prefer_drops_ || (inputs_resident(s, tn) && s.recompute_cost_s(tn) < swap_cost));
      const double cost = drop ? s.recompute_cost_s(tn) : swap_cost;
      const double staleness = std::max(s.now_s - s.last_use_end_s[tn], 1e-9);
      order_.push_back({cost / (static_cast<double>(s.bytes(tn)) * staleness), tn, drop});
    }
    std::sort(order_.begin(), order_.end(), [](const Victim& a, const Victim& b) { return a.key < b.key; });
    std::uint64_t freed = 0;
    for (const Victim& v : order_) {
      if (freed >= bytes_short) break;
      out.push_back({v.tensor, v.drop ? ActionKind::Drop : ActionKind::Evict});
      freed += s.bytes(v.tensor);
    }
  }

 private:
  std::uint32_t resolve(const TensorRef& r) const {
    if (!r.local) return r.index;
    return r.index < pattern_->local_tensors.size() ? matcher_->local(r.index) : kNone;
  }

  // A swap-in that has not landed when its access starts: remember by how much.
  void check_late(const sim::SimState& s, std::uint32_t pos) {
    auto it = awaited_.find(pos);
    if (it == awaited_.end()) return;
    for (const auto& [ref, tn] : it->second) {
      double late = 0;
      if (s.residence[tn] == Residence::Resident) late = s.last_use_end_s[tn] - s.now_s;
      else late = 2 * s.prep->gpu.link_latency_s + static_cast<double>(s.bytes(tn)) / (s.prep->gpu.link_bytes_per_s * s.prep->eff.link);
      if (late > 1e-9) {
        feedback_[{ref, pos}] += late;
        late_since_plan_ = true;
      }
    }
    awaited_.erase(it);
  }

  void begin_iteration(const sim::SimState& s, std::uint32_t first, std::vector<Action>& out) {
    boundary_ = false;
    const trace::Trace& t = *s.prep->trace;
    const bool same_shape = pattern_ && matcher_ && matcher_->complete() && !matcher_->diverged();
    if (!same_shape) feedback_.clear();  // positions of a changed pattern mean nothing
    if (same_shape && !late_since_plan_ && plan_) {
      // The iteration repeated the pattern and every swap-in landed: keep pattern and plan
      // (planning again would find the same), only follow the next iteration.
      segment_begin_ = first;
      matcher_ = std::make_unique<learn::PatternMatcher>(*pattern_, true);
      next_ = 0;
      awaited_.clear();
      return;
    }
    late_since_plan_ = false;
    owned_pattern_ = std::make_unique<learn::Pattern>(learn::make_pattern(t, trace::Iteration{0, segment_begin_, first}));
    pattern_ = owned_pattern_.get();
    PlanOptions opt;
    opt.budget_bytes = s.budget_bytes;
    opt.baseline_bytes = live_bytes_;
    opt.extra_lead_s = feedback_;
    owned_plan_ = std::make_unique<Plan>(choose_plan(s, segment_begin_, first, opt));
    plan_ = owned_plan_.get();
    segment_begin_ = first;
    matcher_ = std::make_unique<learn::PatternMatcher>(*pattern_, true);
    next_ = 0;
    awaited_.clear();
    // Persistent tensors left on the host by passive mode come back before first use unless
    // the plan itself brings them (prefetches are dropped when there is no room).
    std::vector<std::uint8_t> planned(s.residence.size(), 0);
    for (const Decision& d : plan_->decisions)
      if (!d.tensor.local) planned[d.tensor.index] = 1;
    for (std::uint32_t tn = 0; tn < s.residence.size(); ++tn)
      if (s.residence[tn] == Residence::Host && !planned[tn]) out.push_back({tn, ActionKind::Prefetch});
  }

  // Improvement over the paper: several candidates (no plan with on-demand handling by
  // cost, no plan with DTR-style recomputation first, the hybrid plan with two margins,
  // swap-only, recompute-only) are replayed in the simulator on the iteration just observed
  // [begin, end), and the fastest feasible one is kept (with its on-demand mode). The
  // runtime can do the same: it holds that iteration and its kernel times.
  Plan choose_plan(const sim::SimState& s, std::uint32_t begin, std::uint32_t end, const PlanOptions& base) {
    std::vector<Plan> cands(2);  // empty plans first: ties keep the job untouched
    cands.push_back(make_plan(*s.prep, *pattern_, base));
    PlanOptions o = base;
    o.margin = 0.10;
    cands.push_back(make_plan(*s.prep, *pattern_, o));
    o = base;
    o.allow_recompute = false;
    cands.push_back(make_plan(*s.prep, *pattern_, o));
    o = base;
    o.allow_swap = false;
    cands.push_back(make_plan(*s.prep, *pattern_, o));
    // Tensors the observed iteration created and kept (optimizer state made in step 1) are
    // there from the start of the next one: the replay holds their bytes until it reaches
    // their allocation.
    const trace::Trace& t = *s.prep->trace;
    std::vector<std::pair<std::uint32_t, std::uint64_t>> kept;
    for (std::uint32_t e = begin; e < end; ++e) {
      const trace::Event& ev = t.events[e];
      if (ev.op == Op::Alloc && (t.tensors[ev.tensor].free_event == kNone || t.tensors[ev.tensor].free_event >= end))
        kept.push_back({e, t.tensors[ev.tensor].bytes});  // still live: not freed before `end`
    }
    std::size_t best = 0;
    double best_s = 0;
    bool found = false;
    for (std::size_t k = 0; k < cands.size(); ++k) {
      CapuchinPolicy replay(Fixed{pattern_, &cands[k], k == 1});
      sim::SimOptions so;
      so.budget_bytes = s.budget_bytes;
      so.first_event = begin;
      so.end_event = end;
      so.held_until = kept;
      const sim::SimResult r = sim::simulate(*s.prep, replay, so);
      if (r.feasible && (!found || r.total_time_s < best_s)) best = k, best_s = r.total_time_s, found = true;
    }
    prefer_drops_ = best == 1;
    return std::move(cands[best]);
  }

  // Whether every input of t's writers is on the device now: then recomputing t is one
  // level deep (Capuchin recomputes from the nearest resident inputs; deep chains pin
  // memory while they run and can leave a budget unmeetable).
  static bool inputs_resident(const sim::SimState& s, std::uint32_t t) {
    const sim::PreparedTrace& p = *s.prep;
    const trace::Trace& tr = *p.trace;
    const std::uint32_t last = s.last_access(t);
    for (std::uint32_t w = p.write_offset[t]; w < p.write_offset[t + 1] && p.write_event[w] <= last; ++w) {
      const trace::Event& e = tr.events[p.write_event[w]];
      for (std::uint32_t a = e.access_begin; a < e.reads_end; ++a) {
        const std::uint32_t r = tr.accesses[a].tensor;
        if (r != t && s.residence[r] != Residence::Resident && s.residence[r] != Residence::Evicting) return false;
      }
    }
    return true;
  }

  static double copy_time(const sim::SimState& s, std::uint64_t bytes) {
    return s.prep->gpu.link_latency_s + static_cast<double>(bytes) / (s.prep->gpu.link_bytes_per_s * s.prep->eff.link);
  }

  struct Victim {
    double key;
    std::uint32_t tensor;
    bool drop;
  };
  std::vector<Victim> order_;
  std::vector<std::uint32_t> last_touch_;  // event + 1 of the last access
  std::uint64_t live_bytes_ = 0;
  std::uint32_t segment_begin_ = 0;
  bool boundary_ = false;
  std::optional<Fixed> fixed_;
  bool late_since_plan_ = false;         // a swap-in arrived late since the last planning
  bool prefer_drops_ = false;           // on-demand handling recomputes first (DTR-style)
  std::unique_ptr<learn::Pattern> owned_pattern_;
  std::unique_ptr<Plan> owned_plan_;
  const learn::Pattern* pattern_ = nullptr;
  const Plan* plan_ = nullptr;
  std::unique_ptr<learn::PatternMatcher> matcher_;
  std::size_t next_ = 0;
  std::map<std::uint32_t, std::vector<std::pair<TensorRef, std::uint32_t>>> awaited_;
  std::map<std::pair<TensorRef, std::uint32_t>, double> feedback_;
};

}  // namespace

std::unique_ptr<sim::Policy> make_capuchin_policy() { return std::make_unique<CapuchinPolicy>(); }

}  // namespace capuchin::plan
