// Decision records: one JSON object per line, written by whoever acts on memory (the
// interposer's executor, CAPUCHIN_DECISION_LOG=FILE; the daemon's per-session logs) and
// read by `capuchin log`, `capuchin export` and `capuchin report`.
//
// Format (keys in this order; optional ones omitted when absent):
//   t          seconds since the session started (double)
//   pid        the job's process id
//   iteration  the learner's iteration number (0: before the first boundary)
//   action     evict | prefetch | drop | recompute | swapin_on_demand | stall | fallback |
//              plan | relearn | oom | budget | verdict (a launch shape's inferred write set:
//              reason replayable | side-effect | not-deterministic | no-output | foreign-memory,
//              note the kernel)
//   tensor     the allocation id (as in recorded traces), absent for whole-job records
//   bytes      bytes concerned
//   reason     free-time | least-swap-cost | msps | cross-iteration | replay-victim | passive | pressure |
//              pattern-changed | ... (free text allowed)
//   expected_s the planner's expected cost (stall or recomputation), seconds
//   actual_s   what it cost when measured (stall length, copy time), seconds
//   note       free text (e.g. the error a fallback was taken for)
// Contract: parse_decision_line never throws; unknown keys are ignored, a missing
// `action` or `t` is an error naming the line's problem.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "capuchin/expected.hpp"

namespace capuchin {

struct DecisionRecord {
  double t = 0;
  std::int64_t pid = 0;
  std::uint64_t iteration = 0;
  std::string action;
  std::optional<std::uint64_t> tensor;
  std::uint64_t bytes = 0;
  std::string reason;
  std::optional<double> expected_s;
  std::optional<double> actual_s;
  std::string note;
};

std::string to_json_line(const DecisionRecord& r);  // without the trailing newline
Expected<DecisionRecord> parse_decision_line(std::string_view line);

}  // namespace capuchin
