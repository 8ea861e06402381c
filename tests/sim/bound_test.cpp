// lower_bound (include/capuchin/sim.hpp): a hand-made iteration whose bound is worked out in
// the comments (swap against recomputation at the crossing, data-free and dead tensors shed for
// free, a kernel that cannot fit). On real-model traces the bound is checked against every
// policy's runs in traces_test.cpp (SharedTraces.SanityRelations).
#include <gtest/gtest.h>

#include "capuchin/sim.hpp"

namespace capuchin::sim {
namespace {

// simcuda's profile: the link moves exactly 25 GB/s after the efficiency every profile gets.
// k1 writes X (1 MB, 1000 us, no inputs: recomputable at 1 ns per byte); Y (1 MB) is written
// by k2 (100 us) and read by k3 (100 us), then freed; k4 (100 us) reads X. At 1.5 MB, k2 and
// k3 each have X live and unused, 0.5 MB over the budget. At k2: X's out window is 0 (k1 ends
// where k2 starts), so K = 0 and swapping S bytes stretches the iteration by S / 25 GB/s;
// recomputing the rest costs (0.5 MB - S) x 1 ns. The least max is where they cross:
// S / 25e9 = (5e5 - S) x 1e-9, S = 5e-4 / 1.04e-9 = 480,769 bytes, 19.23 us. At k3 X's in
// window is 0: the same. Z (0.3 MB, allocated, never written) holds no data: shed for free, so
// at 1.5 MB the 2.3 MB live at k2 and k3 leave 0.5 MB to swap or recompute.
const char* kTrace = R"({"format":"capuchin-trace","version":1,"iterations":1}
{"op":"alloc","id":0,"bytes":1000000}
{"op":"iter","n":1}
{"op":"alloc","id":9,"bytes":300000}
{"op":"kernel","name":"k1","reads":[],"writes":[0],"dur_ns":1000000}
{"op":"alloc","id":1,"bytes":1000000}
{"op":"kernel","name":"k2","reads":[],"writes":[1],"dur_ns":100000}
{"op":"kernel","name":"k3","reads":[1],"writes":[],"dur_ns":100000}
{"op":"free","id":1}
{"op":"kernel","name":"k4","reads":[0],"writes":[],"dur_ns":100000}
{"op":"free","id":9}
)";

TEST(LowerBound, SwapAgainstRecomputeAtTheCrossing) {
  auto t = trace::parse_trace(kTrace);
  ASSERT_TRUE(t) << t.error().message();
  auto gpu = find_gpu_profile("simcuda");
  ASSERT_TRUE(gpu);
  auto p = prepare(*t, *gpu);
  ASSERT_TRUE(p);
  const Bound b = lower_bound(*p, 1'500'000);
  ASSERT_TRUE(b.feasible);
  EXPECT_NEAR(b.compute_s, 1300e-6, 1e-12);
  EXPECT_NEAR(b.added_s, 5e-4 / 1.04e-9 / 25e9, 1e-9);
  EXPECT_EQ(b.event, 5u);  // k2: the first moment that binds
  EXPECT_EQ(b.over_bytes, 800'000u);  // live beyond the budget, Z included
  // A budget the live bytes never exceed adds nothing.
  EXPECT_EQ(lower_bound(*p, 2'300'000).added_s, 0.0);
  // Below 1 MB no policy fits: k1, the first moment over such a budget, writes X whole.
  const Bound none = lower_bound(*p, 900'000);
  EXPECT_FALSE(none.feasible);
  EXPECT_EQ(none.event, 3u);
  EXPECT_EQ(none.why, "its own tensors need 976.6 KiB, over the budget of 878.9 KiB");
}

TEST(LowerBound, TheJobsOwnCopiesTakeTheirEngineAndTheStream) {
  // kTrace with an upload of 250 kB (c seconds) before k1. At k3, X's in window is 0 and its out
  // window 100 us: swapping S bytes needs S / 25 GB/s of the link to the device, which the upload
  // holds for c, so the iteration runs at least c + S / 25 GB/s beyond its kernels; recomputing
  // the rest takes the compute stream, which the upload holds too: c + (0.5 MB - S) x 1 ns. They
  // cross where they did without the upload: the bound adds c + 19.23 us, at k3 (before, the
  // upload's c counted as time the swap-in could use, and k2 and k3 tied at 19.23 us). At k2 the
  // swap goes out while the upload comes in: the least max there is c + 9.6 us, so k3 binds.
  const std::string text = std::string(kTrace).replace(std::string(kTrace).find("{\"op\":\"kernel\",\"name\":\"k1\""), 0,
                                                       "{\"op\":\"copy\",\"dir\":\"h2d\",\"bytes\":250000}\n");
  auto t = trace::parse_trace(text);
  ASSERT_TRUE(t) << t.error().message();
  auto gpu = find_gpu_profile("simcuda");
  ASSERT_TRUE(gpu);
  auto p = prepare(*t, *gpu);
  ASSERT_TRUE(p);
  ASSERT_EQ(t->events[3].op, trace::Op::Copy);
  const double c = p->duration_s[3];
  ASSERT_GT(c, 9e-6);  // 250 kB at 25 GB/s and the link's latency
  const Bound b = lower_bound(*p, 1'500'000);
  ASSERT_TRUE(b.feasible);
  EXPECT_NEAR(b.compute_s, 1300e-6, 1e-12);
  EXPECT_NEAR(b.added_s, c + 5e-4 / 1.04e-9 / 25e9, 1e-9);
  EXPECT_EQ(b.event, 7u);  // k3
  // The ideal iteration has the upload too: the ratio is what the budget adds to it.
  EXPECT_NEAR(b.ratio(1300e-6 + c), (1300e-6 + c + 5e-4 / 1.04e-9 / 25e9) / (1300e-6 + c), 1e-8);
  // A budget no moment exceeds adds nothing, the upload included.
  EXPECT_EQ(lower_bound(*p, 2'300'000).added_s, 0.0);
}

}  // namespace
}  // namespace capuchin::sim
