// session.hpp: one attached process as the daemon sees it: its identity (hello), the event
// window it has learned from, the learner's state (searching for iterations, or following a
// learned pattern), the plans made for it and its decision log. No Asio here: the server
// feeds decoded batches in, runs planning where run_planning says (a worker) and sends out
// what take_plan() / segment_planned() / take_budget_for_job() return.
//
// Contract: ingestion is cheap and per batch (events go straight into a trace::Trace window
// through a flat id map); learning (iteration detection, pattern, plan) runs only when
// enough new events arrived or at a completed iteration, never per event. Memory is bounded:
// the window holds at most max_events events (older events are compacted away, tensors
// still alive re-created as set-up allocations), decisions kept in memory are bounded too.
// Bad input (unknown ids, names out of order) is counted or refused, never trusted.
#pragma once

#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "capuchin/budget.hpp"
#include "capuchin/decision_log.hpp"
#include "capuchin/learn.hpp"
#include "capuchin/plan.hpp"
#include "capuchin/protocol.hpp"
#include "capuchin/segment_plan.hpp"
#include "capuchin/units.hpp"

namespace spdlog {
class logger;
}

namespace capuchin::daemon {

struct DaemonOptions {
  std::string socket_path;
  std::string log_dir;
  std::string gpu = "h200";
  std::uint32_t max_session_events = 1u << 18;
  std::uint32_t learn_min_events = 512;
  std::uint64_t log_max_bytes = 16u << 20;
  std::uint32_t log_files = 3;
  std::uint32_t max_sessions = 256;
  std::uint32_t closed_sessions_kept = 64;  // in memory, with their tensors and plan
  // The closed-session store (session_store.hpp): its file ("": none, ids still continue after
  // the decision logs' names) and how many closed sessions it keeps (the highest ids).
  std::string state_file;
  std::uint32_t sessions_kept = 200;
};

// Open-addressing map from allocation id to dense tensor index (ids live now only).
class IdMap {
 public:
  IdMap() { rehash(1024); }
  std::uint32_t find(std::uint64_t id) const;  // trace::kNone when absent
  void insert(std::uint64_t id, std::uint32_t value);
  void erase(std::uint64_t id);
  std::size_t size() const { return size_; }
  void clear() { rehash(1024); }

 private:
  void rehash(std::size_t cap);
  static std::uint64_t hash(std::uint64_t x) {
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdull;
    x ^= x >> 33;
    return x;
  }
  std::vector<std::uint64_t> keys_;
  std::vector<std::uint32_t> vals_;  // kNone: empty slot
  std::size_t mask_ = 0, size_ = 0;
};

struct DecisionFilter {
  std::string action;  // "" = all
  double since_t = -1;
  std::size_t limit = 100;
};

class Session {
 public:
  Session(std::uint64_t id, proto::HelloInfo hello, const DaemonOptions& opt);
  ~Session();

  std::uint64_t id() const { return id_; }
  const proto::HelloInfo& hello() const { return hello_; }
  bool closed() const { return closed_; }

  proto::ProtoExpected<void> on_names(const proto::NamesView& names);
  proto::ProtoExpected<void> on_events(const proto::EventBatch& batch);
  void on_exec_stats(const proto::ExecStats& s);
  // Executed decision records from the interposer (JSON lines): logged, kept, counted.
  proto::ProtoExpected<void> on_decisions(std::string_view lines);
  // A live budget change (budget.hpp). For a job with an executor the bytes are sent to it
  // (on_budget_ready; "0.5x" needs a natural peak learned first and "60%" the device's size,
  // else an error says so); otherwise the advisory plan is remade. Refused (`*code` set:
  // "not-ready" for a budget that cannot be resolved yet, "below-minimum" under the most one launch of the job needs at once) with a message
  // naming what would be accepted; the job's executor clamps too, so a job is never killed by it.
  Status set_budget(const Budget& b, std::string_view as_text, std::string* code);
  std::uint64_t job_minimum() const { return job_minimum_; }
  const std::string& run_tag() const { return hello_.run_tag; }
  // set-budget's bytes for the job's executor, once (0: nothing to send).
  std::uint64_t take_budget_for_job();
  std::function<void()> on_budget_ready;  // set by the connection

  // Remote planning for the job's executor. On the io thread: prepare_segment_job applies
  // what the daemon decides (the budget set with set-budget, no dump directory, JSON for
  // the plan view); then a worker runs plan::plan_segment; back on the io thread
  // segment_planned makes the result the session's plan (view, decision log) and returns
  // the reply to send.
  void prepare_segment_job(plan::SegmentJob& job);
  proto::PlanReply segment_planned(const plan::SegmentJob& job, Expected<plan::SegmentPlan, std::string> made);
  bool executor_attached() const { return executor_; }
  void close(std::string_view why);

  // A plan made since the last call, for the connection to send.
  std::optional<proto::PlanMessage> take_plan();
  std::function<void()> on_plan_ready;  // set by the connection: a plan is waiting
  // Where the advisory plan is made: the connection runs `task` on a worker and the closure
  // it returns back on the io thread (unset, as in tests: inline).
  using PlanTask = std::function<std::function<void()>()>;
  std::function<void(PlanTask)> run_planning;

