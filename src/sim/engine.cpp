// The discrete-event engine: replays a prepared trace under a budget with a policy.
//
// Model (see src/sim/README.md): kernels, the trace's own copies and recomputations run in
// issue order on one compute stream; swap-outs queue on the D2H engine and swap-ins on the
// H2D engine, both concurrent with compute and with each other. Device memory is granted in
// issue order on a monotone memory clock: an allocation, swap-in or recomputation that does
// not fit waits for in-flight swap-outs to release memory (the compute stream stalls), then
// asks the policy (on_memory_pressure), and fails the run when nothing can make room. A
// swap-out's memory is released when its copy ends; a drop releases at once; a free
// releases in stream order. Accessing a tensor that is not resident stalls compute until it
// is swapped in (on demand) or recomputed (its writers re-run, inputs made resident first).
#include <algorithm>
#include <array>
#include <utility>
#include <cmath>
#include <deque>
#include <limits>

#include <fmt/format.h>

#include "capuchin/sim.hpp"
#include "capuchin/units.hpp"

namespace capuchin::sim {

using trace::AccessMode;
using trace::kNone;
using trace::Op;
using Lane = TimelineEntry::Lane;
using Kind = TimelineEntry::Kind;

namespace {

// The index of the first settled iteration of a repeated run (SimOptions::repeated): the
// earliest k >= 1 from which every iteration takes within 1% of the last one's time.
std::size_t settled_from(const std::vector<double>& t) {
  const double last = t.back();
  std::size_t k = t.size() - 1;
  while (k > 1 && std::abs(t[k - 1] - last) <= 0.01 * last) --k;
  return k;
}

// What a run has accumulated so far; copied at each iteration mark, so that per-iteration
// figures are differences of two of them.
struct Totals {
  double time = 0, recompute = 0;
  double out_bytes = 0, in_bytes = 0;         // the policy's swaps
  double out_link = 0, in_link = 0;           // their copies' time on each link direction
  double cancelled_out_link = 0;              // copies out whose eviction was cancelled (counted when cancelled)
  std::array<double, kStallCauses> by_cause{};  // stall by StallCause (the stall is their sum)
};

struct Release {
  double time;
  std::uint32_t tensor;
  std::uint32_t gen;
  std::uint32_t event;  // where the eviction was decided
};

class Engine {
 public:
  Engine(const PreparedTrace& p, Policy& pol, const SimOptions& opt)
      : p_(p), t_(*p.trace), pol_(pol), opt_(opt), unlimited_(pol.unlimited_memory()) {
    const std::size_t n = t_.tensors.size();
    s_.prep = &p;
    s_.budget_bytes = unlimited_ ? 0 : opt.budget_bytes;
    s_.residence.assign(n, Residence::Unallocated);
    s_.cursor.assign(p.access_offset.begin(), p.access_offset.end() - 1);
    s_.last_use_end_s.assign(n, 0.0);
    s_.pin_epoch.assign(n, 0);
    s_.resident_slot.assign(n, kNone);
    seen_epoch_.assign(n, 0);
    gen_.assign(n, 0);
    host_ready_s_.assign(n, 0.0);
    arrival_.assign(n, StallCause::OnDemandSwapIn);
    room_until_.assign(n, 0.0);
  }

  SimResult run();

