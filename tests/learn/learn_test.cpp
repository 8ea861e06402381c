// Learning on the real-model traces: iterations found without the `iter` markers, and
// tensor identities stable from one steady iteration to the next.
#include <gtest/gtest.h>

#include <filesystem>

#include "capuchin/learn.hpp"

namespace capuchin::learn {
namespace {

namespace fs = std::filesystem;

std::vector<fs::path> traces() {
  std::vector<fs::path> v{fs::path(CAPUCHIN_TEST_DATA) / "resnet18-b16.jsonl.gz"};
  for (const char* f : {"mobilenet_v2-b16.jsonl.gz", "tiny_transformer-b8.jsonl.gz"}) {
    fs::path p = fs::path(CAPUCHIN_SHARED_TRACES) / f;
    if (fs::exists(p)) v.push_back(p);
  }
  return v;
}

TEST(Learn, FindsTheMarkedIterationsOfRealTraces) {
  for (const auto& path : traces()) {
    SCOPED_TRACE(path.string());
    auto t = trace::load_trace(path.string());
    ASSERT_TRUE(t) << t.error().message();
    ASSERT_EQ(t->iterations.size(), 3u);
    const IterationSplit s = detect_iterations(*t);
    ASSERT_TRUE(s.found) << s.reason;
    ASSERT_EQ(s.iterations.size(), 3u);
    // Steady iterations start exactly where the markers are (after the loss read's sync).
    EXPECT_EQ(s.iterations[1].begin, t->iterations[1].begin);
    EXPECT_EQ(s.iterations[2].begin, t->iterations[2].begin);
    EXPECT_EQ(s.iterations[2].end, t->events.size());
    // The first (different) iteration is found; it may include the set-up before it.
    EXPECT_LE(s.iterations[0].begin, t->iterations[0].begin);
    EXPECT_EQ(s.iterations[0].end, t->iterations[1].begin);
    std::uint32_t kernels = 0;
    for (std::uint32_t e = t->iterations[2].begin; e < t->iterations[2].end; ++e) kernels += t->events[e].op == trace::Op::Kernel;
    EXPECT_EQ(s.period_kernels, kernels);
  }
}

TEST(Learn, IdentitiesAreStableAcrossSteadyIterations) {
  for (const auto& path : traces()) {
    SCOPED_TRACE(path.string());
    auto t = trace::load_trace(path.string());
    ASSERT_TRUE(t);
    const IterationSplit s = detect_iterations(*t);
    ASSERT_EQ(s.iterations.size(), 3u);
    const IdentityMap m = match_iterations(*t, s.iterations[1], s.iterations[2]);
    ASSERT_EQ(m.mismatch_event, trace::kNone);
    const Pattern p = make_pattern(*t, s.iterations[1]);
    ASSERT_EQ(m.b_of_a.size(), p.local_tensors.size());
    ASSERT_FALSE(p.local_tensors.empty());
    for (std::size_t k = 0; k < m.b_of_a.size(); ++k) {
      const auto& a = t->tensors[p.local_tensors[k]];
      const auto& b = t->tensors[m.b_of_a[k]];
      ASSERT_EQ(a.bytes, b.bytes) << k;
      ASSERT_EQ(a.access_count, b.access_count) << k;
      ASSERT_NE(a.id, b.id);  // different allocations, same identity
    }
    // The first iteration differs (optimizer state is created in its step): detected.
    const IdentityMap first = match_iterations(*t, s.iterations[0], s.iterations[1]);
    EXPECT_NE(first.mismatch_event, trace::kNone);
    EXPECT_GT(first.mismatch_event, s.iterations[1].begin);
  }
}

std::string synthetic(int iters, int changed_at_iter, bool syncs = true) {
  std::string s = R"({"format":"capuchin-trace","version":1})" "\n";
  int id = 0;
  s += R"({"op":"alloc","id":)" + std::to_string(id++) + R"(,"bytes":4096})" "\n";
  for (int i = 1; i <= iters; ++i) {
    const int width = i >= changed_at_iter ? 2048 : 1024;  // a dynamic shape from then on
    const int a = id++, b = id++;
    s += R"({"op":"alloc","id":)" + std::to_string(a) + R"(,"bytes":)" + std::to_string(width) + "}\n";
    s += R"({"op":"kernel","name":"fwd","reads":[0],"writes":[)" + std::to_string(a) + "]}\n";
    s += R"({"op":"alloc","id":)" + std::to_string(b) + R"(,"bytes":512})" "\n";
    s += R"({"op":"kernel","name":"loss","reads":[)" + std::to_string(a) + R"(],"writes":[)" + std::to_string(b) + "]}\n";
    s += R"({"op":"kernel","name":"bwd","reads":[)" + std::to_string(a) + "," + std::to_string(b) + R"(],"writes":[0]})" "\n";
    s += R"({"op":"free","id":)" + std::to_string(a) + "}\n";
    s += R"({"op":"free","id":)" + std::to_string(b) + "}\n";
    if (syncs) s += R"({"op":"sync"})" "\n";
  }
  return s;
}

TEST(Learn, FindsIterationsOfASyntheticTrace) {
  auto t = trace::parse_trace(synthetic(5, 99));
  ASSERT_TRUE(t);
  const IterationSplit s = detect_iterations(*t);
  ASSERT_TRUE(s.found) << s.reason;
  EXPECT_EQ(s.period_kernels, 3u);
  ASSERT_EQ(s.iterations.size(), 5u);
  EXPECT_EQ(s.iterations[1].begin, 1u + 8u);  // after the first iteration's sync
}

TEST(Learn, WithoutSyncsCutsAfterTheTrailingFrees) {
  auto t = trace::parse_trace(synthetic(4, 99, false));
  ASSERT_TRUE(t);
  const IterationSplit s = detect_iterations(*t);
  ASSERT_TRUE(s.found) << s.reason;
  ASSERT_EQ(s.iterations.size(), 4u);
  EXPECT_EQ(s.iterations[1].begin, 1u + 7u);
  EXPECT_EQ(s.iterations[3].end, t->events.size());
}

TEST(Learn, AChangedPatternIsDetectedNotApplied) {
  auto t = trace::parse_trace(synthetic(6, 4));
  ASSERT_TRUE(t);
  // Iterations 2 and 3 match; 3 and 4 differ (the shape changed at 4).
  const trace::Iteration i2{2, 9, 17}, i3{3, 17, 25}, i4{4, 25, 33};
  EXPECT_EQ(match_iterations(*t, i2, i3).mismatch_event, trace::kNone);
  const IdentityMap m = match_iterations(*t, i3, i4);
  EXPECT_EQ(m.mismatch_event, 25u);  // the first alloc has a new size
  EXPECT_TRUE(m.b_of_a.empty());
}

// An allocation whose size has the op's bits (2^56) once had a free's signature: matched
// against a free, it wrote past the matcher's map (a crafted event stream killed capuchind).
TEST(Learn, AnAllocNeverMatchesAFree) {
  auto t = trace::parse_trace(R"({"format":"capuchin-trace","version":1}
{"op":"alloc","id":0,"bytes":4096}
{"op":"kernel","name":"k","touch":[0]}
{"op":"free","id":0}
{"op":"sync"}
{"op":"alloc","id":1,"bytes":4096}
{"op":"kernel","name":"k","touch":[1]}
{"op":"alloc","id":2,"bytes":72057594037927936}
{"op":"free","id":1}
{"op":"sync"}
)");
  ASSERT_TRUE(t) << t.error().message();
  const trace::Iteration a{0, 0, 4}, b{1, 4, 9};
  const IdentityMap m = match_iterations(*t, a, b);
  EXPECT_EQ(m.mismatch_event, 6u);
  EXPECT_TRUE(m.b_of_a.empty());
}

TEST(Learn, NoRepetitionIsReported) {
  auto t = trace::parse_trace(R"({"format":"capuchin-trace","version":1}
{"op":"alloc","id":0,"bytes":8}
{"op":"kernel","name":"a","touch":[0]}
{"op":"kernel","name":"b","touch":[0]}
{"op":"kernel","name":"c","touch":[0]}
{"op":"kernel","name":"d","touch":[0]}
)");
  ASSERT_TRUE(t);
  const IterationSplit s = detect_iterations(*t);
  EXPECT_FALSE(s.found);
  EXPECT_FALSE(s.reason.empty());
}

}  // namespace
}  // namespace capuchin::learn
