// Reports of simulation runs: the sweep's side-by-side markdown table and CSV, the
// ratio-against-budget plot as a standalone SVG (written by hand with fmt), and the
// timeline CSV. See include/capuchin/sim.hpp.
#include <algorithm>
#include <cmath>
#include <map>

#include <fmt/format.h>

#include "capuchin/sim.hpp"
#include "capuchin/text.hpp"
#include "capuchin/trace.hpp"
#include "capuchin/units.hpp"

namespace capuchin::sim {
namespace {

std::string csv_field(std::string_view s) {
  if (s.find_first_of(",\"\n") == std::string_view::npos) return std::string(s);
  std::string r = "\"";
  for (char c : s) r += c == '"' ? std::string("\"\"") : std::string(1, c);
  return r + "\"";
}

const char* kColors[] = {"#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#17becf"};

}  // namespace

std::string_view to_string(TimelineEntry::Lane l) {
  switch (l) {
    case TimelineEntry::Lane::Compute: return "compute";
    case TimelineEntry::Lane::H2D: return "h2d";
    case TimelineEntry::Lane::D2H: return "d2h";
  }
  return "?";
}

std::string_view to_string(TimelineEntry::Kind k) {
  switch (k) {
    case TimelineEntry::Kind::Kernel: return "kernel";
    case TimelineEntry::Kind::Copy: return "copy";
    case TimelineEntry::Kind::Recompute: return "recompute";
    case TimelineEntry::Kind::SwapIn: return "swap_in";
    case TimelineEntry::Kind::SwapOut: return "swap_out";
    case TimelineEntry::Kind::Stall: return "stall";
  }
  return "?";
}

std::string sweep_markdown(const std::vector<SweepRow>& rows, const std::vector<std::string>& policies,
                           const std::string& gpu) {
  std::string out = fmt::format(
      "Simulated, GPU profile {}: steady-iteration time / ideal (unlimited memory) time; "
      "\"infeasible\": the policy cannot stay within the budget.\n\n| trace | budget | budget bytes |",
      gpu);
  for (const auto& p : policies) out += fmt::format(" {} |", p);
  out += " bound |\n| --- | --- | ---: |";
  for (std::size_t i = 0; i < policies.size(); ++i) out += " ---: |";
  out += " ---: |\n";
  // One line per (trace, budget), in first-seen order.
  std::vector<std::pair<std::string, std::string>> keys;
  std::map<std::pair<std::string, std::string>, std::map<std::string, const SweepRow*>> cells;
  for (const auto& r : rows) {
    auto key = std::make_pair(r.trace, r.budget);
    if (!cells.count(key)) keys.push_back(key);
    cells[key][r.c.run.policy] = &r;
  }
  for (const auto& key : keys) {
    const auto& m = cells[key];
    const SweepRow* any = m.begin()->second;
    out += fmt::format("| {} | {} | {} |", key.first, key.second, format_bytes(any->budget_bytes));
    for (const auto& p : policies) {
      auto it = m.find(p);
      if (it == m.end()) out += " - |";
      else if (!it->second->c.run.feasible) out += " infeasible |";
      else out += fmt::format(" {:.3f} |", it->second->c.ratio);
    }
    // The least ratio any policy could reach here (sim.hpp lower_bound).
    if (!any->bound_known) out += " - |";
    else if (any->bound_ratio <= 0) out += " infeasible |";
    else out += fmt::format(" {:.3f} |", any->bound_ratio);
    out += "\n";
  }
  return out;
}

namespace {
// The source-trace place of a repeated trace's event: "iteration 8, line 2030 of the trace" ("" when none).
std::string source_place(const trace::Trace& t, std::uint32_t event, std::span<const std::uint32_t> source) {
  if (event >= source.size()) return {};
  const auto it = std::find_if(t.iterations.begin(), t.iterations.end(),
                               [&](const trace::Iteration& i) { return event >= i.begin && event < i.end; });
  // Before iteration 1: the trace's set-up (copied as it is), or the preamble --iters adds from
  // the iterations before the last (trace_repeat.hpp).
  const std::string where = it != t.iterations.end() ? fmt::format("iteration {}", it->n)
                            : source[event] == event ? std::string("set-up")
                                                     : std::string("the --iters preamble");
  const std::uint64_t line = source_line(source, event);
  return line == 0 ? where + ", not in the trace file (added)" : fmt::format("{}, line {} of the trace", where, line);
}
}  // namespace

std::uint64_t source_line(std::span<const std::uint32_t> source, std::uint32_t event) {
  return event < source.size() && source[event] != trace::kNone ? static_cast<std::uint64_t>(source[event]) + 2 : 0;
}

std::string describe_line(const trace::Trace& t, std::uint32_t event, std::span<const std::uint32_t> source) {
  const std::string place = source_place(t, event, source);
  const auto line = static_cast<std::uint64_t>(event) + 2;
  return place.empty() ? fmt::format("line {}", line) : fmt::format("line {} ({})", line, place);
}

std::string describe_site(const trace::Trace& t, const StallSite& site, std::span<const std::uint32_t> source) {
  if (site.event >= t.events.size()) return {};
  const trace::Event& e = t.events[site.event];
  std::string what;
  if (e.op == trace::Op::Kernel && e.name < t.names.size()) what = t.names[e.name];
  else what = std::string(trace::to_string(e.op));
  const std::string place = source_place(t, site.event, source);
  if (!place.empty()) what += "; " + place;
  return fmt::format("line {} ({}): {:.3f} ms, {}", static_cast<std::uint64_t>(site.event) + 2, what, site.stall_s * 1e3,
                     describe(site.cause));
}

namespace {

// Milliseconds, 3 decimals; a sum that is zero up to rounding prints as 0.000, not -0.000.
std::string ms(double s) { return fmt::format("{:.3f}", std::abs(s) < kZeroS ? 0.0 : s * 1e3); }

std::string bound_text(const SweepRow& r) {
  if (!r.bound_known) return "-";
  return r.bound_ratio > 0 ? fmt::format("{:.3f}", r.bound_ratio) : "infeasible";
}

// What the bound adds to the ideal iteration (its ratio less one) and where it binds.
std::string bound_adds_text(const SweepRow& r) {
  if (!r.bound_known || r.bound_ratio <= 0) return "-";
  const double adds_s = (r.bound_ratio - 1.0) * r.c.ideal_time_s;
  if (r.bound_where.empty() || adds_s <= 0) return ms(std::max(0.0, adds_s));
  return fmt::format("{} at {}", ms(adds_s), r.bound_where);
}

std::string infeasible_text(const SweepRow& r) {
  const SimResult& s = r.c.run;
  if (s.where.reason.empty()) return {};
  return fmt::format("{}: {}", r.infeasible_where.empty() ? fmt::format("line {}", s.where.line) : r.infeasible_where,
                     s.where.reason);
}

constexpr const char* kExplainLegend =
    "- `adds`: what it adds to the ideal iteration: its recomputation plus its stalls, by cause;\n"
    "- `bound adds`: the least any policy adds at that budget (`capuchin sim bound`), and where it binds;\n"
    "- `link out / in`: how long its copies kept each direction of the link busy (near the iteration's time, that "
    "direction is saturated);\n"
    "- `cancelled`: copies out whose eviction was cancelled before they landed (the tensor was needed again, or "
    "freed): link time for nothing;\n"
    "- `largest wait`: the last iteration's; with `--iters`, a line of the repeated trace, then the iteration and "
    "the trace's own line.\n\n";

}  // namespace

std::string explain_markdown(const std::vector<SweepRow>& rows, const std::string& policy, const std::string& gpu) {
  std::string out = fmt::format("Where `{}`'s time goes, simulated, GPU profile {} (ms per steady iteration):\n\n", policy, gpu);
  out += kExplainLegend;
  out +=
      "| trace | budget | ratio | bound | ideal | adds | bound adds | recompute | waiting for room | on-demand swap-ins | "
      "late prefetches | job's copies | link out / in | cancelled | largest wait |\n"
      "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- |\n";
  for (const auto& r : rows) {
    if (r.c.run.policy != policy) continue;
    const SimResult& s = r.c.run;
    out += fmt::format("| {} | {} |", r.trace, r.budget);
    if (!s.feasible) {
      out += fmt::format(" infeasible | {} | | | | | | | | | | | {} |\n", bound_text(r), infeasible_text(r));
      continue;
    }
    out += fmt::format(" {:.3f} | {} | {} | {} | {} | {} |", r.c.ratio, bound_text(r), ms(r.c.ideal_time_s),
                       ms(s.time_s - r.c.ideal_time_s), bound_adds_text(r), ms(s.recompute_s));
    for (double d : s.stall_by_cause_s) out += fmt::format(" {} |", ms(d));
    out += fmt::format(" {} / {} | {} | {} |\n", ms(s.swap_out_link_s), ms(s.swap_in_link_s), ms(s.cancelled_out_link_s),
                       r.largest_wait);
  }
  return out;
}

std::string sweep_csv(const std::vector<SweepRow>& rows) {
  std::string out =
      "trace,gpu,policy,budget,budget_bytes,natural_peak_bytes,feasible,time_s,ideal_time_s,ratio,stall_s,"
      "recompute_s,swap_out_bytes,swap_in_bytes,peak_bytes,infeasible_line,infeasible_tensor_id,infeasible_reason,"
      "bound_ratio\n";
  for (const auto& r : rows) {
    const SimResult& s = r.c.run;
    out += fmt::format("{},{},{},{},{},{},{},{:.9g},{:.9g},{:.6f},{:.9g},{:.9g},{:.0f},{:.0f},{},{},{},{},{}\n",
                       csv_field(r.trace), csv_field(s.gpu), csv_field(s.policy), csv_field(r.budget), r.budget_bytes,
                       r.natural_peak_bytes, s.feasible ? "true" : "false", s.time_s, r.c.ideal_time_s, r.c.ratio,
                       s.stall_s, s.recompute_s, s.swap_out_bytes, s.swap_in_bytes, s.peak_bytes,
                       s.feasible ? std::string() : std::to_string(s.where.line),
                       s.feasible || s.where.tensor == trace::kNone ? std::string() : std::to_string(s.where.tensor_id),
                       csv_field(s.feasible ? "" : s.where.reason),
                       r.bound_known ? fmt::format("{:.6f}", r.bound_ratio) : std::string());
  }
  return out;
}

std::string sweep_svg(const std::vector<SweepRow>& rows, const std::string& trace_name,
                      const std::vector<std::string>& policies, const std::string& gpu) {
  const double W = 720, H = 440, left = 70, right = 170, top = 50, bottom = 60;
  const double pw = W - left - right, ph = H - top - bottom;
  double xmin = 1e300, xmax = 0, ymax = 1.0;
  for (const auto& r : rows) {
    if (r.trace != trace_name || r.natural_peak_bytes == 0) continue;
    const double x = static_cast<double>(r.budget_bytes) / static_cast<double>(r.natural_peak_bytes);
    xmin = std::min(xmin, x), xmax = std::max(xmax, x);
    if (r.c.run.feasible) ymax = std::max(ymax, r.c.ratio);
  }
  if (xmax <= 0) xmin = 0, xmax = 1;
  if (xmax - xmin < 1e-9) xmin = std::max(0.0, xmax - 0.1), xmax += 0.1;
  ymax = std::ceil(ymax * 1.05 * 10.0) / 10.0;
  if (ymax <= 1.0) ymax = 1.1;
  const double ymin = 1.0;
  auto X = [&](double x) { return left + (x - xmin) / (xmax - xmin) * pw; };
  auto Y = [&](double y) { return top + (1.0 - (y - ymin) / (ymax - ymin)) * ph; };

  std::string s = fmt::format(
      "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
      "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{0}\" height=\"{1}\" viewBox=\"0 0 {0} {1}\" "
      "font-family=\"sans-serif\" font-size=\"12\">\n"
      "<rect x=\"0\" y=\"0\" width=\"{0}\" height=\"{1}\" fill=\"white\"/>\n"
      "<text x=\"{2}\" y=\"22\" font-size=\"15\">{3}: time / ideal against memory budget</text>\n"
      "<text x=\"{2}\" y=\"40\" fill=\"#555\">simulated, GPU profile {4}; missing points are infeasible</text>\n",
      W, H, left, escape_markup(trace_name), escape_markup(gpu));
  // Axes, ticks and grid.
  s += fmt::format("<rect x=\"{}\" y=\"{}\" width=\"{}\" height=\"{}\" fill=\"none\" stroke=\"#333\"/>\n", left, top, pw, ph);
  for (int i = 0; i <= 5; ++i) {
    const double x = xmin + (xmax - xmin) * i / 5.0, y = ymin + (ymax - ymin) * i / 5.0;
    s += fmt::format("<line x1=\"{0:.1f}\" y1=\"{1}\" x2=\"{0:.1f}\" y2=\"{2}\" stroke=\"#ddd\"/>\n", X(x), top, top + ph);
    s += fmt::format("<text x=\"{:.1f}\" y=\"{}\" text-anchor=\"middle\">{:.2f}</text>\n", X(x), top + ph + 16, x);
    s += fmt::format("<line x1=\"{0}\" y1=\"{1:.1f}\" x2=\"{2}\" y2=\"{1:.1f}\" stroke=\"#ddd\"/>\n", left, Y(y), left + pw);
    s += fmt::format("<text x=\"{}\" y=\"{:.1f}\" text-anchor=\"end\">{:.2f}</text>\n", left - 6, Y(y) + 4, y);
  }
  s += fmt::format("<text x=\"{:.1f}\" y=\"{}\" text-anchor=\"middle\">budget / natural peak</text>\n", left + pw / 2,
                   H - 18);
  s += fmt::format("<text x=\"18\" y=\"{0:.1f}\" text-anchor=\"middle\" transform=\"rotate(-90 18 {0:.1f})\">"
                   "iteration time / ideal</text>\n",
                   top + ph / 2);
  for (std::size_t pi = 0; pi < policies.size(); ++pi) {
    const char* color = kColors[pi % std::size(kColors)];
    std::vector<std::pair<double, double>> pts;
    for (const auto& r : rows)
      if (r.trace == trace_name && r.c.run.policy == policies[pi] && r.c.run.feasible && r.natural_peak_bytes > 0)
        pts.push_back({static_cast<double>(r.budget_bytes) / static_cast<double>(r.natural_peak_bytes), r.c.ratio});
    std::sort(pts.begin(), pts.end());
    if (pts.size() > 1) {
      s += fmt::format("<polyline fill=\"none\" stroke=\"{}\" stroke-width=\"2\" points=\"", color);
      for (const auto& [x, y] : pts) s += fmt::format("{:.1f},{:.1f} ", X(x), Y(std::min(y, ymax)));
      s += "\"/>\n";
    }
    for (const auto& [x, y] : pts)
      s += fmt::format("<circle cx=\"{:.1f}\" cy=\"{:.1f}\" r=\"3\" fill=\"{}\"/>\n", X(x), Y(std::min(y, ymax)), color);
    const double ly = top + 14 + 18.0 * static_cast<double>(pi);
    s += fmt::format("<line x1=\"{0}\" y1=\"{1:.1f}\" x2=\"{2}\" y2=\"{1:.1f}\" stroke=\"{3}\" stroke-width=\"2\"/>\n",
                     left + pw + 12, ly, left + pw + 34, color);
    s += fmt::format("<text x=\"{}\" y=\"{:.1f}\">{}</text>\n", left + pw + 40, ly + 4, escape_markup(policies[pi]));
  }
  s += "</svg>\n";
  return s;
}

std::string timeline_csv(const trace::Trace& t, const std::vector<TimelineEntry>& tl) {
  std::string out = "lane,kind,start_s,end_s,event,line,tensor_id\n";
  for (const auto& e : tl)
    out += fmt::format("{},{},{:.9f},{:.9f},{},{},{}\n", to_string(e.lane), to_string(e.kind), e.start_s, e.end_s,
                       e.event, static_cast<std::uint64_t>(e.event) + 2,
                       e.tensor == trace::kNone ? std::string() : std::to_string(t.tensors[e.tensor].id));
  return out;
}

}  // namespace capuchin::sim