 private:
  double out_time(std::uint64_t bytes) const { return sim::swap_out_s(p_.gpu, p_.eff, bytes); }
  double in_time(std::uint64_t bytes) const { return sim::swap_in_s(p_.gpu, p_.eff, bytes); }
  void trace_interval(Lane lane, Kind kind, double a, double b, std::uint32_t tensor) {
    if (opt_.timeline && b > a) opt_.timeline->push_back({a, b, s_.event, tensor, lane, kind});
  }
  void note(MemoryChange::Kind kind, double t, std::uint32_t tensor, std::uint32_t event, bool on_demand = false) {
    if (opt_.memory) opt_.memory->push_back({t, event, tensor, kind, on_demand});
  }
  // What the compute stream waits for: until `until`, for `cause`, the part before room_until
  // (memory granted then) for room.
  struct Wait {
    double until;
    StallCause cause;
    double room_until = 0;
  };
  void stall_until(double t, StallCause cause) { wait_for({t, cause}); }
  // One timeline entry per wait; its time counted by cause (the part before room_until as room).
  void wait_for(const Wait& w) {
    if (w.until <= now_) return;
    trace_interval(Lane::Compute, Kind::Stall, now_, w.until, kNone);
    const double room = std::clamp(w.room_until, now_, w.until) - now_;
    count_stall(StallCause::Room, room);
    count_stall(w.cause, w.until - now_ - room);
    now_ = w.until;
  }
  void count_stall(StallCause cause, double d) {
    if (d <= 0) return;
    tot_.by_cause[static_cast<std::size_t>(cause)] += d;
    note_site(cause, d);
  }
  // The wait a kernel has for tensor t's data (its swap-in's copy, when one is in flight).
  Wait wait_of(std::uint32_t t) const { return {s_.last_use_end_s[t], arrival_[t], room_until_[t]}; }
  void note_site(StallCause cause, double d) {
    if (site_.event != s_.event) flush_site();
    site_.event = s_.event;
    site_by_[static_cast<std::size_t>(cause)] += d;
  }
  void flush_site();
  Totals totals() const {
    Totals t = tot_;
    t.time = now_;
    return t;
  }
  void set_per_iteration(const Totals& from, const Totals& end, double k);
  void fail(std::uint32_t tensor, std::string reason) {
    if (failed_) return;
    failed_ = true;
    r_.feasible = false;
    r_.where.event = s_.event;
    r_.where.line = static_cast<std::uint64_t>(s_.event) + 2;
    r_.where.tensor = tensor;
    r_.where.tensor_id = tensor == kNone ? 0 : t_.tensors[tensor].id;
    r_.where.reason = std::move(reason);
  }
  void add_resident(std::uint32_t t) {
    s_.residence[t] = Residence::Resident;
    if (s_.resident_slot[t] == kNone) {
      s_.resident_slot[t] = static_cast<std::uint32_t>(s_.resident.size());
      s_.resident.push_back(t);
    }
  }
  void remove_resident(std::uint32_t t) {
    const std::uint32_t slot = s_.resident_slot[t];
    if (slot == kNone) return;
    const std::uint32_t last = s_.resident.back();
    s_.resident[slot] = last;
    s_.resident_slot[last] = slot;
    s_.resident.pop_back();
    s_.resident_slot[t] = kNone;
  }
  void take(std::uint64_t bytes) {
    s_.used_bytes += bytes;
    r_.peak_bytes = std::max(r_.peak_bytes, s_.used_bytes);
  }
  void give(std::uint64_t bytes) { s_.used_bytes -= bytes; }

  bool live(const Release& r) const { return gen_[r.tensor] == r.gen && s_.residence[r.tensor] == Residence::Evicting; }
  void drop_stale_releases() {
    while (!releases_.empty() && !live(releases_.front())) releases_.pop_front();
  }
  void retire(double t) {
    for (drop_stale_releases(); !releases_.empty() && releases_.front().time <= t; drop_stale_releases()) {
      const Release r = releases_.front();
      releases_.pop_front();
      s_.residence[r.tensor] = Residence::Host;
      note(MemoryChange::Kind::SwapOut, r.time, r.tensor, r.event);
      pending_bytes_ -= s_.bytes(r.tensor);
      give(s_.bytes(r.tensor));
    }
  }
  // The tensor stays (its data never left): the copy out's link time was spent for nothing.
  void cancel_eviction(std::uint32_t t) {
    tot_.cancelled_out_link += out_time(s_.bytes(t));
    if (opt_.cancelled) opt_.cancelled->emplace_back(s_.event, t);
    ++gen_[t];
    pending_bytes_ -= s_.bytes(t);
    add_resident(t);
  }

  bool acquire(std::uint64_t bytes, double& t, std::uint32_t tensor, bool demand);
  void apply(const std::vector<Action>& acts, bool from_pressure);
  void evict(std::uint32_t t);
  bool materialize(std::uint32_t t);
  bool recompute(std::uint32_t t);
  void run_event(std::uint32_t i);
  void settle_start(std::uint32_t first);

