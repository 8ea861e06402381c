// `capuchin sim`: what-if simulation of a trace on a GPU profile under a memory budget with
// one policy (`capuchin sim --trace T --gpu h200 --budget 0.5 --policy vdnn [--json]`), and
// `capuchin sim sweep`: every policy at every budget, side by side (markdown, CSV, one SVG
// plot per trace) in a directory. Every figure printed is simulated for a named profile.
// `--iters N` (both) simulates capuchin::trace::repeat_last_iteration(trace, N) instead of the
// trace as it is: its set-up, then its last iteration N times, the very sequence
// sim_trace_replay runs on simcuda. The time per steady iteration is the engine's rule in
// every case: the mean over iterations 2.. (iteration 1 carries warm-up work; with --iters
// it is the first repetition, after set-up), kept so that figures with and without --iters
// compare; every iteration's time is in the JSON (`iteration_time_s`) for other windows.
// Exit status (`capuchin sim --help` says it too): 0 when the simulation ran and the run is
// feasible, 3 when it ran and the policy cannot run the trace within the budget (the output,
// human or --json, says where: a result, printed in full, but not a success for a script that
// asks "does it fit?"), 1 on bad input (the message names the problem). `sim sweep` exits 0
// once its tables are written, whatever rows are infeasible.
#include <fmt/format.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "capuchin/budget.hpp"
#include "capuchin/sim.hpp"
#include "capuchin/trace_repeat.hpp"
#include "capuchin/units.hpp"
#include "commands.hpp"
#include "trace_load.hpp"

