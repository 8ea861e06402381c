// The baseline policies every capuchin policy must beat (each cites its paper):
//   ideal            unlimited memory: the physical limit of the trace on the profile.
//   none             no management: infeasible below the trace's natural peak.
//   lru-uvm          naive CUDA Unified Memory as G10 (Zhang et al., MICRO 2023) and DeepUM
//                    (Jung et al., ASPLOS 2023) describe it: on-demand paging, the least
//                    recently used tensor evicted at fault time, a fixed latency per fault.
//                    Tensor granularity (UVM migrates 4 KiB-2 MiB pages: this is optimistic).
//   vdnn             vDNN (Rhu et al., MICRO 2016): every forward activation that backward
//                    needs is swapped out after its last forward use and prefetched one ahead,
//                    in reverse order, during backward. Generalised from convolution inputs to
//                    every saved tensor. Never evicts under pressure.
//   dtr              Dynamic Tensor Rematerialization (Kirisame et al., ICLR 2021): at memory
//                    pressure, drop the resident recomputable tensor of least
//                    h = cost / (bytes x staleness) (cost: its own writers' compute time, the
//                    paper's local h_DTR without the e* neighbourhood); recompute on demand.
//   checkpoint-sqrt  Chen et al., "Training Deep Nets with Sublinear Memory Cost" (2016):
//                    of the n forward tensors that backward needs, keep every
//                    round(sqrt(n))-th and drop the rest after their last forward use;
//                    backward recomputes them on demand from the kept ones. Budget-oblivious.
// Contract: policies only request actions; the simulator checks them (see sim.hpp).
#include <algorithm>
#include <cmath>
#include <queue>

#include "capuchin/plan.hpp"
#include "capuchin/sim.hpp"

namespace capuchin::sim {
namespace {

using trace::kNone;

class IdealPolicy final : public Policy {
 public:
  std::string_view name() const override { return "ideal"; }
  void before_event(const SimState&, std::vector<Action>&) override {}
  bool unlimited_memory() const override { return true; }
};

class NonePolicy final : public Policy {
 public:
  std::string_view name() const override { return "none"; }
  void before_event(const SimState&, std::vector<Action>&) override {}
};

class LruUvmPolicy final : public Policy {
 public:
  std::string_view name() const override { return "lru-uvm"; }
  bool demand_paging() const override { return true; }
  void start(const SimState& s) override { key_.assign(s.residence.size(), kNone); }
  void before_event(const SimState& s, std::vector<Action>&) override {
    const trace::Trace& t = *s.prep->trace;
    const trace::Event& e = t.events[s.event];
    if (e.op == trace::Op::Alloc) touch(e.tensor, s.event);
    for (std::uint32_t a = e.access_begin; a < e.access_end; ++a) touch(t.accesses[a].tensor, s.event);
  }
  void on_memory_pressure(const SimState& s, std::uint64_t short_bytes, std::vector<Action>& out) override {
    std::uint64_t freed = 0;
    held_.clear();
    while (freed < short_bytes && !heap_.empty()) {
      const Entry top = heap_.top();
      heap_.pop();
      if (key_[top.tensor] != top.event || s.residence[top.tensor] != Residence::Resident) continue;  // stale
      if (s.pinned(top.tensor)) {
        held_.push_back(top);
        continue;
      }
      out.push_back({top.tensor, ActionKind::Evict});
      freed += s.bytes(top.tensor);
      key_[top.tensor] = kNone;  // re-keyed when next accessed
    }
    for (const Entry& e : held_) heap_.push(e);
  }

 private:
  struct Entry {
    std::uint32_t event, tensor;
    bool operator>(const Entry& o) const { return event > o.event; }
  };
  void touch(std::uint32_t tensor, std::uint32_t event) {
    if (key_[tensor] == event) return;
    key_[tensor] = event;
    heap_.push({event, tensor});
  }
  std::vector<std::uint32_t> key_;
  std::priority_queue<Entry, std::vector<Entry>, std::greater<>> heap_;
  std::vector<Entry> held_;
};

class DtrPolicy final : public Policy {
 public:
  std::string_view name() const override { return "dtr"; }
  void before_event(const SimState&, std::vector<Action>&) override {}
  void on_memory_pressure(const SimState& s, std::uint64_t short_bytes, std::vector<Action>& out) override {
    std::uint64_t freed = 0;
    chosen_.clear();
    while (freed < short_bytes) {
      double best_h = 0;
      std::uint32_t best = kNone;
      for (std::uint32_t t : s.resident) {
        if (s.pinned(t) || std::find(chosen_.begin(), chosen_.end(), t) != chosen_.end() || !s.can_recompute(t))
          continue;
        const double staleness = std::max(s.now_s - s.last_use_end_s[t], 1e-9);
        // (a tensor never accessed again may still feed another one's recomputation, so
        // it gets no discount)
        const double h = s.recompute_cost_s(t) / (static_cast<double>(s.bytes(t)) * staleness);
        if (best == kNone || h < best_h) best_h = h, best = t;
      }
      if (best == kNone) break;
      chosen_.push_back(best);
      out.push_back({best, ActionKind::Drop});
      freed += s.bytes(best);
    }
  }

