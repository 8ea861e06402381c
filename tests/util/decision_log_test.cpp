// Decision records round-trip through their JSON line; bad lines are errors, not crashes.
#include <gtest/gtest.h>

#include "capuchin/decision_log.hpp"

namespace capuchin {
namespace {

TEST(DecisionLog, RoundTrips) {
  DecisionRecord r;
  r.t = 1.25;
  r.pid = 42;
  r.iteration = 3;
  r.action = "evict";
  r.tensor = 17;
  r.bytes = 1 << 20;
  r.reason = "free-time";
  r.expected_s = 0.0;
  r.actual_s = 0.002;
  const std::string line = to_json_line(r);
  EXPECT_EQ(line.rfind(R"({"t":1.25,"pid":42,"iteration":3,"action":"evict","tensor":17,)", 0), 0u) << line;
  auto back = parse_decision_line(line);
  ASSERT_TRUE(back) << back.error().message;
  EXPECT_EQ(back->action, "evict");
  EXPECT_EQ(back->tensor, 17u);
  EXPECT_EQ(back->bytes, 1u << 20);
  EXPECT_EQ(back->reason, "free-time");
  EXPECT_DOUBLE_EQ(*back->actual_s, 0.002);
  EXPECT_FALSE(back->note.size());
}

TEST(DecisionLog, BadLinesAreErrors) {
  EXPECT_FALSE(parse_decision_line("garbage"));
  EXPECT_FALSE(parse_decision_line("[1,2]"));
  EXPECT_FALSE(parse_decision_line(R"({"action":"evict"})"));
  EXPECT_FALSE(parse_decision_line(R"({"t":1})"));
  EXPECT_TRUE(parse_decision_line(R"({"t":1,"action":"stall","future":[1]})"));
}

}  // namespace
}  // namespace capuchin