namespace capuchin::cli {
namespace {

namespace fs = std::filesystem;

struct Loaded {
  trace::Trace trace;
  sim::PreparedTrace prep;
  // The file's event each simulated one is (--iters: copies, trace_repeat.hpp; learned
  // iteration markers: kNone for them); empty when they are the same events.
  std::vector<std::uint32_t> source;
  // "line N", with the iteration and the trace's own line under --iters (sim::describe_line).
  std::string line(std::uint32_t event) const { return sim::describe_line(trace, event, source); }
  // The trace's own line of a simulated event under --iters (0: none, or not repeated).
  std::uint64_t trace_line(std::uint32_t event) const { return sim::source_line(source, event); }
};

std::string trace_stem(const std::string& path) {
  std::string s = fs::path(path).filename().string();
  for (const char* ext : {".gz", ".jsonl", ".json"})
    if (s.size() > std::string_view(ext).size() && s.ends_with(ext)) s.resize(s.size() - std::string_view(ext).size());
  return s;
}

std::vector<std::string> split_list(const std::string& s) {
  std::vector<std::string> out;
  std::stringstream ss(s);
  for (std::string item; std::getline(ss, item, ',');)
    if (!item.empty()) out.push_back(item);
  return out;
}

Status write_file(const fs::path& path, const std::string& text) {
  std::ofstream f(path, std::ios::binary);
  f << text;
  f.close();
  if (!f) return make_error("cannot write " + path.string());
  return {};
}

// The lower bound (sim.hpp) next to a result; none for the unlimited `ideal`.
struct BoundLine {
  bool present = false;
  sim::Bound b;
  double ratio = 0;
};

BoundLine bound_for(const sim::PreparedTrace& p, const sim::Comparison& c) {
  BoundLine l;
  if (c.run.policy == "ideal" || c.run.budget_bytes == 0) return l;
  l.present = true;
  l.b = sim::lower_bound(p, c.run.budget_bytes);
  l.ratio = l.b.feasible ? l.b.ratio(c.ideal_time_s) : 0.0;
  return l;
}

void add_bound_json(nlohmann::ordered_json& j, const BoundLine& l, const Loaded& ld) {
  if (!l.present) return;
  j["bound"] = {{"feasible", l.b.feasible},
                {"ratio", l.ratio},
                {"line", l.b.event == trace::kNone ? 0 : l.b.event + 2},
                {"trace_line", l.b.event == trace::kNone ? 0 : ld.trace_line(l.b.event)},
                {"over_bytes", l.b.over_bytes},
                {"compute_s", l.b.compute_s},
                {"added_s", l.b.added_s}};
  if (!l.b.feasible) j["bound"]["why"] = l.b.why;
}

void print_bound(const BoundLine& l, const sim::Comparison& c, const Loaded& ld) {
  if (!l.present) return;
  if (!l.b.feasible) {
    fmt::print("  lower bound: no policy can run this budget: the kernel at {} alone needs more ({})\n", ld.line(l.b.event),
               l.b.why);
    return;
  }
  fmt::print("  lower bound: no policy runs a steady iteration faster than ratio {:.3f}", l.ratio);
  if (l.b.event != trace::kNone && l.ratio > 1.0) fmt::print(" (binding at {}, {} over the budget)", ld.line(l.b.event), format_bytes(l.b.over_bytes));
  if (c.run.feasible && l.ratio > 0) fmt::print("; this result is {:.1f}% above it", 100.0 * (c.ratio / l.ratio - 1.0));
  fmt::print("\n");
}

nlohmann::ordered_json result_json(const std::string& trace, const Loaded& ld, unsigned iters, const sim::Comparison& c) {
  const trace::Trace& t = ld.trace;
  const sim::SimResult& r = c.run;
  nlohmann::ordered_json j;
  j["trace"] = trace;
  j["repeated_iterations"] = iters;  // --iters N: the last iteration N times; 0: the trace as it is
  j["policy"] = r.policy;
  j["gpu"] = r.gpu;
  j["simulated"] = true;
  j["budget_bytes"] = r.budget_bytes;
  j["natural_peak_bytes"] = r.natural_peak_bytes;
  j["peak_bytes"] = r.peak_bytes;
  j["feasible"] = r.feasible;
  j["ideal_time_s"] = c.ideal_time_s;
  j["time_s"] = r.time_s;
  j["ratio"] = c.ratio;
  j["stall_s"] = r.stall_s;
  nlohmann::ordered_json by;
  for (std::size_t k = 0; k < sim::kStallCauses; ++k) by[std::string(sim::to_string(static_cast<sim::StallCause>(k)))] = r.stall_by_cause_s[k];
  j["stall_by_cause_s"] = by;
  nlohmann::ordered_json sites = nlohmann::ordered_json::array();
  for (const sim::StallSite& site : r.stall_sites) {
    const trace::Event& e = t.events[site.event];
    sites.push_back({{"event", site.event},
                     {"line", static_cast<std::uint64_t>(site.event) + 2},
                     {"trace_line", ld.trace_line(site.event)},  // --iters: the trace's own line (0: none)
                     {"op", trace::to_string(e.op)},
                     {"name", e.op == trace::Op::Kernel && e.name < t.names.size() ? t.names[e.name] : std::string()},
                     {"stall_s", site.stall_s},
                     {"cause", sim::to_string(site.cause)}});
  }
  j["stall_sites"] = sites;  // the last iteration's largest waits
  j["recompute_s"] = r.recompute_s;
  j["swap_out_bytes"] = r.swap_out_bytes;
  j["swap_in_bytes"] = r.swap_in_bytes;
  j["swap_out_link_s"] = r.swap_out_link_s;  // the policy's copies' time on each direction of the link
  j["swap_in_link_s"] = r.swap_in_link_s;
  j["cancelled_out_link_s"] = r.cancelled_out_link_s;  // of swap_out_link_s: evictions cancelled before their copy landed
  j["steady_iterations"] = r.steady_iterations;
  j["warmup_iterations"] = r.warmup_iterations;  // --iters: iterations 2.. before the run settled
  j["warmup_time_s"] = r.warmup_time_s;
  j["iteration_time_s"] = r.iteration_time_s;
  j["faults"] = r.faults;
  j["rejected_actions"] = r.rejected_actions;
  j["skipped_prefetches"] = r.skipped_prefetches;
  if (!r.feasible)
    j["infeasible"] = {{"event", r.where.event},   {"line", r.where.line},
                       {"tensor_id", r.where.tensor_id}, {"reason", r.where.reason},
                       {"trace_line", ld.trace_line(r.where.event)}};  // --iters: the trace's own line (0: none)
  return j;
}

// "stall 1.841 ms (on-demand swap-ins 1.2, ...)": the causes that took any time, largest first.
std::string stall_causes(const sim::SimResult& r) {
  std::vector<std::size_t> order;
  for (std::size_t k = 0; k < sim::kStallCauses; ++k)
    if (r.stall_by_cause_s[k] >= sim::kZeroS) order.push_back(k);
  std::stable_sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) { return r.stall_by_cause_s[a] > r.stall_by_cause_s[b]; });
  std::string out;
  for (std::size_t k : order)
    out += fmt::format("{}{} {:.3f}", out.empty() ? " (" : ", ", sim::describe(static_cast<sim::StallCause>(k)), r.stall_by_cause_s[k] * 1e3);
  return out.empty() ? out : out + ")";
}

