// session.cpp: per-process ingestion, learning, planning and decision logging (see
// session.hpp). The window is a trace::Trace built exactly as the trace reader would build
// it (same tensor, access and name bookkeeping), so the learner and the planner from src/
// run on it unchanged.
#include "session.hpp"

#include <fmt/format.h>
#include <spdlog/sinks/rotating_file_sink.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <filesystem>
#include <unordered_map>

#include "capuchin/sim.hpp"

namespace capuchin::daemon {

using trace::AccessMode;
using trace::kNone;
using trace::Op;

// ---- IdMap -------------------------------------------------------------------------------

void IdMap::rehash(std::size_t cap) {
  std::vector<std::uint64_t> old_keys = std::move(keys_);
  std::vector<std::uint32_t> old_vals = std::move(vals_);
  keys_.assign(cap, 0);
  vals_.assign(cap, kNone);
  mask_ = cap - 1;
  size_ = 0;
  for (std::size_t i = 0; i < old_keys.size(); ++i)
    if (old_vals[i] != kNone) insert(old_keys[i], old_vals[i]);
}

std::uint32_t IdMap::find(std::uint64_t id) const {
  for (std::size_t i = hash(id) & mask_;; i = (i + 1) & mask_) {
    if (vals_[i] == kNone) return kNone;
    if (keys_[i] == id) return vals_[i];
  }
}

void IdMap::insert(std::uint64_t id, std::uint32_t value) {
  if ((size_ + 1) * 2 > keys_.size()) rehash(keys_.size() * 2);
  std::size_t i = hash(id) & mask_;
  for (; vals_[i] != kNone; i = (i + 1) & mask_)
    if (keys_[i] == id) {
      vals_[i] = value;
      return;
    }
  keys_[i] = id;
  vals_[i] = value;
  ++size_;
}

void IdMap::erase(std::uint64_t id) {
  std::size_t i = hash(id) & mask_;
  for (;; i = (i + 1) & mask_) {
    if (vals_[i] == kNone) return;
    if (keys_[i] == id) break;
  }
  // Backward-shift deletion: no tombstones, lookups stay short.
  vals_[i] = kNone;
  --size_;
  for (std::size_t j = (i + 1) & mask_; vals_[j] != kNone; j = (j + 1) & mask_) {
    const std::size_t home = hash(keys_[j]) & mask_;
    if (((j - home) & mask_) >= ((j - i) & mask_)) {
      keys_[i] = keys_[j];
      vals_[i] = vals_[j];
      vals_[j] = kNone;
      i = j;
    }
  }
}

// ---- Session -----------------------------------------------------------------------------

Session::Session(std::uint64_t id, proto::HelloInfo hello, const DaemonOptions& opt)
    : id_(id),
      hello_(std::move(hello)),
      opt_(opt),
      start_(std::chrono::steady_clock::now()),
      started_wall_(std::chrono::system_clock::now()) {
  trace_.name = fmt::format("session-{}", id_);
  trace_.header.source = "capuchind";
  trace_.header.device = fmt::format("cuda:{}", hello_.device);
  // CAPUCHIN_BUDGET as the job gave it (budget.hpp): resolved against what is known when asked.
  if (hello_.budget_bytes > 0) budget_ = Budget{Budget::Kind::Bytes, hello_.budget_bytes, 0};
  else if (hello_.budget_of_device > 0) budget_ = Budget{Budget::Kind::OfDevice, 0, hello_.budget_of_device};
  else if (hello_.budget_of_peak > 0) budget_ = Budget{Budget::Kind::OfPeak, 0, hello_.budget_of_peak};
  has_budget_ = hello_.budget_bytes > 0 || hello_.budget_of_device > 0 || hello_.budget_of_peak > 0;
  executor_ = has_budget_;  // CAPUCHIN_BUDGET starts the executor in the job
  job_budget_ = has_budget_ ? budget_.resolve(hello_.device_memory_bytes, 0) : 0;
  if (!opt_.log_dir.empty()) {
    std::error_code ec;
    std::filesystem::create_directories(opt_.log_dir, ec);
    const std::string path = fmt::format("{}/session-{}-pid{}.jsonl", opt_.log_dir, id_, hello_.pid);
    try {  // spdlog reports failures by exception; they stop at this boundary
      auto sink = std::make_shared<spdlog::sinks::rotating_file_sink_mt>(path, opt_.log_max_bytes, opt_.log_files);
      log_ = std::make_shared<spdlog::logger>(fmt::format("session-{}", id_), std::move(sink));
      log_->set_pattern("%v");
      log_->flush_on(spdlog::level::info);
      log_path_ = path;
    } catch (const std::exception& e) {
      spdlog::warn("session {}: cannot open the decision log {}: {}", id_, path, e.what());
    }
  }
  DecisionRecord r;
  r.action = "attach";
  r.bytes = resolved_budget();
  r.reason = has_budget_ ? "budget" : "passive";
  r.note = fmt::format("cmdline: {}; device {} ({}); backend {}", hello_.cmdline, hello_.device,
                       hello_.device_memory_bytes ? format_bytes(hello_.device_memory_bytes) : std::string("memory unknown"),
                       hello_.backend == proto::Backend::Uvm ? "uvm" : "pinned");
  record(std::move(r));
}

Session::~Session() {
  if (!closed_) close("daemon shutting down");
}

// A closed session's clock stops at its close: uptime_s is then how long it lasted.
double Session::now_s() const {
  return std::chrono::duration<double>((closed_ ? end_ : std::chrono::steady_clock::now()) - start_).count();
}
double Session::uptime_s() const { return now_s(); }

void Session::record(DecisionRecord r, bool own_clock) {
  if (!own_clock) {
    r.t = now_s();
    if (r.iteration == 0) r.iteration = iteration_;
  }
  r.pid = hello_.pid;
  if (log_) log_->info(to_json_line(r));
  decisions_.push_back(std::move(r));
  ++decisions_total_;
  while (decisions_.size() > 4096) decisions_.pop_front();
}

void Session::close(std::string_view why) {
  if (closed_) return;
  closed_tensors_ = tensors(kClosedTensorRows);  // still queryable after the window is freed
  DecisionRecord r;  // stamped before the clock stops
  r.action = "detach";
  r.reason = std::string(why);
  r.note = fmt::format("{} events, {} iterations learned, {} plans", events_total_, iteration_, plan_seq_);
  record(std::move(r));
  end_ = std::chrono::steady_clock::now();
  ended_wall_ = std::chrono::system_clock::now();
  closed_ = true;
  close_reason_ = std::string(why);
  if (log_) log_->flush();
  // The window is no longer needed: keep the summary, free the memory.
  matcher_.reset();
  pattern_.reset();
  trace_ = trace::Trace{};
  spare_ = trace::Trace{};
  last_access_event_ = {};
  ids_.clear();
}

std::uint64_t Session::known_natural_peak() const {
  // The executor's own measure first: what the job really held before anything moved.
  if (exec_.natural_peak_bytes) return exec_.natural_peak_bytes;
  return natural_peak_ ? natural_peak_ : segment_natural_peak_;
}

std::uint64_t Session::resolved_budget() const {
  if (!has_budget_) return 0;
  return budget_.resolve(hello_.device_memory_bytes, known_natural_peak());
}

proto::ProtoExpected<void> Session::on_names(const proto::NamesView& names) {
  if (names.first != name_map_.size())
    return Unexpected{proto::ProtoError{proto::ProtoErrc::BadPayload,
                                        fmt::format("names start at {} but {} are known", names.first, name_map_.size())}};
  if (name_map_.size() + names.names.size() > (1u << 20))
    return Unexpected{proto::ProtoError{proto::ProtoErrc::TooLarge, "more than 1M kernel names"}};
  for (auto n : names.names) {
    name_map_.push_back(static_cast<std::uint32_t>(trace_.names.size()));
    trace_.names.emplace_back(n);
  }
  return {};
}

void Session::access(std::uint32_t ev, std::uint64_t id, AccessMode mode) {
  const std::uint32_t t = ids_.find(id);
  if (t == kNone) {
    ++unknown_ids_;
    return;
  }
  trace_.accesses.push_back({ev, t, mode});
  trace::Tensor& ts = trace_.tensors[t];
  if (ts.first_access == kNone) ts.first_access = ev;
  ts.last_access = ev;
  if (last_access_event_[t] != ev) {
    last_access_event_[t] = ev;
    ++ts.access_count;
  }
}

void Session::ingest(const proto::WireEvent& w, const std::uint64_t* ids) {
  const auto op = static_cast<Op>(w.op);
  if (op == Op::Iter) return;  // markers are the program's own claim, not learned from
  auto ei = static_cast<std::uint32_t>(trace_.events.size());
  if (op == Op::Alloc && ids_.find(w.a) != kNone) {
    // An id allocated twice: the interposer lost its free. Close the old tensor first.
    ++reused_ids_;
    proto::WireEvent f;
    f.op = static_cast<std::uint8_t>(Op::Free);
    f.a = w.a;
    ingest(f, nullptr);
    ei = static_cast<std::uint32_t>(trace_.events.size());
  }
  trace::Event& e = trace_.events.emplace_back();
  e.op = op;
  e.flags = w.flags & ~(trace::kHasSrc | trace::kHasDst);
  e.stream = w.stream;
  e.bytes = w.bytes;
  const auto nacc = static_cast<std::uint32_t>(trace_.accesses.size());
  e.access_begin = e.reads_end = e.writes_end = e.access_end = nacc;
  switch (op) {
    case Op::Alloc: {
      trace::Tensor& ts = trace_.tensors.emplace_back();
      ts.id = w.a;
      ts.bytes = w.bytes;
      ts.role = static_cast<trace::Role>(w.sub);
      ts.alloc_event = ei;
      e.tensor = static_cast<std::uint32_t>(trace_.tensors.size() - 1);
      last_access_event_.push_back(kNone);
      ids_.insert(w.a, e.tensor);
      live_bytes_ += w.bytes;
      peak_bytes_ = std::max(peak_bytes_, live_bytes_);
      iteration_peak_now_ = std::max(iteration_peak_now_, live_bytes_);
      break;
    }
    case Op::Free: {
      const std::uint32_t t = ids_.find(w.a);
      if (t == kNone) {  // a free of an id never seen: not an event of this window
        ++unknown_ids_;
        trace_.events.pop_back();
        return;
      }
      e.tensor = t;
      trace_.tensors[t].free_event = ei;
      ids_.erase(w.a);
      live_bytes_ -= trace_.tensors[t].bytes;
      break;
    }
    case Op::Kernel: {
      e.name = w.name < name_map_.size() ? name_map_[w.name] : kNone;
      if (e.name == kNone) {  // checked by on_events; defensive
        trace_.events.pop_back();
        return;
      }
      const std::uint32_t nr = proto::count_reads(w.a), nw = proto::count_writes(w.a), nt = proto::count_touch(w.a);
      for (std::uint32_t i = 0; i < nr; ++i) access(ei, ids[i], AccessMode::Read);
      trace_.events[ei].reads_end = static_cast<std::uint32_t>(trace_.accesses.size());
      for (std::uint32_t i = 0; i < nw; ++i) access(ei, ids[nr + i], AccessMode::Write);
      trace_.events[ei].writes_end = static_cast<std::uint32_t>(trace_.accesses.size());
      for (std::uint32_t i = 0; i < nt; ++i) access(ei, ids[nr + nw + i], AccessMode::Touch);
      break;
    }
    case Op::Copy: {
      e.dir = static_cast<trace::CopyDir>(w.sub);
      std::size_t k = 0;
      if (proto::count_reads(w.a)) {
        const std::uint32_t t = ids_.find(ids[k++]);
        if (t != kNone) {
          trace_.events[ei].tensor = t;
          trace_.events[ei].flags |= trace::kHasSrc;
          access(ei, trace_.tensors[t].id, AccessMode::Read);
        } else {
          ++unknown_ids_;
        }
      }
      trace_.events[ei].reads_end = static_cast<std::uint32_t>(trace_.accesses.size());
      if (proto::count_writes(w.a)) {
        const std::uint32_t t = ids_.find(ids[k++]);
        if (t != kNone) {
          trace_.events[ei].tensor2 = t;
          trace_.events[ei].flags |= trace::kHasDst;
          access(ei, trace_.tensors[t].id, AccessMode::Write);
        } else {
          ++unknown_ids_;
        }
      }
      trace_.events[ei].writes_end = static_cast<std::uint32_t>(trace_.accesses.size());
      break;
    }
    case Op::Iter: break;  // dropped before: the learner finds iterations itself
    case Op::Sync: break;
  }
  trace_.events[ei].access_end = static_cast<std::uint32_t>(trace_.accesses.size());
  ++events_total_;
  if (following_) after_event(ei);
}

// Follows the learned pattern event by event; a completed iteration or a divergence is the
// only place the learner does more than compare a signature.
void Session::after_event(std::uint32_t ev) {
  if (trace_.events[ev].op == Op::Iter) return;
  if (!matcher_->feed(trace_, ev)) {
    following_ = false;
    ++relearns_;
    last_try_events_ = static_cast<std::uint32_t>(trace_.events.size());
    DecisionRecord r;
    r.action = "relearn";
    r.reason = "pattern-changed";
    r.note = fmt::format("event {} differs from position {} of the learned iteration", ev, matcher_->position());
    record(std::move(r));
    matcher_.reset();
    return;
  }
  if (matcher_->complete()) {
    ++iteration_;
    iteration_peaks_.push_back(iteration_peak_now_);
    if (iteration_peaks_.size() > 256) iteration_peaks_.pop_front();
    iteration_peak_now_ = live_bytes_;
    last_complete_begin_ = current_begin_;
    current_begin_ = ev + 1;
    matcher_ = std::make_unique<learn::PatternMatcher>(*pattern_);
  }
}

proto::ProtoExpected<void> Session::on_events(const proto::EventBatch& batch) {
  if (closed_) return {};
  // Names first: a kernel naming an index not sent yet is a protocol error.
  for (const auto& w : batch.events)
    if (w.op == static_cast<std::uint8_t>(Op::Kernel) && w.name >= name_map_.size())
      return Unexpected{proto::ProtoError{proto::ProtoErrc::BadPayload,
                                          fmt::format("kernel name index {} was never sent", w.name)}};
  const std::uint64_t* ids = batch.ids.data();
  for (const auto& w : batch.events) {
    ingest(w, ids);
    ids += proto::event_ids(w);
  }
  if (!following_) maybe_learn();
  if (trace_.events.size() > opt_.max_session_events) compact();
  return {};
}

void Session::maybe_learn() {
  const auto n = static_cast<std::uint32_t>(trace_.events.size());
  // Geometric spacing keeps the total detection work linear in the events seen.
  if (n < last_try_events_ + std::max<std::uint32_t>(opt_.learn_min_events, last_try_events_ / 4)) return;
  last_try_events_ = n;
  trace_.setup_end = n;  // no `iter` markers in the window: all of it is "set-up" to the model
  const learn::IterationSplit split = learn::detect_iterations(trace_);
  if (!split.found || split.iterations.size() < 3) return;  // need two complete ones and the current
  const trace::Iteration& pat = split.iterations[split.iterations.size() - 2];
  period_kernels_ = split.period_kernels;
  const std::uint64_t before = iteration_;
  iteration_ = std::max<std::uint64_t>(iteration_, split.iterations.size() - 1);
  start_following(pat, split.iterations.back().begin);
  if (!following_) {
    iteration_ = before;
    return;
  }
  DecisionRecord r;
  r.action = "relearn";
  r.reason = relearns_ ? "pattern-changed" : "learned";
  r.note = fmt::format("iteration of {} events ({} kernels), {} local tensors", pattern_->events.size(), period_kernels_,
                       pattern_->local_tensors.size());
  record(std::move(r));
  make_plan_now(relearns_ ? "relearned" : "learned");
}

void Session::start_following(const trace::Iteration& pat, std::uint32_t current_begin) {
  pattern_ = std::make_unique<learn::Pattern>(learn::make_pattern(trace_, pat));
  matcher_ = std::make_unique<learn::PatternMatcher>(*pattern_);
  current_begin_ = current_begin;
  last_complete_begin_ = pat.begin;
  following_ = true;
  // Natural peak of the learned iteration (with what was live when it began).
  std::uint64_t live = 0;
  for (std::uint32_t i = 0; i < pat.begin; ++i) {
    const auto& e = trace_.events[i];
    if (e.op == Op::Alloc) live += trace_.tensors[e.tensor].bytes;
    else if (e.op == Op::Free) live -= trace_.tensors[e.tensor].bytes;
  }
  std::uint64_t peak = live;
  for (std::uint32_t i = pat.begin; i < pat.end; ++i) {
    const auto& e = trace_.events[i];
    if (e.op == Op::Alloc) live += trace_.tensors[e.tensor].bytes;
    else if (e.op == Op::Free) live -= trace_.tensors[e.tensor].bytes;
    peak = std::max(peak, live);
  }
  natural_peak_ = peak;
  // Catch up with the iteration in progress.
  iteration_peak_now_ = 0;
  for (std::uint32_t ev = current_begin; ev < trace_.events.size() && following_; ++ev) after_event(ev);
}

// The advisory plan for the learned iteration (a job without an executor, or before its
// first segment): planned on a copy of the window, on a worker when the connection gives one
// (run_planning), then installed on the io thread.
void Session::make_plan_now(std::string_view why) {
  if (executor_ && segment_plans_ > 0) return;  // the job's executor asks for its plans itself
  const std::uint64_t budget = resolved_budget();
  if (!pattern_ || budget == 0) {
    plan_active_ = false;
    return;
  }
  auto window = std::make_shared<trace::Trace>(trace_);
  window->setup_end = static_cast<std::uint32_t>(window->events.size());
  auto pattern = std::make_shared<const learn::Pattern>(*pattern_);
  const std::uint64_t iteration = iteration_, sid = id_;
  const std::string gpu_name = opt_.gpu, reason(why);
  PlanTask task = [this, window, pattern, budget, iteration, sid, gpu_name, reason]() -> std::function<void()> {
    // On the worker: touches nothing of the session but what was copied.
    auto gpu = sim::find_gpu_profile(gpu_name);
    if (!gpu) return {};
    auto prep = sim::prepare(*window, *gpu);
    if (!prep) {
      spdlog::warn("session {}: cannot prepare the window for planning: {}", sid, prep.error().message);
      return {};
    }
    plan::PlanOptions o;
    o.budget_bytes = budget;
    if (pattern->begin > 0) o.baseline_bytes = prep->liveness.live_after[pattern->begin - 1];
    const plan::Plan p = plan::make_plan(*prep, *pattern, o);
    auto a = std::make_shared<AdvisoryPlan>();
    proto::PlanMessage& m = a->msg;
    m.pattern_events = static_cast<std::uint32_t>(pattern->events.size());
    m.iteration = iteration;
    m.budget_bytes = budget;
    m.planned_peak_bytes = p.planned_peak_bytes;
    m.fits = p.fits;
    for (const auto& d : p.decisions) {
      proto::WireDecision w;
      w.at = d.at;
      w.act = static_cast<std::uint8_t>(d.act);
      w.reason = static_cast<std::uint8_t>(d.reason);
      w.tensor_local = d.tensor.local;
      w.tensor = d.tensor.local ? d.tensor.index : window->tensors[d.tensor.index].id;
      w.access = d.access;
      w.bytes = d.bytes;
      m.decisions.push_back(w);
    }
    m.json = plan::plan_to_json(p, *pattern, *window);
    a->swaps = p.swaps;
    a->recomputes = p.recomputes;
    a->natural_peak = p.natural_peak_bytes;
    a->expected_s = p.expected_overhead_s;
    a->why = reason;
    return [this, a] { install_advisory(std::move(*a)); };
  };
  if (run_planning) {
    run_planning(std::move(task));
  } else if (auto done = task()) {
    done();
  }
}

void Session::install_advisory(AdvisoryPlan a) {
  if (closed_ || (executor_ && segment_plans_ > 0)) return;  // overtaken while it was being made
  proto::PlanMessage& m = a.msg;
  m.plan_seq = ++plan_seq_;
  plan_json_ = nlohmann::ordered_json::parse(m.json, nullptr, false);
  plan_active_ = !m.decisions.empty();
  plan_summary_ = fmt::format("plan {}: {} swaps, {} recomputes, natural peak {}, planned peak {}, budget {}{}", m.plan_seq,
                              a.swaps, a.recomputes, format_bytes(a.natural_peak), format_bytes(m.planned_peak_bytes),
                              format_bytes(m.budget_bytes), m.fits ? "" : " (does not fit)");
  DecisionRecord r;
  r.action = "plan";
  r.bytes = m.budget_bytes;
  r.reason = a.why;
  r.expected_s = a.expected_s;
  r.note = plan_summary_;
  record(std::move(r));
  if (!m.fits) {
    DecisionRecord f;
    f.action = "fallback";
    f.bytes = m.planned_peak_bytes;
    f.reason = "plan-does-not-fit";
    f.note = fmt::format("planned peak {} stays over the budget {}", format_bytes(m.planned_peak_bytes),
                         format_bytes(m.budget_bytes));
    record(std::move(f));
  }
  pending_plan_ = std::move(m);
  if (on_plan_ready) on_plan_ready();
}

std::optional<proto::PlanMessage> Session::take_plan() {
  auto p = std::move(pending_plan_);
  pending_plan_.reset();
  return p;
}

namespace {
// The most bytes one launch of the segment touches at once: the least budget the job can run
// under (tensor sizes from the carried set and the segment's allocations).
std::uint64_t largest_launch_bytes(const plan::SegmentJob& job) {
  std::unordered_map<std::uint64_t, std::uint64_t> size;
  for (const auto& [id, bytes] : job.carried) size[id] = bytes;
  std::uint64_t most = 0;
  std::vector<std::uint64_t> seen;
  for (const plan::SegmentEvent& ev : job.events) {
    if (ev.op == static_cast<std::uint8_t>(trace::Op::Alloc)) size[ev.id] = ev.bytes;
    if (ev.op != static_cast<std::uint8_t>(trace::Op::Kernel)) continue;
    const std::size_t n = ev.nreads + ev.nwrites;
    if (ev.ids_off > job.ids.size() || n > job.ids.size() - ev.ids_off) continue;
    seen.assign(job.ids.begin() + ev.ids_off, job.ids.begin() + ev.ids_off + n);
    std::sort(seen.begin(), seen.end());
    seen.erase(std::unique(seen.begin(), seen.end()), seen.end());
    std::uint64_t total = 0;
    for (std::uint64_t id : seen)
      if (auto it = size.find(id); it != size.end()) total += it->second;
    most = std::max(most, total);
  }
  return most;
}
}  // namespace

Status Session::set_budget(const Budget& b, std::string_view as_text, std::string* code) {
  std::uint64_t for_job = 0;
  if (executor_) {
    for_job = b.resolve(hello_.device_memory_bytes, known_natural_peak());
    if (for_job == 0) {
      *code = "not-ready";
      return make_error(b.needs_peak()
                            ? fmt::format("{} ({}): no iteration learned yet; give a size (e.g. 2GiB)", as_text, b.describe())
                            : fmt::format("{} ({}): the job did not say how much memory its device has; give a size",
                                          as_text, b.describe()));
    }
    if (for_job < job_minimum_) {
      *code = "below-minimum";
      return make_error(fmt::format("{} ({}) is below what the job needs at once: one of its launches touches {} ({} "
                                    "bytes); give at least that",
                                    as_text, format_bytes(for_job), format_bytes(job_minimum_), job_minimum_));
    }
  }
  budget_ = b;
  has_budget_ = true;
  DecisionRecord r;
  r.action = "set-budget";
  r.bytes = executor_ ? for_job : resolved_budget();
  r.reason = "query";
  r.note = executor_ ? fmt::format("budget set to {} ({}: {}); sent to the job's executor", as_text, b.describe(),
                                    format_bytes(for_job))
                     : fmt::format("budget set to {} ({})", as_text, b.describe());
  record(std::move(r));
  if (executor_) {
    budget_for_job_ = for_job;
    job_budget_ = for_job;
    if (on_budget_ready) on_budget_ready();
  }
  if (following_) make_plan_now("budget-changed");  // the advisory plan (none once the job plans its segments here)
  return {};
}

std::uint64_t Session::take_budget_for_job() { return std::exchange(budget_for_job_, 0); }

void Session::prepare_segment_job(plan::SegmentJob& job) {
  // The job applies a set-budget before it sends its next segment, so job.budget is the
  // budget it runs with (one sent meanwhile is planned for at the segment after).
  executor_ = true;
  job_budget_ = job.budget;
  job_minimum_ = std::max(job_minimum_, largest_launch_bytes(job));
  job.dump_dir.clear();  // the job's own directory is not the daemon's to write
  job.want_json = true;
}

proto::PlanReply Session::segment_planned(const plan::SegmentJob& job, Expected<plan::SegmentPlan, std::string> made) {
  proto::PlanReply rep;
  rep.segment = job.segment;
  if (!made) {
    rep.why = made.error();
    DecisionRecord r;
    r.action = "plan";
    r.reason = "no-plan";
    r.note = fmt::format("iteration {} of the job: {}", job.segment, made.error());
    record(std::move(r));
    return rep;
  }
  rep.ok = true;
  ++segment_plans_;
  segment_natural_peak_ = made->natural_peak;
  plan_json_ = nlohmann::ordered_json::parse(made->json, nullptr, false);
  made->json.clear();  // not sent back: the job has no use for it
  plan_active_ = !made->decisions.empty();
  ++plan_seq_;
  plan_summary_ = fmt::format("plan {} (the job's iteration {}): {} swaps, {} recomputes, natural peak {}, planned peak {}, "
                              "budget {}{}",
                              plan_seq_, job.segment, made->swaps, made->recomputes, format_bytes(made->natural_peak),
                              format_bytes(made->planned_peak), format_bytes(made->budget),
                              made->fits ? "" : " (does not fit)");
  DecisionRecord r;
  r.action = "plan";
  r.bytes = made->budget;
  r.reason = "executor-segment";
  r.expected_s = made->expected_overhead_s;
  r.note = plan_summary_;
  record(std::move(r));
  rep.plan = std::move(*made);
  return rep;
}

void Session::on_exec_stats(const proto::ExecStats& s) {
  exec_ = s;
  exec_seen_ = true;
  executor_ = true;
}

proto::ProtoExpected<void> Session::on_decisions(std::string_view lines) {
  std::size_t pos = 0;
  while (pos < lines.size()) {
    std::size_t nl = lines.find('\n', pos);
    if (nl == std::string_view::npos) nl = lines.size();
    const std::string_view line = lines.substr(pos, nl - pos);
    pos = nl + 1;
    if (line.empty()) continue;
    auto d = parse_decision_line(line);
    if (!d)
      return Unexpected{proto::ProtoError{proto::ProtoErrc::BadPayload,
                                          "decision record: " + d.error().message + ": '" + std::string(line.substr(0, 80)) + "'"}};
    record(std::move(*d), /*own_clock=*/true);  // the executor's own clock and numbering win, in the log too
  }
  return {};
}

// Drops old events: keeps the learned iteration and the one in progress when following,
// else the newer half. Tensors allocated before the cut and alive after it are re-created
// by allocations at the front, so the window stays a valid trace for the learner.
void Session::compact() {
  const auto n = static_cast<std::uint32_t>(trace_.events.size());
  std::uint32_t cut = n - opt_.max_session_events / 2;
  // Following: keep the last iteration that matched (it becomes the pattern: it is the
  // pattern's equal) and the one in progress.
  const bool keep_pattern = following_ && last_complete_begin_ < current_begin_ &&
                            n - last_complete_begin_ <= opt_.max_session_events * 3 / 4;
  if (keep_pattern) cut = last_complete_begin_;
  if (cut == 0) return;

  trace::Trace nt = std::move(spare_);
  nt.events.clear();
  nt.tensors.clear();
  nt.accesses.clear();
  nt.iterations.clear();
  nt.name = trace_.name;
  nt.header = trace_.header;
  nt.names = trace_.names;
  std::vector<std::uint32_t> remap(trace_.tensors.size(), kNone);
  std::vector<std::uint32_t> last(0);
  auto add_alloc = [&](std::uint32_t old_t, std::uint32_t old_ev_flags, std::uint32_t stream) {
    const auto ei = static_cast<std::uint32_t>(nt.events.size());
    trace::Event& e = nt.events.emplace_back();
    e.op = Op::Alloc;
    e.flags = old_ev_flags;
    e.stream = stream;
    e.bytes = trace_.tensors[old_t].bytes;
    e.access_begin = e.reads_end = e.writes_end = e.access_end = static_cast<std::uint32_t>(nt.accesses.size());
    trace::Tensor ts;
    ts.id = trace_.tensors[old_t].id;
    ts.bytes = trace_.tensors[old_t].bytes;
    ts.role = trace_.tensors[old_t].role;
    ts.alloc_event = ei;
    e.tensor = static_cast<std::uint32_t>(nt.tensors.size());
    remap[old_t] = e.tensor;
    nt.tensors.push_back(ts);
    last.push_back(kNone);
  };
  for (std::uint32_t t = 0; t < trace_.tensors.size(); ++t) {
    const auto& ts = trace_.tensors[t];
    if (ts.alloc_event < cut && (ts.free_event == kNone || ts.free_event >= cut)) add_alloc(t, 0, 0);
  }
  const std::uint32_t shift = static_cast<std::uint32_t>(nt.events.size());  // new index = old - cut + shift
  for (std::uint32_t i = cut; i < n; ++i) {
    const trace::Event& oe = trace_.events[i];
    if (oe.op == Op::Alloc) {
      add_alloc(oe.tensor, oe.flags, oe.stream);
      continue;
    }
    const auto ei = static_cast<std::uint32_t>(nt.events.size());
    trace::Event e = oe;
    if (e.tensor != kNone) e.tensor = remap[e.tensor];
    if (e.tensor2 != kNone) e.tensor2 = remap[e.tensor2];
    const auto base = static_cast<std::uint32_t>(nt.accesses.size());
    e.access_begin = base;
    e.reads_end = base + (oe.reads_end - oe.access_begin);
    e.writes_end = base + (oe.writes_end - oe.access_begin);
    e.access_end = base + (oe.access_end - oe.access_begin);
    for (std::uint32_t a = oe.access_begin; a < oe.access_end; ++a) {
      const std::uint32_t t = remap[trace_.accesses[a].tensor];
      nt.accesses.push_back({ei, t, trace_.accesses[a].mode});
      auto& ts = nt.tensors[t];
      if (ts.first_access == kNone) ts.first_access = ei;
      ts.last_access = ei;
      if (last[t] != ei) last[t] = ei, ++ts.access_count;
    }
    if (e.op == Op::Free) nt.tensors[e.tensor].free_event = ei;
    nt.events.push_back(e);
  }
  nt.setup_end = static_cast<std::uint32_t>(nt.events.size());
  // Rebuild the id map for the live tensors.
  ids_.clear();
  for (std::uint32_t t = 0; t < nt.tensors.size(); ++t)
    if (nt.tensors[t].free_event == kNone) ids_.insert(nt.tensors[t].id, t);
  const std::uint32_t old_pattern_begin = last_complete_begin_, old_pattern_end = current_begin_;
  const std::uint32_t old_current = current_begin_;
  spare_ = std::move(trace_);
  trace_ = std::move(nt);
  last_access_event_ = std::move(last);
  ++compactions_;
  last_try_events_ = static_cast<std::uint32_t>(trace_.events.size());
  if (!following_) return;
  // Re-make the pattern on the new indices, or search again when it was cut away.
  const auto to_new = [&](std::uint32_t old) { return old - cut + shift; };
  if (keep_pattern) {
    matcher_.reset();
    start_following(trace::Iteration{0, to_new(old_pattern_begin), to_new(old_pattern_end)}, to_new(old_current));
  } else {
    following_ = false;
    matcher_.reset();
    pattern_.reset();
  }
}

}  // namespace capuchin::daemon
