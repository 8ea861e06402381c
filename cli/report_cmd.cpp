// `capuchin report FILE... -o report.html`: one self-contained HTML page (inline SVG plots,
// each with its data as JSON, a few lines of inline script, no network): memory over time,
// swap traffic and stalls per iteration, the top tensors by bytes moved (named as a user
// recognises them, each linked to its own decisions), and the decisions by action. Inputs: a
// recorded trace (figures simulated on a GPU profile, labelled so; --budget adds the capuchin
// policy's run) and/or decision logs (figures as recorded).
//
// Memory over time plots only what the inputs hold: from a trace, the simulator's own device
// bytes (the unmanaged live bytes and, with a budget, what the capuchin run held at each
// moment); from a decision log alone, the bytes capuchin held off the device (a log has no
// resident bytes). A series with nothing to show is left out, never drawn as zeros.
#include <fmt/format.h>

#include <algorithm>
#include <fstream>
#include <map>

#include "capuchin/tensor_names.hpp"
#include "capuchin/units.hpp"
#include "report_data.hpp"
#include "report_plot.hpp"

namespace capuchin::cli {
namespace {

using ojson = nlohmann::ordered_json;

// One decision about one tensor, simulated or logged, as the per-tensor lists show it.
struct TensorAction {
  double t_s = 0;    // for the order
  std::string when;  // "12.345 ms (simulated)", "1.234567 s"
  std::uint64_t iteration = 0;
  std::string action, detail;
  std::uint64_t bytes = 0;
};

// What the sections of the page are made of, gathered from every input.
struct Facts {
  std::map<std::uint64_t, double> swap_out, swap_in, stall_s, stall_n;  // per iteration
  std::map<std::uint64_t, std::uint64_t> moved;                          // tensor id -> bytes swapped
  std::map<std::uint64_t, std::vector<TensorAction>> actions;            // tensor id -> its decisions
  std::map<std::uint64_t, std::string> log_identity;                     // tensor id -> what the log says of it
  std::map<std::string, std::uint64_t> by_action;
  std::vector<Series> mem;
  std::string mem_note, mem_xlabel;
  ojson meta = ojson::object();
};

std::string change_words(const sim::MemoryChange& c) {
  using K = sim::MemoryChange::Kind;
  switch (c.kind) {
    case K::SwapOut: return "swapped out";
    case K::SwapIn: return c.on_demand ? "swapped in on demand" : "prefetched";
    case K::Drop: return "dropped";
    case K::Recompute: return "recomputed";
    default: return "";
  }
}

// The capuchin run's per-iteration swaps and stalls, and each tensor's actions in time order.
void add_simulated_actions(const trace::Trace& t, const SimulatedView& v, Facts& f) {
  for (const auto& e : v.managed_tl) {
    const std::uint64_t it = e.event < v.event_iteration.size() ? v.event_iteration[e.event] : 0;
    using K = sim::TimelineEntry::Kind;
    if (e.kind == K::Stall) f.stall_s[it] += e.end_s - e.start_s, f.stall_n[it] += 1;
    if (e.tensor >= t.tensors.size()) continue;  // a stall waits for a tensor; the rest is per tensor
    const trace::Tensor& ts = t.tensors[e.tensor];
    if (e.kind == K::SwapOut) f.swap_out[it] += static_cast<double>(ts.bytes), f.moved[ts.id] += ts.bytes;
    if (e.kind == K::SwapIn) f.swap_in[it] += static_cast<double>(ts.bytes), f.moved[ts.id] += ts.bytes;
    if (e.kind == K::Stall) {
      f.actions[ts.id].push_back({e.start_s, fmt::format("{:.3f} ms (simulated)", e.start_s * 1e3), it, "stall",
                                  fmt::format("the compute stream waited {:.3f} ms for it", (e.end_s - e.start_s) * 1e3), ts.bytes});
    }
  }
  for (const auto& c : v.managed_changes) {
    const std::string what = change_words(c);
    if (what.empty()) continue;
    const std::uint64_t it = c.event < v.event_iteration.size() ? v.event_iteration[c.event] : 0;
    f.actions[t.tensors[c.tensor].id].push_back({c.t_s, fmt::format("{:.3f} ms (simulated)", c.t_s * 1e3), it, what,
                                                 fmt::format("decided at trace line {} ({})", c.event + 2ull, trace::event_name(t, c.event)),
                                                 t.tensors[c.tensor].bytes});
  }
  for (auto& [id, acts] : f.actions)  // stalls were added first: the list in time order
    std::stable_sort(acts.begin(), acts.end(), [](const auto& a, const auto& b) { return a.t_s < b.t_s; });
}

// The trace's simulated runs: the memory series and, with a budget, capuchin's actions.
Status add_trace(const trace::Trace& t, const std::string& gpu, const std::string& budget, Facts& f) {
  auto v = simulate_view(t, gpu, budget);
  if (!v) return Unexpected{v.error()};
  Series nat{"natural", "live bytes, unmanaged (simulated, " + v->gpu + ")", "#1f77b4", {}};
  for (const auto& p : v->natural_mem) nat.pts.push_back({p.t_s * 1e3, static_cast<double>(p.bytes)});
  const double tmax = std::max(v->natural.total_time_s, v->managed.total_time_s) * 1e3;
  const auto flat = [tmax](double y) { return std::vector<std::pair<double, double>>{{0, y}, {tmax, y}}; };
  f.mem.push_back(nat);
  f.mem.push_back({"natural-peak", "natural peak " + format_bytes(v->natural_peak_bytes), "#7f7f7f",
                   flat(static_cast<double>(v->natural_peak_bytes))});
  f.mem_xlabel = "time (ms, simulated)";
  f.meta = {{"source", "trace"}, {"gpu", v->gpu}, {"natural_peak_bytes", v->natural_peak_bytes}};
  if (!v->budget_bytes) {
    f.mem_note = fmt::format("Simulated on GPU profile {} without a budget (give --budget to add capuchin's run).", v->gpu);
    return {};
  }
  Series res{"capuchin-resident", "resident bytes under capuchin (simulated)", "#2ca02c", {}};
  for (const auto& p : v->managed_mem) res.pts.push_back({p.t_s * 1e3, static_cast<double>(p.bytes)});
  f.mem.push_back(res);
  f.mem.push_back({"budget", "budget " + format_bytes(v->budget_bytes), "#d62728", flat(static_cast<double>(v->budget_bytes))});
  f.meta["budget_bytes"] = v->budget_bytes;
  f.meta["feasible"] = v->managed.feasible;
  f.meta["peak_bytes"] = v->managed.peak_bytes;
  add_simulated_actions(t, *v, f);
  const double bound = v->bound.feasible ? v->bound.ratio(v->natural.time_s) : 0.0;
  f.meta["bound_ratio"] = bound;  // 0: no policy fits the budget (sim.hpp lower_bound)
  const std::string bound_words =
      v->bound.feasible ? fmt::format(" No policy sustains a steady iteration under {:.3f} ms at this budget (lower bound, ratio {:.3f}).",
                                      bound * v->natural.time_s * 1e3, bound)
                        : " No policy fits this budget: one kernel's own tensors exceed it (lower bound).";
  f.mem_note = fmt::format("Simulated on GPU profile {}: capuchin at budget {} ({}), {} feasible, peak {}; steady iteration {:.3f} ms "
                           "vs {:.3f} ms unmanaged.{} The green line is what the simulated run held on the device at each moment.",
                           v->gpu, format_bytes(v->budget_bytes), escape_markup(budget), v->managed.feasible ? "run" : "run NOT",
                           format_bytes(v->managed.peak_bytes), v->managed.time_s * 1e3, v->natural.time_s * 1e3, bound_words);
  return {};
}

std::uint64_t budget_of(const std::vector<DecisionRecord>& recs) {
  std::uint64_t b = 0;
  for (const auto& r : recs)
    if ((r.action == "budget" || r.action == "set-budget" || r.action == "plan") && r.bytes > 0) b = r.bytes;
  return b;
}

// The decision logs: per-iteration figures, each tensor's decisions, and (with no trace) the
// memory series: bytes capuchin held off the device, per process.
void add_logs(const std::vector<DecisionRecord>& recs, bool have_trace, Facts& f) {
  double tmax = 0;
  for (const auto& r : recs) {
    ++f.by_action[r.action];
    tmax = std::max(tmax, r.t);
    if (r.action == "evict") f.swap_out[r.iteration] += static_cast<double>(r.bytes);
    if (r.action == "prefetch" || r.action == "swapin_on_demand") f.swap_in[r.iteration] += static_cast<double>(r.bytes);
    if (r.action == "stall") f.stall_n[r.iteration] += 1, f.stall_s[r.iteration] += r.actual_s.value_or(0);
    if (!r.tensor) continue;
    if (r.action == "evict" || r.action == "prefetch" || r.action == "swapin_on_demand") f.moved[*r.tensor] += r.bytes;
    std::string detail = r.reason;
    if (r.actual_s) detail += fmt::format("{}took {:.6f} s", detail.empty() ? "" : "; ", *r.actual_s);
    if (!r.note.empty()) detail += (detail.empty() ? "" : "; ") + r.note;
    f.actions[*r.tensor].push_back({r.t, fmt::format("{:.6f} s", r.t), r.iteration, r.action, detail, r.bytes});
    if (!f.log_identity.count(*r.tensor))
      f.log_identity[*r.tensor] = fmt::format("{}, first in the log in iteration {} ({}, pid {})", format_bytes(r.bytes), r.iteration,
                                              r.action, r.pid);
  }
  if (have_trace) return;
  const bool in_s = tmax >= 10;  // a long session reads better in seconds
  const double scale = in_s ? 1 : 1e3;
  f.mem_xlabel = in_s ? "time (s since the session began)" : "time (ms since the session began)";
  const char* colors[] = {"#9467bd", "#ff7f0e", "#8c564b", "#e377c2"};
  const auto series = off_device_bytes(recs);
  for (std::size_t i = 0; i < series.size(); ++i) {
    Series s{fmt::format("off-device-pid-{}", series[i].pid), fmt::format("bytes held off the device by capuchin, pid {}", series[i].pid),
             colors[i % 4], {{0, 0}}};
    for (const auto& p : series[i].pts) s.pts.push_back({p.t_s * scale, static_cast<double>(p.bytes)});
    f.mem.push_back(std::move(s));
  }
  const std::uint64_t budget = budget_of(recs);
  f.meta = {{"source", "decision log"}, {"budget_bytes", budget}};
  f.mem_note = "From the decision log: a decision log holds capuchin's actions, not the job's resident bytes, so the chart "
               "shows the bytes capuchin held off the device at each moment (swapped out or dropped and not yet swapped "
               "back in or recomputed), per process. ";
  if (budget) f.mem_note += fmt::format("The log's last budget record says {}. ", format_bytes(budget));
  if (series.empty())
    f.mem_note = "The decision log holds no executed evict/drop/prefetch/recompute records (only e.g. plans, budgets, "
                 "sessions): no memory moved, nothing to plot.";
}

// A tensor as a user recognises it: from the trace (producing kernel, size, position in its
// iteration) when it has the id, else what the decision log says.
std::string tensor_name(std::uint64_t id, const trace::TensorNames* names, const Facts& f) {
  if (names)
    if (auto i = names->find(id)) return names->describe(*i);
  const auto it = f.log_identity.find(id);
  const std::string hint = names ? " (not in the trace given)" : " (give the run's recorded trace to name its kernel)";
  return it != f.log_identity.end() ? it->second + hint : "unknown";
}

std::vector<std::uint64_t> top_tensors(const Facts& f, std::size_t n) {
  std::vector<std::uint64_t> ids;
  for (const auto& [id, acts] : f.actions) ids.push_back(id);
  for (const auto& [id, b] : f.moved)
    if (!f.actions.count(id)) ids.push_back(id);
  auto moved = [&](std::uint64_t id) { return f.moved.count(id) ? f.moved.at(id) : 0; };
  auto count = [&](std::uint64_t id) { return f.actions.count(id) ? f.actions.at(id).size() : 0; };
  std::stable_sort(ids.begin(), ids.end(), [&](auto a, auto b) { return std::pair(moved(a), count(a)) > std::pair(moved(b), count(b)); });
  if (ids.size() > n) ids.resize(n);
  return ids;
}

// The top tensors table (each row links to the tensor's decisions) and the per-tensor lists.
std::string tensors_section(const Facts& f, const trace::TensorNames* names) {
  constexpr std::size_t kShown = 50;  // decisions listed per tensor
  const auto ids = top_tensors(f, 20);
  std::string table = "<h2>Top tensors by bytes moved</h2><table id=\"top-tensors\"><tr><th>tensor (allocation id)</th>"
                      "<th>what it is</th><th>bytes moved</th><th>decisions</th></tr>";
  std::string lists = "<h2>Decisions per tensor</h2><div id=\"tensor-decisions\">";
  for (std::uint64_t id : ids) {
    const std::string name = escape_markup(tensor_name(id, names, f));
    const auto it = f.actions.find(id);
    const std::size_t n = it == f.actions.end() ? 0 : it->second.size();
    table += fmt::format(R"(<tr><td><a href="#tensor-{0}">{0}</a></td><td class="name">{1}</td><td>{2}</td><td><a href="#tensor-{0}">{3}</a></td></tr>)",
                         id, name, format_bytes(f.moved.count(id) ? f.moved.at(id) : 0), n);
    lists += fmt::format(R"(<details id="tensor-{0}" class="tensor"><summary>tensor {0}: {1} ({2} decisions)</summary>)", id, name, n);
    lists += "<table><tr><th>when</th><th>iteration</th><th>action</th><th>bytes</th><th>detail</th></tr>";
    for (std::size_t k = 0; k < n && k < kShown; ++k) {
      const TensorAction& a = it->second[k];
      lists += fmt::format("<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td class=\"name\">{}</td></tr>", a.when, a.iteration,
                           escape_markup(a.action), format_bytes(a.bytes), escape_markup(a.detail));
    }
    if (n > kShown) lists += fmt::format("<tr><td colspan=5>... and {} more</td></tr>", n - kShown);
    lists += "</table></details>";
  }
  if (ids.empty()) table += "<tr><td colspan=4>none</td></tr>";
  return table + "</table>" + lists + "</div>";
}

std::string iteration_section(Facts& f) {
  std::vector<std::string> cats;
  std::vector<double> so, si, sn, ss;
  std::map<std::uint64_t, int> its;
  for (auto* m : {&f.swap_out, &f.swap_in, &f.stall_n})
    for (auto& [k, v] : *m) its[k];
  for (auto& [k, v] : its) {
    cats.push_back(std::to_string(k));
    so.push_back(f.swap_out[k]);
    si.push_back(f.swap_in[k]);
    sn.push_back(f.stall_n[k]);
    ss.push_back(f.stall_s[k] * 1e3);
  }
  std::string body = "<h2>Swap traffic per iteration</h2>";
  if (cats.empty()) body += "<p>No swaps.</p>";
  body += bar_plot("swap-plot", "iteration", cats, {{"swapped out", so}, {"swapped in", si}}, true);
  // Counts and milliseconds on separate axes: a thousand stalls of a few microseconds each
  // would otherwise draw their time as nothing.
  body += "<h2>Stalls per iteration</h2>";
  if (f.stall_n.empty()) body += "<p>No stalls.</p>";
  body += bar_plot("stall-plot", "iteration", cats, {{"stalls", sn}}, false);
  body += bar_plot("stall-time-plot", "iteration", cats, {{"stall time (ms)", ss}}, false);
  return body;
}

const char* kScript = R"(<script>
// Marks the page ready once the memory plot is drawn (the browser test reads data-ready), and
// opens a tensor's decisions when a link to them is followed.
(function() {
  var plot = document.getElementById('memory-plot');
  var lines = plot ? plot.querySelectorAll('polyline').length : 0;
  function openTensor() {
    var d = location.hash ? document.getElementById(location.hash.slice(1)) : null;
    if (d && d.tagName === 'DETAILS') d.open = true;
  }
  window.addEventListener('hashchange', openTensor);
  openTensor();
  document.body.setAttribute('data-plot-lines', String(lines));
  document.body.setAttribute('data-ready', plot ? '1' : '0');
})();
</script>)";

}  // namespace

