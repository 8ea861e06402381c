// Real-model traces: the figures the shared README lists, and write-then-read round trips
// (plain and gzip) that reproduce every event exactly.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>

#include "capuchin/trace_model.hpp"

namespace capuchin::trace {
namespace {

namespace fs = std::filesystem;

struct Known {
  const char* file;
  std::uint64_t events, kernels, allocs, peak, iter1_peak, live_at_end;
};
// From shared/traces/README.md.
const Known kKnown[] = {
    {"resnet18-b16.jsonl.gz", 2032, 501, 850, 479227264, 432469216, 93554656},
    {"mobilenet_v2-b16.jsonl.gz", 5149, 1212, 2197, 1292653184, 1278633696, 28175840},
    {"tiny_transformer-b8.jsonl.gz", 3538, 994, 1344, 305383424, 247076864, 87459840},
};

void PrintTo(const Known& k, std::ostream* os) { *os << k.file; }

fs::path shared_trace(const char* file) { return fs::path(CAPUCHIN_SHARED_TRACES) / file; }

void expect_known(const Trace& t, const Known& k) {
  auto l = compute_liveness(t);
  auto s = compute_stats(t, l);
  EXPECT_EQ(s.events, k.events);
  EXPECT_EQ(s.kernels, k.kernels);
  EXPECT_EQ(s.allocs, k.allocs);
  EXPECT_EQ(s.peak_bytes, k.peak);
  ASSERT_EQ(s.iteration_peak_bytes.size(), 3u);
  EXPECT_EQ(s.iteration_peak_bytes[0], k.iter1_peak);
  EXPECT_EQ(s.iteration_peak_bytes[1], k.peak);  // README: iterations 2 and 3 reach the peak
  EXPECT_EQ(s.iteration_peak_bytes[2], k.peak);
  EXPECT_EQ(s.persistent_bytes, k.live_at_end);
}

void expect_same_events(const Trace& a, const Trace& b) {
  ASSERT_EQ(a.events.size(), b.events.size());
  EXPECT_EQ(format_header(a.header), format_header(b.header));
  Trace::ViewScratch sa, sb;
  for (std::uint32_t i = 0; i < a.events.size(); ++i) {
    ASSERT_EQ(format_event(a.view(i, sa)), format_event(b.view(i, sb))) << "event " << i;
  }
}

fs::path temp_path(const std::string& name) {
  return fs::temp_directory_path() / ("capuchin-rt-" + std::to_string(::getpid()) + "-" + name);
}

void round_trip(const fs::path& src) {
  auto t = load_trace(src.string());
  ASSERT_TRUE(t) << t.error().message();
  for (const char* ext : {".jsonl", ".jsonl.gz"}) {
    const fs::path out = temp_path(src.stem().string() + ext);
    ASSERT_TRUE(write_trace(*t, out.string()));
    auto back = load_trace(out.string());
    ASSERT_TRUE(back) << back.error().message();
    expect_same_events(*t, *back);
    EXPECT_EQ(compute_liveness(*t).live_after, compute_liveness(*back).live_after);
    fs::remove(out);
  }
}

TEST(RealTraces, BundledCopyMatchesSharedReadme) {
  auto t = load_trace(std::string(CAPUCHIN_TEST_DATA) + "/resnet18-b16.jsonl.gz");
  ASSERT_TRUE(t) << t.error().message();
  expect_known(*t, kKnown[0]);
}

TEST(RealTraces, BundledCopyRoundTrips) { round_trip(fs::path(CAPUCHIN_TEST_DATA) / "resnet18-b16.jsonl.gz"); }

class SharedTrace : public ::testing::TestWithParam<Known> {};

TEST_P(SharedTrace, MatchesReadmeFigures) {
  const fs::path p = shared_trace(GetParam().file);
  if (!fs::exists(p)) GTEST_SKIP() << p << " absent (../shared is beside the checkout, not in a clone)";
  auto t = load_trace(p.string());
  ASSERT_TRUE(t) << t.error().message();
  expect_known(*t, GetParam());
}

TEST_P(SharedTrace, RoundTripsPlainAndGzip) {
  const fs::path p = shared_trace(GetParam().file);
  if (!fs::exists(p)) GTEST_SKIP() << p << " absent";
  round_trip(p);
}

INSTANTIATE_TEST_SUITE_P(Shared, SharedTrace, ::testing::ValuesIn(kKnown), [](const auto& info) {
  std::string n = info.param.file;
  return n.substr(0, n.find('-'));
});

}  // namespace
}  // namespace capuchin::trace
