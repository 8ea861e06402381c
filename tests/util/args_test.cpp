// args_test.cpp: capuchin/args.hpp, the compiled-once front to CLI11 the small programs use:
// values bind, defaults stay, ranges check as the option's type, words, needs, required,
// subcommands, and parse() returns the exit status CLI11 gives (0 for help, non-zero for errors).
#include "capuchin/args.hpp"

#include <gtest/gtest.h>

#include <initializer_list>
#include <string>
#include <vector>

namespace {

using capuchin::args::Parser;

// argv for parse(): "prog" and then the words.
struct Argv {
  explicit Argv(std::initializer_list<const char*> words) {
    storage.emplace_back("prog");
    for (const char* w : words) storage.emplace_back(w);
    for (auto& s : storage) ptrs.push_back(s.data());
  }
  Argv(const Argv&) = delete;  // ptrs point into storage
  Argv& operator=(const Argv&) = delete;
  int argc() const { return static_cast<int>(ptrs.size()); }
  char** argv() { return ptrs.data(); }
  std::vector<std::string> storage;
  std::vector<char*> ptrs;
};

TEST(Args, BindsValuesOfEachTypeAndKeepsDefaults) {
  Parser p{"test"};
  int i = 7;
  unsigned u = 8;
  long l = -9;
  unsigned long ul = 10;
  float f = 1.5f;
  double d = 2.5;
  std::string s = "keep";
  bool flag = false;
  p.option("--i", i, "");
  p.option("--u", u, "");
  p.option("--l", l, "");
  p.option("--ul", ul, "");
  p.option("--f", f, "");
  p.option("--d", d, "");
  p.option("--s", s, "");
  p.flag("--flag", flag, "");
  Argv a{"--i", "-3", "--u", "5", "--l", "-6", "--ul", "4294967296", "--f", "0.25", "--d", "0.125", "--flag"};
  EXPECT_EQ(p.parse(a.argc(), a.argv()), std::nullopt);
  EXPECT_EQ(i, -3);
  EXPECT_EQ(u, 5u);
  EXPECT_EQ(l, -6);
  EXPECT_EQ(ul, 4294967296ul);
  EXPECT_EQ(f, 0.25f);
  EXPECT_EQ(d, 0.125);
  EXPECT_EQ(s, "keep");  // not given: the default stays
  EXPECT_TRUE(flag);
}

TEST(Args, RangesCheckAsTheOptionsType) {
  for (const char* bad : {"-1", "101", "2.5", "x"}) {
    Parser p{"test"};
    int n = 0;
    p.option("--n", n, "").range(0, 100);
    Argv a{"--n", bad};
    testing::internal::CaptureStderr();
    const auto status = p.parse(a.argc(), a.argv());
    const std::string err = testing::internal::GetCapturedStderr();
    ASSERT_TRUE(status.has_value()) << bad;
    EXPECT_NE(*status, 0) << bad;
    EXPECT_NE(err.find("--n"), std::string::npos) << err;  // the error names the option
  }
  {  // an integer option's range is printed as integers
    Parser p{"test"};
    int n = 0;
    p.option("--n", n, "").range(0, 100);
    Argv a{"--n", "101"};
    testing::internal::CaptureStderr();
    EXPECT_NE(p.parse(a.argc(), a.argv()).value_or(0), 0);
    EXPECT_NE(testing::internal::GetCapturedStderr().find("not in range 0 to 100"), std::string::npos);
  }
  {  // ... and checked exactly: 2^53 + 1 is above 2^53, which a check as doubles would accept
    Parser p{"test"};
    unsigned long n = 0;
    p.option("--n", n, "").range(0, 9007199254740992.0);
    Argv above{"--n", "9007199254740993"};
    testing::internal::CaptureStderr();
    EXPECT_NE(p.parse(above.argc(), above.argv()).value_or(0), 0);
    testing::internal::GetCapturedStderr();
  }
  {
    Parser p{"test"};
    unsigned long n = 0;
    p.option("--n", n, "").range(0, 9007199254740992.0);
    Argv at{"--n", "9007199254740992"};
    EXPECT_EQ(p.parse(at.argc(), at.argv()), std::nullopt);
    EXPECT_EQ(n, 9007199254740992ul);
  }
  Parser p{"test"};
  double x = 0;
  p.option("--x", x, "").range(0, 1e9);
  Argv a{"--x", "5.5"};  // a real option with whole bounds takes a fraction
  EXPECT_EQ(p.parse(a.argc(), a.argv()), std::nullopt);
  EXPECT_EQ(x, 5.5);
}

TEST(Args, WordsNeedsAndRequired) {
  {
    Parser p{"test"};
    std::string mode = "sync";
    p.option("--mode", mode, "").one_of({"sync", "async"});
    Argv ok{"--mode", "async"};
    EXPECT_EQ(p.parse(ok.argc(), ok.argv()), std::nullopt);
    EXPECT_EQ(mode, "async");
  }
  {
    Parser p{"test"};
    std::string mode = "sync";
    p.option("--mode", mode, "").one_of({"sync", "async"});
    Argv bad{"--mode", "fast"};
    EXPECT_NE(p.parse(bad.argc(), bad.argv()).value_or(0), 0);
  }
  {  // --before needs --file: refused alone, taken with it
    std::string file;
    int before = -1;
    auto parse_needs = [&](Argv a) {
      Parser p{"test"};
      auto file_opt = p.option("--file", file, "");
      p.option("--before", before, "").needs(file_opt);
      return p.parse(a.argc(), a.argv());
    };
    EXPECT_NE(parse_needs(Argv{"--before", "3"}).value_or(0), 0);
    EXPECT_EQ(parse_needs(Argv{"--before", "3", "--file", "f"}), std::nullopt);
    EXPECT_EQ(before, 3);
    EXPECT_EQ(file, "f");
  }
  {
    Parser p{"test"};
    std::string file;
    p.option("file", file, "").required();
    Argv none{};
    EXPECT_NE(p.parse(none.argc(), none.argv()).value_or(0), 0);
  }
}

TEST(Args, SubcommandsHelpAndVersion) {
  {
    Parser p{"test"};
    p.require_subcommand();
    int live = 1;
    auto curve = p.subcommand("curve", "");
    auto other = p.subcommand("other", "");
    curve.option("--live", live, "").range(1, 10);
    Argv a{"curve", "--live", "4"};
    EXPECT_EQ(p.parse(a.argc(), a.argv()), std::nullopt);
    EXPECT_TRUE(curve.parsed());
    EXPECT_FALSE(other.parsed());
    EXPECT_EQ(live, 4);
  }
  {
    Parser p{"test"};
    p.require_subcommand();
    p.subcommand("curve", "");
    Argv none{};
    EXPECT_NE(p.parse(none.argc(), none.argv()).value_or(0), 0);
  }
  {
    Parser p{"test"};
    p.version("--version", "prog 1.0");
    Argv help{"--help"};
    testing::internal::CaptureStdout();
    EXPECT_EQ(p.parse(help.argc(), help.argv()), 0);
    EXPECT_NE(testing::internal::GetCapturedStdout().find("--version"), std::string::npos);
  }
  {
    Parser p{"test"};
    p.version("--version", "prog 1.0");
    Argv version{"--version"};
    testing::internal::CaptureStdout();
    EXPECT_EQ(p.parse(version.argc(), version.argv()), 0);
    EXPECT_NE(testing::internal::GetCapturedStdout().find("prog 1.0"), std::string::npos);
  }
}

}  // namespace
