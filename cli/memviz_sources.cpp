// memviz_sources.cpp: a trace (simulated) or a decision log as memory-viz Steps (see
// memviz.hpp for what each shows and why).
#include <fmt/format.h>

#include <algorithm>
#include <filesystem>
#include <map>
#include <optional>

#include "capuchin/plan.hpp"
#include "capuchin/sim.hpp"
#include "capuchin/tensor_names.hpp"
#include "capuchin/units.hpp"
#include "memviz.hpp"

namespace capuchin::cli::memviz {
namespace {

using Change = sim::MemoryChange;

std::string base_name(const std::string& path) { return std::filesystem::path(path).filename().string(); }

// ---- trace ---------------------------------------------------------------------------------

// What the frames of a trace's blocks say, built once per tensor from the shared names
// (capuchin/tensor_names.hpp: the same words as the report and `capuchin log --trace`).
class TraceFrames {
 public:
  TraceFrames(const trace::Trace& t, const std::string& file) : t_(t), file_(base_name(file)), names_(t) {
    tensor_.resize(t.tensors.size());
  }
  // [producing kernel (or first user), the tensor]
  const std::vector<Frame>& tensor(std::uint32_t i) {
    auto& f = tensor_[i];
    if (!f.empty()) return f;
    const trace::Tensor& ts = t_.tensors[i];
    if (const trace::TensorOrigin o = names_.origin(i); o.event != trace::kNone)
      f.push_back({file_, o.event + 2ull, names_.origin_text(i)});
    f.push_back({file_, ts.alloc_event + 2ull, fmt::format("tensor {}: {}", ts.id, names_.describe(i))});
    return f;
  }
  // [capuchin's action at the event where it was decided, producing kernel, the tensor]
  std::vector<Frame> action(std::uint32_t i, std::uint32_t event, std::string what) {
    std::vector<Frame> f{{file_, event + 2ull, "capuchin: " + std::move(what)}};
    const auto& rest = tensor(i);
    f.insert(f.end(), rest.begin(), rest.end());
    return f;
  }
  std::string producer_name(std::uint32_t i) const {
    const std::uint32_t p = names_.producer(i);
    return p == trace::kNone ? "its writers" : trace::event_name(t_, p);
  }
  const std::string& file() const { return file_; }