void print_human(const std::string& trace, const Loaded& ld, unsigned iters, const sim::Comparison& c,
                 const std::string& budget_text) {
  const sim::SimResult& r = c.run;
  fmt::print("{}: policy {}, simulated on GPU profile {}\n", trace, r.policy, r.gpu);
  if (iters > 0) fmt::print("  set-up, then the last iteration {} times (--iters)\n", iters);
  if (r.policy.starts_with("capuchin") && r.iteration_time_s.size() < 5)
    fmt::print("  note: capuchin learns the iteration once it has repeated and follows a plan from about the 4th:\n"
               "  this run has {} iteration(s); --iters 8 shows the planned steady state\n", r.iteration_time_s.size());
  if (r.policy == "ideal")
    fmt::print("  budget: unlimited (natural peak {})\n", format_bytes(r.natural_peak_bytes));
  else
    fmt::print("  budget: {} ({}; natural peak {})\n", format_bytes(r.budget_bytes), budget_text,
               format_bytes(r.natural_peak_bytes));
  if (!r.feasible) {
    fmt::print("  INFEASIBLE at {}, event {}, tensor id {}: {}\n", ld.line(r.where.event), r.where.event,
               r.where.tensor_id, r.where.reason);
    return;
  }
  const std::size_t n = r.iteration_time_s.size();
  const std::string window = n == 0 ? "the whole trace: it has no iterations"
                                    : fmt::format("mean over iterations {}..{}{}", n - r.steady_iterations + 1, n,
                                                  iters > 0 ? ", once settled" : "");
  fmt::print("  time per steady iteration ({}): {:.3f} ms (ideal {:.3f} ms), ratio {:.3f}\n", window, r.time_s * 1e3,
             c.ideal_time_s * 1e3, c.ratio);
  if (r.warmup_iterations > 0)
    fmt::print("  warm-up: iterations 2..{} took {:.3f} ms each (ratio {:.3f}), not counted above\n", r.warmup_iterations + 1,
               r.warmup_time_s * 1e3, c.ideal_time_s > 0 ? r.warmup_time_s / c.ideal_time_s : 0.0);
  fmt::print("  stall {:.3f} ms{}, recompute {:.3f} ms per iteration\n", r.stall_s * 1e3, stall_causes(r), r.recompute_s * 1e3);
  if (!r.stall_sites.empty()) {
    fmt::print("  largest waits{}:\n", r.iteration_time_s.empty() ? "" : " in the last iteration");
    for (const sim::StallSite& site : r.stall_sites) fmt::print("    {}\n", sim::describe_site(ld.trace, site, ld.source));
  }
  fmt::print("  swapped out {} / in {} per iteration; peak device bytes {} ({})\n",
             format_bytes(static_cast<std::uint64_t>(r.swap_out_bytes)),
             format_bytes(static_cast<std::uint64_t>(r.swap_in_bytes)), r.peak_bytes, format_bytes(r.peak_bytes));
}

// --swap-link OUT[,IN]: the rate in GB/s of a policy's moves to the host and to the device (IN
// defaults to OUT), as swap efficiencies of the profile's link (sim::Efficiency::swap_out_link,
// swap_in_link); not given: the profile's link for both. What the executor measures on a real
// job (its summary's link_out_gbps / link_in_gbps) can be put here.
struct SwapLink {
  bool set = false;
  double out_gbps = 0, in_gbps = 0;  // as typed
  sim::Efficiency efficiency(const sim::GpuProfile& gpu) const {
    sim::Efficiency eff;
    if (set) eff.swap_out_link = out_gbps * 1e9 / gpu.link_bytes_per_s, eff.swap_in_link = in_gbps * 1e9 / gpu.link_bytes_per_s;
    return eff;
  }
  // For the outputs that used it ("" when not set).
  std::string label() const {
    return set ? fmt::format("swaps at {:g} GB/s out, {:g} in (--swap-link)", out_gbps, in_gbps) : std::string();
  }
};

