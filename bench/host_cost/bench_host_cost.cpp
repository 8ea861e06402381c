// bench_host_cost: the host CPU time libcapuchin.so adds to a training job's CUDA calls, at
// the event rates and live-allocation counts of real models. Nothing here runs on a GPU: the
// calls go to a null driver (stub_driver.cpp) that returns at once, so what remains is our
// bookkeeping, measured against the same program without capuchin in the same run.
//
// For each shared trace it runs host_replay (its header says what is replayed) in five
// modes, each a fresh process, `--repeats` times (medians):
//   direct    no libcapuchin.so: the baseline
//   capture   LD_PRELOAD, CAPUCHIN_SINK=null (capture and the drain thread; events discarded)
//   exec      + CAPUCHIN_BUDGET above the peak (the executor serves every allocation; no move)
//   replay    exec with every kernel's written pointer declared (CAPUCHIN_KERNEL_OUTPUTS), so
//             each launch keeps a producer for its output as on a GPU, where probations find
//             most kernels replayable (the null driver's kernels write nothing: in `exec` no
//             probation says replayable and no producer is kept)
//   pressure  + CAPUCHIN_BUDGET = half the trace's natural peak: the executor evicts and
//             prefetches, but the driver's moves are no-ops, so its bookkeeping is measured
// and prints the added host ns per call of each kind and the added host time per steady
// iteration as a percentage of the trace's ideal iteration time on the h200 profile
// (capuchin sim's `ideal` policy: simulated, the GPU time a job could not go below). Then the
// cost of one alloc/free pair and one launch against the number of live allocations.
//
// The null driver also counts the calls made to it: a second table gives the driver calls per
// CUDA call of each kind (1 without capuchin) and per iteration on every thread, since each
// such call costs host time on a real driver (cuEventRecord, cuEventQuery: about a microsecond
// or less) that no null driver can show.
//
// Steady iterations by default (151..200 of 200): a job runs thousands, and the first ones
// carry one-off costs a steady iteration does not: each thread's event ring (4 MiB) is touched
// for the first time (a page fault per 64 records, about a third of capture's added time over
// iterations 11..20 here), learning, and the planner's first plans, whose thread competes for
// this 2-core machine's CPUs with the job's. `--iters 20 --warmup 10` measures those.
//
// Figures are CPU timings of the machine it runs on (the h200 column is only the scale).
// The last lines, `worst_percent_of_ideal <mode> <x>`, `pair_ns_at_5000 <mode> <x>` and
// `launch_ns_at_5000 <mode> <x>` (added ns), are what the README's Results quote.
#include "capuchin/args.hpp"
#include <algorithm>
#include <array>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "capuchin/sim.hpp"
#include "capuchin/trace_model.hpp"
#include "capuchin/trace_repeat.hpp"

extern char** environ;

