// controller.hpp: the capuchin policy as one state machine, shared by the executor in
// libcapuchin.so (driven by a job's real events) and the simulator's `capuchin` policy
// (driven by simulated ones), so that `capuchin sim` predicts what the executor does.
//
// Event by event:
//   - Learning: the iteration is the period of the event-signature sequence
//     (learn::find_period), tried at every host sync and whenever the history has grown by an
//     eighth since the last try, while learning only: a loop over identical layers repeats
//     before the iteration does, and a lock on it ends at the first event after the loop
//     (a mismatch), after which the longer repeat is learned. An
//     iteration leaves as many bytes live as it found (within 1%), which such a loop does not.
//     The boundary inside the period goes where the fewest bytes are live (ties: right after
//     a sync, then right before an allocation), a function of the iteration's content only. A
//     sync is an event like any other: iterations do not end at host syncs, so a loop with
//     several syncs per iteration (PyTorch's .item(), blocking copies) is learned like one
//     with none.
//     Where no period repeats in signatures, one that repeats in forms (Event::form: the
//     same ops, kernels and tensor counts, other sizes) is learned instead, once three of it
//     were seen since learning began and it repeats over half the history (not a loop inside
//     one iteration): a job whose batch or sequence length changes every step still has a
//     plan, made for the largest iteration seen (one 5% larger asks again; until its plan
//     arrives, the pressure rules cover the difference; late swap-ins are not fed back).
//   - Locked: every event is matched against the learned iteration (by form, when it was
//     learned by form). A real job's iterations are not all alike: a metric logged now and
//     then adds an allocation, a kernel, a copy and a sync; a tensor may change size. A few
//     events that differ are followed on (tolerated). An event that differs is held until the
//     next one tells what it was: one of the next 8 places, as many as the budget allows, with
//     the next event the place after (skipped places: their
//     decisions are issued now, their allocations are absent, so later places keep their
//     numbers), the place itself with another size (substituted: the same form, and the next
//     event the next place exactly or by form), or extra (outside the iteration's places: its
//     tensor is no plan local). Only an iteration that talks to the host (a copy or a sync)
//     tolerates any, at most max(min_tolerated, period / tolerated_share) places substituted
//     or skipped and max(min_extra, period / extra_share) extra events per iteration; one
//     more returns to Learning (a plan for another iteration is not followed; a skip over the
//     place budget is taken as extra events instead). A plan's
//     decisions act through residency checks, so a place that names another tensor than
//     planned costs time, never correctness. At a
//     boundary, the iteration just seen becomes a plan request when there is no plan for it
//     yet, when a planned swap-in arrived late, or when the owner invalidated the plan (a new
//     budget); an iteration that differed asks only when it repeats the one before it exactly
//     (the job changed a little for good), or when a plan due for another reason than
//     lateness has waited 3 such boundaries for an iteration that did not differ, and then
//     becomes the learned iteration itself (rebased), so the answer made from it is adopted.
//     An iteration that differed is also where a longer iteration is looked for: the learned
//     one may be a loop inside it (gradient accumulation's micro-batch, the optimizer step
//     taken for extra events), and the longer one, once it repeats, is learned instead. A plan offered for a request is adopted at the first boundary after it arrived, never mid-iteration, and is
//     followed while the iteration matches: its decisions come back as commands with their
//     tensors resolved (by place, the k-th allocation of this iteration or of the one before;
//     tensors live across iterations by id).
//   - Feedback: a planned swap-in that had not landed at its access (note_late) makes the
//     next request carry the lateness, and the next plan starts that swap-in earlier.
//
// Contract: pure computation: no CUDA, no clock, no threads, not thread-safe (the owner
// serialises calls); deterministic: the same events and offers in the same order give the
// same commands. Planning is the owner's (plan::plan_segment, at once or on another thread):
// the controller never waits for it. Steady state (Locked, following) allocates only to keep
// the last iterations' events (storage reused once the history is full: a trim keeps the
// newer half, and at least the last two iterations and the running one), and for the search
// for a longer iteration at the end of one with extra events or skips (backing off).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <unordered_map>
#include <utility>
#include <vector>

