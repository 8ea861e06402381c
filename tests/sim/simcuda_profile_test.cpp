// The `simcuda` GPU profile (src/sim/profiles.cpp): after the simulator's efficiencies, its
// rates are exactly simcuda's cost constants (tests/simcuda/include/simcuda/simcuda.h), so a
// copy is charged what simcuda charges; kernel durations on it worked out by hand.
#include <gtest/gtest.h>

#include "capuchin/sim.hpp"
#include "simcuda/simcuda.h"

namespace capuchin::sim {
namespace {

TEST(SimcudaProfile, EffectiveRatesAreSimcudasConstants) {
  auto g = find_gpu_profile("simcuda");
  ASSERT_TRUE(g) << g.error().message;
  const Efficiency eff;
  EXPECT_DOUBLE_EQ(g->fp32_flops * eff.compute, SIMCUDA_FLOPS_PER_NS * 1e9);
  EXPECT_DOUBLE_EQ(g->hbm_bytes_per_s * eff.memory, SIMCUDA_DEVICE_BYTES_PER_NS * 1e9);
  EXPECT_DOUBLE_EQ(g->link_bytes_per_s * eff.link, SIMCUDA_PINNED_BYTES_PER_NS * 1e9);
  EXPECT_DOUBLE_EQ(g->link_latency_s, SIMCUDA_COPY_LATENCY_NS * 1e-9);
  EXPECT_EQ(g->memory_bytes, SIMCUDA_DEFAULT_DEVICE_BYTES);
  EXPECT_EQ(g->tf32_flops, 0);  // one rate for every math mode
  EXPECT_EQ(g->bf16_flops, 0);
  EXPECT_NE(g->sources.find("simcuda.h"), std::string::npos);
}

TEST(SimcudaProfile, DurationsOfCopiesAndKernels) {
  // 0 h2d 25,000 B: 1.5 us + 25,000 / 25 GB/s = 2.5 us; 1 d2h 4 B: 1.5 us + 0.16 ns;
  // 2 conv, 2e7 flops: 2 us at 10 TFLOP/s (no TF32) + 4 us launch latency = 6 us;
  // 3 add, 1.8e6 bytes: 2 us at 900 GB/s + 4 us = 6 us; 4 dur_ns 777: 777 ns as it is.
  auto t = trace::parse_trace(R"({"format":"capuchin-trace","version":1,"dtype":"float32"}
{"op":"alloc","id":0,"bytes":25000}
{"op":"copy","dir":"h2d","bytes":25000,"dst":0}
{"op":"copy","dir":"d2h","bytes":4,"src":0}
{"op":"kernel","name":"aten::convolution","reads":[0],"writes":[0],"flops":20000000}
{"op":"kernel","name":"aten::add_","reads":[0],"writes":[0],"bytes":1800000}
{"op":"kernel","name":"k","touch":[0],"dur_ns":777}
)");
  ASSERT_TRUE(t) << t.error().message();
  auto g = find_gpu_profile("simcuda");
  ASSERT_TRUE(g);
  const auto d = event_durations(*t, *g, Efficiency{});
  ASSERT_EQ(d.size(), 6u);
  EXPECT_NEAR(d[1], 2.5e-6, 1e-15);
  EXPECT_NEAR(d[2], 1.5e-6 + 4.0 / 25e9, 1e-15);
  EXPECT_NEAR(d[3], 6e-6, 1e-15);
  EXPECT_NEAR(d[4], 6e-6, 1e-15);
  EXPECT_NEAR(d[5], 777e-9, 1e-15);
}

}  // namespace
}  // namespace capuchin::sim
