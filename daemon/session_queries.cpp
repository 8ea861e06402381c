// session_queries.cpp: what a Session answers to the query API (summary, detail, tensors,
// plan, decisions; see session.hpp): read-only views of the session's state as JSON, built on
// the daemon's io thread. Split from session.cpp, which ingests, learns and plans.
#include <fmt/format.h>

#include <algorithm>
#include <ctime>

#include "session.hpp"

namespace capuchin::daemon {

using trace::kNone;

// ---- queries --------------------------------------------------------------------------------

namespace {
// UTC, to the second ("2025-01-31T12:00:00Z"): unambiguous in a store read back elsewhere.
std::string iso_utc(std::chrono::system_clock::time_point t) {
  const std::time_t tt = std::chrono::system_clock::to_time_t(t);
  std::tm tm{};
  gmtime_r(&tt, &tm);
  char buf[32];
  return std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm) > 0 ? std::string(buf) : std::string();
}
}  // namespace

nlohmann::ordered_json Session::summary() const {
  nlohmann::ordered_json j;
  j["id"] = id_;
  j["pid"] = hello_.pid;
  j["cmdline"] = hello_.cmdline;
  j["run_tag"] = hello_.run_tag;
  j["device"] = hello_.device;
  j["state"] = closed_ ? "closed" : "attached";
  j["mode"] = plan_active_ ? "active" : "passive";
  j["learner"] = following_ ? "following" : "searching";
  j["iteration"] = iteration_;
  j["budget_bytes"] = budget_bytes();
  j["allocated_bytes"] = live_bytes_;
  j["resident_bytes"] = resident_bytes();  // the executor's when it has one (see session.hpp)
  j["peak_bytes"] = peak_bytes_;
  j["events"] = events_total_;
  j["uptime_s"] = now_s();
  j["started_at"] = iso_utc(started_wall_);
  if (closed_) j["ended_at"] = iso_utc(ended_wall_);
  return j;
}

nlohmann::ordered_json Session::detail() const {
  nlohmann::ordered_json j = summary();
  j["budget"] = has_budget_ ? budget_.describe() : std::string("none");
  j["executor_budget_bytes"] = exec_.budget_bytes;
  j["peak_resident_bytes"] = exec_.peak_resident_bytes;
  j["executor_natural_peak_bytes"] = exec_.natural_peak_bytes;
  j["plans_from_daemon"] = exec_.plans_from_daemon;
  j["plans_embedded"] = exec_.plans_embedded;
  j["executor_iterations"] = exec_.iterations;
  j["backend"] = hello_.backend == proto::Backend::Uvm ? "uvm" : "pinned";
  j["device_memory_bytes"] = hello_.device_memory_bytes;
  j["natural_peak_bytes"] = natural_peak_;
  j["evicted_bytes"] = exec_.evicted_bytes;
  j["prefetched_bytes"] = exec_.prefetched_bytes;
  j["recomputed_bytes"] = exec_.recomputed_bytes;
  j["stalls"] = exec_.stalls;
  j["stall_s"] = exec_.stall_s;
  j["period_kernels"] = period_kernels_;
  j["pattern_events"] = pattern_ ? pattern_->events.size() : 0;
  j["relearns"] = relearns_;
  j["plans"] = plan_seq_;
  j["plan_summary"] = plan_summary_.empty() ? std::string("no plan") : plan_summary_;
  j["window_events"] = trace_.events.size();
  j["compactions"] = compactions_;
  j["unknown_ids"] = unknown_ids_;
  j["reused_ids"] = reused_ids_;
  j["decisions"] = decisions_total_;
  j["iteration_peak_bytes"] = iteration_peaks_;
  j["decision_log"] = log_path_.empty() ? nlohmann::ordered_json(nullptr) : nlohmann::ordered_json(log_path_);
  if (closed_) j["close_reason"] = close_reason_;
  return j;
}