Expected<SwapLink> parse_swap_link(const std::optional<std::string>& given) {
  SwapLink l;
  if (!given) return l;
  const std::string& text = *given;
  std::vector<std::string> parts;  // empty fields kept: ",49.8" and "16," are mistakes, not defaults
  for (std::size_t at = 0;;) {
    const std::size_t comma = text.find(',', at);
    parts.push_back(text.substr(at, comma == std::string::npos ? std::string::npos : comma - at));
    if (comma == std::string::npos) break;
    at = comma + 1;
  }
  if (parts.size() > 2) return make_error(fmt::format("--swap-link: '{}': give OUT or OUT,IN in GB/s (e.g. 16,49.8)", text));
  double rate[2] = {0, 0};
  for (std::size_t i = 0; i < parts.size(); ++i) {
    char* end = nullptr;
    rate[i] = std::strtod(parts[i].c_str(), &end);
    if (parts[i].empty() || end == parts[i].c_str() || *end != '\0' || !(rate[i] > 0) || rate[i] > 1e4)
      return make_error(fmt::format("--swap-link: '{}' is not a rate in GB/s (a number above 0, at most 10000)", parts[i]));
  }
  l.set = true;
  l.out_gbps = rate[0];
  l.in_gbps = parts.size() == 2 ? rate[1] : rate[0];
  return l;
}

// The trace at `path`, repeated to `iters` iterations when iters > 0, prepared for `gpu`.
Expected<std::unique_ptr<Loaded>> load(const std::string& path, const sim::GpuProfile& gpu, unsigned iters,
                                       const sim::Efficiency& eff) {
  std::vector<std::uint32_t> file_event;  // set when iteration markers were learned (added)
  auto t = load_trace_with_iterations(path, &file_event);
  if (!t) return make_error(t.error().message());
  auto l = std::make_unique<Loaded>();
  if (iters > 0) {
    auto r = trace::repeat_last_iteration(*t, iters, &l->source);
    if (!r) return make_error("--iters: " + r.error().message);
    l->trace = std::move(*r);
    // Through the learned markers to the file's own events.
    if (!file_event.empty())
      for (std::uint32_t& e : l->source) e = e == trace::kNone ? e : file_event[e];
  } else {
    l->trace = std::move(*t);
    l->source = std::move(file_event);
  }
  auto p = sim::prepare(l->trace, gpu, eff);
  if (!p) return make_error(path + ": " + p.error().message);
  l->prep = std::move(*p);
  return l;
}

void list_gpus() {
  const sim::Efficiency eff;
  for (const auto& g : sim::gpu_profiles()) {
    fmt::print("{:<7} {}\n        memory {}, FP32 {:.1f} / TF32 {:.1f} / BF16 {:.1f} TFLOP/s, HBM {:.0f} GB/s, link {:.2f} GB/s "
               "each way, copy latency {:g} us\n        sources: {}\n",
               g.name, g.description, format_bytes(g.memory_bytes), g.fp32_flops / 1e12, g.tf32_flops / 1e12,
               g.bf16_flops / 1e12, g.hbm_bytes_per_s / 1e9, g.link_bytes_per_s / 1e9, g.link_latency_s * 1e6, g.sources);
  }
  fmt::print("Applied to every profile alike: {:.2f} of peak compute, {:.2f} of peak HBM bandwidth, {:.2f} of link "
             "bandwidth, {:.0f} us launch latency per roofline kernel, {:.0f} us per demand-paging fault.\n",
             eff.compute, eff.memory, eff.link, eff.launch_latency_s * 1e6, eff.uvm_fault_latency_s * 1e6);
}

constexpr int kExitInfeasible = 3;

struct SimOpts {
  std::string trace, gpu = "h200", budget = "1x", policy = "none", timeline;
  std::optional<std::string> swap_link;  // --swap-link as given (an empty value is refused, not the default)
  unsigned iters = 0;  // 0: the trace as it is
  bool json = false, list = false;
};

