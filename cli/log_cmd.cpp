// `capuchin log FILE [--follow] [--filter evict,prefetch,...]`: a readable view of a decision
// log; `capuchin export perfetto FILE... -o out.json`: Chrome/Perfetto trace-event JSON with
// the job's kernels (simulated timing from a recorded trace), swaps on copy-engine tracks, a
// memory counter track (the simulator's own device bytes: live bytes, or with --budget the
// capuchin run's resident bytes), and the decision log's records on their own tracks with a
// counter of the bytes capuchin held off the device. `log --tensor ID` shows one tensor's
// records, `log --trace TRACE` names each tensor (capuchin/tensor_names.hpp).
// (`export memory-viz` is memviz_cmd.cpp.)
#include <fmt/format.h>
#include <sys/stat.h>
#include <zlib.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <sstream>
#include <thread>

#include "capuchin/budget.hpp"
#include "capuchin/units.hpp"
#include "commands.hpp"
#include "capuchin/tensor_names.hpp"
#include "report_data.hpp"
#include "trace_load.hpp"

namespace capuchin::cli {
namespace {

// One record per line; with a trace (the run's own, `capuchin run --record`: the same allocation
// ids), a tensor is also named as the report names it (capuchin/tensor_names.hpp).
std::string format_record(const DecisionRecord& r, const trace::TensorNames* names) {
  std::string s = fmt::format("{:>10.3f}s  pid {:<7} iter {:<5} {:<16}", r.t, r.pid, r.iteration, r.action);
  s += r.tensor ? fmt::format(" tensor {:<8}", *r.tensor) : std::string(16, ' ');
  s += fmt::format(" {:>10}", r.bytes ? format_bytes(r.bytes) : "-");
  if (!r.reason.empty()) s += "  " + r.reason;
  if (r.expected_s) s += fmt::format("  expected {:.6f}s", *r.expected_s);
  if (r.actual_s) s += fmt::format("  actual {:.6f}s", *r.actual_s);
  if (!r.note.empty()) s += "  (" + r.note + ")";
  if (names && r.tensor) {
    const auto i = names->find(*r.tensor);
    s += i ? "  [" + names->describe(*i) + "]" : std::string("  [not in the trace]");
  }
  return s;
}

std::set<std::string> split_filter(const std::string& f) {
  std::set<std::string> out;
  std::stringstream ss(f);
  std::string a;
  while (std::getline(ss, a, ','))
    if (!a.empty()) out.insert(a);
  return out;
}

// Reads a decision log through zlib, which reads plain files as they are and gzip ones
// inflated (a rotated log: decisions.jsonl.1.gz). Only whole lines are handed on: with
// --follow, a line still being written waits for its newline. --follow waits for a file that
// does not exist yet and starts over when the file is replaced or shrinks (rotation), like
// `tail -F`.
class LogReader {
 public:
  explicit LogReader(std::string path) : path_(std::move(path)) {}
  ~LogReader() { close(); }
  LogReader(const LogReader&) = delete;
  LogReader& operator=(const LogReader&) = delete;

  bool open() {
    close();
    f_ = gzopen(path_.c_str(), "rb");
    if (f_ == nullptr) return false;
    struct stat st {};
    inode_ = ::stat(path_.c_str(), &st) == 0 ? st.st_ino : 0;
    consumed_ = 0;
    pending_.clear();
    return true;
  }
  // Reads what is there; calls `line` for each whole line. false on a read error (said).
  template <class OnLine>
  bool drain(OnLine&& line, bool at_end_is_final) {
    char buf[1 << 16];
    for (;;) {
      const int n = gzread(f_, buf, sizeof buf);
      if (n < 0) {
        int code = 0;
        fmt::print(stderr, "capuchin log: {}: {}\n", path_, gzerror(f_, &code));
        return false;
      }
      if (n == 0) break;
      consumed_ += static_cast<std::uint64_t>(n);
      pending_.append(buf, static_cast<std::size_t>(n));
      std::size_t start = 0;
      for (std::size_t nl; (nl = pending_.find('\n', start)) != std::string::npos; start = nl + 1)
        line(std::string_view(pending_).substr(start, nl - start));
      pending_.erase(0, start);
    }
    if (at_end_is_final && !pending_.empty()) {  // the file ends without a newline: its last line
      line(std::string_view(pending_));
      pending_.clear();
    }
    gzclearerr(f_);  // at the end for now: more may be appended (zlib: for files being written)
    return true;
  }
  // The file was replaced or shrank since it was opened (its bytes so far are not the same).
  bool rotated() const {
    struct stat st {};
    if (::stat(path_.c_str(), &st) != 0) return false;  // gone for now: keep what is open
    return st.st_ino != inode_ || (gzdirect(f_) != 0 && static_cast<std::uint64_t>(st.st_size) < consumed_);
  }

