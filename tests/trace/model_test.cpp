// The in-memory model and liveness on a hand-made trace whose every figure is computed by
// hand in the comments.
#include <gtest/gtest.h>

#include "capuchin/trace_model.hpp"

namespace capuchin::trace {
namespace {

// event index: what it does -> live bytes after it
const char* kHandTrace = R"({"format":"capuchin-trace","version":1,"model":"hand"}
{"op":"alloc","id":0,"bytes":100,"role":"param"}
{"op":"alloc","id":1,"bytes":50,"role":"param"}
{"op":"iter","n":1}
{"op":"alloc","id":2,"bytes":1000,"role":"activation"}
{"op":"kernel","name":"fwd","reads":[0],"writes":[2],"flops":1000}
{"op":"alloc","id":3,"bytes":500}
{"op":"kernel","name":"bwd","reads":[2,1],"writes":[3],"flops":2000}
{"op":"free","id":2}
{"op":"alloc","id":4,"bytes":30,"role":"optim"}
{"op":"kernel","name":"step","touch":[3,4],"dur_ns":77}
{"op":"free","id":3}
{"op":"sync"}
{"op":"iter","n":2}
{"op":"alloc","id":5,"bytes":1000}
{"op":"kernel","name":"fwd","reads":[0],"writes":[5],"flops":1000}
{"op":"alloc","id":6,"bytes":600}
{"op":"kernel","name":"bwd","reads":[5],"writes":[6],"flops":2000}
{"op":"free","id":5}
{"op":"free","id":6}
)";
// 0 alloc0 ->100, 1 alloc1 ->150 (set-up peak), 2 iter1 ->150, 3 alloc2 ->1150, 4 k ->1150,
// 5 alloc3 ->1650 (iteration 1 peak), 6 k, 7 free2 ->650, 8 alloc4 ->680, 9 k, 10 free3 ->180,
// 11 sync, 12 iter2 ->180, 13 alloc5 ->1180, 14 k, 15 alloc6 ->1780 (overall and iteration 2
// peak), 16 k, 17 free5 ->780, 18 free6 ->180. Persistent: ids 0, 1, 4 = 180 bytes.

TEST(Model, LivenessMatchesHandComputation) {
  auto t = parse_trace(kHandTrace, "hand");
  ASSERT_TRUE(t) << t.error().message();
  ASSERT_EQ(t->events.size(), 19u);
  auto l = compute_liveness(*t);
  const std::vector<std::uint64_t> expect{100, 150, 150, 1150, 1150, 1650, 1650, 650, 680, 680,
                                          180, 180, 180, 1180, 1180, 1780, 1780, 780, 180};
  EXPECT_EQ(l.live_after, expect);
  EXPECT_EQ(l.peak_bytes, 1780u);
  EXPECT_EQ(l.peak_event, 15u);
  EXPECT_EQ(l.setup_peak_bytes, 150u);
  EXPECT_EQ(l.iteration_peak_bytes, (std::vector<std::uint64_t>{1650, 1780}));
  EXPECT_EQ(l.iteration_peak_event, (std::vector<std::uint32_t>{5, 15}));
  EXPECT_EQ(l.persistent_bytes, 180u);
}

TEST(Model, TensorsAccessesAndIterations) {
  auto t = parse_trace(kHandTrace, "hand");
  ASSERT_TRUE(t);
  ASSERT_EQ(t->tensors.size(), 7u);
  EXPECT_EQ(t->setup_end, 2u);
  ASSERT_EQ(t->iterations.size(), 2u);
  EXPECT_EQ(t->iterations[0].begin, 2u);
  EXPECT_EQ(t->iterations[0].end, 12u);
  EXPECT_EQ(t->iterations[1].begin, 12u);
  EXPECT_EQ(t->iterations[1].end, 19u);

  const Tensor& act = t->tensors[2];
  EXPECT_EQ(act.bytes, 1000u);
  EXPECT_EQ(act.role, Role::Activation);
  EXPECT_EQ(act.alloc_event, 3u);
  EXPECT_EQ(act.free_event, 7u);
  EXPECT_EQ(act.first_access, 4u);
  EXPECT_EQ(act.last_access, 6u);
  EXPECT_EQ(act.access_count, 2u);
  EXPECT_EQ(t->tensors[0].free_event, kNone);
  EXPECT_EQ(t->tensors[0].access_count, 2u);  // fwd in each iteration
  EXPECT_EQ(t->tensors[4].role, Role::Optim);

  const Event& bwd = t->events[6];
  ASSERT_EQ(bwd.op, Op::Kernel);
  EXPECT_EQ(t->names[bwd.name], "bwd");
  ASSERT_EQ(bwd.reads_end - bwd.access_begin, 2u);
  EXPECT_EQ(t->accesses[bwd.access_begin].tensor, 2u);
  EXPECT_EQ(t->accesses[bwd.access_begin + 1].tensor, 1u);
  EXPECT_EQ(t->accesses[bwd.reads_end].mode, AccessMode::Write);
  const Event& step = t->events[9];
  EXPECT_EQ(step.access_end - step.writes_end, 2u);
  EXPECT_EQ(t->accesses[step.writes_end].mode, AccessMode::Touch);
  EXPECT_EQ(step.dur_ns, 77u);
  EXPECT_EQ(t->names.size(), 3u);  // fwd, bwd, step
}

TEST(Model, StatsCountEventsAndFlopsPerIteration) {
  auto t = parse_trace(kHandTrace, "hand");
  ASSERT_TRUE(t);
  auto s = compute_stats(*t, compute_liveness(*t));
  EXPECT_EQ(s.events, 19u);
  EXPECT_EQ(s.kernels, 5u);
  EXPECT_EQ(s.allocs, 7u);
  EXPECT_EQ(s.frees, 4u);
  EXPECT_EQ(s.syncs, 1u);
  EXPECT_EQ(s.iterations, 2u);
  EXPECT_EQ(s.iteration_flops, (std::vector<double>{3000, 3000}));
  EXPECT_EQ(s.iteration_kernels, (std::vector<std::uint64_t>{3, 2}));
  EXPECT_EQ(s.alloc_bytes_total, 100u + 50 + 1000 + 500 + 30 + 1000 + 600);
}

TEST(Model, TraceWithoutIterationsIsAllSetUp) {
  auto t = parse_trace(R"({"format":"capuchin-trace","version":1}
{"op":"alloc","id":0,"bytes":8}
{"op":"copy","dir":"d2h","bytes":8,"src":0}
)");
  ASSERT_TRUE(t);
  EXPECT_TRUE(t->iterations.empty());
  EXPECT_EQ(t->setup_end, 2u);
  auto l = compute_liveness(*t);
  EXPECT_TRUE(l.iteration_peak_bytes.empty());
  EXPECT_EQ(l.peak_bytes, 8u);
  EXPECT_EQ(t->tensors[0].last_access, 1u);  // the copy reads it
}

TEST(Model, EmptyTraceHasNoPeakEvent) {
  auto t = parse_trace(R"({"format":"capuchin-trace","version":1})");
  ASSERT_TRUE(t);
  auto l = compute_liveness(*t);
  EXPECT_EQ(l.peak_bytes, 0u);
  EXPECT_EQ(l.peak_event, kNone);
}

}  // namespace
}  // namespace capuchin::trace
