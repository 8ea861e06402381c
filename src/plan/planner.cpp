// Capuchin's planner over one observed iteration (see include/capuchin/plan.hpp).
//
// Model: the iteration's events run back to back on the compute stream with the profile's
// durations; the memory in use during event i is M(i) = baseline + the iteration's own live
// tensors. Every gap between two consecutive accesses of a tensor that spans a position over
// the target is a candidate. Phase 1 (the paper's swap selection): candidates in order of
// free time (time between the accesses minus the swap-out and swap-in copies), each placed
// on the D2H and H2D engines around the swaps already chosen (the in-trigger is the latest
// event from which the swap-in still lands before the access), accepted while hidden and
// while it lowers an over-target position. Phase 2 (the hybrid): what remains over the
// target is covered by the cheapest per byte of a late swap or a recomputation (MSPS), with
// a recomputation's inputs kept resident. Improvements over the paper: persistent tensors
// (parameters, optimizer state) are candidates across the iteration boundary, and feedback
// from late arrivals moves in-triggers earlier.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <queue>
#include <span>

#include "capuchin/plan.hpp"
#include "range_max_tree.hpp"

namespace capuchin::plan {

using trace::kNone;
using trace::Op;

namespace {

// One copy engine's busy intervals within an iteration, sorted and disjoint (so their ends
// are sorted too, and searches start with a binary search).
class CopyEngine {
 public:
  // Earliest start >= from with `dur` free.
  double earliest(double from, double dur) const {
    double t = from;
    auto it = std::lower_bound(busy_.begin(), busy_.end(), t, [](const auto& iv, double x) { return iv.second <= x; });
    for (; it != busy_.end() && it->first < t + dur; ++it) t = std::max(t, it->second);
    return t;
  }
  // Latest start s with from <= s and s + dur <= until and [s, s+dur) free; -1 if none.
  double latest(double from, double until, double dur) const {
    double end = until;
    auto it = std::lower_bound(busy_.begin(), busy_.end(), end, [](const auto& iv, double x) { return iv.first < x; });
    while (it != busy_.begin()) {
      --it;
      if (it->second <= end - dur) break;
      end = std::min(end, it->first);
      if (end - dur < from) return -1.0;
    }
    return end - dur >= from ? end - dur : -1.0;
  }
  // Busy runs are kept maximal (touching intervals merged), so a saturated engine is one run.
  void reserve(double start, double dur) {
    double a = start, b = start + dur;
    auto it = std::lower_bound(busy_.begin(), busy_.end(), a, [](const auto& iv, double x) { return iv.second < x - kTouch; });
    auto last = it;
    while (last != busy_.end() && last->first <= b + kTouch) {
      a = std::min(a, last->first);
      b = std::max(b, last->second);
      ++last;
    }
    it = busy_.erase(it, last);
    busy_.insert(it, {a, b});
  }

 private:
  static constexpr double kTouch = 1e-12;
  std::vector<std::pair<double, double>> busy_;
};

struct Candidate {
  TensorRef ref;
  std::uint32_t tensor;  // trace index
  std::uint64_t bytes;
  std::uint32_t a, b;    // accesses: after position a, before position b (b < a: next iteration)
  double free_time;      // ideal, ignoring other swaps
  bool swap_ok;          // worth a link's time (PlanOptions::min_swap_efficiency)
  bool done = false;
};

// The saving of one accepted choice: positions [s, e) (wrapping when e < s).
struct Off {
  std::uint32_t s, e;
  bool covers(std::uint32_t i) const { return s <= e ? (i >= s && i < e) : (i >= s || i < e); }
};

// An accepted choice for one tensor: a swap, or a drop (recomputed from the event
// `from_event`, its access before the drop, at a cost).
struct OffRec {
  Off off;
  bool drop = false;
  std::uint32_t from_event = 0;  // drop: recomputed from its access at this event
  double cost_s = 0;             // drop: own recomputation time
  std::size_t prefetch = 0;      // swap: index of its Prefetch decision
};

class Planner {
 public:
  // stall_s: a planned wait before each position (empty: none).
  Planner(const sim::PreparedTrace& p, const learn::Pattern& pat, const PlanOptions& opt, std::span<const double> stall_s)
      : p_(p), t_(*p.trace), pat_(pat), opt_(opt), n_(static_cast<std::uint32_t>(pat.events.size())), stall_s_(stall_s) {}

