// Sizes and fractions as users type them (budgets, capacities).
#include <gtest/gtest.h>

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

TEST(Units, FractionOrSize) {
  auto half = parse_size_or_fraction("0.5");
  ASSERT_TRUE(half);
  EXPECT_TRUE(half->is_fraction);
  EXPECT_EQ(half->resolve(1000), 500u);
  auto abs = parse_size_or_fraction("40GiB");
  ASSERT_TRUE(abs);
  EXPECT_FALSE(abs->is_fraction);
  EXPECT_EQ(abs->resolve(1), 40ull << 30);
  EXPECT_FALSE(parse_size_or_fraction("1.5"));
  EXPECT_FALSE(parse_size_or_fraction("0.0"));
  EXPECT_EQ(parse_size_or_fraction("1.0")->resolve(77), 77u);
}

TEST(Units, FormatsBinaryUnits) {
  EXPECT_EQ(format_bytes(512), "512 B");
  EXPECT_EQ(format_bytes(1536), "1.5 KiB");
  EXPECT_EQ(format_bytes(479227264), "457.0 MiB");
}

}  // namespace
}  // namespace capuchin
