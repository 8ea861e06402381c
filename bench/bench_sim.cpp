// bench_sim: simulation speed of every policy on a 100k-event trace (resnet18's steady
// iteration repeated with fresh tensor ids), and each policy's time against `ideal` on the
// same trace in the same run. Prints figures; it is not a test.
#include <benchmark/benchmark.h>
#include <fmt/format.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <unordered_map>

#include "capuchin/sim.hpp"

namespace {

using namespace capuchin;

std::string base_trace() {
  std::string p = std::string(CAPUCHIN_SHARED_TRACES) + "/resnet18-b16.jsonl.gz";
  if (!std::filesystem::exists(p)) p = std::string(CAPUCHIN_TEST_DATA) + "/resnet18-b16.jsonl.gz";
  return p;
}

// Set-up and iteration 1 as captured, then iteration 2 repeated (tensors allocated inside it
// get fresh ids each time) until the trace has at least `target` events.
trace::Trace long_trace(const trace::Trace& base, std::size_t target) {
  std::string text = trace::format_header(base.header) + "\n";
  trace::Trace::ViewScratch scratch;
  std::size_t events = 0;
  auto emit = [&](const trace::EventView& v) {
    text += trace::format_event(v);
    text += '\n';
    ++events;
  };
  const auto& it2 = base.iterations.at(1);
  for (std::uint32_t i = 0; i < it2.begin; ++i) emit(base.view(i, scratch));
  std::uint64_t next_id = 0;
  for (const auto& t : base.tensors) next_id = std::max(next_id, t.id + 1);
  std::uint64_t n = 2;
  std::vector<std::uint64_t> reads, writes, touch;
  while (events < target) {
    std::unordered_map<std::uint64_t, std::uint64_t> remap;
    auto id = [&](std::uint64_t old) {
      auto f = remap.find(old);
      return f == remap.end() ? old : f->second;
    };
    for (std::uint32_t i = it2.begin; i < it2.end; ++i) {
      trace::EventView v = base.view(i, scratch);
      if (v.op == trace::Op::Iter) v.n = n++;
      if (v.op == trace::Op::Alloc) v.id = remap[v.id] = next_id++;
      if (v.op == trace::Op::Free) v.id = id(v.id);
      v.src = id(v.src), v.dst = id(v.dst);
      reads.assign(v.reads.begin(), v.reads.end());
      writes.assign(v.writes.begin(), v.writes.end());
      touch.assign(v.touch.begin(), v.touch.end());
      for (auto* vec : {&reads, &writes, &touch})
        for (auto& x : *vec) x = id(x);
      v.reads = reads, v.writes = writes, v.touch = touch;
      emit(v);
    }
  }
  auto t = trace::parse_trace(text, "long");
  if (!t) {
    fmt::print(stderr, "bench_sim: {}\n", t.error().message());
    std::exit(1);
  }
  return std::move(*t);
}

}  // namespace

int main() {
  auto base = trace::load_trace(base_trace());
  if (!base) return fmt::print(stderr, "{}\n", base.error().message()), 1;
  const trace::Trace t = long_trace(*base, 100000);
  auto gpu = sim::find_gpu_profile("h200");
  auto p = sim::prepare(t, *gpu);
  if (!p) return 1;
  const double ideal = sim::ideal_time_s(*p);
  fmt::print("bench_sim: {} events, {} tensors, {} iterations (resnet18-b16 steady iteration repeated); "
             "simulated, GPU profile h200\n",
             t.events.size(), t.tensors.size(), t.iterations.size());
  fmt::print("{:<16} {:>7} {:>12} {:>10} {:>14} {:>10}\n", "policy", "budget", "wall s/run", "feasible",
             "sim ms/iter", "vs ideal");
  for (const auto& name : sim::policy_names()) {
    for (double frac : {1.0, 0.8, 0.6}) {
      auto pol = sim::make_policy(name);
      sim::SimOptions o;
      o.budget_bytes = static_cast<std::uint64_t>(frac * static_cast<double>(p->liveness.peak_bytes));
      const int reps = 3;
      sim::SimResult r;
      const auto t0 = std::chrono::steady_clock::now();
      for (int k = 0; k < reps; ++k) {
        auto fresh = sim::make_policy(name);
        r = sim::simulate(*p, **fresh, o);
        benchmark::DoNotOptimize(r);
      }
      const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() / reps;
      fmt::print("{:<16} {:>7.2f} {:>12.4f} {:>10} {:>14.3f} {:>10}\n", name, frac, wall, r.feasible ? "yes" : "no",
                 r.feasible ? r.time_s * 1e3 : 0.0, r.feasible ? fmt::format("{:.3f}x", r.time_s / ideal) : "-");
    }
  }
  return 0;
}