  const PreparedTrace& p_;
  const trace::Trace& t_;
  Policy& pol_;
  const SimOptions& opt_;
  const bool unlimited_;
  SimState s_;
  SimResult r_;
  double now_ = 0, h2d_free_ = 0, d2h_free_ = 0, mem_clock_ = 0;
  std::deque<Release> releases_;  // swap-outs in flight; the D2H engine is FIFO, so by time
  std::uint64_t pending_bytes_ = 0;
  std::vector<std::uint32_t> gen_;         // bumped to cancel a pending release
  std::vector<double> host_ready_s_;       // when the host copy of a swapped-out tensor is complete
  std::vector<std::uint32_t> seen_epoch_;  // dedupes a kernel's tensors
  std::vector<std::uint32_t> current_;     // the current event's tensors
  std::vector<Action> before_actions_, pressure_actions_;
  Totals tot_;  // (tot_.time is set when copied: now_ is the clock)
  std::vector<StallCause> arrival_;  // how each tensor's last swap-in came (for a kernel's wait on it)
  std::vector<double> room_until_;   // when that swap-in was granted its memory
  StallSite site_;                   // the event being stalled, its waits by cause in site_by_
  std::array<double, kStallCauses> site_by_{};
  std::vector<StallSite> sites_;     // this iteration's, one per stalled event
  bool failed_ = false;
  int depth_ = 0;
};

// Grants `bytes` at time >= t (updated to the grant time). demand: the compute stream needs
// it (the policy is asked for room); otherwise (a prefetch) no room is not a failure.
bool Engine::acquire(std::uint64_t bytes, double& t, std::uint32_t tensor, bool demand) {
  if (unlimited_) {
    take(bytes);
    return true;
  }
  t = std::max(t, mem_clock_);
  retire(t);
  const std::uint64_t budget = s_.budget_bytes;
  while (s_.used_bytes + bytes > budget) {
    std::uint64_t held_after = s_.used_bytes - pending_bytes_;  // once every swap-out lands
    if (held_after + bytes > budget && demand) {
      pressure_actions_.clear();
      pol_.on_memory_pressure(s_, held_after + bytes - budget, pressure_actions_);
      apply(pressure_actions_, true);
      if (failed_) return false;
      const std::uint64_t now_after = s_.used_bytes - pending_bytes_;
      if (now_after < held_after) continue;  // the policy made progress: look again
    }
    drop_stale_releases();
    if (releases_.empty()) {
      if (demand)
        fail(tensor, fmt::format("needs {} more bytes: {} held on the device, budget {} ({}); the policy freed no more",
                                 bytes, s_.used_bytes, budget, format_bytes(budget)));
      return false;
    }
    if (!demand && held_after + bytes > budget) return false;  // waiting would not be enough
    t = std::max(t, releases_.front().time);
    retire(t);
  }
  take(bytes);
  mem_clock_ = t;
  return true;
}

// The run's figures per steady iteration: the mean of k iterations between `from` and `end`.
void Engine::set_per_iteration(const Totals& from, const Totals& end, double k) {
  r_.time_s = (end.time - from.time) / k;
  r_.stall_s = 0;
  for (std::size_t c = 0; c < kStallCauses; ++c) {
    r_.stall_by_cause_s[c] = (end.by_cause[c] - from.by_cause[c]) / k;
    r_.stall_s += r_.stall_by_cause_s[c];
  }
  r_.recompute_s = (end.recompute - from.recompute) / k;
  r_.swap_out_bytes = (end.out_bytes - from.out_bytes) / k;
  r_.swap_in_bytes = (end.in_bytes - from.in_bytes) / k;
  r_.swap_out_link_s = (end.out_link - from.out_link) / k;
  r_.swap_in_link_s = (end.in_link - from.in_link) / k;
  r_.cancelled_out_link_s = (end.cancelled_out_link - from.cancelled_out_link) / k;
}

// The stalled event's waits become one site, under its largest cause.
void Engine::flush_site() {
  if (site_.event == kNone) return;
  const auto most = std::max_element(site_by_.begin(), site_by_.end());
  site_.cause = static_cast<StallCause>(most - site_by_.begin());
  site_.stall_s = 0;
  for (double d : site_by_) site_.stall_s += d;
  sites_.push_back(site_);
  site_ = {};
  site_by_ = {};
}

void Engine::evict(std::uint32_t t) {
  // A copy starts no earlier than it is issued (now: the compute stream at the current event),
  // after the tensor's last use, when the D2H engine is free. (It used to start at its last use
  // even when issued later, under pressure: memory came back before it was asked for.)
  const double start = std::max({d2h_free_, s_.last_use_end_s[t], now_});
  const double end = start + out_time(s_.bytes(t));
  d2h_free_ = end;
  trace_interval(Lane::D2H, Kind::SwapOut, start, end, t);
  remove_resident(t);
  s_.residence[t] = Residence::Evicting;
  releases_.push_back({end, t, gen_[t], s_.event});
  pending_bytes_ += s_.bytes(t);
  host_ready_s_[t] = end;
  tot_.out_bytes += static_cast<double>(s_.bytes(t));
  tot_.out_link += end - start;
}

void Engine::apply(const std::vector<Action>& acts, bool from_pressure) {
  for (const Action& a : acts) {
    if (failed_) return;
    if (a.tensor >= s_.residence.size()) {
      ++r_.rejected_actions;
      continue;
    }
    const std::uint32_t t = a.tensor;
    const Residence res = s_.residence[t];
    switch (a.kind) {
      case ActionKind::Evict:
        if (res != Residence::Resident || s_.pinned(t)) ++r_.rejected_actions;
        else evict(t);
        break;
      case ActionKind::Drop:
        if (res != Residence::Resident || s_.pinned(t) || !s_.can_recompute(t)) {
          ++r_.rejected_actions;
        } else {
          remove_resident(t);
          s_.residence[t] = Residence::Dropped;
          give(s_.bytes(t));
          note(MemoryChange::Kind::Drop, now_, t, s_.event);
        }
        break;
      case ActionKind::Prefetch:
        if (from_pressure) {
          ++r_.rejected_actions;
        } else if (res == Residence::Evicting) {
          cancel_eviction(t);
        } else if (res == Residence::Host) {
          double at = std::max(now_, host_ready_s_[t]);
          if (!acquire(s_.bytes(t), at, t, false)) {
            ++r_.skipped_prefetches;
            break;
          }
          const double start = std::max(h2d_free_, at);
          const double end = start + in_time(s_.bytes(t));
          h2d_free_ = end;
          trace_interval(Lane::H2D, Kind::SwapIn, start, end, t);
          note(MemoryChange::Kind::SwapIn, at, t, s_.event);
          arrival_[t] = StallCause::LatePrefetch;
          room_until_[t] = at;
          add_resident(t);
          s_.last_use_end_s[t] = end;
          tot_.in_bytes += static_cast<double>(s_.bytes(t));
          tot_.in_link += end - start;
        } else if (res != Residence::Resident) {
          ++r_.rejected_actions;
        }
        break;
      case ActionKind::Recompute:
        if (from_pressure || (res != Residence::Dropped && res != Residence::Resident)) ++r_.rejected_actions;
        else if (res == Residence::Dropped) recompute(t);
        break;
    }
  }
}

bool Engine::materialize(std::uint32_t t) {
  switch (s_.residence[t]) {
    case Residence::Resident:
      return true;
    case Residence::Evicting:
      cancel_eviction(t);  // still on the device: the copy is wasted, the data stays
      return true;
    case Residence::Host: {
      ++r_.faults;
      double at = std::max(now_, host_ready_s_[t]);
      if (!acquire(s_.bytes(t), at, t, true)) return false;
      const double start = std::max(h2d_free_, at);
      const double end =
          start + in_time(s_.bytes(t)) + (pol_.demand_paging() ? p_.eff.uvm_fault_latency_s : 0.0);
      h2d_free_ = end;
      trace_interval(Lane::H2D, Kind::SwapIn, start, end, t);
      note(MemoryChange::Kind::SwapIn, at, t, s_.event, true);
      arrival_[t] = StallCause::OnDemandSwapIn;
      // (the wait before `at` counts as room; it includes, rarely, the end of t's own copy out)
      room_until_[t] = at;
      add_resident(t);
      s_.last_use_end_s[t] = end;
      tot_.in_bytes += static_cast<double>(s_.bytes(t));
      tot_.in_link += in_time(s_.bytes(t));  // the link's part (a demand-paging fault's latency is not)
      return true;
    }
    case Residence::Dropped:
      ++r_.faults;
      return recompute(t);
    case Residence::Unallocated:
    case Residence::Freed:
      break;
  }
  fail(t, "tensor accessed while not allocated");
  return false;
}

// Re-runs t's writers (up to its last access) on the compute stream, their inputs made
// resident first; outputs other than t that are not resident go to scratch memory that is
// held for the kernel only.
bool Engine::recompute(std::uint32_t t) {
  if (depth_ > 4096) {
    fail(t, "recomputation chain deeper than 4096 tensors");
    return false;
  }
  ++depth_;
  s_.pin_epoch[t] = s_.epoch;
  double at = now_;
  if (!acquire(s_.bytes(t), at, t, true)) return false;
  note(MemoryChange::Kind::Recompute, at, t, s_.event);
  stall_until(at, StallCause::Room);
  s_.residence[t] = Residence::Resident;  // its memory is held from here on
  const std::uint32_t last = s_.last_access(t);
  for (std::uint32_t k = p_.write_offset[t]; k < p_.write_offset[t + 1] && p_.write_event[k] <= last; ++k) {
    const std::uint32_t ev = p_.write_event[k];
    const trace::Event& e = t_.events[ev];
    std::uint64_t scratch = 0;
    Wait ready{now_, StallCause::Room};
    for (std::uint32_t a = e.access_begin; a < e.access_end; ++a) {
      const std::uint32_t r = t_.accesses[a].tensor;
      if (r == t) continue;
      if (t_.accesses[a].mode == AccessMode::Write) {
        if (s_.residence[r] != Residence::Resident && s_.residence[r] != Residence::Evicting) scratch += s_.bytes(r);
        continue;
      }
      s_.pin_epoch[r] = s_.epoch;
      if (!materialize(r)) return false;
      if (s_.last_use_end_s[r] > ready.until) ready = wait_of(r);
    }
    wait_for(ready);
    if (scratch > 0) {
      double sat = now_;
      if (!acquire(scratch, sat, t, true)) return false;
      stall_until(sat, StallCause::Room);
    }
    const double d = p_.duration_s[ev];
    trace_interval(Lane::Compute, Kind::Recompute, now_, now_ + d, t);
    now_ += d;
    tot_.recompute += d;
    give(scratch);
    for (std::uint32_t a = e.access_begin; a < e.access_end; ++a) {
      const std::uint32_t r = t_.accesses[a].tensor;
      if (s_.residence[r] == Residence::Resident) s_.last_use_end_s[r] = std::max(s_.last_use_end_s[r], now_);
    }
  }
  add_resident(t);
  s_.last_use_end_s[t] = now_;
  --depth_;
  return true;
}

void Engine::run_event(std::uint32_t i) {
  const trace::Event& e = t_.events[i];
  s_.event = i;
  ++s_.epoch;
  retire(now_);
  s_.now_s = now_;
  current_.clear();
  for (std::uint32_t a = e.access_begin; a < e.access_end; ++a) {
    const std::uint32_t t = t_.accesses[a].tensor;
    if (seen_epoch_[t] == s_.epoch) continue;
    seen_epoch_[t] = s_.epoch;
    s_.pin_epoch[t] = s_.epoch;
    current_.push_back(t);
  }
  if (e.op == Op::Alloc || e.op == Op::Free) s_.pin_epoch[e.tensor] = s_.epoch;

  before_actions_.clear();
  pol_.before_event(s_, before_actions_);
  apply(before_actions_, false);
  if (failed_) return;

  switch (e.op) {
    case Op::Alloc: {
      double at = now_;
      if (!acquire(s_.bytes(e.tensor), at, e.tensor, true)) return;
      note(MemoryChange::Kind::Alloc, at, e.tensor, i);
      stall_until(at, StallCause::Room);
      add_resident(e.tensor);
      s_.last_use_end_s[e.tensor] = now_;
      break;
    }
    case Op::Free: {
      const std::uint32_t t = e.tensor;
      if (s_.residence[t] == Residence::Evicting) cancel_eviction(t);
      if (s_.residence[t] == Residence::Resident) {
        remove_resident(t);
        give(s_.bytes(t));
        note(MemoryChange::Kind::Free, now_, t, i);
      }
      s_.residence[t] = Residence::Freed;
      break;
    }
    case Op::Kernel:
    case Op::Copy: {
      Wait ready{now_, StallCause::Room};
      for (std::uint32_t t : current_) {
        if (!materialize(t)) return;
        if (s_.last_use_end_s[t] > ready.until) ready = wait_of(t);
      }
      const double d = p_.duration_s[i];
      double* engine = nullptr;
      if (e.op == Op::Copy && e.dir == trace::CopyDir::H2D) engine = &h2d_free_;
      if (e.op == Op::Copy && e.dir == trace::CopyDir::D2H) engine = &d2h_free_;
      if (engine && *engine > ready.until) ready = {*engine, StallCause::CopyEngine};
      wait_for(ready);
      const double end = now_ + d;
      if (engine) {
        *engine = end;
        trace_interval(e.dir == trace::CopyDir::H2D ? Lane::H2D : Lane::D2H, Kind::Copy, now_, end, kNone);
      }
      trace_interval(Lane::Compute, e.op == Op::Kernel ? Kind::Kernel : Kind::Copy, now_, end, kNone);
      now_ = end;
      for (std::uint32_t t : current_) s_.last_use_end_s[t] = end;
      break;
    }
    case Op::Iter:
    case Op::Sync:
      break;
  }
  for (std::uint32_t t : current_) ++s_.cursor[t];
}

// A sub-range run starts where an earlier iteration left the device: within the budget. When
// its live set is over, the policy's victims for the excess start off the device (on the host,
// or dropped when the policy drops them), as the iteration before would have left them; no
// copy is charged for them here.
void Engine::settle_start(std::uint32_t first) {
  for (std::uint32_t tn = 0; tn < t_.tensors.size(); ++tn) {
    const Residence res = s_.residence[tn];
    if (res == Residence::Host || res == Residence::Dropped) r_.started_off_device.push_back(tn);
  }
  if (unlimited_) return;
  s_.event = first;
  r_.peak_bytes = s_.used_bytes;
  while (s_.used_bytes > s_.budget_bytes) {
    pressure_actions_.clear();
    pol_.on_memory_pressure(s_, s_.used_bytes - s_.budget_bytes, pressure_actions_);
    const std::uint64_t before = s_.used_bytes;
    for (const Action& a : pressure_actions_) {
      const std::uint32_t t = a.tensor;
      if (t >= s_.residence.size() || s_.residence[t] != Residence::Resident || s_.pinned(t)) continue;
      const bool drop = a.kind == ActionKind::Drop && s_.can_recompute(t);
      if (a.kind != ActionKind::Evict && !drop) continue;
      remove_resident(t);
      s_.residence[t] = drop ? Residence::Dropped : Residence::Host;
      give(s_.bytes(t));
      r_.started_off_device.push_back(t);
    }
    if (s_.used_bytes == before) break;  // the policy freed nothing: the run finds out where
  }
  r_.peak_bytes = s_.used_bytes;  // the run's peak starts here, not with the live set taken whole
}

SimResult Engine::run() {
  r_.policy = std::string(pol_.name());
  r_.gpu = p_.gpu.name;
  r_.budget_bytes = s_.budget_bytes;
  r_.natural_peak_bytes = p_.liveness.peak_bytes;
  pol_.start(s_);
  std::vector<Totals> marks;
  const auto n = std::min(static_cast<std::uint32_t>(t_.events.size()), opt_.end_event);
  const std::uint32_t first = std::min(opt_.first_event, n);
  std::vector<bool> on_host(first > 0 ? t_.tensors.size() : 0, false);
  for (std::uint32_t tn : opt_.start_on_host)
    if (tn < on_host.size()) on_host[tn] = true;
  for (std::uint32_t tn = 0; first > 0 && tn < t_.tensors.size(); ++tn) {  // a sub-range: its live set
    const trace::Tensor& ts = t_.tensors[tn];
    if (ts.alloc_event >= first) continue;
    const auto b = p_.access_event.begin() + p_.access_offset[tn], e = p_.access_event.begin() + p_.access_offset[tn + 1];
    s_.cursor[tn] = static_cast<std::uint32_t>(std::lower_bound(b, e, first) - p_.access_event.begin());
    if (ts.free_event != kNone && ts.free_event < first) {
      s_.residence[tn] = Residence::Freed;
      continue;
    }
    if (on_host[tn]) {
      s_.residence[tn] = Residence::Host;
      continue;
    }
    add_resident(tn);
    take(ts.bytes);
  }
  if (first > 0) settle_start(first);
  std::vector<std::pair<std::uint32_t, std::uint64_t>> held = opt_.held_until;
  std::sort(held.begin(), held.end());
  for (const auto& h : held) take(h.second);
  std::size_t next_release = 0;
  for (std::uint32_t i = first; i < n && !failed_; ++i) {
    for (; next_release < held.size() && held[next_release].first <= i; ++next_release) give(held[next_release].second);
    if (t_.events[i].op == Op::Iter) {
      marks.push_back(totals());
      flush_site();
      sites_.clear();  // the last iteration's are kept
    }
    run_event(i);
  }
  if (failed_) return r_;
  for (std::uint32_t tn = 0; first > 0 && tn < t_.tensors.size(); ++tn) {
    const Residence res = s_.residence[tn];
    if (res == Residence::Host || res == Residence::Evicting || res == Residence::Dropped) r_.off_device_at_end.push_back(tn);
  }
  if (opt_.memory) retire(std::numeric_limits<double>::infinity());  // copies in flight land
  const Totals end = totals();
  flush_site();
  std::sort(sites_.begin(), sites_.end(), [](const StallSite& a, const StallSite& b) {
    return a.stall_s != b.stall_s ? a.stall_s > b.stall_s : a.event < b.event;
  });
  if (sites_.size() > SimResult::kStallSites) sites_.resize(SimResult::kStallSites);
  r_.stall_sites = sites_;
  r_.total_time_s = now_;
  marks.push_back(end);
  for (std::size_t k = 0; k + 1 < marks.size(); ++k) r_.iteration_time_s.push_back(marks[k + 1].time - marks[k].time);
  // Steady iterations: 2.. when there are two or more, else the only one, else the trace.
  Totals from;
  std::size_t iters = marks.size() - 1;
  if (iters >= 2) {
    const std::size_t settled = opt_.repeated ? settled_from(r_.iteration_time_s) : 1;
    from = marks[settled];
    iters -= settled;
    r_.warmup_iterations = static_cast<std::uint32_t>(settled - 1);
    if (settled > 1) r_.warmup_time_s = (marks[settled].time - marks[1].time) / static_cast<double>(settled - 1);
  } else if (iters == 1) {
    from = marks[0];
  } else {
    iters = 1;
  }
  r_.steady_iterations = static_cast<std::uint32_t>(iters);
  set_per_iteration(from, end, static_cast<double>(iters));
  return r_;
}

}  // namespace

SimResult simulate(const PreparedTrace& p, Policy& policy, const SimOptions& opt) {
  Engine engine(p, policy, opt);
  return engine.run();
}

double ideal_time_s(const PreparedTrace& p) {
  auto ideal = make_policy("ideal");
  return simulate(p, **ideal, {}).time_s;
}

Comparison simulate_against_ideal(const PreparedTrace& p, Policy& policy, const SimOptions& opt, double ideal_s) {
  Comparison c;
  c.run = simulate(p, policy, opt);
  c.ideal_time_s = ideal_s;
  c.ratio = c.run.feasible && ideal_s > 0 ? c.run.time_s / ideal_s : 0.0;
  return c;
}

namespace {
// Per StallCause, in its order: the JSON key and the words for people.
constexpr std::array<std::pair<std::string_view, std::string_view>, kStallCauses> kStallCauseNames{{
    {"room", "waiting for room"},
    {"on_demand_swap_in", "on-demand swap-ins"},
    {"late_prefetch", "late prefetches"},
    {"copy_engine", "the job's own copies behind swaps"},
}};
}  // namespace

std::string_view to_string(StallCause c) { return kStallCauseNames.at(static_cast<std::size_t>(c)).first; }
std::string_view describe(StallCause c) { return kStallCauseNames.at(static_cast<std::size_t>(c)).second; }

std::string_view to_string(ActionKind k) {
  switch (k) {
    case ActionKind::Evict: return "evict";
    case ActionKind::Prefetch: return "prefetch";
    case ActionKind::Drop: return "drop";
    case ActionKind::Recompute: return "recompute";
  }
  return "?";
}

}  // namespace capuchin::sim
