// The sweep report writers: the markdown table puts policies side by side with
// "infeasible" where they fail, the CSV has one row per run, the SVG is a standalone
// document with one line per policy that has two or more feasible points; explain.md has one
// row per cell of the policy it explains, every row as many columns as its header.
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

namespace capuchin::sim {
namespace {

TEST(SimReport, ExplainRowsHaveTheirHeadersColumns) {
  // A feasible cell at 0.5 (ideal 1 s, 1.5 s: adds 500 ms, the bound 1.25: 250 ms, binding at a
  // named line) and an infeasible one at 0.3, for `none`; `ideal`'s rows are not explained.
  std::vector<SweepRow> rows{row("ideal", "0.5", 0.5, true, 1.0), row("none", "0.5", 0.5, true, 1.5),
                             row("none", "0.3", 0.3, false, 0)};
  rows[1].bound_known = true, rows[1].bound_ratio = 1.25, rows[1].bound_where = "line 9";
  rows[1].c.run.recompute_s = 0.1;
  rows[1].c.run.stall_by_cause_s = {0.2, 0.15, 0.05, 0.0};
  rows[1].c.run.swap_out_link_s = 0.3, rows[1].c.run.swap_in_link_s = 0.25, rows[1].c.run.cancelled_out_link_s = 0.01;
  rows[1].largest_wait = "line 7 (k): 150.000 ms, on-demand swap-ins";
  rows[2].bound_known = true, rows[2].bound_ratio = 0.0;
  rows[2].c.run.where.line = 12;
  const std::string md = explain_markdown(rows, "none", "h200");
  EXPECT_NE(md.find("| m<&> | 0.5 | 1.500 | 1.250 | 1000.000 | 500.000 | 250.000 at line 9 | 100.000 | 200.000 | 150.000 | "
                    "50.000 | 0.000 | 300.000 / 250.000 | 10.000 | line 7 (k): 150.000 ms, on-demand swap-ins |"),
            std::string::npos)
      << md;
  EXPECT_NE(md.find("| m<&> | 0.3 | infeasible | infeasible | | | | | | | | | | | line 12: needs 5 more bytes, budget 500 |"),
            std::string::npos)
      << md;
  EXPECT_EQ(count(md, "| m<&> |"), 2u);  // ideal's row left out
  std::size_t header = 0;
  for (std::size_t at = 0, next; (next = md.find('\n', at)) != std::string::npos; at = next + 1) {
    const std::string line = md.substr(at, next - at);
    if (line.rfind("| ", 0) != 0) continue;
    if (header == 0) header = count(line, "|");
    EXPECT_EQ(count(line, "|"), header) << line;
  }
  EXPECT_EQ(header, 16u);  // 15 columns
}

}  // namespace
}  // namespace capuchin::sim
