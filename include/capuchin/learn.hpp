// Learning a training job's access pattern from its event stream alone: where iterations
// begin (the launch-signature sequence repeats with a period; host syncs place the cut),
// and which tensor of one iteration is which tensor of the next (its place in the
// iteration: the event that allocates it, with its size and producer).
//
// Contract: works on any valid trace; `iter` markers, if present, are ignored (tests compare
// against them). Nothing throws. A pattern that stops matching is reported, never guessed.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "capuchin/trace_model.hpp"

namespace capuchin::learn {

// A kernel's launch signature: its name and the sizes of what it reads and writes.
std::uint64_t kernel_signature(const trace::Trace& t, std::uint32_t event);
// Any event's signature: the op in the top byte, the rest (kernel signature, allocation
// size, copy size and direction) hashed into the low 56 bits.
std::uint64_t event_signature(const trace::Trace& t, std::uint32_t event);
// Its form (policy::Event::form): the signature without sizes (the op; a kernel's name and
// how many tensors it touches; a copy's direction), as the executor forms its events'.
std::uint64_t event_form(const trace::Trace& t, std::uint32_t event);

// The scheme both the trace's signatures and the executor's (which hashes what a live job
// shows: function addresses, sizes) follow. `op` owns the top byte and `v` is spread over the
// low 56 bits by splitmix64's finaliser, so no value can make one op's signature another's.
inline std::uint64_t op_signature(trace::Op op, std::uint64_t v) {
  v = (v ^ (v >> 30)) * 0xbf58476d1ce4e5b9ull;
  v = (v ^ (v >> 27)) * 0x94d049bb133111ebull;
  v ^= v >> 31;
  return static_cast<std::uint64_t>(op) << 56 | (v & ((std::uint64_t{1} << 56) - 1));
}
// Folds v into a running hash h (boost::hash_combine's mixing step).
inline std::uint64_t mix_signature(std::uint64_t h, std::uint64_t v) { return h ^ (v + 0x9e3779b97f4a7c15ull + (h << 6) + (h >> 2)); }
// A form (event_form, policy::Event::form) made of v: salted, so that it is never 0 (which
// means "no form") and never an op's signature of the same value.
inline std::uint64_t form_signature(trace::Op op, std::uint64_t v) { return op_signature(op, mix_signature(0x666f726d, v)); }

struct IterationSplit {
  bool found = false;
  std::uint32_t period_kernels = 0;        // kernels per steady iteration
  std::uint32_t repeats = 0;               // steady iterations seen (>= 2 when found)
  std::vector<trace::Iteration> iterations;  // event ranges, n = 1, 2, ...; the first may be a
                                           // longer warm-up / first step
  std::string reason;                      // why not found
};

// Finds iteration boundaries in t.events (ignoring `iter` events).
IterationSplit detect_iterations(const trace::Trace& t);

// A trace without `iter` markers (what `capuchin run --record` writes: the interposer cannot see
// a training loop) with markers inserted where detect_iterations finds iterations, so that
// statistics and the simulator count per iteration; `found` (the number of iterations) is set.
// nullopt when the trace has markers, or the learner finds fewer than two iterations.
std::optional<trace::Trace> with_learned_iterations(const trace::Trace& t, std::size_t* found = nullptr);

// The period of an event-signature sequence as it stands so far (for learning online, one
// event at a time): the shift P whose repeat, counted back from the sequence's end, is
// longest, provided the last P signatures repeat the P before them in full (repeat >= P) and
// P >= min_period. Ties go to the smaller P. O(n) time and memory. found = false when the
// sequence does not (yet) end in two full periods.
struct Period {
  bool found = false;
  std::uint32_t period = 0;  // signatures per iteration
  std::uint32_t repeat = 0;  // how far back the sequence matches itself shifted by `period`
};
Period find_period(const std::vector<std::uint64_t>& sigs, std::uint32_t min_period);

// One iteration as a template the next iterations are matched against.
struct PatternEvent {
  trace::Op op;
  std::uint32_t trace_event;  // where it was observed
  std::uint64_t signature;    // op + kernel signature or alloc size: what must match
};

struct Pattern {
  std::uint32_t begin = 0, end = 0;   // the observed iteration's event range
  std::vector<PatternEvent> events;   // iter events skipped
  // Local tensors: allocated inside the iteration, by allocation order; `carried` tensors:
  // allocated before it (parameters, optimizer state), known by their trace index.
  std::vector<std::uint32_t> local_tensors;  // trace tensor index of the k-th local tensor
};
Pattern make_pattern(const trace::Trace& t, const trace::Iteration& it);

// Follows a later iteration against a pattern, event by event.
class PatternMatcher {
 public:
  // allow_leading_skip: the new iteration may start further into the pattern (the pattern's
  // opening events were one-time set-up); the first event aligns to the first match.
  explicit PatternMatcher(const Pattern& p, bool allow_leading_skip = false)
      : p_(&p), map_(p.local_tensors.size(), trace::kNone), skip_(allow_leading_skip) {}
  // Feeds the next event of the new iteration; false when it differs from the pattern (the
  // pattern changed: relearn), true while it matches.
  bool feed(const trace::Trace& t, std::uint32_t event);
  std::uint32_t position() const { return pos_; }  // pattern events matched so far
  bool complete() const { return pos_ == p_->events.size(); }
  bool diverged() const { return diverged_; }
  // The new iteration's tensor standing for the pattern's k-th local tensor (kNone if not
  // yet allocated).
  std::uint32_t local(std::uint32_t k) const { return map_[k]; }

 private:
  const Pattern* p_;
  std::vector<std::uint32_t> map_;
  std::uint32_t pos_ = 0, next_local_ = 0;
  bool diverged_ = false;
  bool skip_ = false;
};

// Tensor identities of iteration `b` matched to those of iteration `a` (same place in the
// iteration). Returns, per local tensor of `a`, the trace tensor of `b`, or an empty vector
// with `mismatch_event` set when the iterations differ.
struct IdentityMap {
  std::vector<std::uint32_t> b_of_a;
  std::uint32_t mismatch_event = trace::kNone;  // first event of `b` that differs
};
IdentityMap match_iterations(const trace::Trace& t, const trace::Iteration& a, const trace::Iteration& b);

}  // namespace capuchin::learn
