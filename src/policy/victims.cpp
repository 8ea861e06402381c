// Passive victim order (see include/capuchin/victims.hpp).
#include "capuchin/victims.hpp"

#include <algorithm>

namespace capuchin::policy {

namespace {

double key(const VictimCandidate& v) {
  const double bytes = static_cast<double>(std::max<std::uint64_t>(v.bytes, 1));
  const double idle = static_cast<double>(std::max<std::uint64_t>(v.idle, 1));
  return v.restore_s / (bytes * idle);
}

// a is a better victim than b (a total order: ties go to the smaller handle).
bool better(const VictimCandidate& a, const VictimCandidate& b) {
  const double ka = key(a), kb = key(b);
  return ka != kb ? ka < kb : a.handle < b.handle;
}

// The heap's "less": a comes after b, so the heap's top is the best victim.
bool after(const VictimCandidate& a, const VictimCandidate& b) { return better(b, a); }

}  // namespace

void order_victims(std::vector<VictimCandidate>& c) { std::sort(c.begin(), c.end(), better); }

VictimOrder::VictimOrder(std::vector<VictimCandidate>& c) : c_(c), left_(c.size()) {
  std::make_heap(c_.begin(), c_.end(), after);
}

const VictimCandidate& VictimOrder::next() {
  std::pop_heap(c_.begin(), c_.begin() + static_cast<std::ptrdiff_t>(left_), after);
  --left_;
  return c_[left_];
}

}  // namespace capuchin::policy