  Plan run();

 private:
  // A swap's two copies (sim::swap_out_s, swap_in_s: each way at its own rate).
  double out_time(std::uint64_t bytes) const { return sim::swap_out_s(p_.gpu, p_.eff, bytes); }
  double in_time(std::uint64_t bytes) const { return sim::swap_in_s(p_.gpu, p_.eff, bytes); }
  std::uint32_t ev(std::uint32_t pos) const { return pat_.events[pos].trace_event; }
  // First position whose event starts at or after `time` (n_ if none).
  std::uint32_t pos_from(double time) const {
    return static_cast<std::uint32_t>(std::lower_bound(start_.begin(), start_.end(), time - 1e-15) - start_.begin());
  }
  // Last position issued at or before `time`, not after `limit` (a copy issued before a
  // planned stall starts when the stall does: a position is issued when its predecessor ends).
  std::uint32_t pos_until(double time, std::uint32_t limit) const {
    auto it = std::upper_bound(issue_.begin(), issue_.end(), time + 1e-15);
    std::uint32_t p = it == issue_.begin() ? 0 : static_cast<std::uint32_t>(it - issue_.begin()) - 1;
    return std::min(p, limit);
  }
  // Positions in o that were over the target before any choice (at least 1).
  double covered(const Off& o) const {
    const std::uint32_t k = o.s <= o.e ? over_before_[o.e] - over_before_[o.s]
                                       : over_before_[n_] - over_before_[o.s] + over_before_[o.e];
    return std::max<double>(1.0, k);
  }
  bool over(const Off& o) const {
    if (o.s <= o.e) return o.s < o.e && tree_.max(o.s, o.e) > static_cast<std::int64_t>(target_);
    return tree_.max(o.s, n_) > static_cast<std::int64_t>(target_) || (o.e > 0 && tree_.max(0, o.e) > static_cast<std::int64_t>(target_));
  }
  void lower(const Off& o, std::uint64_t bytes) {
    const auto d = -static_cast<std::int64_t>(bytes);
    if (o.s <= o.e) {
      if (o.s < o.e) tree_.add(o.s, o.e, d);
    } else {
      tree_.add(o.s, n_, d);
      if (o.e > 0) tree_.add(0, o.e, d);
    }
  }
  bool conflicts(std::uint32_t tensor, const Off& o) const;
  // What a swap's use of the link is charged (PlanOptions::link_price): both its copies.
  double link_cost(std::uint64_t bytes) const { return opt_.link_price * (out_time(bytes) + in_time(bytes)); }
  // Phase 1 under a priced link: is recomputing c cheaper than swapping it even when hidden?
  bool priced_recompute_wins(const Candidate& c) {
    double rc = 0;
    return opt_.link_price > 0 && opt_.allow_recompute && try_recompute(c, false, &rc) && rc < link_cost(c.bytes);
  }
  // A swap of c placed on the engines: its saving, in-trigger, lateness. false: no saving.
  struct SwapPlace {
    double out_start, in_start, late;
    Off off;
    std::uint32_t trigger;
    std::uint32_t evict_at;  // the eviction's position: after the access, or in the next iteration (delay_wrap_evictions)
  };
  bool place_swap(const Candidate& c, SwapPlace& sp) const;
  void accept_swap(const Candidate& c, const SwapPlace& sp, Reason why);
  bool try_recompute(const Candidate& c, bool accept, double* cost);
  // An accepted saving of tensor r ends at position `at` instead (it is needed there): the
  // memory comes back from `at`, a swap's prefetch moves to `at`.
  void shorten(std::uint32_t r, std::size_t idx, std::uint32_t at);
  // A dropped tensor r recomputed at `at` as the input of another recomputation: dropped
  // again right after it (its own recomputation at its access stays planned) when what it
  // saves after `at` is still needed, else kept from `at` on (shorten). A chain of dropped
  // activations recomputed for one access would otherwise come back whole and stay until
  // each one's own access.
  void redrop(std::uint32_t r, std::size_t idx, std::uint32_t at);
  // Added cost of recomputing the dropped inputs of `tensor`'s writers (up to `upto`) at
  // position `at`, recursively; -1 when an input is swapped out then.
  double inputs_cost(std::uint32_t tensor, std::uint32_t upto, std::uint32_t at, int depth,
                     std::vector<std::pair<std::uint32_t, std::size_t>>& nested, std::vector<std::uint32_t>& plain);
  std::uint32_t access_index(std::uint32_t tensor, std::uint32_t event) const {
    auto b = p_.access_event.begin() + p_.access_offset[tensor], e = p_.access_event.begin() + p_.access_offset[tensor + 1];
    auto it = std::lower_bound(b, e, event);
    return it != e && *it == event ? static_cast<std::uint32_t>(it - p_.access_event.begin()) : kNone;
  }