int run_report(const std::vector<std::string>& files, const std::string& out, const std::string& gpu,
               const std::string& budget) {
  auto in = load_report_inputs(files);
  if (!in) {
    fmt::print(stderr, "capuchin report: {}\n", in.error().message);
    return 1;
  }
  std::string sources;
  for (const auto& f : in->trace_files) sources += "<li>trace: " + escape_markup(f) + "</li>";
  for (const auto& f : in->decision_files) sources += "<li>decision log: " + escape_markup(f) + "</li>";
  Facts f;
  if (in->trace)
    if (auto r = add_trace(*in->trace, gpu, budget, f); !r) {
      fmt::print(stderr, "capuchin report: {}\n", r.error().message);
      return 1;
    }
  if (!in->decisions.empty()) add_logs(in->decisions, in->trace.has_value(), f);
  std::optional<trace::TensorNames> names;
  if (in->trace) names.emplace(*in->trace);

  std::string body = "<ul>" + sources + "</ul>";
  body += "<h2>Memory over time</h2><p id=\"memory-note\">" + f.mem_note + "</p>";
  body += line_plot("memory-plot", f.mem_xlabel.empty() ? "time" : f.mem_xlabel, f.mem, true, f.meta);
  body += iteration_section(f);
  body += tensors_section(f, names ? &*names : nullptr);
  if (!f.by_action.empty()) {
    body += "<h2>Decisions by action</h2><table id=\"actions\"><tr><th>action</th><th>records</th></tr>";
    for (const auto& [a, n] : f.by_action) body += fmt::format("<tr><td>{}</td><td>{}</td></tr>", escape_markup(a), n);
    body += "</table>";
  }
  const std::string html = fmt::format(R"(<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>capuchin report</title>
<style>body{{font-family:sans-serif;margin:2em;max-width:960px}} table{{border-collapse:collapse}} td,th{{border:1px solid #ccc;padding:2px 8px;text-align:right}} td.name{{text-align:left}} summary{{cursor:pointer}} svg{{display:block;margin:0.5em 0}}</style>
</head><body data-ready="0">
<h1>capuchin report</h1>
{}
{}
</body></html>
)",
                                       body, kScript);
  std::ofstream os(out);
  os << html;
  if (!os.good()) {
    fmt::print(stderr, "capuchin report: cannot write {}\n", out);
    return 1;
  }
  fmt::print("wrote {}\n", out);
  return 0;
}

}  // namespace capuchin::cli
