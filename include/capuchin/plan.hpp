// Planning with Capuchin's policy (Peng et al., ASPLOS 2020), and better: from one observed
// iteration (a learn::Pattern), decide which tensors to swap out and when to bring them back
// (free time, in-triggers on a busy link), and which to drop and recompute instead (MSPS),
// so that the next iterations fit a memory budget at the least slowdown.
//
// Contract: pure computation over the trace model and the simulator's per-trace facts
// (kernel durations, recomputability); no CUDA. A plan is data: decisions keyed to event
// positions of the pattern, each with its reason and expected cost, serialisable as JSON.
// A plan that cannot reach the budget says so (fits = false, where) instead of pretending.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "capuchin/learn.hpp"
#include "capuchin/sim.hpp"

namespace capuchin::plan {

enum class Act : std::uint8_t { Evict, Prefetch, Drop, Recompute };
std::string_view to_string(Act a);

// The order a plan's decisions are issued in (Decision, SegmentDecision): by position, and at
// one position the swap-ins last, after the evictions and drops that make their room. In the
// order they were planned, a swap-in could find no room because the eviction beside it had not
// been issued yet, and was skipped (resnet18 at 0.5 on simcuda: eight 9 MiB swap-ins at one
// position, each then served on demand). Drops and recomputations keep their planned order: a
// recomputation may read what a drop beside it removes.
template <class D>
bool issued_before(const D& x, const D& y) {
  if (x.at != y.at) return x.at < y.at;
  return x.act != Act::Prefetch && y.act == Act::Prefetch;
}

enum class Reason : std::uint8_t {
  FreeTime,        // swap fully hidden behind compute (free time >= 0)
  LeastSwapCost,   // swap with a stall, cheaper per byte than any recompute
  Msps,            // recompute: the best memory saving per second of recomputation
  CrossIteration,  // a persistent tensor (parameter, optimizer state) swapped between uses
  ReplayVictim,    // the pressure rules' victim in the plan's replay, swapped out after its access before the pressure instead
};
// The largest Reason (wire decoders refuse larger codes): keep it the last enumerator.
inline constexpr std::uint8_t kLastReason = static_cast<std::uint8_t>(Reason::ReplayVictim);
std::string_view to_string(Reason r);

// Which tensor a decision is about, as the next iteration will know it.
struct TensorRef {
  bool local = true;        // local: the pattern's k-th allocation; else a carried tensor
  std::uint32_t index = 0;  // k, or the trace tensor index of a carried tensor
  bool operator<(const TensorRef& o) const { return local != o.local ? local < o.local : index < o.index; }
  bool operator==(const TensorRef& o) const { return local == o.local && index == o.index; }
};

// Each trace tensor (0 .. tensors-1) as a plan names it: the pattern's k-th local tensor, else
// a carried tensor by its trace index.
std::vector<TensorRef> tensor_refs(const learn::Pattern& pattern, std::size_t tensors);

struct Decision {
  std::uint32_t at = 0;       // pattern position: issued just before this event
  Act act = Act::Evict;
  TensorRef tensor;
  std::uint64_t bytes = 0;
  std::uint32_t access = 0;   // evict/drop: the access after which (a delayed eviction's: in the
                              // iteration before); prefetch/recompute: the access served
  Reason reason = Reason::FreeTime;
  double free_time_s = 0;     // swap: slack left (negative: expected stall)
  double cost_s = 0;          // expected added time (stall or recomputation)
  double msps = 0;            // recompute: bytes saved per second of recomputation
};

struct PlanOptions {
  std::uint64_t budget_bytes = 0;
  std::uint64_t baseline_bytes = 0;  // bytes live when the planned iteration starts
  double margin = 0.03;              // plan for budget x (1 - margin)
  bool swap_persistent = true;       // improvement over the paper: parameters/optimizer state too
  bool allow_recompute = true;
  bool allow_swap = true;
  // Improvements over the paper (capuchin-paper turns them off): a dropped input recomputed
  // for another recomputation is dropped again after it, instead of staying until its own
  // access; the cost-ordered phase is repeated while it accepts anything, since a choice that
  // brings memory back can make an earlier-rejected candidate useful again.
  bool redrop_chains = true;
  bool repeat_rounds = true;
  // Feedback: extra lead (seconds) for the swap-in serving pattern position `access` of a
  // tensor, learned from late arrivals in earlier iterations.
  std::map<std::pair<TensorRef, std::uint32_t>, double> extra_lead_s;
  // Planned stalls (an improvement over the paper): a wait before each position (seconds;
  // empty: none) in the timeline the iteration is planned on. During a wait the copies in flight
  // go on, so the copies out issued before it complete and copies in issued at it run: what
  // happens on the device anyway when an allocation waits for copies out or a kernel for a
  // swap-in, planned for so that the other choices can count on it. Where to wait is searched
  // by plan_segment (choose_plan), which replays each candidate.
  std::vector<double> stall_s;
  // A swap is planned only when moving its bytes is at least this share of its copy's time
  // (the rest is the link's latency per copy): a small tensor's swap occupies the link for its
  // latency and saves next to nothing (on h200, 163 of resnet18's 213 swaps per iteration were
  // under 12 us, 1.6 ms of the link's time). 0 (the paper): any size.
  double min_swap_efficiency = 0.5;
  // The link's time priced, in seconds of compute per second of copy (0: free, the paper's
  // view). A swap then costs its lateness plus this share of its two copies, so where the link
  // is the bottleneck (every hidden swap takes copy time a later swap needed) a recomputation
  // cheaper than that is chosen first, in both phases. choose_plan tries 0 and 1 (kLinkPrice).
  double link_price = 0;
  // The compute timeline the iteration is planned on, every kernel's time multiplied by this
  // (1: the profile's times). Where the link cannot move what must be off the device in the
  // compute time (tiny_transformer on h200 at 0.5 of its peak: 125 MB must be off by the end of
  // forward, about 1 ms of compute, and take 2.3 ms of the link), the greedy placement on the
  // ideal timeline fits only what the first swaps leave room for, and the pressure rules do the
  // rest at run time, late. On a stretched timeline the same placement spreads the copies as
  // if the iteration were that much slower, which is what the job's waits for copies make of
  // it; choose_plan tries several factors and keeps what replays fastest. Like stall_s, the
  // stretch is the planner's timeline only: a replay runs the kernels at their own times.
  double time_scale = 1.0;
  // Phase 2 ranks a choice by its cost per byte and per position over the target it covers
  // (positions over the target before any choice), not per byte alone: a tensor read by every
  // later layer of a block (DenseNet's concatenated features) has many short gaps, each as cheap
  // per byte as a long one but covering a sliver of the peak: on DTR's densenet121 log such
  // plans recomputed about 1,250 tensors (519-570 ms per iteration) where the pressure rules
  // alone recomputed 131 (89 ms). choose_plan tries both rankings.
  bool cover_weighted = false;
  // A persistent tensor's swap across the iteration boundary (optimizer state, used at the step
  // only) whose copy out cannot end before the iteration does: evicted in the next iteration
  // instead, at the position where its copy out can start on the planner's link timeline (it
  // stays resident from its last use to there, as without the swap), both its copies then within
  // the iteration. Off, such a swap is not planned. choose_plan tries both.
  bool delay_wrap_evictions = false;
};

struct Plan {
  std::vector<Decision> decisions;  // sorted by `at`
  std::uint64_t budget_bytes = 0, target_bytes = 0;
  std::uint64_t natural_peak_bytes = 0;  // of the pattern with the baseline, no management
  std::uint64_t planned_peak_bytes = 0;
  bool fits = true;
  std::uint32_t unfit_position = 0;  // where the plan still exceeds the target (when !fits)
  double expected_overhead_s = 0;   // lateness of swap-ins, recomputation and planned stalls
  // Of which: the waits the plan was made around (PlanOptions::stall_s). The planner's timeline
  // only; a replay can wait far less (its copies end sooner) or more.
  double planned_stall_s = 0;
  double time_scale = 1.0;  // PlanOptions::time_scale it was planned with
  std::uint32_t swaps = 0, recomputes = 0;
  std::uint32_t delayed_evictions = 0;  // swaps evicted in the next iteration (delay_wrap_evictions)
  double plan_time_s = 0;  // how long planning took (wall clock)
  std::vector<std::uint32_t> off_at_start;  // trace tensors the plan keeps off the device as the iteration starts
  double replay_s = 0;   // its iteration in the simulator (replay_plan), when a planner compared candidates
  bool passive = false;  // the chosen candidate was no plan: the pressure rules alone replayed faster
  bool no_drops = false;  // made and replayed without recomputation (the pressure rules must not drop either)
  std::uint32_t refined_moves = 0;  // changes refine_prefetches / refine_from_replay kept (0: as chosen)
};

Plan make_plan(const sim::PreparedTrace& p, const learn::Pattern& pattern, const PlanOptions& opt);

// What a replay saw besides its time (replay_plan's `notes`, appended to, not cleared). Events
// are the trace's; some may lie outside the pattern (the replay runs to the trace's end).
struct ReplayNotes {
  // A victim the pressure rules chose (what the plan left over the budget there): the trace
  // event being run, the tensor, its accesses before and after (kNone: none; the victims of a
  // live set over the budget at the replay's start have no access before).
  struct Victim {
    std::uint32_t event, tensor, last_access, next_access;
    bool dropped;
  };
  std::vector<Victim> victims;
  // Evictions cancelled before their copy ended (the tensor accessed, prefetched or freed while
  // Evicting; planned or the pressure rules'): (trace event, tensor). Link time for nothing.
  std::vector<std::pair<std::uint32_t, std::uint32_t>> cancelled;
};
// The plan's iteration as the simulator runs it (the pattern's events, at `budget`, the plan's
// decisions issued where they apply and the rest under pressure by the capuchin policies'
// rules): its time in seconds, +infinity when the simulator finds it infeasible. What a
// planner compares candidate plans by (plan_segment); each replay is one simulated iteration.
double replay_plan(const sim::PreparedTrace& p, const learn::Pattern& pattern, const Plan& plan, std::uint64_t budget,
                   bool allow_recompute, ReplayNotes* notes = nullptr);

// A chosen plan improved by its replay (anytime refinement). The planner places each swap-in
// on its ideal timeline; where the replayed iteration stalls (the link is busier than that
// timeline assumed, or a planned wait moved what follows it), an earlier in-trigger can hide
// a swap-in that arrives late. For each planned prefetch, in-triggers 32, 8, 2 and 1 positions
// earlier are tried (never before the tensor's own swap-out), a move is kept when the replay
// of the whole iteration gets faster, and rounds repeat while one keeps a move.
// Contract: `plan.replay_s` is its replay at `budget` with `allow_recompute` (finite; else the
// plan is returned as it is); deterministic, bounded by replays and replayed events, never by
// wall time; the plan returned replays no slower (its replay_s updated), decisions sorted by
// `at`; only prefetch positions move: what is swapped or recomputed, and where, stays. The
// planner's own estimates (planned_peak_bytes, fits, expected_overhead_s, a moved prefetch's
// cost_s) still describe its placement before the moves: replay_s is the refined plan's figure.
struct RefineLimits {
  std::size_t max_replays = 2000;
  // Per refine_from_replay call: each round replays the plan for its notes and tries one or a
  // few changes; on the shared traces no call kept more than 3 changes.
  std::size_t max_replays_from_notes = 8;
  std::size_t max_replayed_events = 4'000'000;  // a 50k-event iteration: 80 replays (per call of either refinement)
};
Plan refine_prefetches(const sim::PreparedTrace& p, const learn::Pattern& pattern, Plan plan, std::uint64_t budget,
                       bool allow_recompute, const RefineLimits& limits = {});

// A chosen plan improved by what its replay saw besides its time (replay_plan's ReplayNotes),
// in rounds, each replaying the plan again for its notes:
//   - swaps whose eviction the replay cancelled (the tensor was needed, prefetched or freed
//     before its copy out ended: link time for nothing) are left out, all of them, else one
//     at a time;
//   - else the pressure rules' swapped victims become planned swaps (Reason::ReplayVictim):
//     out right after the access before the pressure, in from the latest position that hides
//     the copy on the ideal timeline, where the gap hides both copies. Capuchin's passive mode
//     learns its evictions the same way, from the iteration it ran.
// A change is kept when the whole iteration replays faster (as in refine_prefetches); rounds
// stop when the victims' swaps are not kept (or there are none). Contract as refine_prefetches'
// (`plan.replay_s` its finite replay, deterministic, bounded by
// RefineLimits::max_replays_from_notes and the replayed events, never slower), except that
// swaps are added and removed: `swaps` and `delayed_evictions` count them, while
// planned_peak_bytes, fits and expected_overhead_s still describe the plan as made. Swaps
// brought back only in the next iteration are never removed.
Plan refine_from_replay(const sim::PreparedTrace& p, const learn::Pattern& pattern, Plan plan, std::uint64_t budget,
                        bool allow_recompute, const RefineLimits& limits = {});

// A planned swap as decision indices: its eviction and the prefetch that brings it back.
using SwapIndices = std::pair<std::size_t, std::size_t>;
// The planned swaps whose eviction a replay cancelled, as refine_from_replay takes them (public
// for its tests). Each cancellation (notes.cancelled; `refs` maps trace tensors as tensor_refs
// does) is paired with the tensor's last planned eviction at or before its position, and the
// first prefetch after that eviction, not after a later eviction. It is left unpaired where the
// swap ran its course before the cancellation (its prefetch comes first: the pressure rules
// evicted the tensor again, and cancelled that), or is brought back only in the next iteration
// (leaving it out would leave its prefetch and off_at_start behind). Each swap is listed once.
std::vector<SwapIndices> cancelled_swaps(const learn::Pattern& pattern, std::span<const TensorRef> refs, const Plan& plan,
                                         const ReplayNotes& notes);

std::string plan_to_json(const Plan& plan, const learn::Pattern& pattern, const trace::Trace& t);

// The `capuchin` policies for the simulator: the executor's own policy (policy::Controller:
// the iteration learned from the event-signature period, passive until a plan for it is
// ready, then the plan followed from the next iteration boundary, with feedback for late
// swap-ins) driven by simulated events.
enum class CapuchinVariant : std::uint8_t {
  Full,   // `capuchin`: what libcapuchin.so runs, with recomputation
  Swap,   // `capuchin-swap`: swaps only, as the executor does without declared kernel outputs
  Paper,  // `capuchin-paper`: Capuchin as published (Peng et al., ASPLOS'20) - see SegmentJob::paper;
          // passive mode swaps the least recently used tensors
};
std::unique_ptr<sim::Policy> make_capuchin_policy(CapuchinVariant v = CapuchinVariant::Full);

}  // namespace capuchin::plan
