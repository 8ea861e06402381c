// `capuchin trace stats|validate FILE...`: read traces (checking every rule of the format)
// and print what is in them: a table for people, one JSON object per file with --json.
#include <fmt/format.h>

#include <cstdio>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "capuchin/learn.hpp"
#include "capuchin/trace_import.hpp"
#include "capuchin/trace_model.hpp"
#include "capuchin/units.hpp"
#include "commands.hpp"
#include "trace_load.hpp"

namespace capuchin::cli {
namespace {

using trace::TraceStats;

nlohmann::ordered_json stats_json(const std::string& file, const trace::Trace& t, const TraceStats& s) {
  nlohmann::ordered_json j;
  j["file"] = file;
  if (!t.header.model.empty()) j["model"] = t.header.model;
  j["events"] = s.events;
  j["kernels"] = s.kernels;
  j["allocs"] = s.allocs;
  j["frees"] = s.frees;
  j["copies"] = s.copies;
  j["syncs"] = s.syncs;
  j["iterations"] = s.iterations;
  j["distinct_kernel_names"] = s.distinct_kernel_names;
  j["peak_bytes"] = s.peak_bytes;
  j["peak_line"] = s.peak_event == trace::kNone ? 0 : s.peak_event + 2;
  j["iteration_peak_bytes"] = s.iteration_peak_bytes;
  j["persistent_bytes"] = s.persistent_bytes;
  j["alloc_bytes_total"] = s.alloc_bytes_total;
  j["copy_bytes"] = {{"h2d", s.copy_bytes[0]}, {"d2h", s.copy_bytes[1]}, {"d2d", s.copy_bytes[2]}};
  j["iteration_flops"] = s.iteration_flops;
  j["iteration_kernels"] = s.iteration_kernels;
  return j;
}

std::string join_sizes(const std::vector<std::uint64_t>& v) {
  std::string r;
  for (std::size_t i = 0; i < v.size(); ++i) r += (i ? ", " : "") + format_bytes(v[i]);
  return r.empty() ? "-" : r;
}

std::string gflops_per_iter(const std::vector<double>& v) {
  if (v.empty()) return "-";
  std::string r;
  for (std::size_t i = 0; i < v.size(); ++i) r += fmt::format("{}{:.1f}", i ? ", " : "", v[i] / 1e9);
  return r;
}

int run_stats(const std::vector<std::string>& files, bool json) {
  int rc = 0;
  struct Row { std::string file; trace::Trace t; TraceStats s; };
  std::vector<Row> rows;
  for (const auto& f : files) {
    auto t = load_trace_with_iterations(f);
    if (!t) {
      fmt::print(stderr, "{}\n", t.error().message());
      rc = 1;
      continue;
    }
    auto live = trace::compute_liveness(*t);
    auto s = trace::compute_stats(*t, live);
    if (json) {
      fmt::print("{}\n", stats_json(f, *t, s).dump());
    } else {
      rows.push_back({f, std::move(*t), std::move(s)});
    }
  }
  if (!json && !rows.empty()) {
    std::size_t w = 5;
    for (const auto& r : rows) w = std::max(w, r.file.size());
    fmt::print("{:<{}}  {:>7}  {:>7}  {:>6}  {:>5}  {:>10}  {:>10}  {:<34}  {}\n", "trace", w, "events", "kernels",
               "allocs", "iters", "peak", "persistent", "peak per iteration", "GFLOP per iteration");
    for (const auto& r : rows) {
      fmt::print("{:<{}}  {:>7}  {:>7}  {:>6}  {:>5}  {:>10}  {:>10}  {:<34}  {}\n", r.file, w, r.s.events, r.s.kernels,
                 r.s.allocs, r.s.iterations, format_bytes(r.s.peak_bytes), format_bytes(r.s.persistent_bytes),
                 join_sizes(r.s.iteration_peak_bytes), gflops_per_iter(r.s.iteration_flops));
    }
    fmt::print("(peak = most bytes live at once, exact values with --json)\n");
  }
  return rc;
}

int run_validate(const std::vector<std::string>& files, bool quiet) {
  int rc = 0;
  for (const auto& f : files) {
    auto r = trace::TraceReader::open(f);
    if (!r) {
      fmt::print(stderr, "{}\n", r.error().message());
      rc = 1;
      continue;
    }
    trace::EventView ev;
    std::uint64_t n = 0;
    for (;;) {
      auto more = r->next(ev);
      if (!more) {
        fmt::print(stderr, "{}\n", more.error().message());
        rc = 1;
        break;
      }
      if (!*more) {
        if (!quiet) fmt::print("{}: valid ({} events)\n", f, n);
        break;
      }
      ++n;
    }
  }
  return rc;
}

// What the learner finds without the trace's `iter` markers: the period, the iterations,
// whether the last two iterations' tensors match one to one, and whether the iterations
// agree with the markers when the trace has them.
int run_learn(const std::vector<std::string>& files, bool json) {
  int rc = 0;
  for (const auto& f : files) {
    auto t = trace::load_trace(f);
    if (!t) {
      fmt::print(stderr, "{}\n", t.error().message());
      rc = 1;
      continue;
    }
    const learn::IterationSplit s = learn::detect_iterations(*t);
    nlohmann::ordered_json j;
    j["file"] = f;
    j["found"] = s.found;
    if (!s.found) j["reason"] = s.reason;
    j["period_kernels"] = s.period_kernels;
    j["iterations"] = nlohmann::ordered_json::array();
    for (const auto& it : s.iterations)
      j["iterations"].push_back({{"n", it.n}, {"begin_line", it.begin + 2}, {"end_line", it.end + 1}});
    // The trace may end inside an iteration (the job's tear-down): compare complete ones.
    std::size_t complete = s.iterations.size();
    if (complete > 0) {
      std::uint32_t k = 0;
      for (std::uint32_t e = s.iterations.back().begin; e < s.iterations.back().end; ++e) k += t->events[e].op == trace::Op::Kernel;
      if (k < s.period_kernels) {
        --complete;
        j["last_iteration_partial"] = true;
      }
    }
    if (complete >= 2) {
      const auto& a = s.iterations[complete - 2];
      const auto& b = s.iterations[complete - 1];
      const learn::IdentityMap m = learn::match_iterations(*t, a, b);
      j["identities_stable"] = m.mismatch_event == trace::kNone;
      if (m.mismatch_event != trace::kNone) j["first_difference_line"] = m.mismatch_event + 2;
      j["tensors_per_iteration"] = m.b_of_a.size();
    }
    if (!t->iterations.empty()) {
      bool agree = s.iterations.size() == t->iterations.size();
      for (std::size_t i = 1; agree && i < s.iterations.size(); ++i) agree = s.iterations[i].begin == t->iterations[i].begin;
      j["markers_agree"] = agree;
    }
    if (json) {
      fmt::print("{}\n", j.dump());
      continue;
    }
    if (!s.found) {
      fmt::print("{}: no repeating iteration found ({})\n", f, s.reason);
      continue;
    }
    fmt::print("{}: {} iterations of {} kernels", f, s.iterations.size(), s.period_kernels);
    if (j.contains("identities_stable"))
      fmt::print(", last two complete ones {}", j["identities_stable"].get<bool>() ? "match tensor for tensor" : "differ");
    if (j.contains("markers_agree")) fmt::print(", {} the trace's iter markers", j["markers_agree"].get<bool>() ? "agree with" : "differ from");
    fmt::print("\n");
    for (const auto& it : s.iterations) fmt::print("  iteration {}: lines {}-{}\n", it.n, it.begin + 2, it.end + 1);
  }
  return rc;
}

// `trace import simrd LOG -o OUT`: DTR's operator log as a trace (trace_import.hpp).
int run_import_simrd(const std::string& in, const std::string& out, std::string model) {
  if (model.empty()) {  // the log's file name up to its first '-' (resnet32-56-9000000000.0-....log.gz)
    const std::size_t slash = in.find_last_of('/');
    model = in.substr(slash == std::string::npos ? 0 : slash + 1);
    model = model.substr(0, model.find('-'));
  }
  auto r = trace::import_simrd_file(in, out, model);
  if (!r) {
    fmt::print(stderr, "capuchin trace import simrd: {}\n", r.error().message);
    return 1;
  }
  const trace::SimrdSummary& s = *r;
  fmt::print("{}: {} operators ({} in place), measured {:.1f} ms in all; {} allocations ({} parameters in the set-up), "
             "peak {}; {} views, {} zero-byte results, {} releases of undefined names ignored, {} lines before START "
             "skipped\n",
             out, s.calls + s.mutates, s.mutates, static_cast<double>(s.operator_ns) / 1e6, s.storages, s.setup_constants,
             format_bytes(s.peak_bytes), s.aliases, s.zero_byte_results, s.undefined_releases, s.skipped_before_start);
  return 0;
}

}  // namespace

void add_trace_command(CLI::App& app, int& exit_code) {
  auto* trace = app.add_subcommand("trace", "Read, check and measure tensor access traces");
  trace->require_subcommand(1);

  struct StatsOpts { std::vector<std::string> files; bool json = false; };
  auto so = std::make_shared<StatsOpts>();
  auto* stats = trace->add_subcommand("stats", "Events, kernels, allocations, iterations and memory peaks of each trace");
  stats->add_option("files", so->files, "trace files (.jsonl or .jsonl.gz)")->required();
  stats->add_flag("--json", so->json, "one JSON object per file instead of a table");
  stats->callback([so, &exit_code] { exit_code = run_stats(so->files, so->json); });

  struct ValidateOpts { std::vector<std::string> files; bool quiet = false; };
  auto vo = std::make_shared<ValidateOpts>();
  auto* validate = trace->add_subcommand("validate", "Check traces against the format; exit 1 and FILE:LINE: reason if not");
  validate->add_option("files", vo->files, "trace files")->required();
  validate->add_flag("-q,--quiet", vo->quiet, "print nothing for valid files");
  validate->callback([vo, &exit_code] { exit_code = run_validate(vo->files, vo->quiet); });

  auto lo = std::make_shared<StatsOpts>();
  auto* learn_cmd = trace->add_subcommand("learn", "Find the iterations and tensor identities without the trace's markers");
  learn_cmd->add_option("files", lo->files, "trace files")->required();
  learn_cmd->add_flag("--json", lo->json, "one JSON object per file");
  learn_cmd->callback([lo, &exit_code] { exit_code = run_learn(lo->files, lo->json); });

  auto* import = trace->add_subcommand("import", "Convert other tools' operator logs into traces");
  import->require_subcommand(1);
  struct ImportOpts { std::string in, out, model; };
  auto io = std::make_shared<ImportOpts>();
  auto* simrd = import->add_subcommand(
      "simrd", "DTR's simrd operator log (one PyTorch training step with measured operator times) as a one-iteration trace");
  simrd->add_option("file", io->in, "the log (.log or .log.gz)")->required();
  simrd->add_option("-o,--output", io->out, "the trace to write (.jsonl or .jsonl.gz); written whole or not at all")->required();
  simrd->add_option("--model", io->model, "the header's model name (default: the log's file name up to its first '-')");
  simrd->callback([io, &exit_code] { exit_code = run_import_simrd(io->in, io->out, io->model); });
}

}  // namespace capuchin::cli