#include "capuchin/flat_map.hpp"
#include "capuchin/segment_plan.hpp"

namespace capuchin::policy {

using Event = plan::SegmentEvent;

struct ControllerOptions {
  std::uint32_t min_period = 8;              // fewer events than this are not an iteration
  std::uint32_t max_history = 1u << 17;      // events kept (older ones dropped; at least two iterations)
  // Touch the history's storage at construction (about 120 bytes per max_history event: the
  // event, its signature and form, room for four tensor ids; 17 MB at the default),
  // so the event path never faults a fresh page in while the history first fills (the
  // executor: a job's first ~100k events would otherwise pay a page fault every 40 events).
  bool prefault = false;
  // Differences from the learned iteration per iteration before it is learned again (see
  // Locked above): places substituted or skipped, at least min_tolerated, else one in
  // tolerated_share of the period; extra events (which leave every place where it was: a
  // logging step's handful), at least min_extra, else one in extra_share.
  std::uint32_t min_tolerated = 4;
  std::uint32_t tolerated_share = 32;
  std::uint32_t min_extra = 16;
  std::uint32_t extra_share = 8;
};

// A plan decision for the running iteration, its tensor resolved.
struct Command {
  plan::Act act = plan::Act::Evict;
  std::uint64_t id = 0;      // the tensor (the owner's allocation id)
  plan::Reason reason = plan::Reason::FreeTime;
  double cost_s = 0;         // the plan's expected cost of it
  std::uint32_t at = 0;      // iteration position it is issued at
  std::uint32_t access = 0;  // prefetch / recompute: the position of the access it serves
  plan::LateArrival place;   // the tensor as the plan names it, and `access` (for note_late)
};

// What one event changed, for the owner's bookkeeping and log.
// (Bits: one byte, returned in a register on the event path; any() tests them all at once.)
struct Step {
  bool boundary : 1 = false;   // an iteration ended just before this event
  bool locked : 1 = false;     // the iteration was learned at this event
  bool relearn : 1 = false;    // this event did not match the learned iteration: learning again
  bool adopted : 1 = false;    // a new plan is followed from this event on
  bool tolerated : 1 = false;  // this event differed from the learned iteration and was followed on
  bool longer : 1 = false;     // relearn: the learned iteration is a loop inside a longer one that repeats
  bool any() const { return boundary || locked || relearn || adopted || tolerated; }
};
static_assert(sizeof(Step) == 1);

// A plan request: the SegmentJob is complete but for what only the owner knows (names,
// budget, profile, recompute, dump_dir); `serial` identifies it in offer().
struct PlanRequest {
  std::uint64_t serial = 0;
  plan::SegmentJob job;
};

struct ControllerStats {
  std::uint64_t events = 0, iterations = 0, locks = 0, relearns = 0, requests = 0, plans_adopted = 0,
                iterations_followed = 0, late = 0;
  std::uint64_t form_locks = 0;    // locks on a period that repeats in forms only
  std::uint64_t resized = 0;       // events matched by form whose signature differed
  std::uint64_t tolerated = 0;     // events locked that differed and were followed on (places skipped count one each)
  std::uint64_t rebased = 0;       // iterations that differed and became the learned one
  std::uint64_t longer_searches = 0;  // ... looked for at iterations that differed (backing off)
  std::uint64_t longer_found = 0;     // iterations that differed showed a longer one repeating: learned again
};

class Controller {
 public:
  explicit Controller(ControllerOptions o = {});

  // Feeds the next event (ids: a kernel's reads then writes, or its touch list, as the event
  // says; alloc/free: e.id; copies: e.id / e.id2). The plan's commands to issue at this
  // position are appended to `out`. The owner feeds an allocation once its id is known and
  // every other event before it runs.
  Step on_event(const Event& e, std::span<const std::uint64_t> ids, std::vector<Command>& out);

