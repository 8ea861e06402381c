// report_plot.cpp: the report's SVG line and bar plots with their JSON data (see report_plot.hpp).
#include "report_plot.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

namespace capuchin::cli {
namespace {

using ojson = nlohmann::ordered_json;

constexpr double kTickFont = 11, kCatFont = 10, kTitleFont = 12;

double text_width(std::string_view s, double font) { return static_cast<double>(s.size()) * font * kCharWidth; }

// Round ticks from 0 to the first at or above `max`, about four steps, and their labels.
struct Axis {
  std::vector<double> ticks;  // values
  std::vector<std::string> labels;
  double top = 1;             // the axis ends here (the last tick)
};

// `to_max`: the axis ends at `max` itself (time: nothing to show after the data), with the
// round ticks below it.
Axis make_axis(double max, bool bytes, bool to_max = false) {
  static constexpr const char* kUnits[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  if (!(max > 0)) max = 1;
  double unit = 1;
  int u = 0;
  while (bytes && max / unit >= 1024 && u < 4) unit *= 1024, ++u;
  const double v = max / unit, raw = v / 4;
  const double mag = std::pow(10.0, std::floor(std::log10(raw)));
  double step = 10 * mag;
  for (double m : {1.0, 2.0, 2.5, 5.0})
    if (m * mag >= raw) {
      step = m * mag;
      break;
    }
  Axis a;
  for (int k = 0;; ++k) {
    const double tick = step * k;
    if (to_max && k > 0 && tick > v * (1 + 1e-9)) break;
    a.ticks.push_back(tick * unit);
    const std::string num = fmt::format("{:.4g}", tick);
    a.labels.push_back(!bytes ? num : k == 0 ? std::string("0") : fmt::format("{} {}", num, kUnits[u]));
    if (tick >= v * (1 - 1e-9)) break;
  }
  a.top = to_max ? max : a.ticks.back() > 0 ? a.ticks.back() : 1;
  return a;
}

double widest(const std::vector<std::string>& labels, double font) {
  double w = 0;
  for (const auto& l : labels) w = std::max(w, text_width(l, font));
  return w;
}

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

std::string svg_open(const std::string& id, double w, double h) {
  return fmt::format(R"(<svg id="{}" class="plot" xmlns="http://www.w3.org/2000/svg" width="{}" height="{}" viewBox="0 0 {} {}">)", id,
                     w, h, w, h);
}

// The plot's data for readers of the page; "</" never appears inside the script element.
std::string data_block(const std::string& id, const ojson& data) {
  std::string text = data.dump(-1, ' ', false, ojson::error_handler_t::replace);
  for (std::size_t at = 0; (at = text.find("</", at)) != std::string::npos; at += 3) text.replace(at, 2, "<\\/");
  return fmt::format(R"(<script type="application/json" id="{}-data">{}</script>)", id, text);
}

// The frame: background, horizontal grid lines with y labels left of it, x labels under it.
struct Frame {
  double W, H, L, R, T, B;
  double x(double v, double top) const { return L + (W - L - R) * v / top; }
  double y(double v, double top) const { return H - B - (H - T - B) * v / top; }
};

std::string y_axis(const Frame& f, const Axis& a) {
  std::string s = fmt::format(R"(<rect x="{}" y="{}" width="{}" height="{}" fill="#fafafa" stroke="#999"/>)", f.L, f.T,
                              f.W - f.L - f.R, f.H - f.T - f.B);
  for (std::size_t i = 0; i < a.ticks.size(); ++i) {
    const double y = f.y(a.ticks[i], a.top);
    s += fmt::format(R"(<line x1="{}" x2="{}" y1="{:.1f}" y2="{:.1f}" stroke="#ddd"/><text x="{}" y="{:.1f}" font-size="{}" text-anchor="end">{}</text>)",
                     f.L, f.W - f.R, y, y, f.L - 5, y + 4, kTickFont, escape_markup(a.labels[i]));
  }
  return s;
}

std::string x_title(const Frame& f, const std::string& xlabel) {
  return fmt::format(R"(<text x="{}" y="{}" font-size="{}" text-anchor="middle">{}</text>)", f.L + (f.W - f.L - f.R) / 2, f.H - 8,
                     kTitleFont, escape_markup(xlabel));
}

std::string polyline(const Frame& f, const Series& se, double xtop, double ytop) {
  std::string pts;
  double prev_y = -1;
  for (auto [x, y] : downsample(se.pts, 1500)) {
    if (se.step && prev_y >= 0) pts += fmt::format("{:.1f},{:.1f} ", f.x(x, xtop), f.y(prev_y, ytop));
    pts += fmt::format("{:.1f},{:.1f} ", f.x(x, xtop), f.y(y, ytop));
    prev_y = y;
  }
  return fmt::format(R"(<polyline fill="none" stroke="{}" stroke-width="1.5" points="{}"><title>{}</title></polyline>)", se.color,
                     pts, escape_markup(se.label));
}

ojson series_json(const Series& se) {
  double max = 0;
  for (const auto& p : se.pts) max = std::max(max, p.second);
  ojson pts = ojson::array();
  for (auto [x, y] : downsample(se.pts, 1500)) pts.push_back({x, y});
  return {{"id", se.id}, {"label", se.label}, {"max", max}, {"points", std::move(pts)}};
}

}  // namespace

std::string line_plot(const std::string& id, const std::string& xlabel, const std::vector<Series>& series, bool y_bytes,
                      const ojson& meta) {
  double xmax = 0, ymax = 0;
  for (const auto& s : series)
    for (auto [x, y] : s.pts) xmax = std::max(xmax, x), ymax = std::max(ymax, y);
  const Axis xa = make_axis(xmax, false, true), ya = make_axis(ymax * 1.02, y_bytes);
  // Margins from the labels: the widest y label left of the plot, half the last x label right of it.
  const double L = std::max(50.0, widest(ya.labels, kTickFont) + 14);
  const double R = std::max(20.0, text_width(xa.labels.back(), kTickFont) / 2 + 6);
  const Frame f{900, 320, L, R, 20, 45};
  std::string s = svg_open(id, f.W, f.H) + y_axis(f, ya);
  for (std::size_t i = 0; i < xa.ticks.size(); ++i)
    s += fmt::format(R"(<text x="{:.1f}" y="{}" font-size="{}" text-anchor="middle">{}</text>)", f.x(xa.ticks[i], xa.top),
                     f.H - f.B + 15, kTickFont, escape_markup(xa.labels[i]));
  s += x_title(f, xlabel);
  ojson data = meta;
  data["x_label"] = xlabel;
  data["y_unit"] = y_bytes ? "bytes" : "";
  data["series"] = ojson::array();
  int legend = 0;
  for (const auto& se : series) {
    if (se.pts.empty()) continue;
    s += polyline(f, se, xa.top, ya.top);
    s += fmt::format(R"(<rect x="{}" y="{}" width="12" height="3" fill="{}"/><text x="{}" y="{}" font-size="{}">{}</text>)", f.L + 10,
                     f.T + 10 + 15 * legend, se.color, f.L + 26, f.T + 14 + 15 * legend, kTickFont, escape_markup(se.label));
    ++legend;
    data["series"].push_back(series_json(se));
  }
  return s + "</svg>" + data_block(id, data);
}

std::string bar_plot(const std::string& id, const std::string& xlabel, const std::vector<std::string>& cats,
                     const std::vector<BarGroup>& groups, bool y_bytes) {
  double ymax = 0;
  for (const auto& g : groups)
    for (double v : g.values) ymax = std::max(ymax, v);
  const Axis ya = make_axis(ymax, y_bytes);
  const Frame f{900, 260, std::max(50.0, widest(ya.labels, kTickFont) + 14), 20, 30, 45};
  const std::size_t n = std::max<std::size_t>(1, cats.size());
  const double slot = (f.W - f.L - f.R) / static_cast<double>(n);
  const double bw = slot * 0.8 / static_cast<double>(std::max<std::size_t>(1, groups.size()));
  const char* colors[] = {"#d62728", "#1f77b4", "#2ca02c", "#9467bd"};
  std::string s = svg_open(id, f.W, f.H) + y_axis(f, ya);
  ojson data = {{"x_label", xlabel}, {"y_unit", y_bytes ? "bytes" : ""}, {"categories", cats}, {"groups", ojson::array()}};
  double lx = f.W - f.R;  // the legend: one row above the plot, ending at its right edge (never over a bar)
  for (const auto& g : groups) lx -= text_width(g.label, kTickFont) + 30;
  for (std::size_t g = 0; g < groups.size(); ++g) {
    for (std::size_t i = 0; i < groups[g].values.size() && i < cats.size(); ++i) {
      const double v = groups[g].values[i], h = f.H - f.B - f.y(v, ya.top);
      s += fmt::format(R"(<rect x="{:.1f}" y="{:.1f}" width="{:.1f}" height="{:.1f}" fill="{}"><title>{} {}: {}</title></rect>)",
                       f.L + slot * static_cast<double>(i) + slot * 0.1 + bw * static_cast<double>(g), f.H - f.B - h, bw, h,
                       colors[g % 4], escape_markup(groups[g].label), escape_markup(cats[i]), fmt::format("{:.6g}", v));
    }
    s += fmt::format(R"(<rect x="{:.1f}" y="{}" width="12" height="8" fill="{}"/><text x="{:.1f}" y="{}" font-size="{}">{}</text>)", lx,
                     f.T - 16, colors[g % 4], lx + 16, f.T - 8, kTickFont, escape_markup(groups[g].label));
    lx += text_width(groups[g].label, kTickFont) + 30;
    data["groups"].push_back({{"label", groups[g].label}, {"values", groups[g].values}});
  }
  // Category labels: every k-th, so that neighbours never overlap.
  const double label_w = widest(cats, kCatFont) + 4;
  const std::size_t every = std::max<std::size_t>(1, static_cast<std::size_t>(std::ceil(label_w / slot)));
  for (std::size_t i = 0; i < cats.size(); i += every)
    s += fmt::format(R"(<text x="{:.1f}" y="{}" font-size="{}" text-anchor="middle">{}</text>)",
                     f.L + slot * (static_cast<double>(i) + 0.5), f.H - f.B + 14, kCatFont, escape_markup(cats[i]));
  return s + x_title(f, xlabel) + "</svg>" + data_block(id, data);
}

}  // namespace capuchin::cli
