// lower_bound (see include/capuchin/sim.hpp): the least time any policy must add to a steady
// iteration at a budget, moment by moment.
#include <algorithm>
#include <limits>

#include "capuchin/sim.hpp"
#include "capuchin/units.hpp"

namespace capuchin::sim {
namespace {

using trace::AccessMode;
using trace::kNone;
using trace::Op;

constexpr double kNever = std::numeric_limits<double>::infinity();
constexpr double kNegligibleS = 1e-12;  // a moment costing less adds nothing (rounding)

// Per tensor, the events that read it (a read or a touch), in order (CSR).
struct Reads {
  std::vector<std::uint32_t> offset, event;
};

Reads reads_of(const trace::Trace& t) {
  std::vector<std::vector<std::uint32_t>> per(t.tensors.size());
  for (const auto& a : t.accesses)  // in event order
    if (a.mode != AccessMode::Write && (per[a.tensor].empty() || per[a.tensor].back() != a.event))
      per[a.tensor].push_back(a.event);
  Reads r;
  r.offset.reserve(per.size() + 1);
  r.offset.push_back(0);
  for (const auto& v : per) {
    r.event.insert(r.event.end(), v.begin(), v.end());
    r.offset.push_back(static_cast<std::uint32_t>(r.event.size()));
  }
  return r;
}

// First element of [b, e) greater than `ev`, or kNone.
std::uint32_t next_after(const std::vector<std::uint32_t>& v, std::uint32_t b, std::uint32_t e, std::uint32_t ev) {
  auto it = std::upper_bound(v.begin() + b, v.begin() + e, ev);
  return it == v.begin() + e ? kNone : *it;
}
// Last element of [b, e) less than `ev`, or kNone.
std::uint32_t last_before(const std::vector<std::uint32_t>& v, std::uint32_t b, std::uint32_t e, std::uint32_t ev) {
  auto it = std::lower_bound(v.begin() + b, v.begin() + e, ev);
  return it == v.begin() + b ? kNone : *(it - 1);
}

struct Swap {
  double bytes, window;
};
struct Recompute {
  double bytes, cost_per_byte;
};

class Moments {
 public:
  Moments(const PreparedTrace& p, std::uint64_t budget) : p_(p), t_(*p.trace), budget_(budget), reads_(reads_of(t_)) {
    // Bytes per second each way: a swap's copies (sim::swap_out_s, swap_in_s, latency left out).
    bw_out_ = swap_out_rate(p.gpu, p.eff);
    bw_in_ = swap_in_rate(p.gpu, p.eff);
    start_.resize(t_.events.size() + 1, 0.0);
    for (std::size_t e = 0; e < t_.events.size(); ++e)
      start_[e + 1] = start_[e] + (t_.events[e].op == Op::Kernel ? p.duration_s[e] : 0.0);
  }

  Bound run() {
    Bound b;
    const auto& its = t_.iterations;
    // Without iterations the simulator measures the whole trace: so does the bound.
    std::uint32_t from = 0, to = static_cast<std::uint32_t>(t_.events.size());
    if (!its.empty()) {
      const auto& it = its.size() >= 3 ? its[its.size() - 2] : its.back();
      from = it.begin, to = it.end;
    }
    b.compute_s = cycle_ = start_[to] - start_[from];
    for (std::uint32_t e = from; e < to; ++e) {  // the job's own copies: compute-stream time, and their engine's
      const trace::Event& ev = t_.events[e];
      if (ev.op != Op::Copy) continue;
      copies_ += p_.duration_s[e];
      if (ev.dir == trace::CopyDir::H2D) h2d_copies_ += p_.duration_s[e];
      if (ev.dir == trace::CopyDir::D2H) d2h_copies_ += p_.duration_s[e];
    }
    // Live tensors as the events go by (the moment's live set: allocated, not yet freed).
    std::vector<std::uint32_t> live;
    std::vector<std::uint32_t> slot(t_.tensors.size(), kNone);
    std::uint64_t live_bytes = 0;
    for (std::uint32_t e = 0; e < to; ++e) {
      const trace::Event& ev = t_.events[e];
      if (ev.op == Op::Alloc) {
        slot[ev.tensor] = static_cast<std::uint32_t>(live.size());
        live.push_back(ev.tensor);
        live_bytes += t_.tensors[ev.tensor].bytes;
      } else if (ev.op == Op::Free && slot[ev.tensor] != kNone) {
        const std::uint32_t s = slot[ev.tensor];
        slot[live.back()] = s;
        live[s] = live.back();
        live.pop_back();
        slot[ev.tensor] = kNone;
        live_bytes -= t_.tensors[ev.tensor].bytes;
      }
      if (e < from || (ev.op != Op::Kernel && ev.op != Op::Copy) || live_bytes <= budget_) continue;
      if (!moment(e, live, live_bytes, b)) return b;
    }
    // A moment's cost is what it adds beyond the job's own copies, which the ideal iteration
    // has as well; the bound adds them back when some moment costs more.
    if (b.added_s > 0) b.added_s += copies_;
    return b;
  }

