// decisions.hpp: what the executor decided, counted and written to the decision log
// (CAPUCHIN_DECISION_LOG, include/capuchin/decision_log.hpp) and to capuchind.
//
// Contract: record() counts every decision (the executor's statistics come from these counts,
// by action, never by comparing strings); a decision identical to the previous one (action,
// tensor, reason) is counted but written once, with a record saying how many followed, at
// the next different one, the iteration's end and exit, so a loop of failed attempts cannot
// fill a disk. Runs under the executor's lock; writes go to a stdio buffer (flushed at
// iteration ends) and a string handed to the daemon link there.
#pragma once

#include <cstdint>
#include <cstdio>
#include <string>

namespace capuchin::interpose::exec {

enum class Action : std::uint8_t {
  Evict, Prefetch, SwapinOnDemand, Stall, Drop, Recompute, Fallback, Plan, Relearn, Budget, Oom, Verdict, Count
};
const char* to_string(Action a);

struct Tally {
  std::uint64_t count[static_cast<int>(Action::Count)] = {};
  std::uint64_t evicted_bytes = 0, prefetched_bytes = 0, recomputed_bytes = 0;
  double stall_s = 0;  // measured stalls' total (record_stall)
  std::uint64_t of(Action a) const { return count[static_cast<int>(a)]; }
};

class DecisionLog {
 public:
  // path: a file to append to (null: none); to_daemon: lines are handed to capuchind.
  void open(const char* path, bool to_daemon, double t0);
  void set_iteration(std::uint64_t it) { iteration_ = it; }
  void record(Action a, std::uint64_t tensor, std::uint64_t bytes, const char* reason, double expected_s = -1,
              const char* note = nullptr);
  // A stall and how long it was (measured): written as `actual_s`; never folded into a repeat
  // (each one's time counts, e.g. in the report's stall time).
  void record_stall(std::uint64_t tensor, std::uint64_t bytes, const char* reason, double actual_s);
  // The iteration ended: pending repeats written, the file flushed, lines for the daemon handed over.
  void end_iteration();
  void finish();             // at exit
  void discard_after_fork(); // a forked child must not write the parent's buffered records
  const Tally& tally() const { return tally_; }

 private:
  void write(Action a, std::uint64_t tensor, std::uint64_t bytes, const std::string& reason, double expected_s,
             const std::string& note, double actual_s = -1);
  void flush_repeats();

  std::FILE* file_ = nullptr;
  bool to_daemon_ = false;
  std::string daemon_lines_;
  double t0_ = 0;
  std::uint64_t iteration_ = 0;
  Tally tally_;
  struct Last {
    bool valid = false;
    Action action = Action::Evict;
    std::uint64_t tensor = 0, bytes = 0, repeats = 0;
    std::string reason;
  } last_;
};

}  // namespace capuchin::interpose::exec