 private:
  const trace::Trace& t_;
  std::string file_;
  trace::TensorNames names_;
  std::vector<std::vector<Frame>> tensor_;
};

struct SimRun {
  std::vector<Change> changes;  // in time order
  sim::SimResult result;
  std::uint64_t budget = 0;     // 0: no budget (ideal run)
  std::string gpu;
};

Expected<SimRun> simulate_memory(const trace::Trace& t, const std::string& gpu_name, const std::string& budget) {
  auto gpu = sim::find_gpu_profile(gpu_name);
  if (!gpu) return Unexpected{gpu.error()};
  auto prep = sim::prepare(t, *gpu);
  if (!prep) return Unexpected{prep.error()};
  SimRun run;
  run.gpu = gpu->name;
  sim::SimOptions o;
  o.memory = &run.changes;
  std::unique_ptr<sim::Policy> policy;
  if (budget.empty()) {
    auto ideal = sim::make_policy("ideal");
    if (!ideal) return Unexpected{ideal.error()};
    policy = std::move(*ideal);
  } else {
    auto b = sim::resolve_budget(budget, prep->liveness.peak_bytes, *gpu);
    if (!b) return Unexpected{b.error()};
    run.budget = o.budget_bytes = *b;
    policy = plan::make_capuchin_policy();
  }
  run.result = sim::simulate(*prep, *policy, o);
  std::stable_sort(run.changes.begin(), run.changes.end(), [](const Change& a, const Change& b) { return a.t_s < b.t_s; });
  return run;
}

struct Counts {
  std::uint64_t allocs = 0, frees = 0, swap_outs = 0, prefetches = 0, on_demand = 0, drops = 0, recomputes = 0;
};

Step change_step(const trace::Trace& t, const Change& c, TraceFrames& frames, Counts& n) {
  Step s;
  s.t_s = c.t_s;
  s.key = c.tensor;
  s.bytes = t.tensors[c.tensor].bytes;
  s.stream = t.events[t.tensors[c.tensor].alloc_event].stream;
  s.kind = c.kind == Change::Kind::Alloc || c.kind == Change::Kind::SwapIn || c.kind == Change::Kind::Recompute
               ? Step::Kind::Alloc
               : Step::Kind::Free;
  switch (c.kind) {
    case Change::Kind::Alloc: ++n.allocs, s.frames = frames.tensor(c.tensor); break;
    case Change::Kind::Free: ++n.frees, s.frames = frames.tensor(c.tensor); break;
    case Change::Kind::SwapOut: ++n.swap_outs, s.frames = frames.action(c.tensor, c.event, "swapped out to host"); break;
    case Change::Kind::SwapIn:
      ++(c.on_demand ? n.on_demand : n.prefetches);
      s.frames = frames.action(c.tensor, c.event,
                               c.on_demand ? "swapped in on demand (compute stalled)" : "prefetched (swapped in ahead of use)");
      break;
    case Change::Kind::Drop: ++n.drops, s.frames = frames.action(c.tensor, c.event, "dropped (freed, to be recomputed)"); break;
    case Change::Kind::Recompute:
      ++n.recomputes;
      s.frames = frames.action(c.tensor, c.event, "recomputed by " + frames.producer_name(c.tensor));
      break;
  }
  return s;
}

// The run stopped: an 'oom' entry where it did, for what it could not place.
Step oom_step(const trace::Trace& t, const SimRun& run, double t_s, std::uint64_t live, const std::string& file) {
  const auto& w = run.result.where;
  Step s;
  s.kind = Step::Kind::Oom;
  s.t_s = t_s;
  s.bytes = w.tensor < t.tensors.size() ? t.tensors[w.tensor].bytes : 0;
  s.device_free = run.budget > live ? run.budget - live : 0;
  s.frames.push_back({base_name(file), w.line, fmt::format("capuchin: out of memory at budget {}: {}", format_bytes(run.budget), w.reason)});
  return s;
}

// ---- decision log -----------------------------------------------------------------------------

enum class Held : std::uint8_t { Unknown, On, Off };

struct LogTensor {
  Held held = Held::Unknown;
  std::uint64_t bytes = 0;
  std::uint64_t last_iteration = 0;
  double last_t = 0;
  std::uint64_t last_line = 0;
  std::string last_file;
  Frame identity;
};

// When each iteration of one process starts and ends, as its records show (an iteration ends
// where the next one's first record is, the last one at the last record).
class Iterations {
 public:
  explicit Iterations(const std::vector<const LoggedRecord*>& recs) {
    for (const auto* r : recs)
      if (order_.empty() || order_.back().first != r->r.iteration) {
        if (!index_.count(r->r.iteration)) index_[r->r.iteration] = order_.size();
        order_.push_back({r->r.iteration, r->r.t});
      }
    last_t_ = recs.empty() ? 0 : recs.back()->r.t;
  }
  double start(std::uint64_t it) const { return order_[index_.at(it)].second; }
  double end(std::uint64_t it) const {
    const std::size_t k = index_.at(it);
    return k + 1 < order_.size() ? std::max(order_[k + 1].second, start(it)) : last_t_;
  }

