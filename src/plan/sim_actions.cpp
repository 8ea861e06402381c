// The capuchin policies' simulator actions (see sim_actions.hpp).
#include "sim_actions.hpp"

#include <algorithm>

namespace capuchin::plan {

using sim::Action;
using sim::ActionKind;
using sim::Residence;

void issue_action(const sim::SimState& s, Act act, std::uint32_t tn, bool allow_recompute, std::vector<Action>& out) {
  if (tn >= s.residence.size()) return;
  const Residence r = s.residence[tn];
  switch (act) {
    case Act::Drop:
    case Act::Evict:
      if (r != Residence::Resident || s.pinned(tn)) return;
      if (act == Act::Drop && allow_recompute && s.can_recompute(tn)) out.push_back({tn, ActionKind::Drop});
      else out.push_back({tn, ActionKind::Evict});
      return;
    case Act::Recompute:
      if (r == Residence::Dropped) {
        out.push_back({tn, ActionKind::Recompute});
        return;
      }
      [[fallthrough]];
    case Act::Prefetch:
      if (r == Residence::Host || r == Residence::Evicting) out.push_back({tn, ActionKind::Prefetch});
      return;
  }
}

void pressure_victims(const sim::SimState& s, bool allow_recompute, std::span<const std::uint64_t> idle_since,
                      std::uint64_t now, std::uint64_t bytes_short, std::vector<policy::VictimCandidate>& cands,
                      std::vector<Action>& out) {
  cands.clear();
  for (std::uint32_t tn : s.resident) {
    if (s.pinned(tn)) continue;
    const double swap = policy::swap_round_trip_s(s.bytes(tn), s.prep->gpu.link_bytes_per_s * s.prep->eff.link,
                                                  s.prep->gpu.link_latency_s);
    // A tensor that stays allocated with no access left in the trace is not dropped: the trace
    // ends before its next use (in a one-iteration replay: the next iteration's), which no
    // recomputation could serve.
    const bool lasting = s.next_access(tn) == trace::kNone && s.prep->trace->tensors[tn].free_event == trace::kNone;
    const bool drop = allow_recompute && !lasting && s.can_recompute(tn) && inputs_resident(s, tn) &&
                      s.recompute_cost_s(tn) < swap;
    const std::uint64_t idle = now - std::min(now, idle_since[tn]) + 1;
    cands.push_back({tn, s.bytes(tn), idle, drop ? s.recompute_cost_s(tn) : swap, drop});
  }
  std::uint64_t freed = 0;
  for (policy::VictimOrder order(cands); !order.done() && freed < bytes_short;) {
    const policy::VictimCandidate& v = order.next();
    out.push_back({static_cast<std::uint32_t>(v.handle), v.drop ? ActionKind::Drop : ActionKind::Evict});
    freed += v.bytes;
  }
}

bool inputs_resident(const sim::SimState& s, std::uint32_t t) {
  const sim::PreparedTrace& p = *s.prep;
  const trace::Trace& tr = *p.trace;
  const std::uint32_t last = s.last_access(t);
  for (std::uint32_t w = p.write_offset[t]; w < p.write_offset[t + 1] && p.write_event[w] <= last; ++w) {
    const trace::Event& e = tr.events[p.write_event[w]];
    for (std::uint32_t a = e.access_begin; a < e.reads_end; ++a) {
      const std::uint32_t r = tr.accesses[a].tensor;
      if (r != t && s.residence[r] != Residence::Resident && s.residence[r] != Residence::Evicting) return false;
    }
  }
  return true;
}

}  // namespace capuchin::plan
