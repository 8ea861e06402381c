// capuchin-sim: a discrete-event what-if simulator over tensor access traces. It replays a
// trace on a GPU profile (one compute stream, one host-to-device and one device-to-host
// copy engine running concurrently), under a device-memory budget, with a memory policy
// that may evict (swap out), prefetch (swap in), drop (free now, recompute later) and
// recompute tensors. See src/sim/README.md for the model, the profiles and their sources.
//
// Contract: nothing throws. Device memory is tracked exactly: at no simulated instant do the
// bytes held on the device exceed the budget; when a policy cannot keep a run within it the
// run is reported infeasible with the event (index and file line) and the tensor where it
// failed, never silently allowed. Results are simulated figures for a named GPU profile,
// never measurements.
#pragma once

#include <algorithm>

#include <array>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "capuchin/expected.hpp"
#include "capuchin/trace_model.hpp"

namespace capuchin::sim {

// ---- GPU profiles ----------------------------------------------------------------------

// Published peak figures of one GPU and its host link (src/sim/profiles.cpp cites each).
struct GpuProfile {
  std::string name;             // e.g. "h200"
  std::string description;      // e.g. "NVIDIA H200 (141 GB HBM3e), PCIe 5.0 x16 host link"
  std::uint64_t memory_bytes = 0;
  double fp32_flops = 0;        // FLOP/s, dense
  double tf32_flops = 0;        // FLOP/s, dense tensor-core TF32; 0: none (runs as FP32)
  double bf16_flops = 0;        // FLOP/s, dense tensor-core BF16 (FP16 where no BF16); 0: none
  double hbm_bytes_per_s = 0;   // device-memory bandwidth
  double link_bytes_per_s = 0;  // host link, theoretical, each way
  double link_latency_s = 0;    // fixed cost of one copy
  std::string sources;          // where the figures come from
};

// The fractions of published peaks a real job reaches, and the fixed costs. One set for
// every profile (never tuned per profile or per policy); tests may use an ideal set.
struct Efficiency {
  double compute = 0.6;          // of peak FLOP/s for a kernel
  double memory = 0.8;           // of peak HBM bandwidth
  double link = 0.87;            // of theoretical link bandwidth (55 of 63 GB/s on PCIe 5.0 x16)
  // A policy's own moves (swaps), each way, where they run at another rate than the job's copies
  // (0: as `link`). A running job measures them (the executor times its moves and plans with
  // what it saw): Unified Memory migrates to the host at about a quarter of a pinned copy's rate
  // on an H200 (README, Results), and a link shared by several GPUs gives each less.
  double swap_out_link = 0;      // to the host
  double swap_in_link = 0;       // to the device
  double launch_latency_s = 4e-6;  // added to every roofline kernel (not to dur_ns)
  double uvm_fault_latency_s = 25e-6;  // per on-demand fault of a paging policy (lru-uvm)
};

// A policy's swap copies each way: the rate in bytes per second (the link's times the swap
// efficiency of that direction, Efficiency::swap_out_link / swap_in_link, else `link`), and the
// seconds one copy of `bytes` takes (the profile's latency plus the bytes at that rate).
inline double swap_out_rate(const GpuProfile& gpu, const Efficiency& eff) {
  return gpu.link_bytes_per_s * (eff.swap_out_link > 0 ? eff.swap_out_link : eff.link);
}
inline double swap_in_rate(const GpuProfile& gpu, const Efficiency& eff) {
  return gpu.link_bytes_per_s * (eff.swap_in_link > 0 ? eff.swap_in_link : eff.link);
}
inline double swap_out_s(const GpuProfile& gpu, const Efficiency& eff, std::uint64_t bytes) {
  return gpu.link_latency_s + static_cast<double>(bytes) / swap_out_rate(gpu, eff);
}
inline double swap_in_s(const GpuProfile& gpu, const Efficiency& eff, std::uint64_t bytes) {
  return gpu.link_latency_s + static_cast<double>(bytes) / swap_in_rate(gpu, eff);
}

// Whether a measured rate differs from the assumed one by more than a tenth either way: within
// it, a link that runs as modelled keeps the model's figures, so measurement noise cannot move
// a plan (0 measured: nothing to use).
inline bool outside_link_band(double measured, double assumed) {
  return measured > 0 && assumed > 0 && (measured > 1.1 * assumed || measured < assumed / 1.1);
}
// The swap efficiency (Efficiency::swap_out_link, swap_in_link) a measured rate in bytes per
// second stands for on `gpu`'s link, or 0 (keep `assumed`, the efficiency the profile runs at)
// when nothing was measured, it is inside the band above, or it is over twice the link's
// theoretical rate (not a measurement to plan by).
inline double measured_link_share(double measured_bytes_per_s, const GpuProfile& gpu, double assumed) {
  if (!(gpu.link_bytes_per_s > 0)) return 0;
  const double share = measured_bytes_per_s / gpu.link_bytes_per_s;
  if (share > 2) return 0;  // twice the link's theoretical rate: not a measurement to plan by
  return outside_link_band(share, assumed) ? share : 0;
}

std::span<const GpuProfile> gpu_profiles();
Expected<GpuProfile> find_gpu_profile(std::string_view name);  // case-insensitive

// Which peak a kernel runs at, by name and trace dtype (see profiles.cpp for the rules).
enum class MathMode : std::uint8_t { FP32, TF32, BF16 };
MathMode kernel_math_mode(std::string_view kernel_name, std::string_view dtype);
std::string_view to_string(MathMode m);

// Duration in seconds of each event on the compute stream or its copy engine (kernels:
// dur_ns, else roofline + launch latency; copies: latency + bytes / link; others 0).
std::vector<double> event_durations(const trace::Trace& t, const GpuProfile& gpu, const Efficiency& eff);

// ---- What a policy sees and does ---------------------------------------------------------

enum class ActionKind : std::uint8_t { Evict, Prefetch, Drop, Recompute };
std::string_view to_string(ActionKind k);

// One request of a policy, about one tensor (a dense tensor index of the trace).
struct Action {
  std::uint32_t tensor;
  ActionKind kind;
};
static_assert(sizeof(Action) == 8);

// Where a tensor's data is.
enum class Residence : std::uint8_t {
  Unallocated,  // before its alloc
  Resident,     // on the device
  Evicting,     // on the device, being copied out (memory released when the copy ends)
  Host,         // only on the host
  Dropped,      // nowhere: recomputed from its producers when next needed
  Freed,        // after its free
};

// Facts about a trace computed once and shared by every run on it (any policy, budget).
struct PreparedTrace {
  const trace::Trace* trace = nullptr;
  trace::Liveness liveness;
  GpuProfile gpu;
  Efficiency eff;
  std::vector<double> duration_s;  // per event
  // Per tensor, the events that access it in order: events [offset[t], offset[t+1]).
  std::vector<std::uint32_t> access_offset, access_event;
  // Per tensor, the events that write it (kernels and copies) in order, the same way.
  std::vector<std::uint32_t> write_offset, write_event;
  // Per entry of access_event: re-running the tensor's writers up to this access is valid
  // for a later access only before this event (kNone: always; 0: never recomputable).
  std::vector<std::uint32_t> recompute_valid_until;
  // Per entry of access_event: seconds of compute to re-run the writers up to this access.
  std::vector<double> recompute_cost_s;
  // Per iteration: the event where backward starts (first kernel named *backward*, else the
  // iteration's memory peak). Used by the phase-aware baselines.
  std::vector<std::uint32_t> backward_begin;
};
Expected<PreparedTrace> prepare(const trace::Trace& t, const GpuProfile& gpu, const Efficiency& eff = {});

// The simulator's live state, read-only for policies. Arrays are indexed by tensor.
struct SimState {
  const PreparedTrace* prep = nullptr;
  std::uint64_t budget_bytes = 0;
  std::uint64_t used_bytes = 0;     // device bytes held now (resident, incl. in-flight copies)
  double now_s = 0;                 // when the compute stream reaches the current event
  std::uint32_t event = 0;          // the current event
  std::vector<Residence> residence;
  std::vector<std::uint32_t> cursor;     // index into access_event of the next access >= event
  // When the data of a resident tensor is ready and its last use has ended (end of its last
  // kernel, or of the copy that brought it in).
  std::vector<double> last_use_end_s;
  std::vector<std::uint32_t> pin_epoch;  // == epoch: needed by the current event, untouchable
  std::uint32_t epoch = 1;
  std::vector<std::uint32_t> resident;        // tensors Resident now (unordered)
  std::vector<std::uint32_t> resident_slot;   // position in `resident`, kNone if not there