 private:
  std::vector<std::pair<std::uint64_t, double>> order_;
  std::map<std::uint64_t, std::size_t> index_;
  double last_t_ = 0;
};

std::string take_words(const std::string& action) {
  if (action == "prefetch") return "prefetched (swapped in ahead of use)";
  if (action == "swapin_on_demand") return "swapped in on demand (the job waited for it)";
  return "recomputed (its producing kernels re-run)";
}

std::string release_words(const DecisionRecord& r) {
  const std::string why = r.reason.empty() ? "" : ", reason " + r.reason;
  return r.action == "evict" ? "swapped out to host (evict" + why + ")" : "dropped, to be recomputed (drop" + why + ")";
}

class LogDevice {
 public:
  LogDevice(std::int64_t pid, const std::vector<const LoggedRecord*>& recs) : pid_(pid), recs_(recs), iters_(recs) {}

  Device build() {
    for (const auto* r : recs_) record(*r);
    for (auto& [id, ts] : tensors_)
      if (ts.held == Held::On)
        push(Step::Kind::Free, std::max(iters_.end(ts.last_iteration), ts.last_t), id, ts,
             {ts.last_file, ts.last_line,
              fmt::format("capuchin: no later decision; the job's free is not in the decision log (shown released at the "
                          "end of iteration {})",
                          ts.last_iteration)});
    std::stable_sort(steps_.begin(), steps_.end(), [](const Step& a, const Step& b) { return a.t_s < b.t_s; });
    Device d;
    d.label = fmt::format("decisions of pid {} ({}): capuchin's swaps and recomputations only (a decision log has no "
                          "allocations or frees of the job)",
                          pid_, files());
    d.steps = std::move(steps_);
    return d;
  }

  std::string summary() const {
    return fmt::format("decisions of pid {}: {} swap-outs, {} drops, {} swap-ins, {} recomputes, {} tensors; "
                       "{} records change no device memory (e.g. a drop of a tensor already swapped out)",
                       pid_, n_.swap_outs, n_.drops, n_.prefetches + n_.on_demand, n_.recomputes, tensors_.size(), skipped_);
  }

 private:
  void record(const LoggedRecord& lr) {
    const DecisionRecord& r = lr.r;
    if (r.action == "oom") return oom(lr);
    const bool take = r.action == "prefetch" || r.action == "swapin_on_demand" || r.action == "recompute";
    const bool release = r.action == "evict" || r.action == "drop";
    if (!take && !release) return;
    if (!r.tensor || r.bytes == 0 || r.note.rfind("repeated ", 0) == 0) return void(++skipped_);
    auto [it, fresh] = tensors_.try_emplace(*r.tensor);
    LogTensor& ts = it->second;
    if (fresh) {
      ts.bytes = r.bytes;
      ts.identity = {base_name(lr.file), lr.line, fmt::format("tensor {}: {}, pid {}", *r.tensor, format_bytes(r.bytes), pid_)};
    }
    if ((take && ts.held == Held::On) || (release && ts.held == Held::Off)) return void(++skipped_);
    if (release && ts.held == Held::Unknown)
      push(Step::Kind::Alloc, iters_.start(r.iteration), *r.tensor, ts,
           {base_name(lr.file), lr.line, "capuchin: on the device before its first decision (the job's allocation is not in the decision log)"});
    if (take) {
      ++(r.action == "recompute" ? n_.recomputes : r.action == "prefetch" ? n_.prefetches : n_.on_demand);
      push(Step::Kind::Alloc, r.t, *r.tensor, ts, {base_name(lr.file), lr.line, "capuchin: " + take_words(r.action)});
    } else {
      ++(r.action == "evict" ? n_.swap_outs : n_.drops);
      push(Step::Kind::Free, r.t, *r.tensor, ts, {base_name(lr.file), lr.line, "capuchin: " + release_words(r)});
    }
    ts.held = take ? Held::On : Held::Off;
    ts.last_iteration = r.iteration;
    ts.last_t = r.t;
    ts.last_line = lr.line;
    ts.last_file = base_name(lr.file);
  }

  void push(Step::Kind kind, double t_s, std::uint64_t id, const LogTensor& ts, Frame why) {
    Step s;
    s.kind = kind;
    s.t_s = t_s;
    s.key = id;
    s.bytes = ts.bytes;
    s.frames = {std::move(why), ts.identity};
    steps_.push_back(std::move(s));
  }

