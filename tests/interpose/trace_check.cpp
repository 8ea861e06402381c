// trace_check: compares a trace recorded by libcapuchin.so with the ground truth the
// program itself wrote (sim_mlp_train --ground-truth: allocations, frees and per-launch
// read/write buffers in program order).
//
// Usage: interpose_trace_check TRACE GROUND_TRUTH
// Checks: the trace is valid; allocations match one to one in order and size; the same
// allocations are freed; kernels (memsets aside) match in order and name, and each touch
// set equals the mapped reads+writes; at least one vendor GEMM (simblas_sgemm_*, launched
// through dlopen + cuGetProcAddress) is present. Exit 0 when all hold, else 1 with reasons.
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <set>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "capuchin/trace.hpp"

namespace {

struct Launch {
  std::string name;
  std::set<std::uint64_t> touched;
};

int failures = 0;
void fail(const std::string& why) {
  std::fprintf(stderr, "MISMATCH: %s\n", why.c_str());
  ++failures;
}

}  // namespace

// interpose_trace_check --kernels TRACE NAME COUNT TOUCH: the trace is valid and has exactly
// COUNT kernels named NAME, each touching exactly TOUCH allocations.
int check_kernels(const char* path, const std::string& name, std::uint64_t count, std::size_t touch) {
  auto reader = capuchin::trace::TraceReader::open(path);
  if (!reader) return std::fprintf(stderr, "%s\n", reader.error().message().c_str()), 1;
  capuchin::trace::EventView ev;
  std::uint64_t n = 0;
  for (;;) {
    auto more = reader->next(ev);
    if (!more) return std::fprintf(stderr, "invalid trace: %s\n", more.error().message().c_str()), 1;
    if (!*more) break;
    if (ev.op != capuchin::trace::Op::Kernel || ev.name != name) continue;
    ++n;
    if (ev.touch.size() != touch) fail("kernel at line " + std::to_string(reader->line()) + " touches " +
                                       std::to_string(ev.touch.size()) + " allocations, expected " + std::to_string(touch));
  }
  if (n != count) fail(std::to_string(n) + " kernels named " + name + ", expected " + std::to_string(count));
  std::printf("%llu kernels %s: %s\n", static_cast<unsigned long long>(n), name.c_str(), failures ? "MISMATCH" : "match");
  return failures == 0 ? 0 : 1;
}

int main(int argc, char** argv) {
  if (argc == 6 && std::string(argv[1]) == "--kernels")
    return check_kernels(argv[2], argv[3], std::strtoull(argv[4], nullptr, 10), std::strtoull(argv[5], nullptr, 10));
  if (argc != 3) {
    std::fprintf(stderr, "usage: interpose_trace_check TRACE GROUND_TRUTH\n");
    return 2;
  }
  // The trace.
  std::vector<std::pair<std::uint64_t, std::uint64_t>> t_allocs;  // id, bytes
  std::set<std::uint64_t> t_freed;
  std::vector<Launch> t_launches;
  auto reader = capuchin::trace::TraceReader::open(argv[1]);
  if (!reader) {
    std::fprintf(stderr, "%s\n", reader.error().message().c_str());
    return 1;
  }
  capuchin::trace::EventView ev;
  for (;;) {
    auto more = reader->next(ev);
    if (!more) {
      std::fprintf(stderr, "invalid trace: %s\n", more.error().message().c_str());
      return 1;
    }
    if (!*more) break;
    using capuchin::trace::Op;
    if (ev.op == Op::Alloc) t_allocs.emplace_back(ev.id, ev.bytes);
    else if (ev.op == Op::Free) t_freed.insert(ev.id);
    else if (ev.op == Op::Kernel && ev.name != "memset")
      t_launches.push_back(Launch{std::string(ev.name), std::set<std::uint64_t>(ev.touch.begin(), ev.touch.end())});
  }
  // The ground truth.
  std::ifstream in(argv[2]);
  if (!in) {
    std::fprintf(stderr, "cannot read %s\n", argv[2]);
    return 1;
  }
  std::vector<std::pair<std::uint64_t, std::uint64_t>> g_allocs;
  std::set<std::uint64_t> g_freed;
  std::vector<Launch> g_launches;
  std::string line;
  while (std::getline(in, line)) {
    auto j = nlohmann::json::parse(line, nullptr, false);
    if (j.is_discarded()) return fail("ground truth line is not JSON: " + line), 1;
    const std::string e = j.value("event", "");
    if (e == "alloc") g_allocs.emplace_back(j["id"].get<std::uint64_t>(), j["bytes"].get<std::uint64_t>());
    else if (e == "free") g_freed.insert(j["id"].get<std::uint64_t>());
    else if (e == "launch") {
      Launch l{j["kernel"].get<std::string>(), {}};
      for (const char* k : {"reads", "writes"})
        for (const auto& b : j[k]) l.touched.insert(b["id"].get<std::uint64_t>());
      g_launches.push_back(std::move(l));
    }
  }
  // Allocations: one to one, in order, same size.
  std::map<std::uint64_t, std::uint64_t> to_trace;
  if (g_allocs.size() != t_allocs.size())
    fail("allocations: ground truth " + std::to_string(g_allocs.size()) + ", trace " + std::to_string(t_allocs.size()));
  for (std::size_t i = 0; i < std::min(g_allocs.size(), t_allocs.size()); ++i) {
    if (g_allocs[i].second != t_allocs[i].second)
      fail("allocation #" + std::to_string(i) + ": " + std::to_string(g_allocs[i].second) + " bytes, trace says " +
           std::to_string(t_allocs[i].second));
    to_trace[g_allocs[i].first] = t_allocs[i].first;
  }
  std::set<std::uint64_t> g_freed_mapped;
  for (std::uint64_t id : g_freed) g_freed_mapped.insert(to_trace.count(id) ? to_trace[id] : ~0ull);
  if (g_freed_mapped != t_freed)
    fail("freed allocations differ: ground truth " + std::to_string(g_freed.size()) + ", trace " +
         std::to_string(t_freed.size()));
  // Launches: in order, same name, same touched set.
  if (g_launches.size() != t_launches.size())
    fail("launches: ground truth " + std::to_string(g_launches.size()) + ", trace " + std::to_string(t_launches.size()));
  std::size_t gemms = 0;
  for (std::size_t i = 0; i < std::min(g_launches.size(), t_launches.size()); ++i) {
    std::set<std::uint64_t> want;
    for (std::uint64_t id : g_launches[i].touched) want.insert(to_trace.count(id) ? to_trace[id] : ~0ull);
    if (g_launches[i].name != t_launches[i].name)
      fail("launch #" + std::to_string(i) + ": " + g_launches[i].name + ", trace says " + t_launches[i].name);
    if (want != t_launches[i].touched)
      fail("launch #" + std::to_string(i) + " (" + g_launches[i].name + "): touched sets differ (" +
           std::to_string(want.size()) + " vs " + std::to_string(t_launches[i].touched.size()) + ")");
    if (t_launches[i].name.rfind("simblas_sgemm", 0) == 0) ++gemms;
  }
  if (gemms == 0) fail("no vendor GEMM (simblas_sgemm_*) in the trace");
  std::printf("allocations %zu, frees %zu, launches %zu (vendor GEMMs %zu): %s\n", t_allocs.size(), t_freed.size(),
              t_launches.size(), gemms, failures == 0 ? "match" : "MISMATCH");
  return failures == 0 ? 0 : 1;
}
