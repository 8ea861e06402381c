// The end-of-run summary of `capuchin run`. See run_summary.hpp.
#include "run_summary.hpp"

#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <nlohmann/json.hpp>
#include <thread>
#include <vector>

#include "capuchin/units.hpp"
#include "client.hpp"

namespace capuchin::cli {
namespace {

using json = nlohmann::json;

std::uint64_t u64(const json& j, const char* key) {
  const auto it = j.find(key);
  return it != j.end() && it->is_number_unsigned() ? it->get<std::uint64_t>() : 0;
}
std::string str(const json& j, const char* key) {
  const auto it = j.find(key);
  return it != j.end() && it->is_string() ? it->get<std::string>() : std::string();
}

// The run's sessions, once every one has closed (or `wait` has passed: then as they are).
Expected<json> closed_sessions(const RunFacts& f, std::chrono::milliseconds wait) {
  const auto until = std::chrono::steady_clock::now() + wait;
  for (;;) {
    auto all = query_daemon(f.socket, "sessions", json{{"run", f.tag}}, std::chrono::seconds(2));
    if (!all) return all;
    // Filtered here too: a daemon of an older protocol ignores "run" and lists every job's.
    json list = json::array();
    for (const json& s : *all)
      if (str(s, "run_tag") == f.tag) list.push_back(s);
    bool open = false;
    for (const json& s : list) open = open || str(s, "state") != "closed";
    if (!open || std::chrono::steady_clock::now() >= until) return list;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
}

std::string budget_line(const json& d, const RunFacts& f) {
  const std::string given = str(d, "budget");
  if (given.empty() || given == "none") return "none (capture only: nothing was moved)";
  // budget_bytes is the budget in force as the executor last reported it (0: never applied).
  const std::uint64_t applied = u64(d, "budget_bytes");
  if (applied == 0) return fmt::format("{} ({}): never applied (no iteration of the job was learned)", f.budget_text, given);
  if (given == format_bytes(applied)) return fmt::format("{} ({} bytes)", given, applied);
  return fmt::format("{} = {} ({} bytes)", given, format_bytes(applied), applied);
}

void print_session(const json& d, const RunFacts& f) {
  // The job's own allocations at their most (capuchin never changes them); the executor counts
  // in whole pages, which is what a "0.5x" budget is a multiple of.
  const std::uint64_t allocated = u64(d, "peak_bytes"), counted = u64(d, "executor_natural_peak_bytes");
  std::string natural = allocated ? format_bytes(allocated) + " allocated" : std::string("not seen");
  if (counted && format_bytes(counted) != format_bytes(allocated))
    natural += fmt::format(" ({} as the executor counts it, in whole pages)", format_bytes(counted));
  fmt::print(stderr, "  session {} (pid {}, {}{})\n", u64(d, "id"), u64(d, "pid"), str(d, "state"),
             str(d, "close_reason").empty() ? "" : ": " + str(d, "close_reason"));
  fmt::print(stderr, "    budget         {}\n", budget_line(d, f));
  fmt::print(stderr, "    natural peak   {}\n", natural);
  const std::uint64_t resident = u64(d, "peak_resident_bytes");
  fmt::print(stderr, "    resident peak  {}\n",
             resident ? format_bytes(resident) + " (on the device while the budget applied; the executor's count)"
                      : fmt::format("{} allocated (no executor: nothing was moved)", format_bytes(u64(d, "peak_bytes"))));
  const auto st = d.find("stall_s");
  const double stall_s = st != d.end() && st->is_number() ? st->get<double>() : 0.0;
  fmt::print(stderr, "    moved          evicted {}, prefetched {}, recomputed {}; {} stalls{}\n",
             format_bytes(u64(d, "evicted_bytes")), format_bytes(u64(d, "prefetched_bytes")),
             format_bytes(u64(d, "recomputed_bytes")), u64(d, "stalls"),
             stall_s > 0 ? fmt::format(" ({:.3f} s)", stall_s) : std::string());
  fmt::print(stderr, "    plans applied  {} ({} made by capuchind, {} in the job)\n",
             u64(d, "plans_from_daemon") + u64(d, "plans_embedded"), u64(d, "plans_from_daemon"), u64(d, "plans_embedded"));
  const std::string log = str(d, "decision_log");
  fmt::print(stderr, "    decision log   {}\n", log.empty() ? std::string("none (the daemon keeps no log directory)") : log);
}

// As a POSIX shell reads it back: bare when only safe characters, else in single quotes.
std::string shell_quoted(const std::string& s) {
  if (!s.empty() && s.find_first_not_of("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789/._-+=%:,@") ==
                        std::string::npos)
    return s;
  std::string q = "'";
  for (char c : s) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return q + "'";
}

}  // namespace

std::string make_run_tag() {
  const auto ns = std::chrono::duration_cast<std::chrono::nanoseconds>(
      std::chrono::system_clock::now().time_since_epoch()).count();
  return fmt::format("{}-{}", getpid(), ns);
}

void print_run_summary(const RunFacts& f, std::chrono::milliseconds wait) {
  fmt::print(stderr, "\ncapuchin run: the job ended ({}); summary:\n",
             f.exit_status == 0 ? std::string("exit status 0")
                                : f.exit_status > 128 ? fmt::format("signal {}", f.exit_status - 128)
                                                      : fmt::format("exit status {}", f.exit_status));
  auto sessions = closed_sessions(f, wait);
  std::vector<std::string> logs;
  if (!sessions) {
    fmt::print(stderr, "  capuchind on {} could not be asked ({}); the executor's own summary is in the job's log "
                       "(CAPUCHIN_LOG=info)\n", f.socket, sessions.error().message);
  } else if (sessions->empty()) {
    fmt::print(stderr, "  no process of the job attached to capuchind (no CUDA use seen, or the daemon was unreachable)\n");
  }
  std::vector<std::uint64_t> applied;  // each session's budget in force, for the report command
  if (sessions) {
    for (const json& s : *sessions) {
      auto d = query_daemon(f.socket, "session", json{{"session", s.value("id", 0ull)}}, std::chrono::seconds(2));
      if (!d) {
        fmt::print(stderr, "  session {} (pid {}): its details could not be had ({})\n", u64(s, "id"), u64(s, "pid"),
                   d.error().message);
        continue;
      }
      print_session(*d, f);
      applied.push_back(u64(*d, "budget_bytes"));
      if (!str(*d, "decision_log").empty()) logs.push_back(str(*d, "decision_log"));
    }
  }
  // The executor's own log holds what the daemon's session logs hold: named only without them.
  if (logs.empty() && !f.decision_log_env.empty()) logs.push_back(f.decision_log_env);
  if (!f.record_path.empty()) fmt::print(stderr, "  trace            {}\n", f.record_path);
  if (!logs.empty() || !f.record_path.empty()) {
    std::string files;
    for (const auto& l : logs) files += " " + shell_quoted(l);
    if (!f.record_path.empty()) files += " " + shell_quoted(f.record_path);
    // The bytes the executor applied (a "60%" or "0.5x" resolved against this job, not against
    // report's GPU profile or the trace); the text as given when they differ or are unknown.
    const bool one = !applied.empty() && applied.front() > 0 &&
                     std::all_of(applied.begin(), applied.end(), [&](std::uint64_t b) { return b == applied.front(); });
    const std::string as_run = one ? std::to_string(applied.front()) : f.budget_text;
    const std::string budget = as_run.empty() || f.record_path.empty() ? "" : " --budget " + shell_quoted(as_run);
    fmt::print(stderr, "  report:          capuchin report{}{} -o report.html\n", files, budget);
  }
  fmt::print(stderr, "  (--quiet leaves this summary out)\n");
}

}  // namespace capuchin::cli
