// Trace reader throughput in events/s (Google Benchmark's items_per_second), on the shared
// real-model traces (decompressed in memory, and from the gzip file) and on a synthetic
// 200k-event trace. Goal: >= 1 M events/s on one core.
#include <benchmark/benchmark.h>
#include <zlib.h>

#include <string>
#include <vector>

#include "capuchin/trace_model.hpp"

namespace {

using namespace capuchin::trace;

std::string inflate_file(const std::string& path) {
  std::string out;
  gzFile f = gzopen(path.c_str(), "rb");
  if (!f) return out;
  char buf[1 << 16];
  int n;
  while ((n = gzread(f, buf, sizeof buf)) > 0) out.append(buf, static_cast<std::size_t>(n));
  gzclose(f);
  return out;
}

// A trace shaped like a training step: allocs, kernels reading 2 and writing 1, frees.
std::string synthetic(std::size_t events) {
  std::string s = R"({"format":"capuchin-trace","version":1,"model":"synthetic"})" "\n";
  std::uint64_t id = 0;
  std::size_t n = 0;
  while (n + 4 <= events) {
    const std::uint64_t a = id++, b = id++;
    s += R"({"op":"alloc","id":)" + std::to_string(a) + R"(,"bytes":1048576,"role":"activation"})" "\n";
    s += R"({"op":"alloc","id":)" + std::to_string(b) + R"(,"bytes":4096})" "\n";
    s += R"({"op":"kernel","name":"aten::addmm","reads":[)" + std::to_string(a) + "," + std::to_string(a) +
         R"(],"writes":[)" + std::to_string(b) + R"(],"flops":33554432,"bytes":2101248})" "\n";
    s += R"({"op":"free","id":)" + std::to_string(a) + "}\n";
    n += 4;
  }
  return s;
}

void read_all(benchmark::State& state, const std::string& text) {
  std::int64_t events = 0;
  for (auto _ : state) {
    auto r = TraceReader::from_memory(text, "bench");
    if (!r) { state.SkipWithError(r.error().message().c_str()); return; }
    EventView ev;
    for (;;) {
      auto more = r->next(ev);
      if (!more) { state.SkipWithError(more.error().message().c_str()); return; }
      if (!*more) break;
      ++events;
    }
  }
  state.SetItemsProcessed(events);
  state.SetBytesProcessed(static_cast<std::int64_t>(text.size()) * state.iterations());
}

void BM_ReadShared(benchmark::State& state, const std::string& file) {
  static std::string text;
  text = inflate_file(std::string(CAPUCHIN_SHARED_TRACES) + "/" + file);
  if (text.empty()) { state.SkipWithError(("cannot read " + file).c_str()); return; }
  read_all(state, text);
}

void BM_LoadSharedGzip(benchmark::State& state, const std::string& file) {
  const std::string path = std::string(CAPUCHIN_SHARED_TRACES) + "/" + file;
  std::int64_t events = 0;
  for (auto _ : state) {
    auto t = load_trace(path);
    if (!t) { state.SkipWithError(t.error().message().c_str()); return; }
    events += static_cast<std::int64_t>(t->events.size());
    benchmark::DoNotOptimize(compute_liveness(*t).peak_bytes);
  }
  state.SetItemsProcessed(events);
}

void BM_ReadSynthetic(benchmark::State& state) {
  static const std::string text = synthetic(200000);
  read_all(state, text);
}

}  // namespace

BENCHMARK_CAPTURE(BM_ReadShared, resnet18, std::string("resnet18-b16.jsonl.gz"));
BENCHMARK_CAPTURE(BM_ReadShared, mobilenet_v2, std::string("mobilenet_v2-b16.jsonl.gz"));
BENCHMARK_CAPTURE(BM_ReadShared, tiny_transformer, std::string("tiny_transformer-b8.jsonl.gz"));
BENCHMARK_CAPTURE(BM_LoadSharedGzip, mobilenet_v2_model_and_liveness, std::string("mobilenet_v2-b16.jsonl.gz"));
BENCHMARK(BM_ReadSynthetic)->Unit(benchmark::kMillisecond);
BENCHMARK_MAIN();
