// Patterns (one observed iteration) and matching later iterations against them: a tensor of
// the new iteration is the pattern's tensor allocated at the same place, provided every
// event so far matched (same op, kernel signature, allocation size).
#include <functional>

#include "capuchin/learn.hpp"

namespace capuchin::learn {

using trace::kNone;
using trace::Op;

std::uint64_t event_signature(const trace::Trace& t, std::uint32_t ev) {
  const trace::Event& e = t.events[ev];
  switch (e.op) {
    case Op::Kernel: return op_signature(e.op, kernel_signature(t, ev));
    case Op::Alloc: return op_signature(e.op, e.bytes);
    case Op::Copy: return op_signature(e.op, e.bytes ^ (static_cast<std::uint64_t>(e.dir) << 61));
    default: return static_cast<std::uint64_t>(e.op) << 56;
  }
}

std::uint64_t event_form(const trace::Trace& t, std::uint32_t ev) {
  const trace::Event& e = t.events[ev];
  switch (e.op) {
    case Op::Kernel:
      return form_signature(e.op, mix_signature(std::hash<std::string>{}(t.names[e.name]), e.access_end - e.access_begin));
    case Op::Copy: return form_signature(e.op, static_cast<std::uint64_t>(e.dir));
    default: return form_signature(e.op, 0);
  }
}

Pattern make_pattern(const trace::Trace& t, const trace::Iteration& it) {
  Pattern p;
  p.begin = it.begin;
  p.end = it.end;
  for (std::uint32_t ev = it.begin; ev < it.end; ++ev) {
    const trace::Event& e = t.events[ev];
    if (e.op == Op::Iter) continue;
    p.events.push_back({e.op, ev, event_signature(t, ev)});
    if (e.op == Op::Alloc) p.local_tensors.push_back(e.tensor);
  }
  return p;
}

bool PatternMatcher::feed(const trace::Trace& t, std::uint32_t event) {
  const trace::Event& e = t.events[event];
  if (e.op == Op::Iter) return !diverged_;
  const std::uint64_t sig = event_signature(t, event);
  if (skip_ && pos_ == 0) {
    skip_ = false;
    while (pos_ < p_->events.size() && p_->events[pos_].signature != sig) {
      if (p_->events[pos_].op == Op::Alloc) ++next_local_;  // skipped set-up allocations stay unmapped
      ++pos_;
    }
  }
  if (diverged_ || complete() || p_->events[pos_].signature != sig || p_->events[pos_].op != e.op ||
      (e.op == Op::Alloc && next_local_ >= map_.size())) {
    diverged_ = true;
    return false;
  }
  if (e.op == Op::Alloc) map_[next_local_++] = e.tensor;
  ++pos_;
  return true;
}

IdentityMap match_iterations(const trace::Trace& t, const trace::Iteration& a, const trace::Iteration& b) {
  IdentityMap m;
  const Pattern p = make_pattern(t, a);
  PatternMatcher matcher(p);
  for (std::uint32_t ev = b.begin; ev < b.end; ++ev) {
    if (!matcher.feed(t, ev)) {
      m.mismatch_event = ev;
      return m;
    }
  }
  if (!matcher.complete()) {
    m.mismatch_event = b.end;
    return m;
  }
  for (std::uint32_t k = 0; k < p.local_tensors.size(); ++k) m.b_of_a.push_back(matcher.local(k));
  return m;
}

}  // namespace capuchin::learn
