// plan_toy.hpp: the planner tests' toy (plan_test.cpp, plan_refine_test.cpp): a GPU and link with
// round numbers (1 MB copies take 1 ms), exact efficiencies, and a two-tensor iteration whose
// tensors A and B do not fit a 1.6 MB budget together.
#pragma once

#include <gtest/gtest.h>

#include <string>

#include "capuchin/plan.hpp"

namespace capuchin::plan::toy {

// A deterministic efficiency set so hand computations are exact.
inline sim::Efficiency exact() {
  sim::Efficiency e;
  e.compute = 1;
  e.memory = 1;
  e.link = 1;
  e.launch_latency_s = 0;
  return e;
}

inline sim::GpuProfile toy_gpu() {
  sim::GpuProfile g;
  g.name = "toy";
  g.memory_bytes = 1ull << 40;
  g.fp32_flops = g.tf32_flops = g.bf16_flops = 1e12;
  g.hbm_bytes_per_s = 1e12;
  g.link_bytes_per_s = 1e9;  // 1 GB/s: 1 MB copies take 1 ms
  g.link_latency_s = 0;
  return g;
}

// One iteration (positions): 0 alloc A (1 MB), 1 fwd writes A, 2 pre, 3 alloc B (1 MB),
// 4 mid1 writes B, 5 mid2 reads B, 6 free B, 7 post, 8 bwd reads A, 9 free A, 10 sync.
// A and B together exceed a 1.6 MB budget, so A must be away from 3 to 6. With 1 GB/s a
// 1 MB copy takes 1 ms.
inline std::string toy_trace(int iters, double fwd_ms, double pre_ms, double middle_ms, double post_ms) {
  std::string s = R"({"format":"capuchin-trace","version":1})" "\n";
  const auto ns = [](double ms) { return std::to_string(static_cast<long long>(ms * 1e6)); };
  const auto k = [&](const char* name, const std::string& r, const std::string& w, double ms) {
    return std::string(R"({"op":"kernel","name":")") + name + R"(","reads":[)" + r + R"(],"writes":[)" + w +
           R"(],"dur_ns":)" + ns(ms) + "}\n";
  };
  int id = 0;
  const std::string w = std::to_string(id++), g = std::to_string(id++);  // weights, gradients
  s += R"({"op":"alloc","id":)" + w + R"(,"bytes":1000})" "\n";
  s += R"({"op":"alloc","id":)" + g + R"(,"bytes":1000})" "\n";
  for (int i = 0; i < iters; ++i) {
    const std::string a = std::to_string(id++), b = std::to_string(id++);
    s += R"({"op":"alloc","id":)" + a + R"(,"bytes":1000000})" "\n";
    s += k("fwd", w, a, fwd_ms);
    s += k("pre", w, g, pre_ms);
    s += R"({"op":"alloc","id":)" + b + R"(,"bytes":1000000})" "\n";
    s += k("mid1", w, b, middle_ms / 2);
    s += k("mid2", b, g, middle_ms / 2);
    s += R"({"op":"free","id":)" + b + "}\n";
    s += k("post", w, g, post_ms);
    s += k("bwd", a, g, 1.0);
    s += R"({"op":"free","id":)" + a + "}\n";
    s += R"({"op":"sync"})" "\n";
  }
  return s;
}

// A trace and its preparation, which points at it: moving one points the copy at its own trace
// (returned by name from prepare_text, where the copy may or may not be elided).
struct Fixture {
  trace::Trace t;
  sim::PreparedTrace p;
  Fixture() = default;
  Fixture(Fixture&& o) noexcept : t(std::move(o.t)), p(std::move(o.p)) { p.trace = &t; }
  Fixture(const Fixture&) = delete;
  Fixture& operator=(const Fixture&) = delete;
  Fixture& operator=(Fixture&&) = delete;
};

// A hand-made trace's text, parsed and prepared on the toy GPU.
inline Fixture prepare_text(const std::string& text) {
  auto t = trace::parse_trace(text);
  EXPECT_TRUE(t) << t.error().message();
  Fixture f;
  f.t = std::move(*t);
  auto p = sim::prepare(f.t, toy_gpu(), exact());
  EXPECT_TRUE(p);
  f.p = std::move(*p);
  f.p.trace = &f.t;
  return f;
}

inline Fixture prepare_toy(int iters, double fwd_ms, double pre_ms, double middle_ms, double post_ms) {
  return prepare_text(toy_trace(iters, fwd_ms, pre_ms, middle_ms, post_ms));
}

// The toy's second iteration, planned for a 1.6 MB budget with no margin (A and B do not fit together).
inline learn::Pattern second_iteration(const Fixture& f) { return learn::make_pattern(f.t, trace::Iteration{2, 13, 24}); }
inline PlanOptions toy_options() {
  PlanOptions opt;
  opt.budget_bytes = 1'600'000;
  opt.baseline_bytes = 2000;
  opt.margin = 0;
  return opt;
}
inline PlanOptions swap_only_toy_options() {
  PlanOptions opt = toy_options();
  opt.allow_recompute = false;
  return opt;
}

}  // namespace capuchin::plan::toy
