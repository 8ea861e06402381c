// Passive victim order (see include/capuchin/victims.hpp).
#include "capuchin/victims.hpp"

#include <algorithm>

namespace capuchin::policy {

void order_victims(std::vector<VictimCandidate>& c) {
  auto key = [](const VictimCandidate& v) {
    const double bytes = static_cast<double>(std::max<std::uint64_t>(v.bytes, 1));
    const double idle = static_cast<double>(std::max<std::uint64_t>(v.idle, 1));
    return v.restore_s / (bytes * idle);
  };
  std::sort(c.begin(), c.end(), [&](const VictimCandidate& a, const VictimCandidate& b) {
    const double ka = key(a), kb = key(b);
    return ka != kb ? ka < kb : a.handle < b.handle;
  });
}

}  // namespace capuchin::policy