  // A planned swap-in of `id` had not landed when its access began, by about late_s (the
  // simulator knows it at the access; ignored once the iteration ended).
  void note_late(std::uint64_t id, double late_s);
  // The same, measured after the fact (the executor reads it from events once both completed):
  // the swap-in as its command named it. Ignored when the iteration it was planned for changed.
  void note_late(const plan::LateArrival& place, double late_s);
  // The owner's circumstances changed (a new budget): the next boundary asks for a new plan.
  void invalidate_plan() { invalidated_ = true; }
  // The owner fed no events for a while (the executor standing by) and feeds every one again
  // from now on: the history and the learned iteration are forgotten (learning starts again, a
  // relearn in the stats) and `live` (allocation id, bytes) is what is allocated now. A request
  // still in flight is no longer awaited: its answer, if it comes, is kept as after any relearn
  // (followed when its iteration comes back). The event clock goes on.
  void resume(std::span<const std::pair<std::uint64_t, std::uint64_t>> live);

  // The request made at the last boundary, if any (taken once).
  std::optional<PlanRequest> take_request();
  bool has_request() const { return request_.has_value(); }
  // The answer to request `serial`: a plan, or null when none could be made. Answers to
  // requests that are no longer current are dropped. An anytime planner may answer the last
  // request twice: the second answer (a refinement) is adopted at the next boundary like the
  // first, which it replaces.
  void offer(std::uint64_t serial, std::shared_ptr<const plan::SegmentPlan> p);

  bool locked() const { return locked_; }
  bool by_form() const { return locked_ && by_form_; }  // the iteration was learned by form
  // The last event that differed from the learned iteration (differed) and the event one
  // iteration earlier at its place (mismatched), for the owner's log of a relearn or a
  // tolerated difference.
  const Event& mismatched() const { return mismatched_; }
  const Event& differed() const { return differed_; }
  bool following() const { return plan_ != nullptr; }
  std::uint32_t period() const { return locked_ ? static_cast<std::uint32_t>(pattern_.size()) : 0; }
  std::uint32_t position() const { return pos_; }
  bool at_boundary() const { return locked_ && (pos_ == 0 || pos_ == pattern_.size()); }
  std::uint64_t tick() const { return stats_.events; }  // events fed: the clock victims age by
  std::uint64_t iteration() const { return stats_.iterations; }
  std::uint64_t live_bytes() const { return live_bytes_; }  // allocated now, by the events fed
  const std::shared_ptr<const plan::SegmentPlan>& plan() const { return plan_; }
  const ControllerStats& stats() const { return stats_; }
  bool awaits(std::uint64_t id) const { return awaited_.count(id) != 0; }

 private:
  struct Stored {
    Stored() = default;
    Stored(const Event& ev, std::uint64_t live) : e(ev), live_after(live) {}
    Event e;                       // ids_off indexes ids_
    std::uint64_t live_after = 0;  // bytes live after it
  };

