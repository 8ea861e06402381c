// decisions.cpp: the executor's decision log and counts (see decisions.hpp).
#include "decisions.hpp"

#include <stdio_ext.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>

#include "capuchin/decision_log.hpp"
#include "config.hpp"
#include "daemon_sink.hpp"

namespace capuchin::interpose::exec {

namespace {
constexpr std::uint64_t kNoTensor = ~std::uint64_t{0};
double steady_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}
}  // namespace

const char* to_string(Action a) {
  switch (a) {
    case Action::Evict: return "evict";
    case Action::Prefetch: return "prefetch";
    case Action::SwapinOnDemand: return "swapin_on_demand";
    case Action::Stall: return "stall";
    case Action::Drop: return "drop";
    case Action::Recompute: return "recompute";
    case Action::Fallback: return "fallback";
    case Action::Plan: return "plan";
    case Action::Relearn: return "relearn";
    case Action::Budget: return "budget";
    case Action::Oom: return "oom";
    case Action::Verdict: return "verdict";
    case Action::Count: break;
  }
  return "?";
}

void DecisionLog::open(const char* path, bool to_daemon, double t0) {
  t0_ = t0;
  to_daemon_ = to_daemon;
  if (path == nullptr) return;
  file_ = std::fopen(path, "a");
  if (file_ == nullptr) log(LogLevel::Error, "cannot open CAPUCHIN_DECISION_LOG=%s: %s", path, std::strerror(errno));
}

void DecisionLog::record(Action a, std::uint64_t tensor, std::uint64_t bytes, const char* reason, double expected_s,
                         const char* note) {
  ++tally_.count[static_cast<int>(a)];
  if (a == Action::Evict) tally_.evicted_bytes += bytes;
  if (a == Action::Prefetch || a == Action::SwapinOnDemand) tally_.prefetched_bytes += bytes;
  if (a == Action::Recompute) tally_.recomputed_bytes += bytes;
  if (file_ == nullptr && !to_daemon_) return;
  const char* why = reason != nullptr ? reason : "";
  if (last_.valid && last_.action == a && last_.tensor == tensor && last_.reason == why && a != Action::Plan) {
    ++last_.repeats;
    return;
  }
  flush_repeats();
  write(a, tensor, bytes, why, expected_s, note != nullptr ? note : "");
  last_ = Last{true, a, tensor, bytes, 0, why};
}

void DecisionLog::record_stall(std::uint64_t tensor, std::uint64_t bytes, const char* reason, double actual_s) {
  ++tally_.count[static_cast<int>(Action::Stall)];
  if (actual_s > 0) tally_.stall_s += actual_s;
  if (file_ == nullptr && !to_daemon_) return;
  flush_repeats();
  write(Action::Stall, tensor, bytes, reason != nullptr ? reason : "", -1, "", actual_s);
}

void DecisionLog::write(Action a, std::uint64_t tensor, std::uint64_t bytes, const std::string& reason, double expected_s,
                        const std::string& note, double actual_s) {
  DecisionRecord r;
  r.t = steady_s() - t0_;
  r.pid = getpid();
  r.iteration = iteration_;
  r.action = to_string(a);
  if (tensor != kNoTensor) r.tensor = tensor;
  r.bytes = bytes;
  r.reason = reason;
  if (expected_s >= 0) r.expected_s = expected_s;
  if (actual_s >= 0) r.actual_s = actual_s;
  r.note = note;
  std::string line = to_json_line(r);
  line.push_back('\n');
  if (file_ != nullptr) std::fwrite(line.data(), 1, line.size(), file_);
  if (to_daemon_) daemon_lines_ += line;
}

void DecisionLog::flush_repeats() {
  if (last_.valid && last_.repeats > 0)
    write(last_.action, last_.tensor, last_.bytes, last_.reason, -1, "repeated " + std::to_string(last_.repeats) + " more times");
  last_ = Last{};
}

void DecisionLog::end_iteration() {
  flush_repeats();
  if (file_ != nullptr) std::fflush(file_);
  if (to_daemon_ && !daemon_lines_.empty()) {
    queue_decision_lines(std::move(daemon_lines_));
    daemon_lines_.clear();
  }
}

void DecisionLog::finish() { end_iteration(); }

void DecisionLog::discard_after_fork() {
  if (file_ != nullptr) __fpurge(file_);
  // Made afresh over the parent's, whose buffers are left (not freed): a fork handler must not
  // allocate or free (an allocator lock another thread held at the fork stays held here).
  new (&daemon_lines_) decltype(daemon_lines_)();
  new (&last_) Last{};
}

}  // namespace capuchin::interpose::exec
