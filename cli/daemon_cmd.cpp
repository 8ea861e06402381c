// The daemon's user commands: `capuchin status | sessions | session ID | tensors ID |
// plan ID | decisions ID | set-budget ID X | metrics` (aligned tables, or the daemon's JSON
// with --json) and `capuchin run [--budget X] [--backend uvm|pinned] [--record F] -- cmd...`
// (starts capuchind if none answers, preloads libcapuchin.so, returns the command's status).
// `--socket PATH` is accepted before or after the subcommand.
#include <fmt/format.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "alloc_conf.hpp"
#include "capuchin/budget.hpp"
#include "capuchin/units.hpp"
#include "client.hpp"
#include "commands.hpp"
#include "install_paths.hpp"
#include "job.hpp"
#include "run_summary.hpp"

namespace capuchin::cli {
namespace {

using json = nlohmann::json;

std::string g_socket;  // --socket, on the app and on every daemon subcommand

std::string bytes_cell(const json& j, const char* key) {
  return j.contains(key) && j[key].is_number_unsigned() ? format_bytes(j[key].get<std::uint64_t>()) : "-";
}
std::string str_cell(const json& j, const char* key) {
  if (!j.contains(key)) return "-";
  return j[key].is_string() ? j[key].get<std::string>() : j[key].dump();
}

// An aligned table: every column as wide as its widest cell; numbers right-aligned.
void print_table(const std::vector<std::string>& head, const std::vector<std::vector<std::string>>& rows,
                 const std::vector<bool>& right) {
  std::vector<std::size_t> w(head.size());
  for (std::size_t c = 0; c < head.size(); ++c) w[c] = head[c].size();
  for (const auto& r : rows)
    for (std::size_t c = 0; c < r.size() && c < w.size(); ++c) w[c] = std::max(w[c], r[c].size());
  auto line = [&](const std::vector<std::string>& r) {
    std::string s;
    for (std::size_t c = 0; c < r.size(); ++c) {
      const bool last = c + 1 == r.size();
      if (right[c]) s += fmt::format("{:>{}}", r[c], w[c]);
      else s += last ? r[c] : fmt::format("{:<{}}", r[c], w[c]);
      if (!last) s += "  ";
    }
    fmt::print("{}\n", s);
  };
  line(head);
  for (const auto& r : rows) line(r);
}

void print_sessions(const json& arr) {
  std::vector<std::vector<std::string>> rows;
  for (const auto& s : arr)
    rows.push_back({str_cell(s, "id"), str_cell(s, "pid"), str_cell(s, "device"), str_cell(s, "state"), str_cell(s, "mode"),
                    str_cell(s, "learner"), str_cell(s, "iteration"), s.value("budget_bytes", 0ull) ? bytes_cell(s, "budget_bytes") : "none",
                    bytes_cell(s, "allocated_bytes"), bytes_cell(s, "resident_bytes"), bytes_cell(s, "peak_bytes"),
                    str_cell(s, "events"), str_cell(s, "started_at"), str_cell(s, "ended_at"), str_cell(s, "cmdline")});
  // ALLOCATED: the job's live allocations; RESIDENT: on the device (the executor's count: under a
  // budget, allocated tensors may be evicted); PEAK: the most allocated at once. STARTED and
  // ENDED are UTC (a closed session may come from an earlier daemon: its store keeps them).
  print_table({"ID", "PID", "DEVICE", "STATE", "MODE", "LEARNER", "ITER", "BUDGET", "ALLOCATED", "RESIDENT", "PEAK", "EVENTS",
               "STARTED", "ENDED", "COMMAND"},
              rows, {true, true, true, false, false, false, true, true, true, true, true, true, false, false, false});
}

// `capuchin sessions` without --all: the attached sessions, then how many closed ones the
// daemon keeps (across its restarts too), so an empty table does not read as "forgotten".
void print_attached_sessions(const json& all) {
  json attached = json::array();
  std::size_t closed = 0;
  for (const auto& s : all) {
    if (s.value("state", std::string()) == "closed") ++closed;
    else attached.push_back(s);
  }
  print_sessions(attached);
  if (closed > 0)
    fmt::print("{} closed session{} kept (capuchin sessions --all lists them)\n", closed, closed == 1 ? "" : "s");
}

// The daemon's metrics (Prometheus text exposition: `name{label="v",...} value` lines, `#`
// comments) as JSON: one object per sample, {"name", "labels", "value"}. A line that does not
// parse is kept as {"unparsed": line}, so nothing is lost.
json metrics_json(const std::string& text) {
  json samples = json::array();
  std::size_t pos = 0;
  while (pos < text.size()) {
    std::size_t eol = text.find('\n', pos);
    if (eol == std::string::npos) eol = text.size();
    const std::string line = text.substr(pos, eol - pos);
    pos = eol + 1;
    if (line.empty() || line[0] == '#') continue;
    const std::size_t brace = line.find('{'), space = line.rfind(' ');
    json sample;
    json labels = json::object();
    std::size_t name_end = space;
    bool ok = space != std::string::npos && space > 0;
    if (ok && brace != std::string::npos && brace < space) {
      name_end = brace;
      const std::size_t close = line.find('}', brace);
      ok = close != std::string::npos && close < space;
      for (std::size_t p = brace + 1; ok && p < close;) {  // k="v" pairs, comma separated
        const std::size_t eq = line.find("=\"", p), end = eq == std::string::npos ? eq : line.find('"', eq + 2);
        if (eq == std::string::npos || end == std::string::npos || end > close) {
          ok = false;
          break;
        }
        labels[line.substr(p, eq - p)] = line.substr(eq + 2, end - eq - 2);
        p = end + 1 < close && line[end + 1] == ',' ? end + 2 : end + 1;
      }
    }
    char* stop = nullptr;
    const std::string num = ok ? line.substr(space + 1) : std::string();
    const double value = ok ? std::strtod(num.c_str(), &stop) : 0;
    if (!ok || stop == num.c_str() || *stop != '\0') {
      samples.push_back({{"unparsed", line}});
      continue;
    }
    sample["name"] = line.substr(0, name_end);
    sample["labels"] = std::move(labels);
    sample["value"] = value;
    samples.push_back(std::move(sample));
  }
  return samples;
}

int show(const std::string& method, const json& params, bool as_json, void (*human)(const json&)) {
  auto r = query_daemon(resolve_socket(g_socket), method, params);
  if (!r) {
    fmt::print(stderr, "capuchin {}: {}\n", method, r.error().message);
    return 1;
  }
  if (as_json && r->is_string()) {  // text answers (metrics) made JSON, as --json promises
    const json out = method == "metrics" ? metrics_json(r->get<std::string>()) : json(r->get<std::string>());
    fmt::print("{}\n", out.dump(-1, ' ', false, json::error_handler_t::replace));
  } else if (as_json || human == nullptr) {
    if (r->is_string()) fmt::print("{}", r->get<std::string>());
    else fmt::print("{}\n", r->dump(-1, ' ', false, json::error_handler_t::replace));
  } else {
    human(*r);
  }
  return 0;
}

void human_status(const json& r) {
  fmt::print("capuchind {} (pid {}), up {:.1f} s, socket {}\n", str_cell(r, "version"), str_cell(r, "pid"),
             r.value("uptime_s", 0.0), str_cell(r, "socket"));
  fmt::print("decision logs: {}; GPU profile: {}; {} session(s) attached\n", str_cell(r, "log_dir"),
             str_cell(r, "gpu_profile"), r.contains("sessions") ? r["sessions"].size() : 0);
  if (r.contains("state_file"))  // absent from a daemon older than the session store
    fmt::print("closed sessions: {} kept in {} (capuchin sessions --all)\n", str_cell(r, "closed_sessions_kept"),
               r["state_file"].is_string() ? r["state_file"].get<std::string>() : std::string("memory only"));
  if (r.contains("sessions") && !r["sessions"].empty()) print_sessions(r["sessions"]);
}

void human_session(const json& s) {
  std::vector<std::vector<std::string>> rows;
  for (auto it = s.begin(); it != s.end(); ++it) {
    std::string v = it.value().is_string() ? it.value().get<std::string>() : it.value().dump();
    if (it.key().ends_with("_bytes") && it.value().is_number_unsigned()) v = format_bytes(it.value().get<std::uint64_t>());
    if (it.key() == "iteration_peak_bytes" && it.value().is_array()) {
      v.clear();
      std::size_t n = it.value().size(), from = n > 8 ? n - 8 : 0;
      for (std::size_t i = from; i < n; ++i) v += (v.empty() ? "" : ", ") + format_bytes(it.value()[i].get<std::uint64_t>());
      if (from) v = "..., " + v;
      if (v.empty()) v = "-";
    }
    rows.push_back({it.key(), v});
  }
  print_table({"FIELD", "VALUE"}, rows, {false, false});
}

void human_tensors(const json& arr) {
  std::vector<std::vector<std::string>> rows;
  for (const auto& t : arr) {
    std::string planned;
    for (const auto& p : t["planned"]) {
      if (!planned.empty()) planned += ',';
      planned += p.get<std::string>();
    }
    rows.push_back({str_cell(t, "identity"), str_cell(t, "observed_id"), bytes_cell(t, "bytes"), str_cell(t, "role"),
                    str_cell(t, "state"), str_cell(t, "accesses_per_iteration"), planned.empty() ? "-" : planned});
  }
  if (rows.empty()) fmt::print("no learned iteration yet\n");
  else print_table({"TENSOR", "ID", "SIZE", "ROLE", "STATE", "ACCESSES/ITER", "PLANNED"}, rows,
                   {false, true, true, false, false, true, false});
}

void human_plan(const json& p) {
  fmt::print("{}\n", str_cell(p, "summary"));
  if (!p.contains("plan") || !p["plan"].is_object()) return;
  std::vector<std::vector<std::string>> rows;
  for (const auto& d : p["plan"]["decisions"]) {
    const auto& t = d["tensor"];
    const std::string tensor = t.contains("local") ? fmt::format("local:{}", t["local"].dump())
                                                   : fmt::format("carried:{}", t.value("persistent", 0ull));
    rows.push_back({str_cell(d, "at"), str_cell(d, "action"), tensor, bytes_cell(d, "bytes"), str_cell(d, "reason"),
                    fmt::format("{:.6f}", d.value("expected_cost_s", 0.0))});
  }
  if (!rows.empty()) print_table({"AT", "ACTION", "TENSOR", "BYTES", "REASON", "EXPECTED_S"}, rows,
                                 {true, false, false, true, false, true});
}

void human_decisions(const json& arr) {
  std::vector<std::vector<std::string>> rows;
  for (const auto& d : arr)
    rows.push_back({fmt::format("{:.3f}", d.value("t", 0.0)), str_cell(d, "iteration"), str_cell(d, "action"),
                    d.contains("tensor") ? str_cell(d, "tensor") : "-", bytes_cell(d, "bytes"), str_cell(d, "reason"),
                    str_cell(d, "note")});
  print_table({"T(s)", "ITER", "ACTION", "TENSOR", "BYTES", "REASON", "NOTE"}, rows,
              {true, true, false, true, true, false, false});
}

// ---- run -----------------------------------------------------------------------------------

struct RunOptions {
  std::string budget, backend, record;
  std::vector<std::string> cmd;
  int idle_exit_s = 60;
  bool quiet = false;
};

// PyTorch reads PYTORCH_ALLOC_CONF (2.9 on) or PYTORCH_CUDA_ALLOC_CONF, which first varies by
// version: each one set is merged (alloc_conf.hpp), and PYTORCH_CUDA_ALLOC_CONF is always set.
void set_pytorch_alloc_conf() {
  struct Variable {
    const char* name;
    bool always;
  };
  for (const Variable& var : {Variable{"PYTORCH_CUDA_ALLOC_CONF", true}, Variable{"PYTORCH_ALLOC_CONF", false}}) {
    const char* user = std::getenv(var.name);
    if (user == nullptr && !var.always) continue;
    const MergedAllocConf merged =
        merge_pytorch_alloc_conf(user != nullptr ? std::optional<std::string_view>(user) : std::nullopt);
    for (const std::string& note : merged.notes) fmt::print(stderr, "capuchin run: note: {}: {}\n", var.name, note);
    ::setenv(var.name, merged.value.c_str(), 1);
  }
}

int run_command(const RunOptions& o) {
  if (o.cmd.empty()) {
    fmt::print(stderr, "capuchin run: no command given (capuchin run [options] -- cmd args...)\n");
    return 2;
  }
  if (!o.budget.empty())
    if (auto b = parse_budget(o.budget); !b) {
      fmt::print(stderr, "capuchin run: --budget: {}\n", b.error().message);
      return 2;
    }
  if (!o.backend.empty() && o.backend != "uvm" && o.backend != "pinned") {
    fmt::print(stderr, "capuchin run: --backend must be uvm or pinned, not '{}'\n", o.backend);
    return 2;
  }
  const auto found = find_interposer();  // CAPUCHIN_INTERPOSER, else beside this executable's prefix
  if (!found) {
    fmt::print(stderr, "capuchin run: {}\n", found.error().message);
    return 2;
  }
  const std::string& lib = *found;
  const std::string socket = resolve_socket(g_socket);
  // The job starts within a few seconds whatever the daemon does; it attaches later if a
  // daemon comes to answer. A socket that does not answer is not replaced (its daemon may
  // be busy or stopped, and a second one would take the socket from under it).
  switch (probe_daemon(socket, std::chrono::milliseconds(1500))) {
    case DaemonProbe::Answers: break;
    case DaemonProbe::Unresponsive:
      fmt::print(stderr, "capuchin run: warning: capuchind on {} does not answer (stopped or hung?); running without "
                         "it (the job attaches if it recovers)\n", socket);
      break;
    case DaemonProbe::Absent:
      if (auto s = start_daemon(socket, o.idle_exit_s, std::chrono::seconds(3)); !s)
        fmt::print(stderr, "capuchin run: warning: {}; running without a daemon\n", s.error().message);
      break;
  }
  const char* old = std::getenv("LD_PRELOAD");
  // Preloads already there come first (a sanitizer runtime must stay first in the list).
  const std::string preload = old != nullptr && old[0] != '\0' ? std::string(old) + ":" + lib : lib;
  ::setenv("LD_PRELOAD", preload.c_str(), 1);
  ::setenv("CAPUCHIN_SOCKET", socket.c_str(), 1);
  if (!o.budget.empty()) ::setenv("CAPUCHIN_BUDGET", o.budget.c_str(), 1);
  if (!o.backend.empty()) ::setenv("CAPUCHIN_BACKEND", o.backend.c_str(), 1);
  if (!o.record.empty()) ::setenv("CAPUCHIN_RECORD", o.record.c_str(), 1);
  const std::string tag = make_run_tag();
  ::setenv("CAPUCHIN_RUN_TAG", tag.c_str(), 1);  // the summary finds the job's sessions by it
  // Per-tensor allocations must reach CUDA's allocator to be seen (no framework caching).
  set_pytorch_alloc_conf();
  ::setenv("TF_GPU_ALLOCATOR", "cuda_malloc_async", 0);
  ::setenv("XLA_PYTHON_CLIENT_ALLOCATOR", "platform", 0);

  std::vector<char*> argv;
  for (const auto& a : o.cmd) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  const int status = run_job(argv);
  if (!o.quiet) {
    const char* dlog = std::getenv("CAPUCHIN_DECISION_LOG");
    print_run_summary(RunFacts{socket, tag, o.budget, o.record, dlog != nullptr ? dlog : "", status},
                      std::chrono::seconds(3));
  }
  return status;
}
}  // namespace

void add_daemon_commands(CLI::App& app, int& exit_code) {
  app.add_option("--socket", g_socket, "the daemon's socket (default: $CAPUCHIN_SOCKET, else the per-user default)");
  auto add = [&](const char* name, const char* help, bool takes_id, const char* method, void (*human)(const json&)) {
    CLI::App* c = app.add_subcommand(name, help);
    c->add_option("--socket", g_socket, "the daemon's socket");
    auto as_json = std::make_shared<bool>(false);
    auto id = std::make_shared<std::string>();
    c->add_flag("--json", *as_json, "print the daemon's JSON answer");
    auto action = std::make_shared<std::string>();
    auto since = std::make_shared<double>(-1);
    auto limit = std::make_shared<std::size_t>(0);
    auto all = std::make_shared<bool>(false);
    if (takes_id) c->add_option("ID", *id, "session id (capuchin sessions)")->required();
    if (std::string(method) == "decisions") {
      c->add_option("--action", *action, "only this action (evict, prefetch, plan, relearn, ...)");
      c->add_option("--since", *since, "only records at or after this time (s since the session began)");
    }
    if (std::string(method) == "decisions" || std::string(method) == "tensors")
      c->add_option("--limit", *limit, "at most this many rows");
    if (std::string(method) == "sessions")
      c->add_flag("--all", *all, "include closed sessions (kept across daemon restarts, the last 200 by default)");
    c->callback([&exit_code, method, human, as_json, id, action, since, limit, all] {
      json params = json::object();
      if (!id->empty()) params["session"] = *id;
      if (!action->empty()) params["action"] = *action;
      if (*since >= 0) params["since"] = *since;
      if (*limit > 0) params["limit"] = *limit;
      if (*all) params["all"] = true;
      if (std::string(method) == "sessions" && !*all && !*as_json) {  // the table counts the closed ones
        params["all"] = true;
        exit_code = show(method, params, false, print_attached_sessions);
        return;
      }
      exit_code = show(method, params, *as_json, human);
    });
  };
  add("status", "the daemon: version, uptime, attached sessions", false, "status", human_status);
  add("sessions", "attached sessions (--all: closed ones too, with their start and end times)", false, "sessions", print_sessions);
  add("session", "one session: mode, iteration, budget, memory, plan summary", true, "session", human_session);
  add("tensors", "the tensors of a session's learned iteration", true, "tensors", human_tensors);
  add("plan", "a session's current plan", true, "plan", human_plan);
  add("decisions", "a session's recent decisions", true, "decisions", human_decisions);
  add("metrics", "the daemon's metrics (Prometheus text format; --json: one {name, labels, value} object per sample)", false,
      "metrics", nullptr);

  CLI::App* sb = app.add_subcommand("set-budget", "change a session's memory budget live");
  sb->add_option("--socket", g_socket, "the daemon's socket");
  auto sb_id = std::make_shared<std::string>(), sb_budget = std::make_shared<std::string>();
  sb->add_option("ID", *sb_id, "session id")->required();
  sb->add_option("BUDGET", *sb_budget, kBudgetHelp)->required();
  sb->callback([&exit_code, sb_id, sb_budget] {
    exit_code = show("set-budget", json{{"session", *sb_id}, {"budget", *sb_budget}}, false, human_session);
  });

  auto ro = std::make_shared<RunOptions>();
  CLI::App* run = app.add_subcommand("run", "run a command under capuchin (starts capuchind if none answers)");
  run->add_option("--socket", g_socket, "the daemon's socket");
  run->add_option("--budget", ro->budget,
                 std::string("device-memory budget: ") + kBudgetHelp + "; a multiple applies once the job's first iteration has been learned");
  run->add_option("--backend", ro->backend, "where evicted tensors go: uvm or pinned");
  run->add_option("--record", ro->record, "also record the job's trace to this file (.gz: compressed)");
  run->add_option("--daemon-idle-exit", ro->idle_exit_s, "an auto-started daemon exits after this many idle seconds "
                                                 "(the next one still lists its closed sessions)");
  run->add_flag("--quiet", ro->quiet, "print no summary when the job ends");
  run->add_option("cmd", ro->cmd, "the command and its arguments (after --)")->required();
  run->positionals_at_end();
  run->footer("libcapuchin.so: $CAPUCHIN_INTERPOSER, else PREFIX/lib/capuchin/ (an install) or lib/ (a build tree) "
              "beside this capuchin's bin/; capuchind: $CAPUCHIN_DAEMON, else beside this capuchin");
  run->callback([&exit_code, ro] { exit_code = run_command(*ro); });
}

}  // namespace capuchin::cli
