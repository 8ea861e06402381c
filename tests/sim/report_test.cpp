// The sweep report writers: the markdown table puts policies side by side with
// "infeasible" where they fail, the CSV has one row per run, the SVG is a standalone
// document with one line per policy that has two or more feasible points.
#include <gtest/gtest.h>

#include "capuchin/sim.hpp"

namespace capuchin::sim {
namespace {

SweepRow row(const std::string& policy, const std::string& budget, double frac, bool feasible, double ratio) {
  SweepRow r;
  r.trace = "m<&>";
  r.budget = budget;
  r.natural_peak_bytes = 1000;
  r.budget_bytes = static_cast<std::uint64_t>(frac * 1000);
  r.c.run.policy = policy;
  r.c.run.gpu = "h200";
  r.c.run.feasible = feasible;
  r.c.run.where.reason = feasible ? "" : "needs 5 more bytes, budget 500";
  r.c.ratio = ratio;
  r.c.run.time_s = ratio;
  r.c.ideal_time_s = 1;
  return r;
}

std::size_t count(const std::string& s, const std::string& what) {
  std::size_t n = 0;
  for (auto pos = s.find(what); pos != std::string::npos; pos = s.find(what, pos + 1)) ++n;
  return n;
}

TEST(SimReport, MarkdownCsvSvg) {
  std::vector<SweepRow> rows{row("ideal", "1.0", 1.0, true, 1.0), row("none", "1.0", 1.0, true, 1.0),
                             row("ideal", "0.5", 0.5, true, 1.0), row("none", "0.5", 0.5, false, 0),
                             row("ideal", "0.3", 0.3, true, 1.0), row("none", "0.3", 0.3, false, 0)};
  const std::vector<std::string> pols{"ideal", "none"};
  const auto md = sweep_markdown(rows, pols, "h200");
  EXPECT_NE(md.find("| trace | budget | budget bytes | ideal | none |"), std::string::npos) << md;
  EXPECT_NE(md.find("| m<&> | 0.5 | 500 B | 1.000 | infeasible | - |"), std::string::npos) << md;  // no bound known
  std::vector<SweepRow> bounded = rows;
  for (SweepRow& r : bounded) r.bound_known = true, r.bound_ratio = r.budget == "0.3" ? 0.0 : 1.25;
  const auto md2 = sweep_markdown(bounded, pols, "h200");
  EXPECT_NE(md2.find("| m<&> | 0.5 | 500 B | 1.000 | infeasible | 1.250 |"), std::string::npos) << md2;
  EXPECT_NE(md2.find("| m<&> | 0.3 | 300 B | 1.000 | infeasible | infeasible |"), std::string::npos) << md2;
  EXPECT_NE(md.find("Simulated, GPU profile h200"), std::string::npos);

  const auto csv = sweep_csv(rows);
  EXPECT_EQ(count(csv, "\n"), rows.size() + 1);
  EXPECT_NE(csv.find("\"needs 5 more bytes, budget 500\""), std::string::npos) << csv;

  const auto svg = sweep_svg(rows, "m<&>", pols, "h200");
  EXPECT_EQ(svg.rfind("<?xml", 0), 0u);
  EXPECT_NE(svg.find("xmlns=\"http://www.w3.org/2000/svg\""), std::string::npos);
  EXPECT_EQ(count(svg, "<polyline"), 1u);  // `none` has a single feasible point
  EXPECT_EQ(count(svg, "<circle"), 4u);
  EXPECT_NE(svg.find("m&lt;&amp;&gt;"), std::string::npos);  // escaped
  EXPECT_EQ(svg.find("m<&>"), std::string::npos);
  EXPECT_EQ(svg.substr(svg.size() - 7), "</svg>\n");
}

}  // namespace
}  // namespace capuchin::sim
