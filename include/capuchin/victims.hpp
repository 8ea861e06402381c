// victims.hpp: which resident tensors to move out when memory runs short and no plan says
// (passive mode), one rule for the executor and the simulator's `capuchin` policy alike:
// DTR's heuristic h = restore cost / (bytes x idle), least first (Kirisame et al., ICLR 2021;
// the restore cost is a swap round trip, or a recomputation where the owner allows one).
// Idle time is counted in events (the policy controller's clock, Controller::tick()), which
// the executor and the simulator count alike, rather than in seconds, which only the
// simulator knows.
//
// Contract: pure and deterministic (ties go to the smaller handle); no allocation beyond the
// caller's vector.
#pragma once

#include <cstdint>
#include <vector>

namespace capuchin::policy {

struct VictimCandidate {
  std::uint64_t handle = 0;     // the owner's: a tensor index or an allocation id
  std::uint64_t bytes = 0;      // what moving it frees
  std::uint64_t idle = 1;       // events since its last use (at least 1)
  double restore_s = 0;         // what bringing it back costs
  bool drop = false;            // the owner's choice to recompute it rather than swap it
  double key = 0;               // set by order_victims / VictimOrder: restore cost per byte and idle event
};

// The most dropped tensors on one recomputation chain (the tensor itself included), for a drop
// under pressure and in the executor: each level is a nested recomputation on the calling
// thread's stack, holding its inputs pinned.
inline constexpr int kMaxRecomputeChain = 8;

// What the order ranks by, least first: restore cost per byte and idle event.
inline double victim_key(const VictimCandidate& v) {
  const double bytes = static_cast<double>(v.bytes > 0 ? v.bytes : 1);
  const double idle = static_cast<double>(v.idle > 0 ? v.idle : 1);
  return v.restore_s / (bytes * idle);
}

// a is a better victim than b: the order's rule, total (ties go to the smaller handle). Keys set.
inline bool better_victim(const VictimCandidate& a, const VictimCandidate& b) {
  return a.key != b.key ? a.key < b.key : a.handle < b.handle;
}

// Orders candidates best victim first.
void order_victims(std::vector<VictimCandidate>& c);

// The same order one victim at a time, for callers that stop once enough bytes are free
// (usually after one or two): the first few by a linear scan each (no element moves but one
// swap), then a heap over the rest (reordered in place, O(log n) per victim). Sorting every
// resident tensor at each shortage, and later building a heap of them, dominated the
// executor's time under pressure.
class VictimOrder {
 public:
  explicit VictimOrder(std::vector<VictimCandidate>& c);
  // Where the caller set every key to victim_key() while making the candidates (the executor,
  // which prices every block on the device at each shortage: one pass over them, not two), and
  // may have kept the index of the best by better_victim as it went (the first victim then
  // needs no scan; most shortages take one or two).
  struct KeysSet {};
  static constexpr std::size_t kNoBest = ~std::size_t{0};
  VictimOrder(std::vector<VictimCandidate>& c, KeysSet, std::size_t best = kNoBest)
      : c_(c), left_(c.size()), best_(best < c.size() ? best : kNoBest) {}
  bool done() const { return left_ == 0; }
  // The best candidate not yet returned (precondition: !done()); valid until `c` changes.
  const VictimCandidate& next();

 private:
  static constexpr int kScans = 3;  // victims found by a scan before the rest become a heap
  std::vector<VictimCandidate>& c_;
  std::size_t left_;
  std::size_t best_ = kNoBest;  // the first scan's answer, when the caller knew it
  int scans_ = 0;
};

}  // namespace capuchin::policy