nlohmann::ordered_json Session::tensors(std::size_t limit) const {
  if (closed_) {
    nlohmann::ordered_json arr = nlohmann::ordered_json::array();
    for (std::size_t i = 0; i < closed_tensors_.size() && i < limit; ++i) arr.push_back(closed_tensors_[i]);
    return arr;
  }
  nlohmann::ordered_json arr = nlohmann::ordered_json::array();
  if (!pattern_) return arr;
  // The learned iteration's tensors: its local allocations and the carried tensors it uses.
  struct Row {
    std::uint32_t t;
    bool local;
    std::uint32_t k;
    std::uint32_t accesses;
  };
  std::vector<Row> rows;
  std::vector<std::uint32_t> count(trace_.tensors.size(), 0), seen(trace_.tensors.size(), kNone);
  for (std::uint32_t ev = pattern_->begin; ev < pattern_->end && ev < trace_.events.size(); ++ev) {
    const auto& e = trace_.events[ev];
    for (std::uint32_t a = e.access_begin; a < e.access_end; ++a) {
      const std::uint32_t t = trace_.accesses[a].tensor;
      if (seen[t] != ev) seen[t] = ev, ++count[t];
    }
  }
  for (std::uint32_t k = 0; k < pattern_->local_tensors.size(); ++k) {
    const std::uint32_t t = pattern_->local_tensors[k];
    rows.push_back({t, true, k, count[t]});
    count[t] = 0;
  }
  for (std::uint32_t t = 0; t < trace_.tensors.size(); ++t)
    if (count[t] > 0) rows.push_back({t, false, 0, count[t]});
  std::stable_sort(rows.begin(), rows.end(),
                   [&](const Row& a, const Row& b) { return trace_.tensors[a.t].bytes > trace_.tensors[b.t].bytes; });
  // Planned actions per tensor, from the last plan.
  auto planned = [&](const Row& r) {
    std::vector<std::string> acts;
    if (!plan_json_.is_object() || !plan_json_.contains("decisions")) return acts;
    for (const auto& d : plan_json_["decisions"]) {
      const auto& tj = d["tensor"];
      const bool match = r.local ? (tj.contains("local") && tj["local"] == r.k)
                                 : (tj.contains("persistent") && tj["persistent"] == trace_.tensors[r.t].id);
      if (match) acts.push_back(d["action"].get<std::string>());
    }
    return acts;
  };
  for (std::size_t i = 0; i < rows.size() && i < limit; ++i) {
    const Row& r = rows[i];
    const auto& ts = trace_.tensors[r.t];
    nlohmann::ordered_json x;
    x["identity"] = r.local ? fmt::format("local:{}", r.k) : fmt::format("carried:{}", ts.id);
    x["observed_id"] = ts.id;
    x["bytes"] = ts.bytes;
    x["role"] = std::string(trace::to_string(ts.role));
    x["state"] = ts.free_event == kNone ? "live" : "freed";
    x["accesses_per_iteration"] = r.accesses;
    x["planned"] = planned(r);
    arr.push_back(std::move(x));
  }
  return arr;
}

nlohmann::ordered_json Session::plan() const {
  nlohmann::ordered_json j;
  j["session"] = id_;
  j["plans"] = plan_seq_;
  j["summary"] = plan_summary_.empty() ? std::string("no plan") : plan_summary_;
  j["plan"] = plan_json_.is_object() ? plan_json_ : nlohmann::ordered_json(nullptr);
  return j;
}

nlohmann::ordered_json Session::decisions(const DecisionFilter& f) const {
  std::vector<const DecisionRecord*> picked;
  for (auto it = decisions_.rbegin(); it != decisions_.rend() && picked.size() < f.limit; ++it) {
    if (!f.action.empty() && it->action != f.action) continue;
    if (it->t < f.since_t) continue;
    picked.push_back(&*it);
  }
  nlohmann::ordered_json arr = nlohmann::ordered_json::array();
  for (auto it = picked.rbegin(); it != picked.rend(); ++it)
    arr.push_back(nlohmann::ordered_json::parse(to_json_line(**it)));
  return arr;
}

}  // namespace capuchin::daemon
