// Sizes and fractions as users type them (budgets, capacities).
#include <gtest/gtest.h>

#include "capuchin/budget.hpp"
#include "capuchin/units.hpp"

namespace capuchin {
namespace {

TEST(Units, ParsesPlainBytesAndUnits) {
  EXPECT_EQ(*parse_size("268435456"), 268435456u);
  EXPECT_EQ(*parse_size("500MiB"), 500ull << 20);
  EXPECT_EQ(*parse_size("12GiB"), 12ull << 30);
  EXPECT_EQ(*parse_size("12 gib"), 12ull << 30);
  EXPECT_EQ(*parse_size("1.5GB"), 1500000000u);
  EXPECT_EQ(*parse_size("64KiB"), 65536u);
}

TEST(Units, RejectsNonsenseWithAMessage) {
  for (const char* bad : {"", "abc", "-5", "12XB", "0", "0.1", "1e30GiB"}) {
    auto r = parse_size(bad);
    ASSERT_FALSE(r) << bad;
    EXPECT_FALSE(r.error().message.empty());
  }
}

TEST(Budget, OneSyntaxForEveryKind) {
  auto bytes = parse_budget("40GiB");
  ASSERT_TRUE(bytes);
  EXPECT_EQ(bytes->kind, Budget::Kind::Bytes);
  EXPECT_EQ(bytes->resolve(1, 1), 40ull << 30);
  EXPECT_EQ(parse_budget("268435456")->resolve(0, 0), 268435456u);  // a plain integer is bytes
  auto dev = parse_budget("60%");
  ASSERT_TRUE(dev);
  EXPECT_EQ(dev->kind, Budget::Kind::OfDevice);
  EXPECT_EQ(dev->resolve(1000, 7), 600u);
  EXPECT_EQ(dev->resolve(0, 7), 0u);  // the device's size unknown: no guess
  EXPECT_EQ(dev->describe(), "60% of the device");
  auto peak = parse_budget(" 0.5x ");
  ASSERT_TRUE(peak);
  EXPECT_TRUE(peak->needs_peak());
  EXPECT_EQ(peak->resolve(1000, 800), 400u);
  EXPECT_EQ(peak->resolve(1000, 0), 0u);  // the natural peak not known yet
  EXPECT_EQ(peak->describe(), "0.5x the natural peak");
  EXPECT_EQ(parse_budget("1X")->resolve(0, 77), 77u);
}

TEST(Budget, TheAmbiguousFormIsRejectedNamingTheChoices) {
  for (const char* t : {"0.5", "1.0", "1", "12"}) {
    auto r = parse_budget(t);
    ASSERT_FALSE(r) << t;
    EXPECT_NE(r.error().message.find("ambiguous"), std::string::npos) << r.error().message;
    EXPECT_NE(r.error().message.find("x)"), std::string::npos) << r.error().message;
    EXPECT_NE(r.error().message.find("%)"), std::string::npos) << r.error().message;
  }
  EXPECT_NE(parse_budget("0.5").error().message.find("0.5x"), std::string::npos);
  // Numbers that fit no share or multiple are not offered as one ("250%", "2.5x" would be refused).
  for (const char* t : {"2.5", "500", "1e3", "01000", "1.5e0"}) {
    auto r = parse_budget(t);
    ASSERT_FALSE(r) << t;
    EXPECT_NE(r.error().message.find("ambiguous"), std::string::npos) << r.error().message;
    EXPECT_EQ(r.error().message.find(std::string(t) + "x"), std::string::npos) << r.error().message;
    EXPECT_NE(r.error().message.find(std::string(t) + "MiB"), std::string::npos) << r.error().message;
  }
  EXPECT_EQ(parse_budget("1024")->resolve(0, 0), 1024u);  // plain digits from 1024 up are bytes
  EXPECT_NE(parse_budget("0.5").error().message.find("50%"), std::string::npos);
  for (const char* t : {"", "lots", "1.5x", "0x", "0%", "150%", "x", "%", "-3", "12XB", "abc%"}) {
    auto r = parse_budget(t);
    ASSERT_FALSE(r) << t;
    EXPECT_FALSE(r.error().message.empty());
  }
}

TEST(Units, FormatsBinaryUnits) {
  EXPECT_EQ(format_bytes(512), "512 B");
  EXPECT_EQ(format_bytes(1536), "1.5 KiB");
  EXPECT_EQ(format_bytes(479227264), "457.0 MiB");
}

}  // namespace
}  // namespace capuchin