 private:
  void close() {
    if (f_ != nullptr) gzclose(f_);
    f_ = nullptr;
  }
  std::string path_;
  gzFile f_ = nullptr;
  ino_t inode_ = 0;
  std::uint64_t consumed_ = 0;
  std::string pending_;
};

struct LogOptions {
  std::string file, filter, trace;
  std::optional<std::uint64_t> tensor;  // only this tensor's records
  bool follow = false;
};

int run_log(const LogOptions& o) {
  const std::string& file = o.file;
  const bool follow = o.follow;
  const auto want = split_filter(o.filter);
  std::optional<trace::Trace> t;
  std::optional<trace::TensorNames> names;
  if (!o.trace.empty()) {
    auto loaded = load_trace_with_iterations(o.trace);
    if (!loaded) {
      fmt::print(stderr, "capuchin log: --trace: {}\n", loaded.error().message());
      return 1;
    }
    names.emplace(t.emplace(std::move(*loaded)));
  }
  LogReader in(file);
  bool waited = false;
  while (!in.open()) {
    if (!follow) {
      fmt::print(stderr, "capuchin log: {}: cannot open ({})\n", file, std::strerror(errno));
      return 1;
    }
    if (!waited) fmt::print(stderr, "capuchin log: waiting for {} to appear\n", file), waited = true;
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
  }
  std::uint64_t lineno = 0, good = 0, bad = 0;
  bool not_a_log = false;
  auto on_line = [&](std::string_view text) {
    ++lineno;
    if (text.empty() || not_a_log) return;
    auto r = parse_decision_line(std::string(text));
    if (!r) {
      if (good == 0 && bad == 0) {  // the first record is not one: this is not a decision log
        fmt::print(stderr, "capuchin log: {} is not a capuchin decision log (line {}: {})\n", file, lineno,
                   r.error().message);
        not_a_log = true;
        return;
      }
      if (++bad <= 5) fmt::print(stderr, "{}:{}: {}\n", file, lineno, r.error().message);
      return;
    }
    ++good;
    if (!want.empty() && !want.count(r->action)) return;
    if (o.tensor && r->tensor != o.tensor) return;
    fmt::print("{}\n", format_record(*r, names ? &*names : nullptr));
  };
  for (;;) {
    if (!in.drain(on_line, !follow)) return 1;
    if (not_a_log) return 1;
    if (!follow) break;
    std::fflush(stdout);
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    if (in.rotated() && in.open()) lineno = 0;  // rotated: the new file from its start
  }
  if (bad > 5) fmt::print(stderr, "capuchin log: {}: {} malformed lines in all (the first 5 shown)\n", file, bad);
  return bad ? 1 : 0;
}

// ---- export perfetto --------------------------------------------------------------------------

using ojson = nlohmann::ordered_json;

void track_name(ojson& events, int pid, int tid, const std::string& name) {
  events.push_back({{"ph", "M"}, {"pid", pid}, {"tid", tid}, {"name", "thread_name"}, {"args", {{"name", name}}}});
}

int run_export(const std::vector<std::string>& files, const std::string& out, const std::string& gpu,
               const std::string& budget) {
  auto in = load_report_inputs(files);
  if (!in) {
    fmt::print(stderr, "capuchin export: {}\n", in.error().message);
    return 1;
  }
  ojson events = ojson::array();
  ojson simulated = nullptr;  // what the simulation of a trace was, for readers of the file
  const int kSim = 1, kLog = 2;
  if (in->trace) {
    auto v = simulate_view(*in->trace, gpu, budget);
    if (!v) {
      fmt::print(stderr, "capuchin export: {}\n", v.error().message);
      return 1;
    }
    const trace::Trace& t = *in->trace;
    const bool managed = v->budget_bytes > 0;
    events.push_back({{"ph", "M"}, {"pid", kSim}, {"name", "process_name"},
                      {"args", {{"name", fmt::format("{} (simulated, GPU profile {}{})", in->trace_files.front(), v->gpu,
                                                     managed ? ", capuchin at budget " + format_bytes(v->budget_bytes) : "")}}}});
    track_name(events, kSim, 1, "compute stream");
    track_name(events, kSim, 2, "H2D copy engine");
    track_name(events, kSim, 3, "D2H copy engine");
    const auto& tl = managed ? v->managed_tl : v->natural_tl;
    for (const auto& e : tl) {
      const int tid = e.lane == sim::TimelineEntry::Lane::Compute ? 1 : e.lane == sim::TimelineEntry::Lane::H2D ? 2 : 3;
      std::string name(sim::to_string(e.kind));
      if (e.kind == sim::TimelineEntry::Kind::Kernel && e.event < t.events.size() && t.events[e.event].name != trace::kNone)
        name = t.names[t.events[e.event].name];
      ojson x = {{"ph", "X"}, {"pid", kSim}, {"tid", tid}, {"name", name}, {"cat", std::string(sim::to_string(e.kind))},
                 {"ts", e.start_s * 1e6}, {"dur", std::max(0.0, e.end_s - e.start_s) * 1e6}};
      ojson args = {{"event", e.event}};
      if (e.tensor != trace::kNone && e.tensor < t.tensors.size()) {
        args["tensor"] = t.tensors[e.tensor].id;
        args["bytes"] = t.tensors[e.tensor].bytes;
      }
      x["args"] = std::move(args);
      events.push_back(std::move(x));
    }
    simulated = {{"gpu", v->gpu}, {"natural_peak_bytes", v->natural_peak_bytes}};
    if (managed)
      simulated.update({{"budget_bytes", v->budget_bytes}, {"feasible", v->managed.feasible}, {"peak_bytes", v->managed.peak_bytes}});
    const auto& mem = managed ? v->managed_mem : v->natural_mem;
    std::uint64_t last = ~0ull;
    for (const auto& p : mem) {
      if (p.bytes == last) continue;
      last = p.bytes;
      events.push_back({{"ph", "C"}, {"pid", kSim}, {"name", managed ? "resident bytes" : "live bytes"},
                        {"ts", p.t_s * 1e6}, {"args", {{"bytes", p.bytes}}}});
    }
  }
  // Decisions: one Perfetto process per job process (a record's pid), so the logs of several
  // processes (ranks, separate runs) are never merged into one; each has its own tracks and its
  // own counter of the bytes held off the device.
  struct Proc {
    int export_pid;
  };
  std::map<std::int64_t, Proc> procs;
  std::string log_files;
  for (const auto& f : in->decision_files) {
    if (!log_files.empty()) log_files += ", ";
    log_files += f;
  }
  for (const auto& r : in->decisions) {
    auto [it, fresh] = procs.try_emplace(r.pid, Proc{kLog + static_cast<int>(procs.size())});
    const int pid = it->second.export_pid;
    if (fresh) {
      events.push_back({{"ph", "M"}, {"pid", pid}, {"name", "process_name"},
                        {"args", {{"name", fmt::format("decisions of pid {} ({})", r.pid, log_files)}}}});
      track_name(events, pid, 1, "compute (recompute, drop)");
      track_name(events, pid, 2, "H2D copy engine (prefetch, swap-in)");
      track_name(events, pid, 3, "D2H copy engine (evict)");
      track_name(events, pid, 4, "stalls");
      track_name(events, pid, 5, "daemon (plans, sessions)");
    }
    int tid = 5;
    if (r.action == "evict") tid = 3;
    else if (r.action == "prefetch" || r.action == "swapin_on_demand") tid = 2;
    else if (r.action == "recompute" || r.action == "drop") tid = 1;
    else if (r.action == "stall" || r.action == "oom") tid = 4;
    const double dur = r.actual_s ? *r.actual_s : r.expected_s ? *r.expected_s : 0.0;
    ojson args = {{"iteration", r.iteration}, {"bytes", r.bytes}, {"pid", r.pid}};
    if (r.tensor) args["tensor"] = *r.tensor;
    if (!r.reason.empty()) args["reason"] = r.reason;
    if (!r.note.empty()) args["note"] = r.note;
    if (tid == 5 || dur <= 0)
      events.push_back({{"ph", "i"}, {"s", "t"}, {"pid", pid}, {"tid", tid}, {"name", r.action}, {"ts", r.t * 1e6}, {"args", args}});
    else
      events.push_back({{"ph", "X"}, {"pid", pid}, {"tid", tid}, {"name", r.action}, {"ts", r.t * 1e6},
                        {"dur", dur * 1e6}, {"args", args}});
  }
  // What the decisions did to memory, per process: the bytes capuchin held off the device (the
  // report's chart of a decision log: report_data.hpp off_device_bytes).
  for (const auto& series : off_device_bytes(in->decisions))
    for (const auto& p : series.pts)
      events.push_back({{"ph", "C"}, {"pid", procs.at(series.pid).export_pid}, {"name", "bytes held off the device by capuchin"},
                        {"ts", p.t_s * 1e6}, {"args", {{"bytes", p.bytes}}}});
  ojson other = {{"generator", "capuchin export perfetto"}, {"timing", "simulated for traces; decision-log times as recorded"}};
  if (!simulated.is_null()) other["simulated"] = std::move(simulated);
  ojson doc = {{"traceEvents", std::move(events)}, {"displayTimeUnit", "ms"}, {"otherData", std::move(other)}};
  std::ofstream os(out);
  if (!os) {
    fmt::print(stderr, "capuchin export: cannot write {}\n", out);
    return 1;
  }
  os << doc.dump(-1, ' ', false, ojson::error_handler_t::replace) << "\n";
  if (!os.good()) {
    fmt::print(stderr, "capuchin export: write to {} failed\n", out);
    return 1;
  }
  fmt::print("wrote {} ({} trace events)\n", out, doc["traceEvents"].size());
  return 0;
}

}  // namespace

int run_report(const std::vector<std::string>& files, const std::string& out, const std::string& gpu,
               const std::string& budget);

void add_log_commands(CLI::App& app, int& exit_code) {
  auto lo = std::make_shared<LogOptions>();
  auto tensor = std::make_shared<std::uint64_t>(0);
  CLI::App* log = app.add_subcommand("log", "a readable view of a decision log");
  log->add_option("FILE", lo->file, "decision log (JSON lines)")->required();
  log->add_flag("--follow,-f", lo->follow, "keep reading as the log grows (and after rotation)");
  log->add_option("--filter", lo->filter, "only these actions, comma-separated (evict,prefetch,recompute,stall,plan,...)");
  CLI::Option* tensor_opt = log->add_option("--tensor", *tensor, "only the records of this tensor (its allocation id)");
  log->add_option("--trace", lo->trace,
                  "the run's recorded trace (capuchin run --record): name each tensor (producing kernel, size, position)");
  log->callback([&exit_code, lo, tensor, tensor_opt] {
    if (tensor_opt->count() > 0) lo->tensor = *tensor;
    exit_code = run_log(*lo);
  });

  struct ExportOpts {
    std::vector<std::string> files;
    std::string out, gpu = "h200", budget;
  };
  auto eo = std::make_shared<ExportOpts>();
  CLI::App* exp = app.add_subcommand("export", "export for other tools");
  exp->require_subcommand(1);
  CLI::App* pf = exp->add_subcommand("perfetto", "Chrome/Perfetto trace-event JSON (load in ui.perfetto.dev)");
  pf->add_option("FILE", eo->files, "recorded trace and/or decision log(s)")->required();
  pf->add_option("-o,--output", eo->out, "output JSON file")->required();
  pf->add_option("--gpu", eo->gpu, "GPU profile for a trace's simulated timing");
  pf->add_option("--budget", eo->budget, std::string("simulate the capuchin policy at this budget: ") + kBudgetHelp);
  pf->callback([&exit_code, eo] { exit_code = run_export(eo->files, eo->out, eo->gpu, eo->budget); });
  add_memviz_command(*exp, exit_code);

  auto ro = std::make_shared<ExportOpts>();
  CLI::App* rep = app.add_subcommand("report", "one self-contained HTML page: memory over time, swaps, stalls, top tensors");
  rep->add_option("FILE", ro->files, "recorded trace and/or decision log(s)")->required();
  rep->add_option("-o,--output", ro->out, "output HTML file")->required();
  rep->add_option("--gpu", ro->gpu, "GPU profile for a trace's simulated timing");
  rep->add_option("--budget", ro->budget, std::string("simulate the capuchin policy at this budget: ") + kBudgetHelp);
  rep->callback([&exit_code, ro] { exit_code = run_report(ro->files, ro->out, ro->gpu, ro->budget); });
}

}  // namespace capuchin::cli