int run_single(const SimOpts& o) {
  if (o.list) {
    list_gpus();
    return 0;
  }
  if (o.trace.empty()) {
    fmt::print(stderr, "capuchin sim: --trace is required (or use `capuchin sim sweep`)\n");
    return 1;
  }
  auto gpu = sim::find_gpu_profile(o.gpu);
  if (!gpu) return fmt::print(stderr, "capuchin sim: {}\n", gpu.error().message), 1;
  auto policy = sim::make_policy(o.policy);
  if (!policy) return fmt::print(stderr, "capuchin sim: {}\n", policy.error().message), 1;
  auto link = parse_swap_link(o.swap_link);
  if (!link) return fmt::print(stderr, "capuchin sim: {}\n", link.error().message), 1;
  auto l = load(o.trace, *gpu, o.iters, link->efficiency(*gpu));
  if (!l) return fmt::print(stderr, "{}\n", l.error().message), 1;
  auto budget = sim::resolve_budget(o.budget, (*l)->prep.liveness.peak_bytes, *gpu);
  if (!budget) return fmt::print(stderr, "capuchin sim: {}\n", budget.error().message), 1;
  std::vector<sim::TimelineEntry> timeline;
  sim::SimOptions opt;
  opt.budget_bytes = *budget;
  opt.repeated = o.iters > 0;
  if (!o.timeline.empty()) opt.timeline = &timeline;
  const double ideal = sim::ideal_time_s((*l)->prep);
  const auto c = sim::simulate_against_ideal((*l)->prep, **policy, opt, ideal);
  const BoundLine bound = bound_for((*l)->prep, c);
  if (o.json) {
    auto j = result_json(o.trace, **l, o.iters, c);
    add_bound_json(j, bound, **l);
    if (link->set) j["swap_link_gbps"] = {link->out_gbps, link->in_gbps};
    fmt::print("{}\n", j.dump());
  } else {
    print_human(o.trace, **l, o.iters, c, o.budget);
    if (link->set) fmt::print("  {}\n", link->label());
    print_bound(bound, c, **l);
  }
  if (!o.timeline.empty()) {
    if (auto s = write_file(o.timeline, sim::timeline_csv((*l)->trace, timeline)); !s)
      return fmt::print(stderr, "capuchin sim: {}\n", s.error().message), 1;
  }
  return c.run.feasible ? 0 : kExitInfeasible;
}

// `sim bound`: the lower bound alone (no policy run).
int run_bound(const SimOpts& o) {
  auto gpu = sim::find_gpu_profile(o.gpu);
  if (!gpu) return fmt::print(stderr, "capuchin sim bound: {}\n", gpu.error().message), 1;
  auto link = parse_swap_link(o.swap_link);
  if (!link) return fmt::print(stderr, "capuchin sim bound: {}\n", link.error().message), 1;
  auto l = load(o.trace, *gpu, o.iters, link->efficiency(*gpu));
  if (!l) return fmt::print(stderr, "{}\n", l.error().message), 1;
  auto budget = sim::resolve_budget(o.budget, (*l)->prep.liveness.peak_bytes, *gpu);
  if (!budget) return fmt::print(stderr, "capuchin sim bound: {}\n", budget.error().message), 1;
  sim::Comparison c;
  c.run.policy = "bound";
  c.run.budget_bytes = *budget;
  c.run.feasible = false;  // no run: the line says nothing of one
  c.ideal_time_s = sim::ideal_time_s((*l)->prep);
  const BoundLine b = bound_for((*l)->prep, c);
  if (o.json) {
    nlohmann::ordered_json j;
    j["trace"] = o.trace;
    j["repeated_iterations"] = o.iters;
    j["gpu"] = gpu->name;
    j["simulated"] = true;
    j["budget_bytes"] = *budget;
    j["natural_peak_bytes"] = (*l)->prep.liveness.peak_bytes;
    j["ideal_time_s"] = c.ideal_time_s;
    add_bound_json(j, b, **l);
    if (link->set) j["swap_link_gbps"] = {link->out_gbps, link->in_gbps};
    fmt::print("{}\n", j.dump());
  } else {
    fmt::print("{}: simulated on GPU profile {}, budget {} ({}; natural peak {}), ideal iteration {:.3f} ms\n", o.trace,
               gpu->name, format_bytes(*budget), o.budget, format_bytes((*l)->prep.liveness.peak_bytes),
               c.ideal_time_s * 1e3);
    if (link->set) fmt::print("  {}\n", link->label());
    print_bound(b, c, **l);
    if (b.b.feasible)
      fmt::print("  ({:.3f} ms of kernels back to back, at least {:.3f} ms more at this budget)\n", b.b.compute_s * 1e3,
                 b.b.added_s * 1e3);
  }
  return b.b.feasible ? 0 : kExitInfeasible;
}