 private:
  std::vector<std::uint32_t> chosen_;
};

// The forward tensors of each iteration that backward needs, with their last forward
// access and first backward access, in allocation order.
struct Saved {
  std::uint32_t tensor, last_forward, first_backward;
};
std::vector<std::vector<Saved>> saved_for_backward(const PreparedTrace& p) {
  const trace::Trace& t = *p.trace;
  std::vector<std::vector<Saved>> out(t.iterations.size());
  for (std::size_t i = 0; i < t.iterations.size(); ++i) {
    const auto& it = t.iterations[i];
    const std::uint32_t b = p.backward_begin[i];
    for (std::uint32_t ti = 0; ti < t.tensors.size(); ++ti) {
      const trace::Tensor& ts = t.tensors[ti];
      if (ts.alloc_event < it.begin || ts.alloc_event >= b) continue;
      const auto first = p.access_event.begin() + p.access_offset[ti];
      const auto last = p.access_event.begin() + p.access_offset[ti + 1];
      const auto bw = std::lower_bound(first, last, b);
      if (bw == first || bw == last || *bw >= it.end) continue;  // no forward use or no backward use
      out[i].push_back({ti, *(bw - 1), *bw});
    }
  }
  return out;
}

// Actions scheduled at fixed events (CSR by event).
class ScheduledPolicy : public Policy {
 public:
  void before_event(const SimState& s, std::vector<Action>& out) override {
    for (std::uint32_t k = offset_[s.event]; k < offset_[s.event + 1]; ++k) {
      const Action a = actions_[k];
      if (a.kind == ActionKind::Drop && !s.can_recompute(a.tensor)) continue;
      out.push_back(a);
    }
  }

 protected:
  void schedule(const SimState& s, std::vector<std::pair<std::uint32_t, Action>> list) {
    const std::size_t n = s.prep->trace->events.size();
    std::stable_sort(list.begin(), list.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
    offset_.assign(n + 1, 0);
    for (const auto& [ev, a] : list) ++offset_[ev + 1];
    for (std::size_t i = 0; i < n; ++i) offset_[i + 1] += offset_[i];
    actions_.clear();
    for (const auto& [ev, a] : list) actions_.push_back(a);
  }

 private:
  std::vector<std::uint32_t> offset_;
  std::vector<Action> actions_;
};

class VdnnPolicy final : public ScheduledPolicy {
 public:
  std::string_view name() const override { return "vdnn"; }
  void start(const SimState& s) override {
    std::vector<std::pair<std::uint32_t, Action>> list;
    const auto saved = saved_for_backward(*s.prep);
    for (std::size_t i = 0; i < saved.size(); ++i) {
      auto v = saved[i];
      for (const Saved& x : v) list.push_back({x.last_forward + 1, {x.tensor, ActionKind::Evict}});
      // Backward needs them in (about) reverse order: prefetch the first at backward's start,
      // and each next one when the previous one is first used.
      std::stable_sort(v.begin(), v.end(), [](const Saved& a, const Saved& b) { return a.first_backward < b.first_backward; });
      if (v.empty()) continue;
      list.push_back({s.prep->backward_begin[i], {v[0].tensor, ActionKind::Prefetch}});
      for (std::size_t k = 0; k + 1 < v.size(); ++k) list.push_back({v[k].first_backward, {v[k + 1].tensor, ActionKind::Prefetch}});
    }
    schedule(s, std::move(list));
  }
};

class CheckpointSqrtPolicy final : public ScheduledPolicy {
 public:
  std::string_view name() const override { return "checkpoint-sqrt"; }
  void start(const SimState& s) override {
    std::vector<std::pair<std::uint32_t, Action>> list;
    for (const auto& v : saved_for_backward(*s.prep)) {
      if (v.empty()) continue;
      const auto k = static_cast<std::size_t>(std::max(1.0, std::round(std::sqrt(static_cast<double>(v.size())))));
      for (std::size_t j = 0; j < v.size(); ++j)
        if (j % k != 0) list.push_back({v[j].last_forward + 1, {v[j].tensor, ActionKind::Drop}});
    }
    schedule(s, std::move(list));
  }
};

}  // namespace

std::vector<std::string> policy_names() {
  return {"ideal", "none", "lru-uvm", "vdnn", "dtr", "checkpoint-sqrt", "capuchin", "capuchin-swap", "capuchin-paper"};
}

Expected<std::unique_ptr<Policy>> make_policy(std::string_view name) {
  std::unique_ptr<Policy> p;
  if (name == "ideal") p = std::make_unique<IdealPolicy>();
  else if (name == "none") p = std::make_unique<NonePolicy>();
  else if (name == "lru-uvm") p = std::make_unique<LruUvmPolicy>();
  else if (name == "vdnn") p = std::make_unique<VdnnPolicy>();
  else if (name == "dtr") p = std::make_unique<DtrPolicy>();
  else if (name == "checkpoint-sqrt") p = std::make_unique<CheckpointSqrtPolicy>();
  else if (name == "capuchin") p = plan::make_capuchin_policy(plan::CapuchinVariant::Full);  // src/plan/
  else if (name == "capuchin-swap") p = plan::make_capuchin_policy(plan::CapuchinVariant::Swap);
  else if (name == "capuchin-paper") p = plan::make_capuchin_policy(plan::CapuchinVariant::Paper);
  if (p) return p;
  std::string known;
  for (const auto& n : policy_names()) known += (known.empty() ? "" : ", ") + n;
  return make_error("unknown policy '" + std::string(name) + "' (known: " + known + ")");
}

}  // namespace capuchin::sim