  std::uint64_t bytes(std::uint32_t t) const { return prep->trace->tensors[t].bytes; }
  bool pinned(std::uint32_t t) const { return pin_epoch[t] == epoch; }
  // The next event (>= the current one) accessing t, kNone when none.
  std::uint32_t next_access(std::uint32_t t) const;
  // The last event before the current one that accessed t, kNone when none.
  std::uint32_t last_access(std::uint32_t t) const;
  // Whether t, dropped now, could be recomputed for its next access.
  bool can_recompute(std::uint32_t t) const;
  double recompute_cost_s(std::uint32_t t) const;  // of re-running its writers so far
};

// A memory policy. The simulator calls before_event for every event in issue order (the
// policy appends actions to `out`), and on_memory_pressure when an allocation, swap-in or
// recompute needs `bytes_short` more bytes than the budget leaves even after every copy in
// flight completes. Returning no action there makes the run infeasible. Invalid actions
// (e.g. evicting a pinned or absent tensor) are counted in SimResult::rejected_actions.
class Policy {
 public:
  virtual ~Policy() = default;
  virtual std::string_view name() const = 0;
  virtual void start(const SimState& s) { (void)s; }
  virtual void before_event(const SimState& s, std::vector<Action>& out) = 0;
  virtual void on_memory_pressure(const SimState& s, std::uint64_t bytes_short, std::vector<Action>& out) {
    (void)s, (void)bytes_short, (void)out;
  }
  virtual bool unlimited_memory() const { return false; }  // the `ideal` bound
  virtual bool demand_paging() const { return false; }     // faults pay Efficiency::uvm_fault_latency_s
};

std::vector<std::string> policy_names();  // the built-in baselines
Expected<std::unique_ptr<Policy>> make_policy(std::string_view name);

// ---- Runs -------------------------------------------------------------------------------

// One interval on a resource, for the timeline dump.
struct TimelineEntry {
  enum class Lane : std::uint8_t { Compute, H2D, D2H };
  enum class Kind : std::uint8_t { Kernel, Copy, Recompute, SwapIn, SwapOut, Stall };
  double start_s, end_s;
  std::uint32_t event;
  std::uint32_t tensor;  // kNone when none
  Lane lane;
  Kind kind;
};
std::string_view to_string(TimelineEntry::Lane l);
std::string_view to_string(TimelineEntry::Kind k);

// One change of the device memory a tensor holds in a run: it takes memory (its allocation, a
// swap-in, a recomputation) or releases it (its free, the end of a swap-out's copy, a drop).
// An eviction cancelled before its copy ended (the data stayed) changes nothing.
struct MemoryChange {
  enum class Kind : std::uint8_t { Alloc, Free, SwapOut, SwapIn, Drop, Recompute };
  double t_s;            // when the memory is taken or given back
  std::uint32_t event;   // the event being run when it was decided
  std::uint32_t tensor;
  Kind kind;
  bool on_demand;        // SwapIn: the compute stream needed it (not a prefetch)
};

struct SimOptions {
  std::uint64_t budget_bytes = 0;
  std::vector<TimelineEntry>* timeline = nullptr;  // filled when set
  // Filled when set: every MemoryChange of the run (swap-outs still in flight at its end
  // included), not in time order (a swap-out's release is found late): sort by t_s, stably.
  std::vector<MemoryChange>* memory = nullptr;
  // Filled when set: each eviction cancelled before its copy ended (the tensor needed, prefetched
  // or freed while Evicting: SimResult::cancelled_out_link_s), as (event being run, tensor).
  std::vector<std::pair<std::uint32_t, std::uint32_t>>* cancelled = nullptr;
  // Only events [first_event, end_event): tensors live at first_event start resident, but those
  // in start_on_host and, when they exceed the budget, the policy's victims (a what-if over one
  // iteration, e.g. for a planner comparing candidate plans).
  std::uint32_t first_event = 0;
  std::uint32_t end_event = trace::kNone;
  // Bytes held from the start until an event (then released, before it runs): memory that a
  // sub-range run must account for although the range allocates it later (e.g. optimizer
  // state a first iteration creates at its end, present from the start of the next).
  std::vector<std::pair<std::uint32_t, std::uint64_t>> held_until;
  // A sub-range run (first_event > 0): tensors (dense indices) live at first_event that start
  // swapped out to the host rather than resident (e.g. what a plan keeps off the device across
  // the iteration boundary); others are ignored.
  std::vector<std::uint32_t> start_on_host;
  // The trace's iterations are copies of one (`--iters N`, trace::repeat_last_iteration): the
  // steady figures are then those of the run once it has settled, the iterations from the
  // first one after which every iteration takes within 1% of the last one's time (a policy
  // learning and planning, such as capuchin's, settles a few iterations in); the iterations
  // before it (but the first) are its warm-up, reported apart. Else the steady figures are
  // the mean over iterations 2.. .
  bool repeated = false;
};

// Why the compute stream waited (SimResult::stall_by_cause_s), for "where does the time go":
//   Room: an allocation, swap-in or recomputation waited for swap-outs in flight to release memory;
//   OnDemandSwapIn: a kernel read a tensor on the host that no prefetch had brought back (its copy
//     queued behind the link's other copies; its wait for room counts as Room);
//   LatePrefetch: a kernel read a tensor whose prefetch was issued but had not landed;
//   CopyEngine: one of the trace's own copies waited for its copy engine (busy with swaps).
enum class StallCause : std::uint8_t { Room, OnDemandSwapIn, LatePrefetch, CopyEngine };
inline constexpr std::size_t kStallCauses = 4;
inline constexpr double kZeroS = 0.5e-6;  // a time below this prints as 0.000 ms
std::string_view to_string(StallCause c);   // "room", "on_demand_swap_in", ...: JSON keys
std::string_view describe(StallCause c);    // "waiting for room", ...: for people

// One event of a run's last iteration where the compute stream waited, and the cause of most of it.
struct StallSite {
  std::uint32_t event = trace::kNone;
  double stall_s = 0;
  StallCause cause = StallCause::Room;
};

struct Infeasibility {
  std::uint32_t event = trace::kNone;
  std::uint64_t line = 0;                // file line of the event (index + 2)
  std::uint32_t tensor = trace::kNone;   // dense index; tensor_id is the trace's id
  std::uint64_t tensor_id = 0;
  std::string reason;
};

struct SimResult {
  std::string policy;
  std::string gpu;
  std::uint64_t budget_bytes = 0;   // 0 for unlimited
  std::uint64_t natural_peak_bytes = 0;
  bool feasible = true;
  Infeasibility where;              // when !feasible
  // Per steady iteration (mean over iterations 2.. when there are two or more, else the
  // only iteration, else the whole trace; with SimOptions::repeated, over the settled
  // iterations only).
  double time_s = 0;
  double stall_s = 0;
  std::array<double, kStallCauses> stall_by_cause_s{};  // stall_s by StallCause (they add up to it)
  double recompute_s = 0;
  double swap_out_bytes = 0;
  double swap_in_bytes = 0;
  // The time the policy's copies took on each direction of the link (a copy counted in the
  // iteration that issued it): near the iteration's time, that direction is saturated.
  double swap_out_link_s = 0, swap_in_link_s = 0;
  // Copies out whose tensor was needed again (or freed) before they landed, so the eviction was
  // cancelled and freed nothing: link time spent for nothing. Counted in the iteration that
  // cancelled them (swap_out_link_s in the one that issued them): in a steady state, a part of it.
  double cancelled_out_link_s = 0;
  std::uint32_t steady_iterations = 0;   // the last ones
  std::uint32_t warmup_iterations = 0;   // SimOptions::repeated: iterations 2.. before the steady ones
  double warmup_time_s = 0;              // their mean (0 when none)
  std::vector<double> iteration_time_s;  // every iteration
  double total_time_s = 0;               // the whole trace
  std::uint64_t peak_bytes = 0;          // most device bytes held at once
  std::uint64_t rejected_actions = 0;
  std::uint64_t skipped_prefetches = 0;  // no room even after every copy in flight
  std::uint64_t faults = 0;              // on-demand swap-ins and recomputes
  // The last iteration's largest waits (the whole run's when it has no iterations), largest
  // first, at most kStallSites; one per event (its stall summed, under its largest cause).
  static constexpr std::size_t kStallSites = 5;
  std::vector<StallSite> stall_sites;
  // A sub-range run (SimOptions::first_event > 0): the tensors live at its end that are not
  // resident then (on the host, being copied out or dropped), which the iteration after it
  // would have to bring back.
  std::vector<std::uint32_t> off_device_at_end;
  // A sub-range run: the tensors that started off the device (SimOptions::start_on_host, and
  // the policy's victims when the live set at its start was over the budget).
  std::vector<std::uint32_t> started_off_device;
};

SimResult simulate(const PreparedTrace& p, Policy& policy, const SimOptions& opt);

// A run with its ideal reference: time_s / ideal_time_s.
struct Comparison {
  SimResult run;
  double ideal_time_s = 0;
  double ratio = 0;  // 0 when infeasible
};
Comparison simulate_against_ideal(const PreparedTrace& p, Policy& policy, const SimOptions& opt,
                                  double ideal_time_s);
double ideal_time_s(const PreparedTrace& p);

// A lower bound on any policy's steady iteration at a budget: "no policy can sustain an
// iteration of this trace at this budget faster than X", for a steady state in which every
// iteration does the same work (what `--iters N` simulates). For each moment m (a kernel or
// copy of the steady iteration: the trace's second-to-last when it has three or more, its only
// one, or the whole trace without iterations), the bytes live at m beyond the budget
// must be off the device then. A byte of a tensor m does not use is free to shed when it holds
// no data yet or none that is read again before it is overwritten or freed; any other byte is
// either recomputed (a tensor the simulator may recompute, at its producers' compute time,
// cheapest per byte first) or swapped: copied out after its last write before m and back before
// its next read after m. Each link direction moves at most (window + stretch) x bandwidth, the
// window being the compute time between those events (a window longer than an iteration is
// unbounded: in the steady state such a tensor is not written, or not read, again) and the stretch
// the time the iteration runs beyond its kernels' own (stalls and recomputation); taking the
// swapped bytes with the widest windows first, the stretch a swap of S bytes needs is
// max(0, S / bandwidth - K), K = min over the tensors in window order of (bytes before it /
// bandwidth + its window). The iteration's own copies (times U to the device, D to the host,
// U + D + others in all) hold the compute stream and their copy engine: a swap the same way
// cannot use their time, recomputation cannot overlap them. So the iteration takes at least its
// kernels' time C plus
//   min over S of max(U + stretch in, D + stretch out, all copies + recomputation of the rest)
// at every moment (at least the copies themselves: what the ideal iteration adds); the bound is
// the largest. A moment whose own kernel's tensors exceed the
// budget makes the budget infeasible for every policy. Relaxations (each can only lower the
// bound, never raise it above what a policy can do): link latency and the copy engines' sharing
// between moments are ignored; a byte may count as swapped in one
// direction and recomputed in the other; tensors are split fractionally.
// Not a bound on a finite run's mean, strictly: `simulate` averages iterations 2..N, and a run
// can do some of the first measured iteration's copies in the unmeasured first one, or skip the
// last iteration's copies out for an iteration that never comes (a trace that reads a tensor in
// its last iteration only can even be faster on average); on the repeated shared traces no
// result of any policy came below it (tests/sim/traces_test.cpp's sanity sweep, and 539 runs by hand).
struct Bound {
  bool feasible = true;       // false: some kernel's own tensors exceed the budget
  double compute_s = 0;       // C: the steady iteration's kernels, back to back
  double added_s = 0;         // the least time any policy adds to C at this budget (the copies included; 0: none beyond them)
  std::uint32_t event = trace::kNone;  // the binding moment (infeasible: the kernel that does not fit)
  std::uint64_t over_bytes = 0;        // live beyond the budget there
  std::string why;                     // infeasible: which kernel needs how much
  // The bound as a ratio to the ideal iteration (which is at least C): max(1, (C + added) / ideal).
  // (1 when nothing is added: the steady iteration's kernels may differ from the mean's.)
  double ratio(double ideal_s) const {
    if (ideal_s <= 0) return 0.0;
    return added_s > 0 ? std::max(1.0, (compute_s + added_s) / ideal_s) : 1.0;
  }
};
Bound lower_bound(const PreparedTrace& p, std::uint64_t budget_bytes);

// Resolves a --budget text (budget.hpp): a size, a share of the profile's memory ("60%") or
// a multiple of the trace's natural peak ("0.5x").
Expected<std::uint64_t> resolve_budget(std::string_view text, std::uint64_t natural_peak_bytes, const GpuProfile& gpu);

// ---- Sweep report -------------------------------------------------------------------------

struct SweepRow {
  std::string trace;   // a short name (the file's stem)
  std::string budget;  // as given
  std::uint64_t budget_bytes = 0;
  std::uint64_t natural_peak_bytes = 0;
  Comparison c;
  // lower_bound at this budget, as a ratio to the ideal (bound_known: computed; 0: infeasible
  // for every policy).
  bool bound_known = false;
  double bound_ratio = 0;
  std::string largest_wait;                  // describe_site of the run's largest stall site ("" when none)
  // describe_line of the bound's binding moment ("" when none) and of where the run failed ("":
  // its Infeasibility's line).
  std::string bound_where, infeasible_where;
};
std::string sweep_markdown(const std::vector<SweepRow>& rows, const std::vector<std::string>& policies,
                           const std::string& gpu);
std::string sweep_csv(const std::vector<SweepRow>& rows);
// Where one policy's time goes in each cell of a sweep: its iteration against the ideal and the
// bound, the time it adds split into recomputation and stalls by cause, and its largest wait.
std::string explain_markdown(const std::vector<SweepRow>& rows, const std::string& policy, const std::string& gpu);
// Where event `event` of trace t is: "line N", and when t's events are not the file's own (made
// by repeat_last_iteration, or with learned iteration markers added; `source` maps each to the
// file's event, kNone for one the file does not have), which iteration and which line of the
// file it is: "line 4888 (iteration 8, line 1968 of the trace)". `source` empty: the line alone.
std::string describe_line(const trace::Trace& t, std::uint32_t event, std::span<const std::uint32_t> source = {});
// The line of the trace that event `event` of a repeated trace copies (source_event[event] + 2);
// 0 when none (an event --iters adds, or no `source`).
std::uint64_t source_line(std::span<const std::uint32_t> source, std::uint32_t event);
// "line N (kernel name): 0.863 ms, on-demand swap-ins": a stall site of a run of trace t; with
// `source`, "line N (kernel name; iteration 8, line M of the trace): ...".
std::string describe_site(const trace::Trace& t, const StallSite& site, std::span<const std::uint32_t> source = {});
// A standalone SVG: ratio against budget, one line per policy, for one trace.
std::string sweep_svg(const std::vector<SweepRow>& rows, const std::string& trace,
                      const std::vector<std::string>& policies, const std::string& gpu);
std::string timeline_csv(const trace::Trace& t, const std::vector<TimelineEntry>& tl);

}  // namespace capuchin::sim