 private:
  // The least time added at moment e (live_bytes > budget); false when e cannot fit at all.
  bool moment(std::uint32_t e, const std::vector<std::uint32_t>& live, std::uint64_t live_bytes, Bound& b) {
    const trace::Event& ev = t_.events[e];
    std::uint64_t working = 0;
    auto used = [&](std::uint32_t tensor) {
      for (std::uint32_t a = ev.access_begin; a < ev.access_end; ++a)
        if (t_.accesses[a].tensor == tensor) return true;
      return false;
    };
    for (std::uint32_t a = ev.access_begin; a < ev.access_end; ++a) {
      const std::uint32_t tensor = t_.accesses[a].tensor;
      bool first = true;
      for (std::uint32_t q = ev.access_begin; q < a; ++q) first = first && t_.accesses[q].tensor != tensor;
      if (first) working += t_.tensors[tensor].bytes;
    }
    if (working > budget_) {
      b.feasible = false;
      b.event = e;
      b.over_bytes = live_bytes - budget_;
      b.why = "its own tensors need " + format_bytes(working) + ", over the budget of " + format_bytes(budget_);
      return false;
    }
    double over = static_cast<double>(live_bytes - budget_);
    swaps_.clear();
    ins_.clear();
    recomputes_.clear();
    for (std::uint32_t tensor : live) {
      if (used(tensor)) continue;
      const double bytes = static_cast<double>(t_.tensors[tensor].bytes);
      if (bytes <= 0) continue;
      const std::uint32_t last_write = last_before(p_.write_event, p_.write_offset[tensor], p_.write_offset[tensor + 1], e);
      const std::uint32_t next_read = next_after(reads_.event, reads_.offset[tensor], reads_.offset[tensor + 1], e);
      const std::uint32_t next_write = next_after(p_.write_event, p_.write_offset[tensor], p_.write_offset[tensor + 1], e);
      const std::uint32_t freed = t_.tensors[tensor].free_event;
      // No data yet, or none read again before it is overwritten or freed: shed for free.
      if (last_write == kNone || next_read == kNone || (next_write != kNone && next_write < next_read) ||
          (freed != kNone && freed < next_read)) {
        over -= bytes;
        continue;
      }
      // In the steady state every iteration does the same work: a tensor last written more
      // than an iteration ago is never written again (its host copy, once made, stays valid)
      // and one read next more than an iteration later is not read again; either way that
      // direction costs no link time (an unbounded window).
      const double out_window = window(start_[e] - start_[last_write + 1]);
      const double in_window = window(start_[next_read] - start_[e + 1]);
      swaps_.push_back({bytes, out_window});
      ins_.push_back({bytes, in_window});
      if (const double c = recompute_cost(tensor, e); c < kNever) recomputes_.push_back({bytes, c / bytes});
    }
    const double cost = over <= 0 ? 0.0 : least_added(over) - copies_;
    if (cost > b.added_s + kNegligibleS) {
      b.added_s = cost;
      b.event = e;
      b.over_bytes = live_bytes - budget_;
    }
    return true;
  }

  double window(double span) const { return span > cycle_ ? kNever : span; }

