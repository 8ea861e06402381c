// Passive victim order (see include/capuchin/victims.hpp).
#include "capuchin/victims.hpp"

#include <algorithm>

namespace capuchin::policy {

namespace {

// Each candidate's key once, not two divisions per comparison (the heap compares ~2n times).
void set_keys(std::vector<VictimCandidate>& c) {
  for (VictimCandidate& v : c) v.key = victim_key(v);
}

bool better(const VictimCandidate& a, const VictimCandidate& b) { return better_victim(a, b); }

// The heap's "less": a comes after b, so the heap's top is the best victim.
bool after(const VictimCandidate& a, const VictimCandidate& b) { return better(b, a); }

}  // namespace

void order_victims(std::vector<VictimCandidate>& c) {
  set_keys(c);
  std::sort(c.begin(), c.end(), better);
}

VictimOrder::VictimOrder(std::vector<VictimCandidate>& c) : c_(c), left_(c.size()) { set_keys(c_); }

// The best of [0, left_) goes to left_ - 1, taken: the order a sort would give, one at a time.
const VictimCandidate& VictimOrder::next() {
  const auto end = c_.begin() + static_cast<std::ptrdiff_t>(left_);
  if (scans_ < kScans) {
    ++scans_;
    auto best = scans_ == 1 && best_ != kNoBest ? c_.begin() + static_cast<std::ptrdiff_t>(best_)
                                                : std::min_element(c_.begin(), end, better);
    std::iter_swap(best, end - 1);
    if (scans_ == kScans) std::make_heap(c_.begin(), end - 1, after);  // the rest, when more are asked for
  } else {
    std::pop_heap(c_.begin(), end, after);
  }
  --left_;
  return c_[left_];
}

}  // namespace capuchin::policy