namespace {

namespace tr = capuchin::trace;
namespace sim = capuchin::sim;

constexpr std::array<const char*, 5> kKinds = {"alloc", "free", "launch", "copy", "sync"};

struct Mode {
  std::string name;
  bool preload = false;
  std::string budget;   // empty: no executor
  bool declared = false;  // CAPUCHIN_KERNEL_OUTPUTS from `host_replay declared-outputs`
};



// What one host_replay run printed: `key a b` lines.
using Output = std::map<std::string, std::vector<double>>;

// Clears every CAPUCHIN_* and LD_PRELOAD variable of ours: each child gets only its mode's.
void clean_environment() {
  std::vector<std::string> names;
  for (char** e = environ; *e != nullptr; ++e) {
    std::string kv(*e);
    const std::string name = kv.substr(0, kv.find('='));
    if (name.rfind("CAPUCHIN_", 0) == 0 || name == "LD_PRELOAD") names.push_back(name);
  }
  for (const std::string& n : names) unsetenv(n.c_str());
}

// What the run says of capuchin itself: its capture summary, and the executor's (evictions).
struct Seen {
  std::string capture_line;
  bool executor = false;
  long evictions = -1;
};

bool run_child(const std::string& command, Output* out, Seen* seen) {
  FILE* p = popen((command + " 2>&1").c_str(), "r");
  if (p == nullptr) return false;
  char line[4096];
  std::string* capture_line = &seen->capture_line;
  while (std::fgets(line, sizeof line, p) != nullptr) {
    if (const char* at = std::strstr(line, "executor summary:")) {
      seen->executor = true;
      if (const char* ev = std::strstr(at, " evictions=")) seen->evictions = std::atol(ev + 11);
      continue;
    }
    std::istringstream in(line);
    std::string key;
    in >> key;
    if (key == "capture") {
      *capture_line = std::string(line).substr(8);
      if (!capture_line->empty() && capture_line->back() == '\n') capture_line->pop_back();
      continue;
    }
    if (key == "kind") {
      std::string k;
      in >> k;
      key += "." + k;
    }
    std::vector<double> values;
    for (double v; in >> v;) values.push_back(v);
    (*out)[key] = values;
  }
  return pclose(p) == 0;
}

std::string command_for(const Mode& m, const std::string& replay, const std::string& stub_dir, const std::string& lib,
                        const std::string& args) {
  std::string c = "LD_LIBRARY_PATH='" + stub_dir + "' CAPUCHIN_LOG=" + (m.budget.empty() ? "error" : "info");
  if (m.preload) c += " LD_PRELOAD='" + lib + "' CAPUCHIN_SINK=null CAPUCHIN_DRAIN_US=200";
  if (!m.budget.empty()) c += " CAPUCHIN_BUDGET=" + m.budget;
  if (m.declared) c += " CAPUCHIN_KERNEL_OUTPUTS=\"$(LD_LIBRARY_PATH='" + stub_dir + "' '" + replay + "' declared-outputs)\"";
  return c + " '" + replay + "' " + args;
}

// Whether the run measured what its mode says (else the figures would be a vacuous "no cost"):
// capuchin loaded and capturing, the executor on, and evicting under pressure.
bool really(const Mode& m, const Seen& seen, const std::string& what) {
  const char* why = nullptr;
  if (m.preload && seen.capture_line.empty()) why = "libcapuchin.so did not capture (not loaded?)";
  else if (!m.budget.empty() && !seen.executor) why = "the executor did not run";
  else if (m.name == "pressure" && seen.evictions <= 0) why = "no eviction under pressure";
  if (why != nullptr) std::fprintf(stderr, "bench_host_cost: %s, mode %s: %s\n", what.c_str(), m.name.c_str(), why);
  return why == nullptr;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

// Median of `key`'s value `index` over runs.
double median_of(const std::vector<Output>& runs, const std::string& key, std::size_t index) {
  std::vector<double> v;
  for (const Output& o : runs)
    if (auto it = o.find(key); it != o.end() && it->second.size() > index) v.push_back(it->second[index]);
  return median(v);
}

struct TraceCase {
  std::string name, path;
  double ideal_ns = 0;
  std::uint64_t peak = 0;
};

bool describe(TraceCase& c, int iters) {
  auto loaded = tr::load_trace(c.path);
  if (!loaded) return std::fprintf(stderr, "bench_host_cost: %s\n", loaded.error().message().c_str()), false;
  auto repeated = tr::repeat_last_iteration(*loaded, static_cast<unsigned>(iters));
  auto gpu = sim::find_gpu_profile("h200");
  if (!repeated || !gpu) return std::fprintf(stderr, "bench_host_cost: cannot repeat %s\n", c.path.c_str()), false;
  auto prepared = sim::prepare(*repeated, *gpu);
  auto ideal = sim::make_policy("ideal");
  if (!prepared || !ideal) return false;
  const sim::SimResult r = sim::simulate(*prepared, **ideal, sim::SimOptions{});
  c.ideal_ns = r.time_s * 1e9;
  c.peak = r.natural_peak_bytes;
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  std::string traces_dir = CAPUCHIN_SHARED_TRACES, replay = HOST_REPLAY_PATH, stub_dir = STUB_DRIVER_DIR,
              lib = CAPUCHIN_INTERPOSER_PATH;
  int repeats = 3, iters = 200, warmup = 150, max_live = 100000;
  bool skip_traces = false, skip_curve = false;
  capuchin::args::Parser app{"bench_host_cost: host time libcapuchin.so adds per CUDA call and per iteration (null driver)"};
  app.option("--traces", traces_dir, "folder of traces (*.jsonl.gz)");
  app.option("--repeats", repeats, "runs per case (medians)").range(1, 100);
  app.option("--iters", iters, "iterations replayed per run").range(2, 1000);
  app.option("--warmup", warmup, "iterations not counted").range(0, 1000);
  app.option("--max-live", max_live, "largest live-allocation count of the curve").range(100, 10000000);
  app.flag("--no-traces", skip_traces, "only the curve");
  app.flag("--no-curve", skip_curve, "only the traces");
  app.option("--lib", lib, "libcapuchin.so to measure");
  if (auto status = app.parse(argc, argv)) return *status;
  if (warmup >= iters) return std::fprintf(stderr, "bench_host_cost: --warmup must be below --iters\n"), 2;
  clean_environment();
  std::map<std::string, double> worst_percent, worst_cpu_percent;
  bool ok = true;

  if (!skip_traces) {
    std::vector<TraceCase> cases;
    std::error_code ec;
    for (const auto& f : std::filesystem::directory_iterator(traces_dir, ec))
      if (f.path().string().ends_with(".jsonl.gz"))
        cases.push_back({f.path().filename().string().substr(0, f.path().filename().string().size() - 9), f.path().string()});
    if (ec || cases.empty()) return std::fprintf(stderr, "bench_host_cost: no traces in %s\n", traces_dir.c_str()), 2;
    std::sort(cases.begin(), cases.end(), [](auto& a, auto& b) { return a.name < b.name; });
    std::printf("# Host time added per CUDA call and per steady iteration (CPU timings of this machine, null driver;\n"
                "# medians of %d runs, iterations %d..%d of %d). ideal = simulated h200 ideal iteration (scale only).\n",
                repeats, warmup + 1, iters, iters);
    std::printf("# cpu_us/it: the calling thread's CPU time per iteration against the program alone's (direct row: its\n"
                "# own), the whole iteration's, so the hooks' effect on the program's own work (caches) counts too; the\n"
                "# per-call columns and added_us/it are wall time inside the calls, which counts waits for a core too\n"
                "# (capuchin's drain and planner threads share this machine's two).\n");
    std::printf("%-22s %-9s %9s %9s %9s %9s %9s %8s %12s %10s %10s %8s\n", "trace", "mode", "alloc_ns", "free_ns", "launch_ns",
                "copy_ns", "sync_ns", "calls", "added_us/it", "%_ideal", "cpu_us/it", "%cpu");
    for (TraceCase& c : cases) {
      if (!describe(c, iters)) return 2;
      const std::vector<Mode> modes = {{"direct"},
                                       {"capture", true},
                                       {"exec", true, "70GiB"},
                                       {"replay", true, "70GiB", true},
                                       {"pressure", true, std::to_string(c.peak / 2)}};
      std::map<std::string, std::vector<Output>> runs;
      std::string capture_line;
      std::map<std::string, std::vector<double>> drain_ms;  // the drain thread's CPU per run (capture summary)
      const std::string args = "trace '" + c.path + "' --iters " + std::to_string(iters) + " --warmup " + std::to_string(warmup);
      for (int r = 0; r < repeats; ++r)
        for (const Mode& m : modes) {
          Output o;
          Seen seen;
          if (!run_child(command_for(m, replay, stub_dir, lib, args), &o, &seen) || !really(m, seen, c.name)) {
            std::fprintf(stderr, "bench_host_cost: host_replay failed for %s (%s)\n", c.name.c_str(), m.name.c_str());
            ok = false;
          }
          if (m.preload) capture_line = seen.capture_line;
          if (const auto at = seen.capture_line.find("drain_cpu_ms="); at != std::string::npos)
            drain_ms[m.name].push_back(std::atof(seen.capture_line.c_str() + at + 13));
          runs[m.name].push_back(std::move(o));
        }
      for (const Mode& m : modes) {
        double added_total = 0, calls = 0;
        std::array<double, kKinds.size()> per_call{};
        for (std::size_t k = 0; k < kKinds.size(); ++k) {
          const std::string key = std::string("kind.") + kKinds[k];
          const double n = median_of(runs[m.name], key, 0);
          const double ns = median_of(runs[m.name], key, 1), base = median_of(runs["direct"], key, 1);
          const double added = m.name == "direct" ? ns : ns - base;
          per_call[k] = n > 0 ? added / n : 0;
          if (m.name != "direct") added_total += added;
          calls += n;
        }
        const double pct = 100.0 * added_total / c.ideal_ns;
        const double cpu = median_of(runs[m.name], "thread_cpu_ns", 0), cpu_base = median_of(runs["direct"], "thread_cpu_ns", 0);
        const double cpu_added = m.name == "direct" ? cpu : cpu - cpu_base, cpu_pct = 100.0 * cpu_added / c.ideal_ns;
        char pct_text[32] = "-", cpu_pct_text[32] = "-";
        if (m.name != "direct") {
          std::snprintf(pct_text, sizeof pct_text, "%.1f", pct);
          std::snprintf(cpu_pct_text, sizeof cpu_pct_text, "%.1f", cpu_pct);
        }
        std::printf("%-22s %-9s %9.0f %9.0f %9.0f %9.0f %9.0f %8.0f %12.1f %10s %10.1f %8s\n", c.name.c_str(), m.name.c_str(),
                    per_call[0], per_call[1], per_call[2], per_call[3], per_call[4], calls, added_total / 1e3, pct_text,
                    cpu_added / 1e3, cpu_pct_text);
        if (m.name != "direct") {
          worst_percent[m.name] = std::max(worst_percent[m.name], pct);
          worst_cpu_percent[m.name] = std::max(worst_cpu_percent[m.name], cpu_pct);
        }
      }
      std::printf("%-22s ideal_us/it %.1f, natural peak %.1f MiB; direct rows: host ns per call of the program alone\n",
                  c.name.c_str(), c.ideal_ns / 1e3, static_cast<double>(c.peak) / (1 << 20));
      for (const Mode& m : modes) {  // driver calls per call of each kind, and per iteration on every thread
        std::printf("%-22s %-9s driver calls per call:", c.name.c_str(), m.name.c_str());
        for (std::size_t k = 0; k < kKinds.size(); ++k) {
          const std::string key = std::string("kind.") + kKinds[k];
          const double n = median_of(runs[m.name], key, 0), d = median_of(runs[m.name], key, 2);
          std::printf(" %s %.2f", kKinds[k], n > 0 ? d / n : 0);
        }
        std::printf("; per iteration %.0f\n", median_of(runs[m.name], "driver_calls", 0));
      }
      for (const Mode& m : modes)  // not in the calling thread's figures above: another core's time
        if (!drain_ms[m.name].empty())
          std::printf("%-22s %-9s drain thread CPU per iteration: %.1f us (all %d iterations, start-up included)\n",
                      c.name.c_str(), m.name.c_str(), 1e3 * median(drain_ms[m.name]) / iters, iters);
      std::printf("%-22s capture: %s\n", c.name.c_str(), capture_line.c_str());
    }
  }

  std::map<std::string, double> pair5k, launch5k;
  if (!skip_curve) {
    std::printf("\n# Added ns per alloc/free pair and per launch against live allocations (medians of rounds,\n"
                "# then of %d runs; CPU timings of this machine, null driver)\n", repeats);
    std::printf("%-10s %-9s %12s %12s\n", "live", "mode", "pair_ns", "launch_ns");
    const std::vector<Mode> modes = {{"direct"}, {"capture", true}, {"exec", true, "70GiB"}};
    for (int live : {100, 1000, 5000, 10000, 100000}) {
      if (live > max_live) continue;
      const int per_round = live >= 100000 ? 2000 : 5000;
      const std::string args = "curve --live " + std::to_string(live) + " --rounds 11 --per-round " + std::to_string(per_round);
      std::map<std::string, std::vector<Output>> runs;
      for (int r = 0; r < repeats; ++r)
        for (const Mode& m : modes) {
          Output o;
          Seen seen;
          if (!run_child(command_for(m, replay, stub_dir, lib, args), &o, &seen) || !really(m, seen, "curve")) {
            std::fprintf(stderr, "bench_host_cost: host_replay curve failed (%d live, %s)\n", live, m.name.c_str());
            ok = false;
          }
          runs[m.name].push_back(std::move(o));
        }
      const double base_pair = median_of(runs["direct"], "pair_ns", 0), base_launch = median_of(runs["direct"], "launch_ns", 0);
      for (const Mode& m : modes) {
        const double pair = median_of(runs[m.name], "pair_ns", 0), launch = median_of(runs[m.name], "launch_ns", 0);
        const bool base = m.name == "direct";
        std::printf("%-10d %-9s %12.1f %12.1f%s\n", live, m.name.c_str(), base ? pair : pair - base_pair,
                    base ? launch : launch - base_launch, base ? "   (the program alone, not added)" : "");
        if (live == 5000 && !base) pair5k[m.name] = pair - base_pair, launch5k[m.name] = launch - base_launch;
      }
    }
  }
  std::printf("\n");
  for (const auto& [mode, pct] : worst_percent) std::printf("worst_percent_of_ideal %s %.2f\n", mode.c_str(), pct);
  for (const auto& [mode, pct] : worst_cpu_percent) std::printf("worst_cpu_percent_of_ideal %s %.2f\n", mode.c_str(), pct);
  for (const auto& [mode, ns] : pair5k) std::printf("pair_ns_at_5000 %s %.1f\n", mode.c_str(), ns);
  for (const auto& [mode, ns] : launch5k) std::printf("launch_ns_at_5000 %s %.1f\n", mode.c_str(), ns);
  return ok ? 0 : 1;
}
