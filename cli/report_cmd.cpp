// `capuchin report FILE... -o report.html`: one self-contained HTML page (inline SVG plots,
// a few lines of inline script, no network): memory over time (resident vs budget vs natural
// peak), swap traffic and stalls per iteration, the top tensors by bytes moved, and the
// decisions by action. Inputs: a recorded trace (figures simulated on a GPU profile, labelled
// so; --budget adds the capuchin policy's run) and/or decision logs (figures as recorded).
#include <fmt/format.h>

#include <algorithm>
#include <fstream>
#include <map>

#include "capuchin/units.hpp"
#include "report_data.hpp"

namespace capuchin::cli {
namespace {

std::string esc(std::string_view s) {
  std::string o;
  for (char c : s) {
    switch (c) {
      case '<': o += "&lt;"; break;
      case '>': o += "&gt;"; break;
      case '&': o += "&amp;"; break;
      case '"': o += "&quot;"; break;
      default: o += c;
    }
  }
  return o;
}

struct Series {
  std::string label, color;
  std::vector<std::pair<double, double>> pts;  // (x, y)
  bool step = true;
};

// Keeps at most ~`n` points, each bucket's maximum (peaks stay visible).
std::vector<std::pair<double, double>> downsample(const std::vector<std::pair<double, double>>& p, std::size_t n) {
  if (p.size() <= n) return p;
  std::vector<std::pair<double, double>> o;
  const std::size_t per = (p.size() + n - 1) / n;
  for (std::size_t i = 0; i < p.size(); i += per) {
    auto best = p[i];
    for (std::size_t j = i; j < std::min(p.size(), i + per); ++j)
      if (p[j].second > best.second) best = p[j];
    o.push_back(best);
  }
  return o;
}

std::string line_plot(const std::string& id, const std::string& xlabel, const std::vector<Series>& series,
                      bool y_bytes) {
  const double W = 900, H = 320, L = 90, R = 20, T = 20, B = 45;
  double xmax = 0, ymax = 0;
  for (const auto& s : series)
    for (auto [x, y] : s.pts) xmax = std::max(xmax, x), ymax = std::max(ymax, y);
  if (xmax <= 0) xmax = 1;
  if (ymax <= 0) ymax = 1;
  ymax *= 1.08;
  auto X = [&](double x) { return L + (W - L - R) * x / xmax; };
  auto Y = [&](double y) { return H - B - (H - T - B) * y / ymax; };
  std::string s = fmt::format(R"(<svg id="{}" class="plot" xmlns="http://www.w3.org/2000/svg" width="{}" height="{}" viewBox="0 0 {} {}">)",
                              id, W, H, W, H);
  s += fmt::format(R"(<rect x="{}" y="{}" width="{}" height="{}" fill="#fafafa" stroke="#999"/>)", L, T, W - L - R, H - T - B);
  for (int i = 0; i <= 4; ++i) {
    const double y = ymax * i / 4;
    s += fmt::format(R"(<line x1="{}" x2="{}" y1="{:.1f}" y2="{:.1f}" stroke="#ddd"/><text x="{}" y="{:.1f}" font-size="11" text-anchor="end">{}</text>)",
                     L, W - R, Y(y), Y(y), L - 5, Y(y) + 4, y_bytes ? format_bytes(static_cast<std::uint64_t>(y)) : fmt::format("{:.3g}", y));
    const double x = xmax * i / 4;
    s += fmt::format(R"(<text x="{:.1f}" y="{}" font-size="11" text-anchor="middle">{:.4g}</text>)", X(x), H - B + 15, x);
  }
  s += fmt::format(R"(<text x="{}" y="{}" font-size="12" text-anchor="middle">{}</text>)", L + (W - L - R) / 2, H - 8, esc(xlabel));
  int legend = 0;
  for (const auto& se : series) {
    if (se.pts.empty()) continue;
    std::string pts;
    double prev_y = -1;
    for (auto [x, y] : downsample(se.pts, 1500)) {
      if (se.step && prev_y >= 0) pts += fmt::format("{:.1f},{:.1f} ", X(x), Y(prev_y));
      pts += fmt::format("{:.1f},{:.1f} ", X(x), Y(y));
      prev_y = y;
    }
    s += fmt::format(R"(<polyline fill="none" stroke="{}" stroke-width="1.5" points="{}"><title>{}</title></polyline>)",
                     se.color, pts, esc(se.label));
    s += fmt::format(R"(<rect x="{}" y="{}" width="12" height="3" fill="{}"/><text x="{}" y="{}" font-size="11">{}</text>)",
                     L + 10, T + 10 + 15 * legend, se.color, L + 26, T + 14 + 15 * legend, esc(se.label));
    ++legend;
  }
  return s + "</svg>";
}

std::string bar_plot(const std::string& id, const std::string& xlabel, const std::vector<std::string>& cats,
                     const std::vector<std::pair<std::string, std::vector<double>>>& groups, bool y_bytes) {
  const double W = 900, H = 260, L = 90, R = 20, T = 20, B = 45;
  double ymax = 0;
  for (const auto& g : groups)
    for (double v : g.second) ymax = std::max(ymax, v);
  if (ymax <= 0) ymax = 1;
  const std::size_t n = std::max<std::size_t>(1, cats.size());
  const double slot = (W - L - R) / static_cast<double>(n), bw = slot * 0.8 / static_cast<double>(std::max<std::size_t>(1, groups.size()));
  const char* colors[] = {"#d62728", "#1f77b4", "#2ca02c", "#9467bd"};
  std::string s = fmt::format(R"(<svg id="{}" class="plot" xmlns="http://www.w3.org/2000/svg" width="{}" height="{}" viewBox="0 0 {} {}">)",
                              id, W, H, W, H);
  s += fmt::format(R"(<rect x="{}" y="{}" width="{}" height="{}" fill="#fafafa" stroke="#999"/>)", L, T, W - L - R, H - T - B);
  s += fmt::format(R"(<text x="{}" y="{:.1f}" font-size="11" text-anchor="end">{}</text>)", L - 5, T + 4.0,
                   y_bytes ? format_bytes(static_cast<std::uint64_t>(ymax)) : fmt::format("{:.3g}", ymax));
  for (std::size_t g = 0; g < groups.size(); ++g) {
    for (std::size_t i = 0; i < groups[g].second.size() && i < cats.size(); ++i) {
      const double v = groups[g].second[i], h = (H - T - B) * v / ymax;
      s += fmt::format(R"(<rect x="{:.1f}" y="{:.1f}" width="{:.1f}" height="{:.1f}" fill="{}"><title>{} {}: {}</title></rect>)",
                       L + slot * static_cast<double>(i) + slot * 0.1 + bw * static_cast<double>(g), H - B - h, bw, h,
                       colors[g % 4], esc(groups[g].first), esc(cats[i]),
                       y_bytes ? format_bytes(static_cast<std::uint64_t>(v)) : fmt::format("{:.6g}", v));
    }
    s += fmt::format(R"(<rect x="{}" y="{}" width="12" height="8" fill="{}"/><text x="{}" y="{}" font-size="11">{}</text>)",
                     W - R - 220, T + 8 + 14 * g, colors[g % 4], W - R - 204, T + 16 + 14 * g, esc(groups[g].first));
  }
  const std::size_t every = std::max<std::size_t>(1, cats.size() / 20);
  for (std::size_t i = 0; i < cats.size(); i += every)
    s += fmt::format(R"(<text x="{:.1f}" y="{}" font-size="10" text-anchor="middle">{}</text>)",
                     L + slot * (static_cast<double>(i) + 0.5), H - B + 14, esc(cats[i]));
  s += fmt::format(R"(<text x="{}" y="{}" font-size="12" text-anchor="middle">{}</text>)", L + (W - L - R) / 2, H - 8, esc(xlabel));
  return s + "</svg>";
}

}  // namespace

int run_report(const std::vector<std::string>& files, const std::string& out, const std::string& gpu,
               const std::string& budget) {
  auto in = load_report_inputs(files);
  if (!in) {
    fmt::print(stderr, "capuchin report: {}\n", in.error().message);
    return 1;
  }
  std::string body;
  std::string sources;
  for (const auto& f : in->trace_files) sources += "<li>trace: " + esc(f) + "</li>";
  for (const auto& f : in->decision_files) sources += "<li>decision log: " + esc(f) + "</li>";
  body += "<ul>" + sources + "</ul>";

  // Per-iteration swap bytes / stalls, and bytes moved per tensor, from both sources.
  std::map<std::uint64_t, double> swap_out, swap_in, stall_s, stall_n;
  std::map<std::uint64_t, std::uint64_t> moved;  // tensor id -> bytes
  std::vector<Series> mem;
  std::string mem_note;

  if (in->trace) {
    auto v = simulate_view(*in->trace, gpu, budget);
    if (!v) {
      fmt::print(stderr, "capuchin report: {}\n", v.error().message);
      return 1;
    }
    const trace::Trace& t = *in->trace;
    Series nat{"live bytes, unmanaged (simulated, " + v->gpu + ")", "#1f77b4", {}};
    for (const auto& p : v->natural_mem) nat.pts.push_back({p.t_s * 1e3, static_cast<double>(p.bytes)});
    const double tmax = std::max(v->natural.total_time_s, v->managed.total_time_s) * 1e3;
    mem.push_back(nat);
    mem.push_back({"natural peak " + format_bytes(v->natural_peak_bytes), "#7f7f7f",
                   {{0, static_cast<double>(v->natural_peak_bytes)}, {tmax, static_cast<double>(v->natural_peak_bytes)}}});
    if (v->budget_bytes) {
      Series res{"resident bytes under capuchin (simulated)", "#2ca02c", {}};
      for (const auto& p : v->managed_mem) res.pts.push_back({p.t_s * 1e3, static_cast<double>(p.bytes)});
      mem.push_back(res);
      mem.push_back({"budget " + format_bytes(v->budget_bytes), "#d62728",
                     {{0, static_cast<double>(v->budget_bytes)}, {tmax, static_cast<double>(v->budget_bytes)}}});
      for (const auto& e : v->managed_tl) {
        const std::uint64_t it = e.event < v->event_iteration.size() ? v->event_iteration[e.event] : 0;
        const std::uint64_t bytes = e.tensor < t.tensors.size() ? t.tensors[e.tensor].bytes : 0;
        if (e.kind == sim::TimelineEntry::Kind::SwapOut) swap_out[it] += static_cast<double>(bytes);
        if (e.kind == sim::TimelineEntry::Kind::SwapIn) swap_in[it] += static_cast<double>(bytes);
        if (e.kind == sim::TimelineEntry::Kind::Stall) stall_s[it] += e.end_s - e.start_s, stall_n[it] += 1;
        if ((e.kind == sim::TimelineEntry::Kind::SwapOut || e.kind == sim::TimelineEntry::Kind::SwapIn) && e.tensor < t.tensors.size())
          moved[t.tensors[e.tensor].id] += bytes;
      }
      mem_note = fmt::format("Simulated on GPU profile {}: capuchin at budget {} ({}), {} feasible; steady iteration {:.3f} ms "
                             "vs {:.3f} ms unmanaged.",
                             v->gpu, format_bytes(v->budget_bytes), esc(v->budget_text), v->managed.feasible ? "run" : "run NOT",
                             v->managed.time_s * 1e3, v->natural.time_s * 1e3);
    } else {
      mem_note = fmt::format("Simulated on GPU profile {} without a budget (give --budget to add capuchin's run).", v->gpu);
    }
  }
  std::map<std::string, std::uint64_t> by_action;
  if (!in->decisions.empty()) {
    Series dres{"resident change from executed decisions (log)", "#9467bd", {}};
    std::uint64_t budget_seen = 0;
    double tmax = 0;
    double change = 0;
    for (const auto& r : in->decisions) {
      ++by_action[r.action];
      tmax = std::max(tmax, r.t * 1e3);
      if (r.action == "plan" || r.action == "set-budget") budget_seen = r.bytes;
      const bool out_ = r.action == "evict" || r.action == "drop";
      const bool in_ = r.action == "prefetch" || r.action == "swapin_on_demand" || r.action == "recompute";
      if (r.action == "evict") swap_out[r.iteration] += static_cast<double>(r.bytes);
      if (r.action == "prefetch" || r.action == "swapin_on_demand") swap_in[r.iteration] += static_cast<double>(r.bytes);
      if (r.action == "stall") stall_n[r.iteration] += 1, stall_s[r.iteration] += r.actual_s.value_or(0);
      if ((out_ || in_) && r.tensor) moved[*r.tensor] += r.bytes;
      if (out_ || in_) {
        change += out_ ? -static_cast<double>(r.bytes) : static_cast<double>(r.bytes);
        dres.pts.push_back({r.t * 1e3, std::max(0.0, change)});
      }
    }
    if (in->trace == std::nullopt) {
      mem.push_back(dres);
      if (budget_seen)
        mem.push_back({"budget " + format_bytes(budget_seen), "#d62728",
                       {{0, static_cast<double>(budget_seen)}, {tmax, static_cast<double>(budget_seen)}}});
      if (dres.pts.empty())
        mem_note += "The decision log holds no executed evict/prefetch/recompute records (the daemon's own records: "
                    "plans, relearning, sessions); the plot shows the budget only.";
    }
  }
  if (mem.empty() || std::all_of(mem.begin(), mem.end(), [](const Series& s) { return s.pts.empty(); }))
    mem.push_back({"no memory data", "#cccccc", {{0, 0}, {1, 0}}});
  body += "<h2>Memory over time</h2><p>" + mem_note + "</p>";
  body += line_plot("memory-plot", in->trace ? "time (ms, simulated)" : "time (ms since the session began)", mem, true);

  std::vector<std::string> cats;
  std::vector<double> so, si, sn, ss;
  std::map<std::uint64_t, int> its;
  for (auto& [k, v] : swap_out) its[k];
  for (auto& [k, v] : swap_in) its[k];
  for (auto& [k, v] : stall_n) its[k];
  for (auto& [k, v] : its) {
    cats.push_back(std::to_string(k));
    so.push_back(swap_out[k]);
    si.push_back(swap_in[k]);
    sn.push_back(stall_n[k]);
    ss.push_back(stall_s[k] * 1e3);
  }
  body += "<h2>Swap traffic per iteration</h2>";
  if (cats.empty()) body += "<p>No swaps.</p>";
  body += bar_plot("swap-plot", "iteration", cats, {{"swapped out", so}, {"swapped in", si}}, true);
  body += "<h2>Stalls per iteration</h2>";
  body += bar_plot("stall-plot", "iteration", cats, {{"stalls", sn}, {"stall time (ms)", ss}}, false);

  std::vector<std::pair<std::uint64_t, std::uint64_t>> top(moved.begin(), moved.end());
  std::sort(top.begin(), top.end(), [](auto& a, auto& b) { return a.second > b.second; });
  body += "<h2>Top tensors by bytes moved</h2><table id=\"top-tensors\"><tr><th>tensor (allocation id)</th><th>bytes moved</th></tr>";
  for (std::size_t i = 0; i < top.size() && i < 20; ++i)
    body += fmt::format("<tr><td>{}</td><td>{}</td></tr>", top[i].first, format_bytes(top[i].second));
  if (top.empty()) body += "<tr><td colspan=2>none</td></tr>";
  body += "</table>";
  if (!by_action.empty()) {
    body += "<h2>Decisions by action</h2><table id=\"actions\"><tr><th>action</th><th>records</th></tr>";
    for (const auto& [a, n] : by_action) body += fmt::format("<tr><td>{}</td><td>{}</td></tr>", esc(a), n);
    body += "</table>";
  }

  const std::string html = fmt::format(R"(<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>capuchin report</title>
<style>body{{font-family:sans-serif;margin:2em;max-width:960px}} table{{border-collapse:collapse}} td,th{{border:1px solid #ccc;padding:2px 8px;text-align:right}} svg{{display:block;margin:0.5em 0}}</style>
</head><body data-ready="0">
<h1>capuchin report</h1>
{}
<script>
// Marks the page ready once the memory plot is drawn (the browser test reads data-ready).
(function() {{
  var plot = document.getElementById('memory-plot');
  var lines = plot ? plot.querySelectorAll('polyline').length : 0;
  document.body.setAttribute('data-plot-lines', String(lines));
  document.body.setAttribute('data-ready', lines > 0 ? '1' : '0');
}})();
</script>
</body></html>
)",
                                       body);
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
