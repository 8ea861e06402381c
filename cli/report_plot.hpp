// report_plot.hpp: the inline SVG plots of `capuchin report` (report_cmd.cpp), each followed by
// its data as JSON (<script type="application/json" id="PLOT-data">) so that users and tests
// read the numbers a plot shows instead of reverse-engineering SVG paths.
//
// Contract: every text a plot draws fits inside its SVG (margins are computed from the longest
// tick label, at kCharWidth per font pixel; the last x label is anchored to stay inside);
// axes have round ticks (1, 2, 2.5 or 5 times a power of ten; byte axes in one binary unit).
// A line plot's JSON has, per series, its id, label, full-resolution maximum and the points
// as plotted (at most ~1500, each bucket's highest, so peaks stay visible).
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "capuchin/text.hpp"

namespace capuchin::cli {

// An estimate of a character's width as a share of the font size (sans-serif digits and
// letters are about 0.55; a little over so that an estimate never undercounts).
inline constexpr double kCharWidth = 0.62;


struct Series {
  std::string id, label, color;                // id: stable key in the JSON (e.g. "capuchin-resident")
  std::vector<std::pair<double, double>> pts;  // (x, y)
  bool step = true;                            // a step curve (memory) rather than straight segments
};

// `meta` is copied into the JSON block (e.g. the budget and whether the run was feasible).
std::string line_plot(const std::string& id, const std::string& xlabel, const std::vector<Series>& series, bool y_bytes,
                      const nlohmann::ordered_json& meta = nlohmann::ordered_json::object());

struct BarGroup {
  std::string label;
  std::vector<double> values;  // one per category
};
std::string bar_plot(const std::string& id, const std::string& xlabel, const std::vector<std::string>& cats,
                     const std::vector<BarGroup>& groups, bool y_bytes);

}  // namespace capuchin::cli
