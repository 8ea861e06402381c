// Plans as JSON (for the decision log, the daemon and the executor): every decision with its
// tensor, the pattern position and the trace event it was planned from, and its reason.
#include <nlohmann/json.hpp>

#include "capuchin/plan.hpp"

namespace capuchin::plan {

std::string plan_to_json(const Plan& plan, const learn::Pattern& pattern, const trace::Trace& t) {
  nlohmann::ordered_json j;
  j["budget_bytes"] = plan.budget_bytes;
  j["target_bytes"] = plan.target_bytes;
  j["natural_peak_bytes"] = plan.natural_peak_bytes;
  j["planned_peak_bytes"] = plan.planned_peak_bytes;
  j["fits"] = plan.fits;
  if (!plan.fits) j["unfit_position"] = plan.unfit_position;
  j["swaps"] = plan.swaps;
  j["recomputes"] = plan.recomputes;
  j["delayed_evictions"] = plan.delayed_evictions;  // swaps across the boundary evicted in the next iteration
  j["expected_overhead_s"] = plan.expected_overhead_s;
  j["time_scale"] = plan.time_scale;
  j["plan_time_s"] = plan.plan_time_s;
  auto& arr = j["decisions"] = nlohmann::ordered_json::array();
  for (const Decision& d : plan.decisions) {
    nlohmann::ordered_json x;
    x["at"] = d.at;
    x["action"] = to_string(d.act);
    if (d.tensor.local) {
      x["tensor"] = {{"local", d.tensor.index}};
      if (d.tensor.index < pattern.local_tensors.size()) x["observed_id"] = t.tensors[pattern.local_tensors[d.tensor.index]].id;
    } else {
      x["tensor"] = {{"persistent", t.tensors[d.tensor.index].id}};
    }
    x["bytes"] = d.bytes;
    x["access"] = d.access;
    if (d.at < pattern.events.size()) x["observed_event"] = pattern.events[d.at].trace_event;
    x["reason"] = to_string(d.reason);
    if (d.act == Act::Evict || d.act == Act::Prefetch) x["free_time_s"] = d.free_time_s;
    if (d.act == Act::Drop || d.act == Act::Recompute) x["msps"] = d.msps;
    x["expected_cost_s"] = d.cost_s;
    arr.push_back(std::move(x));
  }
  return j.dump();
}

}  // namespace capuchin::plan
