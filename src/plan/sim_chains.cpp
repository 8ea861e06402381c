// Recomputation chains in the simulator (see sim_chains.hpp).
#include "sim_chains.hpp"

#include <algorithm>
#include <array>
#include <optional>
#include <utility>
#include <vector>

#include "capuchin/victims.hpp"

namespace capuchin::plan::chains {

namespace {

using sim::Residence;
constexpr int kMax = policy::kMaxRecomputeChain;

// The state with this round's drops applied, and `dropping` (the candidate) dropped too.
struct View {
  const sim::SimState& s;
  std::span<const std::uint32_t> chosen;
  std::uint32_t dropping;

  bool dropped(std::uint32_t r) const {
    return r == dropping || s.residence[r] == Residence::Dropped || std::find(chosen.begin(), chosen.end(), r) != chosen.end();
  }
  // Every tensor that t's recomputation reads (the reads of its writers up to its last
  // access), t itself left out.
  template <class F>
  void for_each_input(std::uint32_t t, F&& f) const {
    const sim::PreparedTrace& p = *s.prep;
    const trace::Trace& tr = *p.trace;
    const std::uint32_t last = s.last_access(t);
    for (std::uint32_t w = p.write_offset[t]; w < p.write_offset[t + 1] && p.write_event[w] <= last; ++w) {
      const trace::Event& e = tr.events[p.write_event[w]];
      for (std::uint32_t a = e.access_begin; a < e.reads_end; ++a)
        if (tr.accesses[a].tensor != t) f(tr.accesses[a].tensor);
    }
  }
  // Each dropped dependent of t: a dropped tensor one of whose writers read t's current value,
  // i.e. since t was last written (the executor's dependents lists are emptied when their
  // block is written: materialize_dependents). Newest access first, so the scan stops there
  // instead of walking every earlier iteration's accesses.
  template <class F>
  void for_each_dropped_dependent(std::uint32_t t, F&& f) const {
    const sim::PreparedTrace& p = *s.prep;
    const trace::Trace& tr = *p.trace;
    for (std::uint32_t k = s.cursor[t]; k > p.access_offset[t];) {
      const trace::Event& e = tr.events[p.access_event[--k]];
      bool reads_t = false, writes_t = false;
      for (std::uint32_t a = e.access_begin; a < e.reads_end && !reads_t; ++a) reads_t = tr.accesses[a].tensor == t;
      for (std::uint32_t a = e.reads_end; a < e.writes_end; ++a) {
        const std::uint32_t d = tr.accesses[a].tensor;
        writes_t = writes_t || d == t;
        if (reads_t && d != t && dropped(d)) f(d);
      }
      if (writes_t) return;
    }
  }
};

// Each tensor's result once (a concatenation of dropped branches is reached by many paths);
// kWalking while it is walked: met again, the walk has gone round a cycle.
using Memo = std::vector<std::pair<std::uint32_t, int>>;
constexpr int kWalking = -2;
constexpr int kTooTall = kMax + 1;

template <class Walk>
int memoized(Memo& memo, std::uint32_t t, int on_cycle, Walk&& walk) {
  for (const auto& [k, v] : memo)
    if (k == t) return v == kWalking ? on_cycle : v;
  memo.emplace_back(t, kWalking);
  const std::size_t slot = memo.size() - 1;
  const int r = walk();
  memo[slot].second = r;
  return r;
}

// Dropped tensors under t on its longest chain of dropped inputs (0: none); -1 when one cannot
// be recomputed, the candidate is among them (a cycle through it), or the chain is too deep.
int walk_under(const View& v, std::uint32_t t, int depth, Memo& memo) {
  if (depth > kMax) return -1;
  int most = 0;
  v.for_each_input(t, [&](std::uint32_t r) {
    if (most < 0 || !v.dropped(r)) return;
    if (r == v.dropping || !v.s.can_recompute(r)) {
      most = -1;
      return;
    }
    const int under = memoized(memo, r, -1, [&] { return walk_under(v, r, depth + 1, memo); });
    most = under < 0 ? -1 : std::max(most, under + 1);
  });
  return most;
}

// Dropped tensors over t on its longest chain of dropped dependents, exact up to kTooTall.
int walk_over(const View& v, std::uint32_t t, int depth, Memo& memo) {
  if (depth > kMax) return kTooTall;
  int most = 0;
  v.for_each_dropped_dependent(t, [&](std::uint32_t d) {
    if (most >= kTooTall || d == v.dropping) return;
    const int over = memoized(memo, d, kTooTall, [&] { return walk_over(v, d, depth + 1, memo); });
    most = std::max(most, std::min(kTooTall, 1 + over));
  });
  return most;
}

// What t's recomputation holds at once: t, its writers' inputs, and those of each dropped
// input recomputed first, each tensor counted once, up to a bound on the work.
std::uint64_t add_replay_bytes(const View& v, std::uint32_t t, std::vector<std::uint32_t>& seen) {
  std::uint64_t bytes = 0;
  if (std::find(seen.begin(), seen.end(), t) == seen.end()) seen.push_back(t), bytes += v.s.bytes(t);
  if (seen.size() > 64 * static_cast<std::size_t>(kMax)) return bytes;
  v.for_each_input(t, [&](std::uint32_t r) {
    if (std::find(seen.begin(), seen.end(), r) != seen.end()) return;
    if (v.dropped(r)) {
      bytes += add_replay_bytes(v, r, seen);
    } else {
      seen.push_back(r);
      bytes += v.s.bytes(r);
    }
  });
  return bytes;
}

// t's recomputation, and those of the dropped tensors over it, each fit the budget on its own.
bool replays_fit(const View& v, std::uint32_t t, int depth, std::vector<std::uint32_t>& done) {
  if (std::find(done.begin(), done.end(), t) != done.end()) return true;
  done.push_back(t);
  std::vector<std::uint32_t> seen;
  if (add_replay_bytes(v, t, seen) > v.s.budget_bytes) return false;
  if (depth >= kMax) return true;  // deeper chains are refused by their length
  bool fit = true;
  v.for_each_dropped_dependent(t, [&](std::uint32_t d) { fit = fit && replays_fit(v, d, depth + 1, done); });
  return fit;
}

// The common case, asked for every resident tensor under pressure: no input dropped and no
// dropped dependent, so no chain: t's replay holds t and its inputs (up to kFew of them,
// counted once each without allocating). nullopt: not this case.
std::optional<bool> fits_without_chain(const View& v, std::uint32_t t) {
  constexpr std::size_t kFew = 32;
  std::array<std::uint32_t, kFew> inputs;
  std::size_t n = 0;
  bool simple = true;
  std::uint64_t bytes = v.s.bytes(t);
  v.for_each_input(t, [&](std::uint32_t r) {
    if (!simple || std::find(inputs.begin(), inputs.begin() + static_cast<std::ptrdiff_t>(n), r) != inputs.begin() + static_cast<std::ptrdiff_t>(n)) return;
    if (v.dropped(r) || n == kFew) {
      simple = false;
      return;
    }
    inputs[n++] = r;
    bytes += v.s.bytes(r);
  });
  if (!simple) return std::nullopt;
  bool dependent = false;
  v.for_each_dropped_dependent(t, [&](std::uint32_t) { dependent = true; });
  if (dependent) return std::nullopt;
  return bytes <= v.s.budget_bytes;
}

}  // namespace

bool inputs_there_or_dropped(const sim::SimState& s, std::uint32_t t) {
  const View v{s, {}, trace::kNone};
  bool ok = true;
  v.for_each_input(t, [&](std::uint32_t r) {
    const Residence res = s.residence[r];
    ok = ok && (res == Residence::Resident || res == Residence::Evicting || res == Residence::Dropped);
  });
  return ok;
}

bool allows_drop(const sim::SimState& s, std::uint32_t t, std::span<const std::uint32_t> chosen) {
  const View v{s, chosen, t};
  if (const std::optional<bool> fit = fits_without_chain(v, t)) return *fit;
  Memo under_memo, over_memo;
  const int under = walk_under(v, t, 0, under_memo);
  if (under < 0 || under > kMax - 1 || under + 1 + walk_over(v, t, 0, over_memo) > kMax) return false;
  std::vector<std::uint32_t> done;
  return replays_fit(v, t, 0, done);
}

}  // namespace capuchin::plan::chains