struct SweepOpts {
  std::vector<std::string> traces;
  std::string gpu = "h200", budgets = "1x,0.8x,0.6x,0.5x,0.4x,0.3x,0.2x", policies, out = "sim-sweep";
  std::optional<std::string> swap_link;
  unsigned iters = 0;
};

int run_sweep(const SweepOpts& o) {
  auto gpu = sim::find_gpu_profile(o.gpu);
  if (!gpu) return fmt::print(stderr, "capuchin sim sweep: {}\n", gpu.error().message), 1;
  std::vector<std::string> policies = o.policies.empty() ? sim::policy_names() : split_list(o.policies);
  for (const auto& p : policies)
    if (auto made = sim::make_policy(p); !made) return fmt::print(stderr, "capuchin sim sweep: {}\n", made.error().message), 1;
  const auto budgets = split_list(o.budgets);
  if (budgets.empty()) return fmt::print(stderr, "capuchin sim sweep: --budgets is empty\n"), 1;
  auto link = parse_swap_link(o.swap_link);
  if (!link) return fmt::print(stderr, "capuchin sim sweep: {}\n", link.error().message), 1;
  const sim::Efficiency eff = link->efficiency(*gpu);
  // The markdown table and the plots name the profile, and the swap link where --swap-link set
  // one (the CSV does not: its columns are the same either way).
  const std::string label = link->set ? gpu->name + ", " + link->label() : gpu->name;
  std::vector<sim::SweepRow> rows;
  std::vector<std::string> stems;
  for (const auto& path : o.traces) {
    auto l = load(path, *gpu, o.iters, eff);
    if (!l) return fmt::print(stderr, "{}\n", l.error().message), 1;
    const auto& prep = (*l)->prep;
    const double ideal = sim::ideal_time_s(prep);
    const std::string stem = trace_stem(path);
    stems.push_back(stem);
    for (const auto& b : budgets) {
      auto bytes = sim::resolve_budget(b, prep.liveness.peak_bytes, *gpu);
      if (!bytes) return fmt::print(stderr, "capuchin sim sweep: {}\n", bytes.error().message), 1;
      const sim::Bound bound = sim::lower_bound(prep, *bytes);
      for (const auto& pname : policies) {
        auto policy = sim::make_policy(pname);
        sim::SimOptions opt;
        opt.budget_bytes = *bytes;
        opt.repeated = o.iters > 0;
        sim::SweepRow row{stem, b, *bytes, prep.liveness.peak_bytes, sim::simulate_against_ideal(prep, **policy, opt, ideal),
                          true, bound.feasible ? bound.ratio(ideal) : 0.0, {}, {}, {}};
        const Loaded& ld = **l;
        if (!row.c.run.stall_sites.empty()) row.largest_wait = sim::describe_site(ld.trace, row.c.run.stall_sites.front(), ld.source);
        if (bound.event != trace::kNone) row.bound_where = ld.line(bound.event);
        if (!row.c.run.feasible) row.infeasible_where = ld.line(row.c.run.where.event);
        rows.push_back(std::move(row));
      }
    }
  }
  std::error_code ec;
  fs::create_directories(o.out, ec);
  if (ec) return fmt::print(stderr, "capuchin sim sweep: cannot create {}: {}\n", o.out, ec.message()), 1;
  const std::string md = sim::sweep_markdown(rows, policies, label);
  Status s = write_file(fs::path(o.out) / "sweep.md", md);
  // Where the time goes for the project's own policy, when the sweep ran it.
  const bool explain = std::find(policies.begin(), policies.end(), "capuchin") != policies.end();
  if (s && explain) s = write_file(fs::path(o.out) / "explain.md", sim::explain_markdown(rows, "capuchin", label));
  if (s) s = write_file(fs::path(o.out) / "sweep.csv", sim::sweep_csv(rows));
  for (const auto& stem : stems)
    if (s) s = write_file(fs::path(o.out) / (stem + ".svg"), sim::sweep_svg(rows, stem, policies, label));
  if (!s) return fmt::print(stderr, "capuchin sim sweep: {}\n", s.error().message), 1;
  fmt::print("{}\nwritten: {}/sweep.md, {}sweep.csv and one SVG plot per trace\n", md, o.out,
             explain ? "explain.md (where capuchin's time goes), " : "");
  return 0;
}

}  // namespace