  // Queries (daemon/query.cpp turns these into responses).
  nlohmann::ordered_json summary() const;
  nlohmann::ordered_json detail() const;
  nlohmann::ordered_json tensors(std::size_t limit) const;
  nlohmann::ordered_json plan() const;
  nlohmann::ordered_json decisions(const DecisionFilter& f) const;

  std::uint64_t events_total() const { return events_total_; }
  std::uint64_t allocated_bytes() const { return live_bytes_; }  // the job's live allocations
  // On the device now: the executor's count when the job has one (allocated tensors may be
  // evicted), else everything allocated.
  std::uint64_t resident_bytes() const { return executor_ ? exec_.resident_bytes : live_bytes_; }
  std::uint64_t peak_bytes() const { return peak_bytes_; }
  std::uint64_t iteration() const { return iteration_; }
  std::uint64_t plans_made() const { return plan_seq_; }
  // The budget in force: the executor's own figure once it reported one (0 while a "0.5x"
  // waits for the natural peak), else what the daemon knows it to be. Every view shows this.
  std::uint64_t budget_bytes() const {
    if (exec_seen_) return exec_.budget_bytes;
    return executor_ && job_budget_ ? job_budget_ : resolved_budget();
  }
  const proto::ExecStats& exec() const { return exec_; }
  double uptime_s() const;

 private:
  void ingest(const proto::WireEvent& w, const std::uint64_t* ids);
  void access(std::uint32_t ev, std::uint64_t id, trace::AccessMode mode);
  void after_event(std::uint32_t ev);
  void maybe_learn();
  void start_following(const trace::Iteration& pattern_it, std::uint32_t current_begin);
  void make_plan_now(std::string_view why);
  struct AdvisoryPlan {
    proto::PlanMessage msg;
    std::uint32_t swaps = 0, recomputes = 0;
    std::uint64_t natural_peak = 0;
    double expected_s = 0;
    std::string why;
  };
  void install_advisory(AdvisoryPlan a);
  void compact();
  std::uint64_t resolved_budget() const;
  std::uint64_t known_natural_peak() const;  // 0: not yet
  // Logs and keeps a decision, stamped with the session's clock and iteration unless
  // `own_clock` (the executor's records keep theirs, in memory and in the log alike).
  void record(DecisionRecord r, bool own_clock = false);
  double now_s() const;

  std::uint64_t id_;
  proto::HelloInfo hello_;
  const DaemonOptions& opt_;
  std::chrono::steady_clock::time_point start_, end_;  // end_: when it closed
  std::chrono::system_clock::time_point started_wall_, ended_wall_;  // shown as started_at / ended_at
  std::shared_ptr<spdlog::logger> log_;
  std::string log_path_;  // the decision log, "" when none could be opened
  bool closed_ = false;
  std::string close_reason_;

  // The event window.
  trace::Trace trace_;
  trace::Trace spare_;  // the previous window's buffers, reused by compaction (no page churn)
  IdMap ids_;
  std::vector<std::uint32_t> last_access_event_;  // per tensor, to count accessing events once
  std::vector<std::uint32_t> name_map_;           // wire name index -> trace name index
  std::uint64_t live_bytes_ = 0, peak_bytes_ = 0;
  std::uint64_t events_total_ = 0, compactions_ = 0, unknown_ids_ = 0, reused_ids_ = 0;

  // The learner.
  bool following_ = false;
  std::uint32_t last_try_events_ = 0;      // window size at the last detection attempt
  std::unique_ptr<learn::Pattern> pattern_;
  std::unique_ptr<learn::PatternMatcher> matcher_;
  std::uint32_t current_begin_ = 0;        // first event of the iteration being followed
  std::uint32_t last_complete_begin_ = 0;  // first event of the last iteration that matched
  std::uint64_t iteration_ = 0;            // completed iterations, as the learner counts them
  std::uint64_t iteration_peak_now_ = 0;
  std::deque<std::uint64_t> iteration_peaks_;  // recent completed iterations
  std::uint64_t relearns_ = 0;
  std::uint64_t natural_peak_ = 0;         // of the learned iteration (with its baseline)
  std::uint32_t period_kernels_ = 0;

  // Budget and plans.
  Budget budget_;
  bool has_budget_ = false;
  bool exec_seen_ = false;  // an exec-stats frame arrived: exec_ is the executor's own view
  std::uint32_t plan_seq_ = 0;
  std::optional<proto::PlanMessage> pending_plan_;
  nlohmann::ordered_json plan_json_;       // the last plan (plan_to_json), null when none
  std::string plan_summary_;
  bool plan_active_ = false;
  proto::ExecStats exec_;
  bool executor_ = false;              // the job runs capuchin's executor (budget in hello, stats, plan requests)
  std::uint64_t job_budget_ = 0;       // the executor's budget as last known (bytes)
  std::uint64_t job_minimum_ = 0;      // the most one launch of the job touched at once (its segments)
  std::uint64_t budget_for_job_ = 0;   // set-budget bytes waiting to be sent
  std::uint64_t segment_natural_peak_ = 0;  // from the last segment plan
  std::uint64_t segment_plans_ = 0;
  static constexpr std::size_t kClosedTensorRows = 2000;
  nlohmann::ordered_json closed_tensors_;   // tensors() as it was at close (the window is freed)

  std::deque<DecisionRecord> decisions_;
  std::uint64_t decisions_total_ = 0;
};

}  // namespace capuchin::daemon
