// Planning speed: the time make_plan takes for one iteration (the second) of each shared
// trace at 0.5 of its natural peak on h200, and for a synthetic iteration with 50k tensor
// accesses (a deep net: per layer a forward kernel and a backward kernel). Goal: <= 50 ms
// for 50k accesses. Prints the median of 5 runs per case.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include "capuchin/plan.hpp"

using namespace capuchin;

namespace {

// Layers of activations: forward reads a_{i-1} and w_i, writes a_i; backward reads a_i and
// g_{i+1}, writes g_i; activations freed after their backward use. Two iterations, a sync
// after each. 3 accesses per kernel, 2 kernels per layer.
std::string synthetic(int layers) {
  std::string s = R"({"format":"capuchin-trace","version":1,"model":"synthetic-deep"})" "\n";
  int id = 0;
  std::vector<int> w(layers);
  for (int i = 0; i < layers; ++i) {
    w[i] = id++;
    s += R"({"op":"alloc","id":)" + std::to_string(w[i]) + R"(,"bytes":65536})" "\n";
  }
  for (int it = 0; it < 2; ++it) {
    std::vector<int> a(layers + 1);
    a[0] = id++;
    s += R"({"op":"alloc","id":)" + std::to_string(a[0]) + R"(,"bytes":4194304})" "\n";
    for (int i = 1; i <= layers; ++i) {
      a[i] = id++;
      const int bytes = (1 + (i * 7919) % 8) << 20;
      s += R"({"op":"alloc","id":)" + std::to_string(a[i]) + R"(,"bytes":)" + std::to_string(bytes) + "}\n";
      s += R"({"op":"kernel","name":"fwd","reads":[)" + std::to_string(a[i - 1]) + "," + std::to_string(w[i - 1]) +
           R"(],"writes":[)" + std::to_string(a[i]) + R"(],"flops":)" + std::to_string(bytes * 64LL) + "}\n";
    }
    int g = id++;
    s += R"({"op":"alloc","id":)" + std::to_string(g) + R"(,"bytes":4194304})" "\n";
    for (int i = layers; i >= 1; --i) {
      const int g2 = id++;
      s += R"({"op":"alloc","id":)" + std::to_string(g2) + R"(,"bytes":4194304})" "\n";
      s += R"({"op":"kernel","name":"bwd","reads":[)" + std::to_string(a[i]) + "," + std::to_string(g) +
           R"(],"writes":[)" + std::to_string(g2) + R"(],"flops":268435456})" "\n";
      s += R"({"op":"free","id":)" + std::to_string(a[i]) + "}\n";
      s += R"({"op":"free","id":)" + std::to_string(g) + "}\n";
      g = g2;
    }
    s += R"({"op":"free","id":)" + std::to_string(g) + "}\n";
    s += R"({"op":"free","id":)" + std::to_string(a[0]) + "}\n";
    s += R"({"op":"sync"})" "\n";
  }
  return s;
}

void bench(const std::string& name, const trace::Trace& t) {
  auto gpu = sim::find_gpu_profile("h200");
  auto p = sim::prepare(t, *gpu);
  if (!p) {
    std::printf("%s: %s\n", name.c_str(), p.error().message.c_str());
    return;
  }
  // The second iteration: after the first sync.
  std::uint32_t begin = 0, end = static_cast<std::uint32_t>(t.events.size());
  int syncs = 0;
  for (std::uint32_t i = 0; i < t.events.size(); ++i)
    if (t.events[i].op == trace::Op::Sync && ++syncs == 1) begin = i + 1;
    else if (t.events[i].op == trace::Op::Sync && syncs == 2) end = i + 1;
  const learn::Pattern pat = learn::make_pattern(t, trace::Iteration{2, begin, end});
  std::size_t accesses = 0;
  for (const auto& pe : pat.events) accesses += t.events[pe.trace_event].access_end - t.events[pe.trace_event].access_begin;
  const trace::Liveness live = trace::compute_liveness(t);
  plan::PlanOptions opt;
  opt.budget_bytes = live.peak_bytes / 2;
  opt.baseline_bytes = begin > 0 ? live.live_after[begin - 1] : 0;
  std::vector<double> ms;
  plan::Plan last;
  for (int r = 0; r < 5; ++r) {
    const auto t0 = std::chrono::steady_clock::now();
    last = plan::make_plan(*p, pat, opt);
    ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
  }
  std::sort(ms.begin(), ms.end());
  std::printf("%-22s events %6zu accesses %6zu  plan %8.2f ms  (%u swaps, %u recomputes, fits %s)\n", name.c_str(),
              pat.events.size(), accesses, ms[2], last.swaps, last.recomputes, last.fits ? "yes" : "no");
}

}  // namespace

int main() {
  for (const char* f : {"resnet18-b16.jsonl.gz", "mobilenet_v2-b16.jsonl.gz", "tiny_transformer-b8.jsonl.gz"}) {
    const std::filesystem::path path = std::filesystem::path(CAPUCHIN_SHARED_TRACES) / f;
    auto t = trace::load_trace(path.string());
    if (!t) {
      std::printf("%s: %s\n", f, t.error().message().c_str());
      continue;
    }
    bench(std::string(f).substr(0, std::string(f).find('.')), *t);
  }
  auto t = trace::parse_trace(synthetic(8334), "synthetic");
  if (!t) {
    std::printf("synthetic: %s\n", t.error().message().c_str());
    return 1;
  }
  bench("synthetic-50k", *t);
  return 0;
}
