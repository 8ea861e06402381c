// run_summary.hpp: what `capuchin run` tells the user when the job has ended (normally, by a
// signal or Ctrl-C): per session of the run (one per process that attached), the budget and
// what it resolved to, the natural and resident peaks, bytes evicted / prefetched /
// recomputed, stalls, plans applied and who made them, the decision log and trace paths, and
// the command that opens the report.
//
// Contract: the sessions are found by the run's tag (CAPUCHIN_RUN_TAG, set by `capuchin run`
// for the job and every process it starts); the daemon is given up to `wait` for them to
// close. Never fails the run: when the daemon cannot be asked, the summary says so and what
// was still known. Everything goes to stderr.
#pragma once

#include <chrono>
#include <string>

namespace capuchin::cli {

struct RunFacts {
  std::string socket, tag, budget_text, record_path, decision_log_env;
  int exit_status = 0;
};

void print_run_summary(const RunFacts& facts, std::chrono::milliseconds wait);

// A tag no other run of this machine has: the CLI's pid and the start time.
std::string make_run_tag();

}  // namespace capuchin::cli