  // The simulator's rule (SimState::can_recompute): its writers re-run for its next access.
  double recompute_cost(std::uint32_t tensor, std::uint32_t e) const {
    const std::uint32_t b = p_.access_offset[tensor], end = p_.access_offset[tensor + 1];
    auto it = std::lower_bound(p_.access_event.begin() + b, p_.access_event.begin() + end, e);
    if (it == p_.access_event.begin() + b) return kNever;
    const std::uint32_t k = static_cast<std::uint32_t>(it - p_.access_event.begin()) - 1;
    const std::uint32_t next = next_after(p_.access_event, b, end, e);
    if (next != kNone && !(next < p_.recompute_valid_until[k])) return kNever;
    return p_.recompute_cost_s[k];
  }

  // K for a direction: the link time free before the stretch starts, with the widest windows
  // taken first.
  double capacity(std::vector<Swap>& v, double bw) const {
    std::sort(v.begin(), v.end(), [](const Swap& a, const Swap& b) { return a.window > b.window; });
    double k = kNever, before = 0;
    for (const Swap& s : v) {
      k = std::min(k, before / bw + s.window);
      before += s.bytes;
    }
    return k;
  }

  // The least time T the iteration runs beyond its kernels: min over S (bytes swapped) of
  //   max(H2D copies + stretch in, D2H copies + stretch out, copies + recomputation of over - S):
  // the job's own copies take the compute stream (so recomputation cannot overlap them) and
  // their copy engine (so a swap the same way cannot either); they can overlap the other way's
  // swaps.
  double least_added(double over) {
    const double k_out = capacity(swaps_, bw_out_), k_in = capacity(ins_, bw_in_);
    std::sort(recomputes_.begin(), recomputes_.end(),
              [](const Recompute& a, const Recompute& b) { return a.cost_per_byte < b.cost_per_byte; });
    double recomputable = 0;
    for (const Recompute& r : recomputes_) recomputable += r.bytes;
    // Both ways must carry S: the direction with less room sets the stretch.
    auto stretch = [&](double s) {
      return std::max({copies_, d2h_copies_ + std::max(0.0, s / bw_out_ - k_out), h2d_copies_ + std::max(0.0, s / bw_in_ - k_in)});
    };
    auto recompute_cost = [&](double bytes) {  // cheapest first, fractionally
      double cost = 0;
      for (const Recompute& r : recomputes_) {
        if (bytes <= 0) break;
        const double take = std::min(bytes, r.bytes);
        cost += take * r.cost_per_byte;
        bytes -= take;
      }
      return bytes > 0 ? kNever : cost;
    };
    auto recompute = [&](double bytes) { return copies_ + recompute_cost(bytes); };
    double lo = std::max(0.0, over - recomputable), hi = over;  // swapped bytes
    if (stretch(hi) <= recompute(0)) return stretch(hi);  // swapping it all costs no more than the copies
    if (lo >= hi) return stretch(hi);
    // stretch rises and recomputation falls with S: the least max is where they cross.
    for (int i = 0; i < 100 && hi - lo > 1e-6 * over; ++i) {
      const double mid = (lo + hi) / 2;
      (stretch(mid) < recompute(over - mid) ? lo : hi) = mid;
    }
    // The least max lies in [lo, hi] (stretch below recomputation at lo, not at hi), so it is
    // at least stretch(lo) and recompute(over - hi): a lower bound wherever exactly it is.
    return std::max(stretch(lo), recompute(over - hi));
  }

  const PreparedTrace& p_;
  const trace::Trace& t_;
  std::uint64_t budget_;
  Reads reads_;
  double bw_out_ = 0, bw_in_ = 0, cycle_ = 0;
  double copies_ = 0, h2d_copies_ = 0, d2h_copies_ = 0;  // the steady iteration's own copies (their times)
  std::vector<double> start_;  // compute time before each event (kernels back to back)
  std::vector<Swap> swaps_, ins_;
  std::vector<Recompute> recomputes_;
};

}  // namespace

Bound lower_bound(const PreparedTrace& p, std::uint64_t budget_bytes) { return Moments(p, budget_bytes).run(); }

}  // namespace capuchin::sim
