// report_data.cpp: loading decision logs and traces, and the simulated views derived from a
// trace (see report_data.hpp).
#include "report_data.hpp"

#include <fmt/format.h>
#include <zlib.h>

#include <algorithm>
#include <map>

#include "capuchin/learn.hpp"
#include "capuchin/plan.hpp"
#include "trace_load.hpp"

namespace capuchin::cli {

namespace {

// A file's lines, read through zlib: plain files as they are, gzip ones (a rotated decision
// log, decisions.jsonl.1.gz) inflated.
Expected<std::vector<std::string>> read_lines(const std::string& path) {
  gzFile g = gzopen(path.c_str(), "rb");
  if (g == nullptr) return make_error(fmt::format("{}: cannot open", path));
  std::vector<std::string> lines(1);
  char buf[1 << 16];
  int n = 0;
  while ((n = gzread(g, buf, sizeof buf)) > 0)
    for (int i = 0; i < n; ++i) {
      if (buf[i] == '\n') lines.emplace_back();
      else lines.back().push_back(buf[i]);
    }
  int code = 0;
  const std::string err = n < 0 ? gzerror(g, &code) : "";
  gzclose(g);
  if (n < 0) return make_error(fmt::format("{}: {}", path, err));
  return lines;
}

}  // namespace

Expected<ReportInputs> load_report_inputs(const std::vector<std::string>& files) {
  ReportInputs in;
  for (const auto& f : files) {
    // A trace starts with its header (the reader checks it, gzip or not); anything else must
    // be a decision log.
    if (auto r = trace::TraceReader::open(f); r) {
      in.trace_files.push_back(f);
      if (!in.trace) {
        auto t = trace::build_trace(*r);
        if (!t) return make_error(t.error().message());
        mark_learned_iterations(*t, f);
        in.trace = std::move(*t);
      }
      continue;
    } else if (r.error().code == trace::TraceErrc::Io) {
      return make_error(r.error().message());
    }
    auto lines = read_lines(f);
    if (!lines) return Unexpected{lines.error()};
    for (std::size_t n = 0; n < lines->size(); ++n) {
      if ((*lines)[n].empty()) continue;
      auto d = parse_decision_line((*lines)[n]);
      if (!d) return make_error(fmt::format("{}:{}: not a decision record or trace: {}", f, n + 1, d.error().message));
      in.decisions.push_back(std::move(*d));
    }
    in.decision_files.push_back(f);
  }
  return in;
}

namespace {

// When each event starts on the compute stream in a run's timeline (events with no entry,
// allocations and frees, take the time the previous entry ended).
std::vector<double> event_times(const trace::Trace& t, const std::vector<sim::TimelineEntry>& tl) {
  std::vector<double> start(t.events.size(), -1.0), end(t.events.size(), -1.0);
  for (const auto& e : tl) {
    if (e.lane != sim::TimelineEntry::Lane::Compute || e.event >= t.events.size()) continue;
    if (e.kind != sim::TimelineEntry::Kind::Kernel && e.kind != sim::TimelineEntry::Kind::Copy) continue;
    if (start[e.event] < 0 || e.start_s < start[e.event]) start[e.event] = e.start_s;
    end[e.event] = std::max(end[e.event], e.end_s);
  }
  double clock = 0;
  for (std::size_t i = 0; i < start.size(); ++i) {
    if (start[i] < 0) start[i] = clock;
    clock = std::max(clock, end[i] >= 0 ? end[i] : start[i]);
  }
  return start;
}

}  // namespace

Expected<SimulatedView> simulate_view(const trace::Trace& t, const std::string& gpu_name, const std::string& budget) {
  SimulatedView v;
  auto gpu = sim::find_gpu_profile(gpu_name);
  if (!gpu) return Unexpected{gpu.error()};
  v.gpu = gpu->name;
  auto prep = sim::prepare(t, *gpu);
  if (!prep) return Unexpected{prep.error()};
  v.natural_peak_bytes = prep->liveness.peak_bytes;

  // Iterations as the learner finds them (markers ignored), for per-iteration figures.
  v.event_iteration.assign(t.events.size(), 0);
  const learn::IterationSplit split = learn::detect_iterations(t);
  for (const auto& it : split.iterations)
    for (std::uint32_t e = it.begin; e < it.end && e < t.events.size(); ++e) v.event_iteration[e] = static_cast<std::uint32_t>(it.n);

  auto ideal = sim::make_policy("ideal");
  if (!ideal) return Unexpected{ideal.error()};
  sim::SimOptions o;
  o.timeline = &v.natural_tl;
  v.natural = sim::simulate(*prep, **ideal, o);
  const auto nat_t = event_times(t, v.natural_tl);
  for (std::size_t i = 0; i < t.events.size(); ++i) v.natural_mem.push_back({nat_t[i], prep->liveness.live_after[i]});

  if (budget.empty()) return v;
  auto b = sim::resolve_budget(budget, v.natural_peak_bytes, *gpu);
  if (!b) return Unexpected{b.error()};
  v.budget_text = budget;
  v.budget_bytes = *b;
  v.bound = sim::lower_bound(*prep, *b);
  auto policy = plan::make_capuchin_policy();
  sim::SimOptions m;
  m.budget_bytes = *b;
  m.timeline = &v.managed_tl;
  std::vector<sim::MemoryChange>& changes = v.managed_changes;
  m.memory = &changes;  // the bytes the simulated run held, as it held them (swaps, drops, recomputes)
  v.managed = sim::simulate(*prep, *policy, m);
  std::stable_sort(changes.begin(), changes.end(), [](const auto& x, const auto& y) { return x.t_s < y.t_s; });
  std::int64_t held = 0;
  for (const auto& c : changes) {
    using K = sim::MemoryChange::Kind;
    const auto bytes = static_cast<std::int64_t>(t.tensors[c.tensor].bytes);
    held += c.kind == K::Alloc || c.kind == K::SwapIn || c.kind == K::Recompute ? bytes : -bytes;
    v.managed_mem.push_back({c.t_s, static_cast<std::uint64_t>(std::max<std::int64_t>(0, held))});
  }
  return v;
}

std::vector<OffDeviceSeries> off_device_bytes(const std::vector<DecisionRecord>& records) {
  std::vector<const DecisionRecord*> sorted;
  for (const auto& r : records) sorted.push_back(&r);
  std::stable_sort(sorted.begin(), sorted.end(), [](const auto* a, const auto* b) { return a->t < b->t; });
  std::map<std::int64_t, std::size_t> index;  // pid -> its series
  std::map<std::pair<std::int64_t, std::uint64_t>, std::uint64_t> off;  // (pid, tensor) -> bytes held off
  std::vector<OffDeviceSeries> out;
  std::vector<std::uint64_t> total;
  for (const auto* r : sorted) {
    const bool release = r->action == "evict" || r->action == "drop";
    const bool take = r->action == "prefetch" || r->action == "swapin_on_demand" || r->action == "recompute";
    if ((!release && !take) || !r->tensor) continue;
    const auto key = std::make_pair(r->pid, *r->tensor);
    const auto it = off.find(key);
    if (release == (it != off.end())) continue;  // already off, or never seen leaving
    auto [at, fresh] = index.try_emplace(r->pid, out.size());
    if (fresh) out.push_back({r->pid, {}, 0}), total.push_back(0);
    std::uint64_t& sum = total[at->second];
    if (release) off.emplace(key, r->bytes), sum += r->bytes;
    else sum -= std::min(sum, it->second), off.erase(it);
    OffDeviceSeries& s = out[at->second];
    s.pts.push_back({r->t, sum});
    s.max_bytes = std::max(s.max_bytes, sum);
  }
  return out;
}

}  // namespace capuchin::cli