  void oom(const LoggedRecord& lr) {
    Step s;
    s.kind = Step::Kind::Oom;
    s.t_s = lr.r.t;
    s.bytes = lr.r.bytes;
    s.frames.push_back({base_name(lr.file), lr.line, "capuchin: out of memory" + (lr.r.note.empty() ? "" : ": " + lr.r.note)});
    steps_.push_back(std::move(s));
  }

  std::string files() const {
    std::vector<std::string> names;
    for (const auto* r : recs_)
      if (std::find(names.begin(), names.end(), r->file) == names.end()) names.push_back(r->file);
    return fmt::format("{}", fmt::join(names, ", "));
  }

  std::int64_t pid_;
  const std::vector<const LoggedRecord*>& recs_;
  Iterations iters_;
  std::map<std::uint64_t, LogTensor> tensors_;
  std::vector<Step> steps_;
  Counts n_;
  std::uint64_t skipped_ = 0;
};

}  // namespace

Expected<TraceDevice> device_from_trace(const trace::Trace& t, const std::string& file, const std::string& gpu,
                                        const std::string& budget) {
  auto run = simulate_memory(t, gpu, budget);
  if (!run) return Unexpected{run.error()};
  TraceFrames frames(t, file);
  Counts n;
  TraceDevice out;
  std::uint64_t live = 0;
  for (const Change& c : run->changes) {
    out.device.steps.push_back(change_step(t, c, frames, n));
    const Step& s = out.device.steps.back();
    live = s.kind == Step::Kind::Alloc ? live + s.bytes : live - s.bytes;
  }
  const bool managed = run->budget > 0;
  const std::string how = managed ? fmt::format("the capuchin policy at budget {} ({} of a natural peak of {})", format_bytes(run->budget),
                                                budget, format_bytes(run->result.natural_peak_bytes))
                                  : fmt::format("the trace's own allocations (natural peak {})", format_bytes(run->result.natural_peak_bytes));
  out.device.label = fmt::format("{}: simulated on GPU profile {}, {}", file, run->gpu, how);
  if (!run->result.feasible) {
    const double at = run->changes.empty() ? 0.0 : run->changes.back().t_s;
    out.device.steps.push_back(oom_step(t, *run, at, live, file));
    out.warning = fmt::format("the capuchin policy cannot run {} within {}: the snapshot ends at the 'oom' entry (trace line {}: {})",
                              frames.file(), format_bytes(run->budget), run->result.where.line, run->result.where.reason);
  }
  out.summary = fmt::format("{}: {} allocations, {} frees", frames.file(), n.allocs, n.frees);
  out.summary += managed ? fmt::format("; capuchin at {}: {} swap-outs, {} prefetches, {} swap-ins on demand, {} drops, {} recomputes",
                                       format_bytes(run->budget), n.swap_outs, n.prefetches, n.on_demand, n.drops, n.recomputes)
                         : std::string(" (no --budget: the trace's own)");
  return out;
}

LogDevices devices_from_log(const std::vector<LoggedRecord>& records) {
  std::vector<std::int64_t> pids;
  std::map<std::int64_t, std::vector<const LoggedRecord*>> by_pid;
  for (const auto& r : records) {
    auto& v = by_pid[r.r.pid];
    if (v.empty()) pids.push_back(r.r.pid);
    v.push_back(&r);
  }
  LogDevices out;
  for (std::int64_t pid : pids) {
    auto& recs = by_pid[pid];
    std::stable_sort(recs.begin(), recs.end(), [](const auto* a, const auto* b) { return a->r.t < b->r.t; });
    LogDevice d(pid, recs);
    out.devices.push_back(d.build());
    out.summaries.push_back(d.summary());
  }
  return out;
}

}  // namespace capuchin::cli::memviz
