// daemon_sink.hpp: the drain thread's connection to capuchind (CAPUCHIN_SOCKET): a Sink that
// batches trace events into the binary protocol (include/capuchin/protocol.hpp), optionally
// tees them to the file sink (CAPUCHIN_RECORD), and receives the daemon's plans.
//
// Contract: everything here runs on the drain thread (never on a hook path). The job never
// depends on the daemon: while it is absent or gone, events are counted and discarded (the
// tee'd file still gets them), and the sink re-attaches with backoff (100 ms doubling to
// 5 s), as a new session. A send that would block longer than 200 ms drops the connection
// rather than stall the drain. Nothing here acts on memory: the executor's planner thread
// asks the daemon to plan its segments (plan_remotely) and applies the answer; a budget the
// daemon sets (set-budget) is kept for the executor (daemon_budget). The daemon's advisory
// plans are only counted. The link's counters are logged when the sink closes.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <optional>
#include <memory>
#include <string>

#include "capuchin/protocol.hpp"
#include "config.hpp"
#include "sink.hpp"

namespace capuchin::interpose {

// The link's counters (atomics: written on the drain thread, the session id read by the
// executor's planner thread).
struct DaemonLinkStats {
  std::atomic<std::uint64_t> connects{0}, disconnects{0}, refused{0};
  std::atomic<std::uint64_t> events_sent{0}, events_offline{0}, bytes_sent{0};
  std::atomic<std::uint64_t> plans_received{0};
  std::atomic<std::uint64_t> plan_requests{0}, plan_replies{0}, budgets_received{0};
  std::atomic<std::uint64_t> session_id{0};  // the current session (0: not attached)
};


// For the executor's planner thread (never a hook): sends the segment to capuchind and waits
// at most `timeout` for its answer. nullopt: not attached, the segment does not fit one frame,
// the link dropped or no answer in time; the caller then plans locally.
std::optional<proto::PlanReply> plan_remotely(const plan::SegmentJob& job, std::chrono::milliseconds timeout);

// The budget capuchind set for this job with set-budget (0: none); *generation changes
// with each one received.
std::uint64_t daemon_budget(std::uint64_t* generation);

// Executed decision records (decision_log.hpp JSON lines) for the daemon's session log; sent
// on the drain thread's next pass while attached, else dropped. For the executor.
// The executor's running totals for the daemon's session view, asked for by the drain thread
// when the link is up; the source must never wait (false: none now). Set once at start by the
// library (library.cpp), so the link does not depend on the executor.
using ExecTotals = proto::ExecStats;
using ExecTotalsSource = bool (*)(ExecTotals&);
void set_exec_totals_source(ExecTotalsSource source);

void queue_decision_lines(std::string lines);

// The device the job's executor serves (set once at its start, from the job's thread): the
// hello names it and the device memory a budget fraction is of. A job with CAPUCHIN_BUDGET
// attaches once it is known or the first event is drained, so a rank on device 1 is not
// reported on device 0; other jobs attach at once and report device 0.
void set_job_device(int device);

// `inner` (may be null) receives every event too (the CAPUCHIN_RECORD file).
std::unique_ptr<Sink> make_daemon_sink(const Config& config, std::unique_ptr<Sink> inner);

}  // namespace capuchin::interpose