  void append(const Event& e, std::span<const std::uint64_t> ids);
  void try_lock(Step& st);
  void lock_at(std::size_t b, std::size_t p);
  // Locked: whether `e` takes the learned iteration's next place (false: an extra event);
  // may end the iteration (boundary), skip places or return to Learning.
  bool match(const Event& e, Step& st, std::vector<Command>& out);
  struct Held {  // an event that differed, until the next tells what it was
    bool valid = false;
    std::uint64_t key = 0, form = 0;
    Event e;         // it
    Event expected;  // the event one iteration earlier at its place (for the log)
  };
  void hold(const Event& e, std::uint64_t k);
  bool resolve(const Event& e, std::uint64_t k, Step& st, std::vector<Command>& out);
  enum class Cost : std::uint8_t { Substituted, Skipped, Extra };
  bool charge(Cost kind, std::uint32_t n, Step& st);
  void forget_differences();  // of the running iteration
  // The running iteration's places moved against the learned one's (skips; extras, which a
  // rebase makes places): its plan's places name other tensors after a rebase.
  bool renumbered_places() const { return skipped_ + extras_ > 0; }
  void take_place(const Held& h, Step& st, std::vector<Command>& out);
  bool at_place(const Event& e, std::uint64_t k, Step& st);
  Event expected_here() const;
  std::uint32_t tolerance(Cost kind) const;
  void set_pattern(std::size_t b, std::size_t p);  // the learned iteration := history [b, b + p)
  void rebase(std::size_t b, std::size_t len);
  bool talks_to_host(std::size_t from, std::size_t to) const;  // a copy or a sync in history [from, to)
  bool end_iteration(Step& st);  // boundary(), or learning again (a longer iteration found)
  void boundary(Step& st);
  void follow(std::vector<Command>& out);
  void relearn(Step& st);
  void request_from(std::size_t b);  // history index of the iteration's first event
  void trim_history(std::size_t keep_from);
  std::vector<std::uint64_t> allocations_in(std::size_t from, std::size_t to) const;
  std::uint64_t peak_in(std::size_t from, std::size_t to) const;  // most bytes live after any of them
  // History [b, b + len) is the same events as the len before it (by key()).
  bool repeats_previous(std::size_t b, std::size_t len) const;
  // History entry i as the pattern compares it (its form when learned by form).
  std::uint64_t key(std::size_t i) const { return by_form_ ? forms_[i] : sigs_[i]; }

  ControllerOptions opt_;
  ControllerStats stats_;
  // history: the last events (at least the last two iterations'), their ids in ids_
  std::vector<Stored> hist_;
  std::vector<std::uint64_t> ids_;
  std::vector<std::uint64_t> sigs_;   // hist_'s signatures alone, for find_period (no copy per try)
  std::vector<std::uint64_t> forms_;  // and their forms (Event::form, else the signature)
  std::size_t next_try_ = 0;
  FlatMap<std::uint64_t> live_;  // id -> bytes (an id of ~0 is not counted)
  std::uint64_t live_bytes_ = 0;
  // the learned iteration
  bool locked_ = false;
  bool by_form_ = false;                // pattern_ holds forms (else signatures)
  std::uint64_t learning_events_ = 0;   // events fed since learning (re)started
  std::vector<std::uint64_t> pattern_;
  std::vector<std::uint64_t> pattern_forms_;  // its forms, for a substitution by size
  std::vector<std::uint8_t> pattern_ops_;     // its ops, for the allocations of skipped places
  bool talks_to_host_ = false;                // it holds a copy or a sync: differences are tolerated
  std::uint32_t pos_ = 0;
  std::uint32_t iter_events_ = 0;    // events of the running iteration in the history (its places and extras)
  std::uint32_t substituted_ = 0, skipped_ = 0, extras_ = 0;  // of the running iteration, tolerated
  std::uint32_t postponed_ = 0;  // boundaries of iterations that differed where a due request waited
  std::uint64_t longer_search_gap_ = 0, next_longer_search_ = 0;  // end_iteration's backoff (iterations)
  std::uint32_t carried_ = 0;  // at a boundary: events last in the history that are the next iteration's
  Held held_;
  std::vector<std::uint64_t> cur_locals_, prev_locals_;
  // plans
  std::shared_ptr<const plan::SegmentPlan> plan_, ready_, last_;
  std::size_t next_ = 0;
  std::optional<PlanRequest> request_;
  std::uint64_t serial_ = 0, pending_ = 0;  // pending: the serial awaiting an answer (0: none)
  std::uint64_t answered_ = 0;              // the last request answered: a second answer refines it
  std::uint64_t requested_peak_ = 0;        // learned by form: the most peak_in of an iteration requested
  bool late_since_plan_ = false, invalidated_ = false, failed_ = false;
  bool for_late_only_ = false;  // the pending request was made for late swap-ins alone
  Event mismatched_, differed_;  // see mismatched()
  std::unordered_map<std::uint64_t, plan::LateArrival> awaited_;  // id -> its place and access (late_s 0)
  std::vector<plan::LateArrival> feedback_;                       // accumulated while the iteration holds
};

}  // namespace capuchin::policy