void add_sim_command(CLI::App& app, int& exit_code) {
  auto so = std::make_shared<SimOpts>();
  auto* simc = app.add_subcommand("sim", "Simulate a trace on a GPU profile under a memory budget with a policy");
  simc->footer("Exit status: 0 feasible; 3 infeasible (the policy cannot run the trace within the budget: the output "
               "says where); 1 bad input. `sim sweep`: 0 once its tables are written.");
  simc->add_option("--trace", so->trace, "trace file (.jsonl or .jsonl.gz)");
  simc->add_option("--gpu", so->gpu, "GPU profile (see --list-gpus)")->capture_default_str();
  simc->add_option("--budget", so->budget, std::string("device-memory budget: ") + kBudgetHelp + "; N% is of the GPU profile's memory")
      ->capture_default_str();
  std::string names;
  for (const auto& n : sim::policy_names()) names += (names.empty() ? "" : ", ") + n;
  simc->add_option("--policy", so->policy, names)->capture_default_str();
  simc->add_option("--iters", so->iters,
                   "simulate the set-up then the trace's last iteration N times (as sim_trace_replay runs it) "
                   "instead of the trace as it is; steady time: mean over the iterations once the run has settled (each within 1% of the last), the warm-up before them reported apart")
      ->check(CLI::Range(1u, 100000u));
  simc->add_flag("--json", so->json, "print one JSON object");
  simc->add_option("--timeline", so->timeline, "write the simulated timeline (CSV) to this file");
  simc->add_flag("--list-gpus", so->list, "list the GPU profiles, their sources and the efficiency factors");
  const char* swap_link_help =
      "OUT[,IN]: the rate in GB/s of the policy's moves to the host and to the device (IN defaults to OUT; default: "
      "the profile's link); e.g. 16,49.8, Unified Memory on an H200 (measured), or an executor summary's "
      "link_out_gbps,link_in_gbps";
  simc->add_option("--swap-link", so->swap_link, swap_link_help);

  auto wo = std::make_shared<SweepOpts>();
  auto* sweep = simc->add_subcommand("sweep", "Every policy at every budget, side by side: markdown, CSV and SVG plots");
  sweep->add_option("--trace", wo->traces, "trace files")->required();
  sweep->add_option("--gpu", wo->gpu, "GPU profile")->capture_default_str();
  sweep->add_option("--budgets", wo->budgets, std::string("comma-separated budgets, each ") + kBudgetHelp)->capture_default_str();
  sweep->add_option("--policies", wo->policies, "comma-separated policies (default: all)");
  sweep->add_option("--out", wo->out, "output directory")->capture_default_str();
  sweep->add_option("--swap-link", wo->swap_link, swap_link_help);
  sweep->add_option("--iters", wo->iters, "simulate the set-up then each trace's last iteration N times")
      ->check(CLI::Range(1u, 100000u));
  sweep->callback([wo, &exit_code] { exit_code = run_sweep(*wo); });

  auto bo = std::make_shared<SimOpts>();
  auto* bound = simc->add_subcommand(
      "bound", "The least steady-iteration ratio any policy could reach at a budget (a lower bound; exit 3: no policy fits)");
  bound->add_option("--trace", bo->trace, "trace file")->required();
  bound->add_option("--gpu", bo->gpu, "GPU profile")->capture_default_str();
  bound->add_option("--budget", bo->budget, std::string("device-memory budget: ") + kBudgetHelp)->capture_default_str();
  bound->add_option("--iters", bo->iters, "the set-up then the trace's last iteration N times")->check(CLI::Range(1u, 100000u));
  bound->add_flag("--json", bo->json, "print one JSON object");
  bound->add_option("--swap-link", bo->swap_link, swap_link_help);
  bound->callback([bo, &exit_code] { exit_code = run_bound(*bo); });
  simc->callback([so, sweep, bound, &exit_code] {
    if (!sweep->parsed() && !bound->parsed()) exit_code = run_single(*so);
  });
}

}  // namespace capuchin::cli
