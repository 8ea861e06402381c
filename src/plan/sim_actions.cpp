// The capuchin policies' simulator actions (see sim_actions.hpp).
#include "sim_actions.hpp"

#include "sim_chains.hpp"

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
    const double swap = sim::swap_out_s(s.prep->gpu, s.prep->eff, s.bytes(tn)) + sim::swap_in_s(s.prep->gpu, s.prep->eff, s.bytes(tn));
    // A tensor that stays allocated with no access left in the trace is not dropped: the trace
    // ends before its next use (in a one-iteration replay: the next iteration's), which no
    // recomputation could serve.
    const bool lasting = s.next_access(tn) == trace::kNone && s.prep->trace->tensors[tn].free_event == trace::kNone;
    const bool drop = allow_recompute && !lasting && s.can_recompute(tn) && chains::inputs_there_or_dropped(s, tn) &&
                      s.recompute_cost_s(tn) < swap && chains::allows_drop(s, tn, {});
    const std::uint64_t idle = now - std::min(now, idle_since[tn]) + 1;
    cands.push_back({tn, s.bytes(tn), idle, drop ? s.recompute_cost_s(tn) : swap, drop});
  }
  std::uint64_t freed = 0;
  std::vector<std::uint32_t> dropped;  // this round's drops
  for (policy::VictimOrder order(cands); !order.done() && freed < bytes_short;) {
    const policy::VictimCandidate& v = order.next();
    const auto tn = static_cast<std::uint32_t>(v.handle);
    // Asked again once this round has dropped something (before that, the answer is the one
    // above). A drop the chains then refuse is skipped, not swapped: its place in the order was
    // the drop's price (the executor's start_victims does the same when try_drop refuses).
    if (v.drop && !dropped.empty() && !chains::allows_drop(s, tn, dropped)) continue;
    if (v.drop) dropped.push_back(tn);
    out.push_back({tn, v.drop ? ActionKind::Drop : ActionKind::Evict});
    freed += v.bytes;
  }
}

}  // namespace capuchin::plan