  const sim::PreparedTrace& p_;
  const trace::Trace& t_;
  const learn::Pattern& pat_;
  const PlanOptions& opt_;
  const std::uint32_t n_;
  const std::span<const double> stall_s_;
  std::vector<double> start_, end_;
  std::vector<double> issue_;  // when each position is issued: start_ less its planned stall
  double iter_s_ = 0;
  std::uint64_t target_ = 0;
  RangeMaxTree tree_;
  std::vector<std::uint32_t> over_before_;  // run(): over-target positions before each (prefix counts)
  CopyEngine d2h_, h2d_;
  std::vector<Candidate> cands_;
  std::vector<std::vector<OffRec>> off_;    // per trace tensor: accepted savings
  std::vector<TensorRef> ref_of_;  // per trace tensor: how the plan names it
  std::vector<std::vector<std::uint32_t>> needed_at_;  // per trace tensor: positions a recompute reads it
  Plan plan_;
};

bool Planner::conflicts(std::uint32_t tensor, const Off& o) const {
  for (std::uint32_t at : needed_at_[tensor])
    if (o.covers(at)) return true;
  return false;
}

bool Planner::place_swap(const Candidate& c, SwapPlace& sp) const {
  const double out_dur = out_time(c.bytes), in_dur = in_time(c.bytes);
  const bool wrap = c.b < c.a;
  double lead = 0;
  if (auto it = opt_.extra_lead_s.find({c.ref, c.b}); it != opt_.extra_lead_s.end()) lead = it->second;
  sp.out_start = d2h_.earliest(end_[c.a], out_dur);
  sp.evict_at = c.a + 1;
  bool wrap_now = wrap;
  if (wrap && sp.out_start + out_dur > iter_s_) {
    if (!opt_.delay_wrap_evictions) return false;
    // Its copy out would not end within the iteration: evicted in the next one instead
    // (resident until then, as without the swap), its copy out and in both before the access.
    // Issued where its copy can start, not all at the start: a queue of copies out there would
    // hold up the job's own copies to the host (a metric read early in forward waited 0.74 ms
    // behind resnet18's optimizer state, simulated).
    sp.out_start = d2h_.earliest(0.0, out_dur);
    sp.evict_at = pos_until(sp.out_start, c.b);
    wrap_now = false;
  }
  const double released = sp.out_start + out_dur;
  const std::uint32_t out_pos = pos_from(released);
  // The swap-in must land by the access (minus learned lead); as late as possible after
  // the swap-out (wrapping: anywhere before the access in the next iteration).
  const double deadline = std::max(0.0, start_[c.b] - lead);
  const double from = wrap_now ? 0.0 : released;
  double in = h2d_.latest(from, deadline, in_dur);
  sp.late = 0;
  if (in < 0) {
    in = h2d_.earliest(from, in_dur);
    sp.late = in + in_dur - deadline;
  }
  sp.in_start = in;
  sp.trigger = pos_until(in, c.b);
  sp.off = Off{out_pos, sp.trigger};
  if (!wrap_now && sp.trigger <= out_pos) return false;  // back before it was gone
  if (wrap_now && out_pos >= n_ && sp.trigger == 0) return false;
  if (wrap_now && out_pos >= n_) sp.off.s = 0;  // released after the last event: saves from the next start
  return true;
}

void Planner::accept_swap(const Candidate& c, const SwapPlace& sp, Reason why) {
  d2h_.reserve(sp.out_start, out_time(c.bytes));
  h2d_.reserve(sp.in_start, in_time(c.bytes));
  lower(sp.off, c.bytes);
  off_[c.tensor].push_back({sp.off, false, 0, 0, plan_.decisions.size() + 1});
  Decision out{sp.evict_at, Act::Evict, c.ref, c.bytes, c.a, why, c.free_time, sp.late, 0};
  Decision in{sp.trigger, Act::Prefetch, c.ref, c.bytes, c.b, why, c.free_time, sp.late, 0};
  plan_.decisions.push_back(out);
  plan_.decisions.push_back(in);
  plan_.expected_overhead_s += sp.late;
  ++plan_.swaps;
  if (sp.evict_at != c.a + 1) ++plan_.delayed_evictions;
}

void Planner::shorten(std::uint32_t r, std::size_t idx, std::uint32_t at) {
  OffRec& rec = off_[r][idx];
  needed_at_[r].push_back(at);
  if (!rec.off.covers(at)) return;
  const auto back = static_cast<std::int64_t>(t_.tensors[r].bytes);
  if (rec.off.s <= rec.off.e) {
    tree_.add(at, rec.off.e, back);
  } else if (at >= rec.off.s) {  // wrapping, cut in its first part
    tree_.add(at, n_, back);
    if (rec.off.e > 0) tree_.add(0, rec.off.e, back);
  } else {  // wrapping, cut in its second part
    tree_.add(at, rec.off.e, back);
  }
  rec.off.e = at;
  if (!rec.drop) plan_.decisions[rec.prefetch].at = std::min(plan_.decisions[rec.prefetch].at, at);
}

void Planner::redrop(std::uint32_t r, std::size_t idx, std::uint32_t at) {
  const OffRec rec = off_[r][idx];
  const std::uint64_t bytes = t_.tensors[r].bytes;
  // (A drop's saving never wraps, and inputs_cost names only savings covering `at`.) Kept
  // instead when its return after `at` puts no position over the target.
  if (at + 1 >= rec.off.e ||
      tree_.max(at + 1, rec.off.e) + static_cast<std::int64_t>(bytes) <= static_cast<std::int64_t>(target_)) {
    shorten(r, idx, at);
    return;
  }
  needed_at_[r].push_back(at);
  tree_.add(at, at + 1, static_cast<std::int64_t>(bytes));
  off_[r][idx].off.e = at;
  off_[r].push_back({Off{at + 1, rec.off.e}, true, rec.from_event, rec.cost_s});
  plan_.decisions.push_back({at + 1, Act::Drop, ref_of_[r], bytes, at, Reason::Msps, 0, rec.cost_s, 0});
  plan_.expected_overhead_s += rec.cost_s;  // its own recomputation at its access runs as well
}

double Planner::inputs_cost(std::uint32_t tensor, std::uint32_t upto, std::uint32_t at, int depth,
                            std::vector<std::pair<std::uint32_t, std::size_t>>& nested, std::vector<std::uint32_t>& plain) {
  if (depth > 64) return -1;
  double cost = 0;
  for (std::uint32_t w = p_.write_offset[tensor]; w < p_.write_offset[tensor + 1]; ++w) {
    const std::uint32_t we = p_.write_event[w];
    if (we > upto) break;
    const trace::Event& e = t_.events[we];
    for (std::uint32_t a = e.access_begin; a < e.reads_end; ++a) {
      const std::uint32_t r = t_.accesses[a].tensor;
      if (r == tensor) continue;
      bool off = false;
      for (std::size_t k = 0; k < off_[r].size(); ++k) {
        const OffRec& o = off_[r][k];
        if (!o.off.covers(at)) continue;
        off = true;
        if (!o.drop) {  // swapped out then: brought back for the recomputation (a stall)
          nested.push_back({r, k});
          cost += in_time(t_.tensors[r].bytes);
          break;
        }
        if (std::find(nested.begin(), nested.end(), std::pair{r, k}) != nested.end()) break;
        nested.push_back({r, k});
        const double sub = inputs_cost(r, o.from_event, at, depth + 1, nested, plain);
        if (sub < 0) return -1;
        cost += o.cost_s + sub;
        break;
      }
      if (!off) plain.push_back(r);
    }
  }
  return cost;
}

// Drop after a, recompute before b: valid when the simulator's lineage facts say the
// writers can be re-run then. Inputs that are themselves dropped then are recomputed first
// (Capuchin's lineage from the nearest resident inputs): their cost is added and they stay
// resident from b on. An input swapped out at b rules the recomputation out.
bool Planner::try_recompute(const Candidate& c, bool accept, double* cost) {
  if (c.b < c.a) return false;
  const std::uint32_t k = access_index(c.tensor, ev(c.a));
  if (k == kNone || p_.recompute_valid_until[k] == 0) return false;
  const std::uint32_t valid_until = p_.recompute_valid_until[k];
  if (valid_until != kNone && ev(c.b) >= valid_until) return false;
  const double own = p_.recompute_cost_s[k];
  if (!(own > 0)) return false;
  // A recomputation already planned that reads this tensor inside the gap brings it back
  // there (recomputed first, as its nearest dropped input): the saving ends at that point.
  Off o{c.a + 1, c.b};
  for (std::uint32_t q : needed_at_[c.tensor])
    if (o.covers(q)) o.e = q;
  if (o.e <= o.s) return false;
  if (o.e != c.b && !over(o)) return false;
  std::vector<std::pair<std::uint32_t, std::size_t>> nested;
  std::vector<std::uint32_t> plain;
  const double extra = inputs_cost(c.tensor, ev(c.a), o.e, 0, nested, plain);
  if (extra < 0) return false;
  const double rc = own + extra;
  if (cost) *cost = rc;
  if (!accept) return true;
  for (std::uint32_t r : plain) needed_at_[r].push_back(o.e);
  for (const auto& [r, idx] : nested) {  // inputs back at o.e
    if (off_[r][idx].drop && opt_.redrop_chains) redrop(r, idx, o.e);
    else shorten(r, idx, o.e);
  }
  lower(o, c.bytes);
  off_[c.tensor].push_back({o, true, ev(c.a), own});
  const double msps = static_cast<double>(c.bytes) / rc;
  plan_.decisions.push_back({c.a + 1, Act::Drop, c.ref, c.bytes, c.a, Reason::Msps, 0, rc, msps});
  plan_.decisions.push_back({o.e, Act::Recompute, c.ref, c.bytes, c.b, Reason::Msps, 0, rc, msps});
  plan_.expected_overhead_s += rc;
  ++plan_.recomputes;
  return true;
}

Plan Planner::run() {
  const auto wall0 = std::chrono::steady_clock::now();
  plan_.budget_bytes = opt_.budget_bytes;
  target_ = static_cast<std::uint64_t>(static_cast<double>(opt_.budget_bytes) * (1.0 - opt_.margin));
  plan_.target_bytes = target_;
  plan_.time_scale = opt_.time_scale;
  if (n_ == 0) return plan_;

  // Ideal timeline and the trace's own copies on the engines.
  start_.resize(n_);
  end_.resize(n_);
  issue_.resize(n_);
  double now = 0;
  for (std::uint32_t i = 0; i < n_; ++i) {
    const trace::Event& e = t_.events[ev(i)];
    issue_[i] = now;
    if (i < stall_s_.size() && stall_s_[i] > 0) {
      now += stall_s_[i];
      plan_.planned_stall_s += stall_s_[i];
      plan_.expected_overhead_s += stall_s_[i];
    }
    start_[i] = now;
    // (The trace's own copies are link time: not stretched.)
    const double d = e.op == Op::Kernel ? p_.duration_s[ev(i)] * opt_.time_scale : e.op == Op::Copy ? p_.duration_s[ev(i)] : 0.0;
    now += d;
    end_[i] = now;
    if (e.op == Op::Copy && e.dir == trace::CopyDir::H2D) h2d_.reserve(start_[i], d);
    if (e.op == Op::Copy && e.dir == trace::CopyDir::D2H) d2h_.reserve(start_[i], d);
  }
  iter_s_ = now;

  // Memory during each position, and per-tensor accesses (positions).
  const std::size_t nt = t_.tensors.size();
  off_.assign(nt, {});
  needed_at_.assign(nt, {});
  std::vector<std::int64_t> mem(n_, static_cast<std::int64_t>(opt_.baseline_bytes));
  ref_of_ = tensor_refs(pat_, nt);
  std::vector<std::vector<std::uint32_t>> acc(nt);
  std::vector<std::uint32_t> alloc_pos(nt, kNone), free_pos(nt, kNone);
  for (std::uint32_t i = 0; i < n_; ++i) {
    const trace::Event& e = t_.events[ev(i)];
    if (e.op == Op::Alloc) alloc_pos[e.tensor] = i;
    if (e.op == Op::Free) free_pos[e.tensor] = i;
    for (std::uint32_t a = e.access_begin; a < e.access_end; ++a) {
      auto& v = acc[t_.accesses[a].tensor];
      if (v.empty() || v.back() != i) v.push_back(i);
    }
  }
  std::vector<std::int64_t> delta(n_ + 1, 0);
  for (std::uint32_t tn = 0; tn < nt; ++tn) {
    if (alloc_pos[tn] == kNone || free_pos[tn] == kNone) continue;  // survivors are in the baseline
    delta[alloc_pos[tn]] += static_cast<std::int64_t>(t_.tensors[tn].bytes);
    delta[free_pos[tn]] -= static_cast<std::int64_t>(t_.tensors[tn].bytes);
  }
  std::int64_t run = 0;
  for (std::uint32_t i = 0; i < n_; ++i) run += delta[i], mem[i] += run;
  tree_.build(mem);
  over_before_.assign(n_ + 1, 0);  // positions over the target before each (cover_weighted)
  for (std::uint32_t i = 0; i < n_; ++i)
    over_before_[i + 1] = over_before_[i] + (mem[i] > static_cast<std::int64_t>(target_) ? 1u : 0u);
  plan_.natural_peak_bytes = static_cast<std::uint64_t>(std::max<std::int64_t>(0, tree_.max(0, n_)));
  if (plan_.natural_peak_bytes <= opt_.budget_bytes) {  // fits as it is: nothing to do
    plan_.planned_peak_bytes = plan_.natural_peak_bytes;
    return plan_;
  }

  // Candidates: gaps between consecutive accesses that span an over-target position.
  for (std::uint32_t tn = 0; tn < nt; ++tn) {
    const auto& v = acc[tn];
    if (v.empty()) continue;
    const bool local = alloc_pos[tn] != kNone;
    if (local && free_pos[tn] == kNone) continue;  // survivor: allocated here, kept after
    if (!local && (!opt_.swap_persistent || free_pos[tn] != kNone || t_.tensors[tn].free_event != kNone)) continue;
    const TensorRef ref = ref_of_[tn];
    const std::uint64_t bytes = t_.tensors[tn].bytes;
    // Each copy moves bytes for at least min_swap_efficiency of its time (the rest is latency).
    const double out = out_time(bytes), in = in_time(bytes), moved = static_cast<double>(bytes);
    const bool swap_ok = moved / sim::swap_out_rate(p_.gpu, p_.eff) >= opt_.min_swap_efficiency * out &&
                         moved / sim::swap_in_rate(p_.gpu, p_.eff) >= opt_.min_swap_efficiency * in;
    auto add = [&](std::uint32_t a, std::uint32_t b) {
      const bool wrap = b < a;
      const double gap = wrap ? iter_s_ - end_[a] + start_[b] : start_[b] - end_[a];
      const Off span = Off{a + 1, b};
      if ((!wrap && b <= a + 1) || !over(span)) return;
      cands_.push_back({ref, tn, bytes, a, b, gap - (out + in), swap_ok});
    };
    for (std::size_t i = 0; i + 1 < v.size(); ++i) add(v[i], v[i + 1]);
    if (!local && v.back() + 1 < n_) add(v.back(), v.front());  // across the iteration boundary
  }

  // Phase 1: hidden swaps, largest free time first.
  std::stable_sort(cands_.begin(), cands_.end(), [](const Candidate& x, const Candidate& y) { return x.free_time > y.free_time; });
  if (opt_.allow_swap) {
    for (Candidate& c : cands_) {
      if (tree_.max(0, n_) <= static_cast<std::int64_t>(target_)) break;
      if (c.free_time < 0) break;
      if (!c.swap_ok) continue;
      SwapPlace sp;
      if (!place_swap(c, sp) || sp.late > 0 || !over(sp.off) || conflicts(c.tensor, sp.off)) continue;
      if (priced_recompute_wins(c)) continue;  // left to phase 2, which weighs both
      accept_swap(c, sp, c.b < c.a ? Reason::CrossIteration : Reason::FreeTime);
      c.done = true;
    }
  }

  // Phase 2: the rest by the least cost per byte: a late swap or a recomputation. Lazy
  // greedy: costs only change as choices accumulate, so a popped candidate is re-evaluated
  // and accepted if it is still no worse than the next best, else pushed back.
  struct Option {
    double per_byte;
    bool swap;
    SwapPlace sp;
  };
  auto evaluate = [&](const Candidate& c, Option& o) -> bool {
    bool ok = false;
    double rc = 0;
    if (opt_.allow_recompute && try_recompute(c, false, &rc) && over(Off{c.a + 1, c.b})) {
      o = {rc / static_cast<double>(c.bytes) / (opt_.cover_weighted ? covered(Off{c.a + 1, c.b}) : 1.0), false, {}};
      ok = true;
    }
    SwapPlace sp;
    if (opt_.allow_swap && c.swap_ok && place_swap(c, sp) && over(sp.off) && !conflicts(c.tensor, sp.off)) {
      const double per_byte = (sp.late + link_cost(c.bytes)) / static_cast<double>(c.bytes) / (opt_.cover_weighted ? covered(sp.off) : 1.0);
      if (!ok || per_byte < o.per_byte) o = {per_byte, true, sp};
      ok = true;
    }
    return ok;
  };
  using Entry = std::pair<double, std::uint32_t>;  // cost per byte, candidate
  std::priority_queue<Entry, std::vector<Entry>, std::greater<>> heap;
  // A candidate that is of no use when popped may become useful again once a later choice
  // brings memory back (a recomputation's inputs): rounds repeat while they accept anything.
  for (bool progress = true; progress && tree_.max(0, n_) > static_cast<std::int64_t>(target_);) {
    progress = false;
    for (std::uint32_t k = 0; k < cands_.size(); ++k) {
      Option o;
      if (!cands_[k].done && evaluate(cands_[k], o)) heap.push({o.per_byte, k});
    }
    while (!heap.empty() && tree_.max(0, n_) > static_cast<std::int64_t>(target_)) {
      const auto [key, k] = heap.top();
      heap.pop();
      Candidate& c = cands_[k];
      Option o;
      if (!evaluate(c, o)) continue;  // of no use now
      if (!heap.empty() && o.per_byte > heap.top().first * (1 + 1e-9) + 1e-18) {
        heap.push({o.per_byte, k});  // got worse: let the next best go first
        continue;
      }
      c.done = true;
      progress = true;
      if (o.swap) accept_swap(c, o.sp, o.sp.late > 0 ? Reason::LeastSwapCost : (c.b < c.a ? Reason::CrossIteration : Reason::FreeTime));
      else try_recompute(c, true, nullptr);
    }
    heap = {};
    if (!opt_.repeat_rounds) break;
  }

  for (std::uint32_t tn = 0; tn < nt; ++tn)
    for (const OffRec& rec : off_[tn])
      if (!rec.drop && rec.off.s != rec.off.e && rec.off.covers(0)) {
        plan_.off_at_start.push_back(tn);
        break;
      }
  const std::int64_t peak = tree_.max(0, n_);
  plan_.planned_peak_bytes = static_cast<std::uint64_t>(std::max<std::int64_t>(0, peak));
  plan_.fits = peak <= static_cast<std::int64_t>(target_);
  if (!plan_.fits) plan_.unfit_position = tree_.argmax(0, n_);
  std::stable_sort(plan_.decisions.begin(), plan_.decisions.end(), issued_before<Decision>);
  plan_.plan_time_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - wall0).count();
  return plan_;
}

}  // namespace

std::string_view to_string(Act a) {
  switch (a) {
    case Act::Evict: return "evict";
    case Act::Prefetch: return "prefetch";
    case Act::Drop: return "drop";
    case Act::Recompute: return "recompute";
  }
  return "?";
}

std::string_view to_string(Reason r) {
  switch (r) {
    case Reason::FreeTime: return "free-time";
    case Reason::LeastSwapCost: return "least-swap-cost";
    case Reason::Msps: return "msps";
    case Reason::CrossIteration: return "cross-iteration";
    case Reason::ReplayVictim: return "replay-victim";
  }
  return "?";
}

std::vector<TensorRef> tensor_refs(const learn::Pattern& pattern, std::size_t tensors) {
  std::vector<TensorRef> refs(tensors);
  for (std::uint32_t tn = 0; tn < tensors; ++tn) refs[tn] = TensorRef{false, tn};
  for (std::uint32_t k = 0; k < pattern.local_tensors.size(); ++k) refs[pattern.local_tensors[k]] = TensorRef{true, k};
  return refs;
}

Plan make_plan(const sim::PreparedTrace& p, const learn::Pattern& pattern, const PlanOptions& opt) {
  return Planner(p, pattern, opt, opt.stall_s).run();
}

}  // namespace capuchin::plan
