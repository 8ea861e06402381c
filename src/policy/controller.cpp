// The capuchin policy's state machine (see include/capuchin/controller.hpp): learning the
// iteration from the event-signature period, following plans at iteration boundaries through
// the few differences a real job's iterations have, feedback from late swap-ins.
#include "capuchin/controller.hpp"

#include <algorithm>
#include <cstdint>
#include <vector>

#include "capuchin/learn.hpp"
#include "capuchin/trace.hpp"

namespace capuchin::policy {

using trace::Op;

namespace {

bool is(const Event& e, Op op) { return e.op == static_cast<std::uint8_t>(op); }
std::uint64_t form_of(const Event& e) { return e.form != 0 ? e.form : e.sig; }
constexpr std::uint64_t kAbsent = ~std::uint64_t{0};  // a skipped place's allocation

std::uint32_t id_count(const Event& e) { return is(e, Op::Kernel) ? e.nreads + e.nwrites : 0; }

// The line `ahead` elements past v's end (plus `offset` bytes), asked for writing. An address,
// not a pointer into v: it may lie past the allocation (a prefetch never faults).
template <class T>
void prefetch_for_write(const std::vector<T>& v, std::size_t ahead, std::size_t offset = 0) {
  const std::uintptr_t at = reinterpret_cast<std::uintptr_t>(v.data()) + (v.size() + ahead) * sizeof(T) + offset;
  __builtin_prefetch(reinterpret_cast<const void*>(at), 1, 3);
}

bool same_place(const plan::LateArrival& a, const plan::LateArrival& b) {
  return a.local == b.local && a.prev == b.prev && a.k == b.k && a.id == b.id && a.access == b.access;
}

}  // namespace

Controller::Controller(ControllerOptions o) : opt_(o) {
  opt_.min_period = std::max<std::uint32_t>(opt_.min_period, 1);
  opt_.max_history = std::max<std::uint32_t>(opt_.max_history, 4 * opt_.min_period);
  // The history's final size at once: growing it would copy it (and fault fresh pages) on
  // the executor's hook path; untouched capacity costs address space only.
  hist_.reserve(opt_.max_history + 1);
  sigs_.reserve(opt_.max_history + 1);
  forms_.reserve(opt_.max_history + 1);
  if (opt_.prefault) {
    // Value-initialised once and cleared: the capacity stays, its pages now present. ids_
    // holds a kernel's touched tensors: a few per event on average, more is grown into.
    hist_.resize(hist_.capacity());
    hist_.clear();
    sigs_.resize(sigs_.capacity());
    sigs_.clear();
    forms_.resize(forms_.capacity());
    forms_.clear();
    ids_.resize(4 * static_cast<std::size_t>(opt_.max_history));
    ids_.clear();
  }
}

Step Controller::on_event(const Event& e, std::span<const std::uint64_t> ids, std::vector<Command>& out) {
  Step st;
  ++stats_.events;
  // The common case inline: the next place, exactly (match() for the rest).
  const bool place = locked_ && ((pos_ < pattern_.size() && !held_.valid && !by_form_ && pattern_[pos_] == e.sig) ||
                                 match(e, st, out));
  append(e, ids);
  if (locked_) {
    ++iter_events_;
    if (place) {
      if (is(e, Op::Alloc)) cur_locals_.push_back(e.id);
      ++pos_;
      follow(out);
    }
  }
  // Locked, every event is checked against the pattern above, so the history since the lock
  // is periodic with it but for the differences tolerated: a try would find the same period
  // (or a divisor that the live-bytes rule rejected before and rejects again), so tries are
  // made while learning, and for a longer period at the end of an iteration with extra events
  // or skipped places (end_iteration). (They used to confirm the lock every half history: O(history) each, a
  // tenth of the event path.)
  if (!locked_) ++learning_events_;
  if (!locked_ && (hist_.size() >= next_try_ || is(e, Op::Sync))) try_lock(st);
  // Half the history stays, even while locked: a lock on a loop inside the iteration ends at
  // its first mismatch (or, where differences are tolerated, once the whole iteration repeats:
  // end_iteration), and the whole iteration is found only in a history holding two of it
  // (trimming to the locked period's last repeats would leave it only the loop to find).
  const std::size_t keep = std::max<std::size_t>(opt_.max_history / 2, 2 * pattern_.size() + iter_events_);
  if (hist_.size() > opt_.max_history && hist_.size() > keep) trim_history(hist_.size() - keep);
  return st;
}

// Locked. An event that differs is held until the next one tells what it was (resolve).
bool Controller::match(const Event& e, Step& st, std::vector<Command>& out) {
  if (pos_ == pattern_.size() && !end_iteration(st)) return false;
  const std::uint64_t k = by_form_ ? form_of(e) : e.sig;
  if (held_.valid) return resolve(e, k, st, out);
  if (pattern_[pos_] == k) {
    if (by_form_ && hist_.size() >= pattern_.size() && hist_[hist_.size() - pattern_.size()].e.sig != e.sig) ++stats_.resized;
    return true;
  }
  if (!talks_to_host_) {
    differed_ = e;
    mismatched_ = expected_here();
    relearn(st);
    return false;
  }
  hold(e, k);
  return false;
}

std::uint32_t Controller::tolerance(Cost kind) const {
  if (!talks_to_host_) return 0;
  const std::uint32_t p = static_cast<std::uint32_t>(pattern_.size());
  if (kind == Cost::Extra) return std::max(opt_.min_extra, p / std::max<std::uint32_t>(opt_.extra_share, 1));
  return std::max(opt_.min_tolerated, p / std::max<std::uint32_t>(opt_.tolerated_share, 1));
}

// The event one iteration earlier at this place (the previous iteration's, when it had no
// extras), for the log of a difference.
Event Controller::expected_here() const {
  const std::size_t p = pattern_.size(), start = hist_.size() - iter_events_;
  return start + pos_ >= p ? hist_[start + pos_ - p].e : Event{};
}

void Controller::hold(const Event& e, std::uint64_t k) { held_ = Held{true, k, form_of(e), e, expected_here()}; }

// The held event h did not take place pos_; `e` (key k) tells what it was, the first that
// fits: the j places from pos_ skipped (h is place pos_ + j, e the next: both exactly),
// substituted (h has pos_'s form, e is the next place exactly or by form: a resized tensor's
// kernels differ too), or extra (e takes pos_). Else h was extra and e is held in its turn.
// Each costs its places (substituted and extra: one); past the tolerance, learning again.
bool Controller::resolve(const Event& e, std::uint64_t k, Step& st, std::vector<Command>& out) {
  constexpr std::uint32_t kLookAhead = 8;  // places a skip may cover
  const Held h = held_;
  held_.valid = false;
  differed_ = h.e;  // what every charge below is about (the owner logs it)
  mismatched_ = h.expected;
  const std::size_t p = pattern_.size();
  auto expect = [&](std::size_t i) { return pattern_[i % p]; };  // i may run into the next iteration
  for (std::uint32_t j = 1; j <= kLookAhead && j < p && pos_ + j <= p; ++j) {
    if (expect(pos_ + j) != h.key || expect(pos_ + j + 1) != k) continue;
    // More places than tolerated: rather extra events that happen to look like later ones (a
    // logging step's read-back and sync, like the loss read's a few places on).
    if (substituted_ + skipped_ + j > tolerance(Cost::Skipped)) break;
    if (!charge(Cost::Skipped, j, st)) return false;
    // The places between did not come: their allocations are absent (later places keep their
    // numbers), their decisions are issued now (prefetches for later accesses still serve).
    for (std::uint32_t i = 0; i < j; ++i) {
      if (pattern_ops_[pos_] == static_cast<std::uint8_t>(Op::Alloc)) cur_locals_.push_back(kAbsent);
      ++pos_;
      follow(out);
    }
    take_place(h, st, out);
    return at_place(e, k, st);
  }
  if (!by_form_ && pattern_forms_[pos_] == h.form && (expect(pos_ + 1) == k || pattern_forms_[(pos_ + 1) % p] == form_of(e))) {
    if (!charge(Cost::Substituted, 1, st)) return false;
    take_place(h, st, out);
    return at_place(e, k, st);
  }
  if (pattern_[pos_] == k) return charge(Cost::Extra, 1, st) && at_place(e, k, st);
  if (!charge(Cost::Extra, 1, st)) return false;
  hold(e, k);
  return false;
}

// Counts n differences of the running iteration: false (learning again) past the tolerance of
// their kind (places substituted or skipped share one).
bool Controller::charge(Cost kind, std::uint32_t n, Step& st) {
  const std::uint32_t used = kind == Cost::Extra ? extras_ : substituted_ + skipped_;
  if (used + n > tolerance(kind)) {
    relearn(st);
    return false;
  }
  (kind == Cost::Extra ? extras_ : kind == Cost::Skipped ? skipped_ : substituted_) += n;
  stats_.tolerated += n;
  st.tolerated = true;
  return true;
}

// The held event takes the next place, late by one event (the iteration ends first when it was
// complete: the held event came after its end, and belongs to the next one).
void Controller::take_place(const Held& h, Step& st, std::vector<Command>& out) {
  if (pos_ == pattern_.size()) {
    --iter_events_;  // the held event, last in the history, is the next iteration's
    carried_ = 1;
    const bool locked = end_iteration(st);
    carried_ = 0;
    if (!locked) return;
    iter_events_ = 1;
    // A rebase may have made an iteration that opens otherwise the learned one: then extra.
    if (pattern_[0] != h.key) {
      charge(Cost::Extra, 1, st);
      return;
    }
  }
  if (is(h.e, Op::Alloc)) cur_locals_.push_back(h.e.id);
  ++pos_;
  follow(out);
}

// Whether the event of key k takes the next place (the caller takes it), once an iteration
// that is complete has ended; else it is held.
bool Controller::at_place(const Event& e, std::uint64_t k, Step& st) {
  if (!locked_) return false;  // learning again (a place held before was one too many)
  if (pos_ == pattern_.size() && !end_iteration(st)) return false;
  if (pattern_[pos_] == k) return true;
  // Not this place either (the next of a resized tensor's events, or a rebase made another
  // iteration the learned one): held until the next event tells.
  hold(e, k);
  return false;
}

void Controller::append(const Event& e, std::span<const std::uint64_t> ids) {
  // The history is megabytes, written once per event and read rarely: the lines it writes next
  // are long out of the cache, and each write waited for its line (most of this function's
  // time under pressure). Asked for a few events ahead instead (a prefetch past the reserved
  // capacity does not fault).
  constexpr std::size_t kAhead = 8;
  prefetch_for_write(hist_, kAhead);
  prefetch_for_write(hist_, kAhead, 64);  // a Stored is more than a line
  prefetch_for_write(sigs_, kAhead);
  prefetch_for_write(forms_, kAhead);
  prefetch_for_write(ids_, 4 * kAhead);
  const auto ids_off = static_cast<std::uint32_t>(ids_.size());
  const std::size_t n = std::min<std::size_t>(id_count(e), ids.size());
  ids_.insert(ids_.end(), ids.begin(), ids.begin() + static_cast<std::ptrdiff_t>(n));
  std::uint64_t bytes = e.bytes;
  if (is(e, Op::Alloc)) {
    if (live_.try_emplace(e.id, e.bytes).second) live_bytes_ += e.bytes;
  } else if (is(e, Op::Free)) {
    if (std::uint64_t freed = 0; live_.erase(e.id, &freed)) {
      bytes = freed;  // kept so the live set of an earlier moment can be rebuilt
      live_bytes_ -= freed;
    }
  }
  // Written in place from the caller's event, then two fields patched: a record built on
  // the stack and copied made the copy's wide loads wait on its fields' narrow stores (store
  // forwarding; perf put about 40% of this function's samples there).
  Stored& s = hist_.emplace_back(e, live_bytes_);
  s.e.ids_off = ids_off;
  s.e.bytes = bytes;
  sigs_.push_back(e.sig);
  forms_.push_back(form_of(e));
}

// Is the history periodic now (learning only)? Lock on the period and plan the last complete
// iteration. A lock on a loop inside the iteration (a model's identical layers repeat before
// the iteration does) ends at the first event after the loop, which does not match it: the
// longer repeat is learned then.
void Controller::try_lock(Step& st) {
  const std::size_t n = hist_.size();
  next_try_ = n + std::max<std::size_t>(n / 8, opt_.min_period);
  learn::Period per = learn::find_period(sigs_, opt_.min_period);
  // No period in signatures: one in forms, seen three times since learning began (a job whose
  // every iteration has other sizes), so that signatures had an iteration more to repeat in
  // (a job whose sizes changed once relearns them by signature), repeating over at least half
  // the history, and holding a copy or a host sync (the batch's upload, the loss read): a loop
  // whose steps differ in size only (a model's stages, an optimizer's per-parameter updates)
  // repeats in forms while the iteration is still seen for the first time (resnet18's 8-event
  // stage loops were locked on without these).
  bool by_form = false;
  if (!per.found) {
    per = learn::find_period(forms_, opt_.min_period);
    if (!per.found || learning_events_ < 3 * static_cast<std::uint64_t>(per.period) || 2 * std::size_t{per.repeat} < n) return;
    if (!talks_to_host(n - per.period, n)) return;
    by_form = true;
  }
  by_form_ = by_form;  // key() compares by it from here (relearn() clears it)
  const std::size_t p = per.period;
  // The boundary depends on the iteration's content only, not on where it was detected:
  // fewest live bytes, then right after a sync, then right before an allocation, then the
  // smallest signature of the first event.
  auto better = [&](std::size_t q, std::size_t best) {
    const Stored &qa = hist_[q - 1], &ba = hist_[best - 1];
    if (qa.live_after != ba.live_after) return qa.live_after < ba.live_after;
    const bool qs = is(qa.e, Op::Sync), bs = is(ba.e, Op::Sync);
    if (qs != bs) return qs;
    const bool qa_alloc = is(hist_[q].e, Op::Alloc), ba_alloc = is(hist_[best].e, Op::Alloc);
    if (qa_alloc != ba_alloc) return qa_alloc;
    return key(q) < key(best);
  };
  std::size_t best = n - p;
  for (std::size_t q = n - p + 1; q < n; ++q)
    if (better(q, best)) best = q;
  const std::size_t b = best == n - p ? best : best - p;  // the last complete iteration: [b, b + p)
  // An iteration leaves as many bytes live as it found (within 1%: a job may keep a few small
  // tensors per iteration); a loop over layers does not (forward keeps activations, backward
  // frees them), which tells such a loop from the iteration when their signatures repeat alike.
  if (b > 0) {
    const std::uint64_t before = hist_[b - 1].live_after, after = hist_[b + p - 1].live_after;
    const std::uint64_t diff = before > after ? before - after : after - before;
    if (diff > std::max<std::uint64_t>(before / 100, 64 * 1024)) {
      by_form_ = false;
      return;
    }
  }
  lock_at(b, p);
  if (by_form_) ++stats_.form_locks;
  st.locked = true;
}

void Controller::lock_at(std::size_t b, std::size_t p) {
  const std::size_t n = hist_.size();
  locked_ = true;
  ++stats_.locks;
  set_pattern(b, p);
  pos_ = static_cast<std::uint32_t>(n - (b + p));
  iter_events_ = pos_;
  longer_search_gap_ = 0;
  next_longer_search_ = 0;
  forget_differences();
  prev_locals_ = allocations_in(b, b + p);
  cur_locals_ = allocations_in(b + p, n);
  failed_ = false;
  // A plan for this very iteration (it changed and came back): followed again from the next
  // boundary; a new one is asked for only when the circumstances changed. (A plan keeps its
  // iteration's signatures: one learned by form asks again.)
  if (!by_form_ && last_ && last_->sigs == pattern_) ready_ = last_;
  if (!ready_ || invalidated_) {
    invalidated_ = false;
    for_late_only_ = false;
    request_from(b);
  }
}

void Controller::set_pattern(std::size_t b, std::size_t p) {
  pattern_.clear();
  pattern_forms_.clear();
  pattern_ops_.clear();
  for (std::size_t i = b; i < b + p; ++i) {
    pattern_.push_back(key(i));
    pattern_forms_.push_back(forms_[i]);
    pattern_ops_.push_back(hist_[i].e.op);
  }
  talks_to_host_ = talks_to_host(b, b + p);
}

bool Controller::talks_to_host(std::size_t from, std::size_t to) const {
  for (std::size_t i = from; i < to; ++i)
    if (is(hist_[i].e, Op::Copy) || is(hist_[i].e, Op::Sync)) return true;
  return false;
}

// The iteration ends. One that differed may show that the learned iteration is a loop inside a
// longer one that now repeats in the history (gradient accumulation: micro-batches, then an
// optimizer step taken for extra events; or a logging step every few iterations): the longer
// one is learned instead (false: learning again).
// The search is O(history) and allocates, on the event path: after one that finds nothing, the
// next waits twice as many iterations, up to a quarter of the history's turnover (a job whose
// every iteration has extras pays it a few times per history; a longer iteration is still
// found within about twice the iterations it needs to repeat).
bool Controller::end_iteration(Step& st) {
  // Only extras or skips can be a longer iteration's events (substitutions are sizes).
  const bool renumbered = renumbered_places();
  boundary(st);
  if (!renumbered || stats_.iterations < next_longer_search_) return true;
  ++stats_.longer_searches;
  const learn::Period longer = learn::find_period(by_form_ ? forms_ : sigs_, opt_.min_period);
  if (!longer.found || longer.period <= pattern_.size()) {
    // At most about a quarter of the history's turnover apart: a longer iteration that begins
    // late (a logging step added after many noisy iterations) is still found while it is there.
    const std::uint64_t cap = std::max<std::uint64_t>(1, opt_.max_history / (4 * std::max<std::size_t>(pattern_.size(), 1)));
    longer_search_gap_ = std::min(std::max<std::uint64_t>(2 * longer_search_gap_, 1), cap);
    next_longer_search_ = stats_.iterations + longer_search_gap_;
    return true;
  }
  ++stats_.longer_found;
  st.longer = true;
  relearn(st);
  return false;
}

void Controller::boundary(Step& st) {
  st.boundary = true;
  ++stats_.iterations;
  if (plan_) ++stats_.iterations_followed;
  const std::size_t len = iter_events_;  // the iteration that just ended: [b, b + len)
  const std::size_t b = hist_.size() - carried_ - len;
  const bool differed = substituted_ + skipped_ + extras_ > 0;
  if (pending_ == 0) {
    // Learned by form, iterations differ in size: the plan is made for the largest seen, so a
    // larger iteration than the last request's asks again (a few times: each is a new record).
    // (By 5%: a job whose sizes creep up would otherwise ask at every boundary.) Lateness is
    // not fed back by form: a plan made from a smaller iteration would replace it.
    const std::uint64_t peak = by_form_ ? peak_in(b, b + len) : 0;
    const bool larger = by_form_ && peak > requested_peak_ + requested_peak_ / 20;
    const bool late = late_since_plan_ && !by_form_;
    const bool due = (!plan_ && !ready_ && !failed_) || invalidated_ || larger;
    // An iteration that differed in a few places asks when it repeats the one before exactly
    // (the job changed a little for good); a plan due for another reason than lateness (none
    // yet, a new budget, a larger iteration) waits for an iteration that did not differ, up to
    // kPostponed boundaries (a logging step must not become the learned iteration). It then
    // becomes the learned iteration (rebase), so that the answer (made from it, with its
    // signatures) is adopted. Lateness alone waits for an iteration that did not differ.
    constexpr std::uint32_t kPostponed = 3;
    const bool rebased = differed && len >= opt_.min_period && (repeats_previous(b, len) || (due && ++postponed_ > kPostponed));
    if (rebased) rebase(b, len);
    const bool want = differed ? rebased : due || late;
    if (want) {
      postponed_ = 0;
      // Only a request made for late swap-ins alone may be refused in favour of the plan
      // followed (offer): an invalidated plan (a new budget, recomputation switched) must go, and
      // so must a plan for the iteration before a rebase.
      for_late_only_ = plan_ != nullptr && late && !invalidated_ && !larger && !rebased;
      late_since_plan_ = false;
      invalidated_ = false;
      failed_ = false;
      request_from(b);
    }
  }
  if (ready_) {
    plan_ = std::move(ready_);
    ready_.reset();
    st.adopted = true;
    ++stats_.plans_adopted;
  }
  next_ = 0;
  awaited_.clear();
  prev_locals_.swap(cur_locals_);
  cur_locals_.clear();
  pos_ = 0;
  iter_events_ = 0;
  forget_differences();
}

void Controller::forget_differences() { substituted_ = skipped_ = extras_ = 0; }

// History [b, b + len), an iteration that differed from the learned one, becomes it.
void Controller::rebase(std::size_t b, std::size_t len) {
  const bool renumbered = renumbered_places();
  set_pattern(b, len);
  cur_locals_ = allocations_in(b, b + len);  // its places now, extras included
  ++stats_.rebased;
  // A plan for the old iteration names other places once extras or skips renumbered them
  // (substitutions keep them): not followed, nor adopted when it arrives now.
  if (renumbered) {
    plan_.reset();
    feedback_.clear();  // its places are the old numbering's
  }
  if (ready_ && !by_form_ && ready_->sigs != pattern_) ready_.reset();
  longer_search_gap_ = 0;  // a new learned iteration: a longer one is looked for again at once
  next_longer_search_ = 0;
}

void Controller::follow(std::vector<Command>& out) {
  if (!plan_) return;
  const std::uint32_t at = pos_ - 1;
  const auto& ds = plan_->decisions;
  while (next_ < ds.size() && ds[next_].at <= at) {
    const plan::SegmentDecision& d = ds[next_++];
    std::uint64_t id = d.id;
    if (d.local) {
      const auto& places = d.prev ? prev_locals_ : cur_locals_;
      if (d.k >= places.size()) continue;  // not allocated (yet): nothing to act on
      id = places[d.k];
      if (id == kAbsent) continue;  // its place was skipped: nothing to act on
    }
    const plan::LateArrival place{d.local, d.prev, d.k, d.id, d.access, 0.0};
    out.push_back(Command{d.act, id, d.reason, d.cost_s, d.at, d.access, place});
    if (d.act == plan::Act::Prefetch) awaited_[id] = place;
  }
}

void Controller::relearn(Step& st) {
  st.relearn = true;
  ++stats_.relearns;
  locked_ = false;
  by_form_ = false;
  learning_events_ = 0;
  requested_peak_ = 0;
  pattern_.clear();
  pattern_forms_.clear();
  pattern_ops_.clear();
  talks_to_host_ = false;
  held_ = Held{};
  pos_ = 0;
  iter_events_ = 0;
  forget_differences();
  postponed_ = 0;
  plan_.reset();
  ready_.reset();
  next_ = 0;
  awaited_.clear();
  feedback_.clear();
  cur_locals_.clear();
  prev_locals_.clear();
  request_.reset();
  pending_ = 0;
  answered_ = 0;
  late_since_plan_ = false;
  for_late_only_ = false;
  failed_ = false;
  next_try_ = hist_.size() + opt_.min_period;
}

void Controller::note_late(std::uint64_t id, double late_s) {
  auto it = awaited_.find(id);
  if (it == awaited_.end()) return;
  const plan::LateArrival a = it->second;
  awaited_.erase(it);
  note_late(a, late_s);
}

void Controller::note_late(const plan::LateArrival& place, double late_s) {
  if (!locked_ || !plan_ || late_s <= 0) return;
  plan::LateArrival a = place;
  ++stats_.late;
  late_since_plan_ = true;
  for (plan::LateArrival& f : feedback_)
    if (same_place(f, a)) {
      f.late_s += late_s;
      return;
    }
  a.late_s = late_s;
  feedback_.push_back(a);
}

std::optional<PlanRequest> Controller::take_request() {
  std::optional<PlanRequest> r = std::move(request_);
  request_.reset();
  return r;
}

void Controller::offer(std::uint64_t serial, std::shared_ptr<const plan::SegmentPlan> p) {
  const bool answer = serial != 0 && serial == pending_;
  const bool refinement = serial != 0 && serial == answered_ && !answer;
  if (!answer && !refinement) {
    if (p) last_ = std::move(p);
    return;
  }
  if (answer) {
    pending_ = 0;
    answered_ = serial;
    if (!p) {
      failed_ = true;  // asked again only when something changes (lateness, budget, a new iteration)
      return;
    }
  }
  if (!p) return;  // a refinement that failed: the first answer stands
  // A plan asked for because swap-ins of the followed one were late replaces it only when the
  // simulator replays it faster (same budget; a plan not replayed, an anytime planner's first
  // answer, never replaces a replayed one): each is the fastest of its own candidates, and the
  // lateness fed back makes the next request's candidates different, not better (that churn
  // cost resnet18 on h200 at 0.5x about 5% per iteration).
  if (for_late_only_ && plan_ && p->budget == plan_->budget && plan_->replay_s > 0 &&
      !(p->replay_s > 0 && p->replay_s < plan_->replay_s))
    return;
  last_ = p;
  // An answer to a request of this lock (relearn() forgets the serials): its signatures are the
  // pattern's, or, learned by form, those of the iteration it was made from.
  if (locked_ && (by_form_ || p->sigs == pattern_)) ready_ = std::move(p);
}

bool Controller::repeats_previous(std::size_t b, std::size_t len) const {
  if (b < len) return false;
  for (std::size_t i = 0; i < len; ++i)
    if (key(b - len + i) != key(b + i)) return false;
  return true;
}

std::uint64_t Controller::peak_in(std::size_t from, std::size_t to) const {
  std::uint64_t peak = 0;
  for (std::size_t i = from; i < to && i < hist_.size(); ++i) peak = std::max(peak, hist_[i].live_after);
  return peak;
}

std::vector<std::uint64_t> Controller::allocations_in(std::size_t from, std::size_t to) const {
  std::vector<std::uint64_t> out;
  for (std::size_t i = from; i < to && i < hist_.size(); ++i)
    if (is(hist_[i].e, Op::Alloc)) out.push_back(hist_[i].e.id);
  return out;
}

// The iteration [b, b + p) of the history as a SegmentJob: its events, the tensors live at its
// start, the previous iteration's allocations (when that one was the same iteration too).
void Controller::request_from(std::size_t b) {
  const std::size_t p = pattern_.size(), n = hist_.size();
  PlanRequest r;
  r.serial = ++serial_;
  pending_ = r.serial;
  answered_ = 0;  // a refinement of an earlier request comes too late now
  ++stats_.requests;
  plan::SegmentJob& j = r.job;
  j.segment = stats_.iterations;
  j.events.reserve(p);
  for (std::size_t i = b; i < b + p; ++i) {
    Event e = hist_[i].e;
    const std::uint32_t k = id_count(e);
    const std::uint32_t off = e.ids_off;
    e.ids_off = static_cast<std::uint32_t>(j.ids.size());
    j.ids.insert(j.ids.end(), ids_.begin() + off, ids_.begin() + off + k);
    if (is(e, Op::Free)) e.bytes = 0;
    j.events.push_back(e);
  }
  // Live at b: today's live set with the events since b undone.
  std::unordered_map<std::uint64_t, std::uint64_t> at;
  at.reserve(live_.size());
  live_.for_each([&](std::uint64_t id, std::uint64_t bytes) { at.emplace(id, bytes); });
  for (std::size_t i = n; i-- > b;) {
    const Event& e = hist_[i].e;
    if (is(e, Op::Alloc)) at.erase(e.id);
    else if (is(e, Op::Free) && e.bytes > 0) at[e.id] = e.bytes;
  }
  j.carried.assign(at.begin(), at.end());
  std::sort(j.carried.begin(), j.carried.end());
  // The previous iteration is the same iteration only when it matched the pattern too.
  bool prev_same = b >= p;
  for (std::size_t i = 0; prev_same && i < p; ++i) prev_same = key(b - p + i) == pattern_[i];
  if (prev_same) j.prev_locals = allocations_in(b - p, b);
  j.baseline = hist_[b + p - 1].live_after;
  j.late = feedback_;
  requested_peak_ = std::max(requested_peak_, peak_in(b, b + p));  // the largest this lock planned for (read by form only)
  request_ = std::move(r);
}

void Controller::resume(std::span<const std::pair<std::uint64_t, std::uint64_t>> live) {
  Step st;
  relearn(st);
  trim_history(hist_.size());
  next_try_ = opt_.min_period;
  live_ = FlatMap<std::uint64_t>{};
  live_bytes_ = 0;
  for (const auto& [id, bytes] : live)
    if (live_.try_emplace(id, bytes).second) live_bytes_ += bytes;
}

void Controller::trim_history(std::size_t keep_from) {
  keep_from = std::min(keep_from, hist_.size());
  if (keep_from == 0) return;
  const std::uint32_t drop_ids = keep_from < hist_.size() ? hist_[keep_from].e.ids_off : static_cast<std::uint32_t>(ids_.size());
  hist_.erase(hist_.begin(), hist_.begin() + static_cast<std::ptrdiff_t>(keep_from));
  sigs_.erase(sigs_.begin(), sigs_.begin() + static_cast<std::ptrdiff_t>(keep_from));
  forms_.erase(forms_.begin(), forms_.begin() + static_cast<std::ptrdiff_t>(keep_from));
  ids_.erase(ids_.begin(), ids_.begin() + drop_ids);
  for (Stored& s : hist_) s.e.ids_off -= drop_ids;
  next_try_ = next_try_ > keep_from ? next_try_ - keep_from : 0;
}

}  // namespace capuchin::policy
