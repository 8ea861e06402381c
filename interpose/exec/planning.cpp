// planning.cpp: the controller fed with the job's events, the planner thread, kernel timing
// (see planning.hpp).
#include "planning.hpp"

#include <algorithm>
#include <chrono>
#include <cinttypes>

#include "capuchin/segment_plan.hpp"
#include "capuchin/sim.hpp"
#include "capuchin/trace.hpp"
#include "config.hpp"
#include "daemon_sink.hpp"
#include "event_pool.hpp"

namespace capuchin::interpose::exec {

namespace {
constexpr int kRemotePlanTimeoutMs = 2000;  // then the job plans itself
constexpr std::size_t kTimingPairs = 4096;
constexpr std::uint64_t kRetimeEvery = 8;  // iterations
}  // namespace

Planning::~Planning() {
  delete inbox_.exchange(nullptr);
  delete outbox_.exchange(nullptr);
}

void Planning::start() {
  if (!opt_.enabled || thread_.joinable()) return;
  thread_ = std::thread([this] { run(); });
}

void Planning::stop() {
  if (!thread_.joinable()) return;
  stop_.store(true, std::memory_order_release);
  wake_.release();
  thread_.join();
}

std::uint32_t Planning::name_index(std::uint64_t key, std::string_view name) {
  auto [it, fresh] = name_of_.try_emplace(key, static_cast<std::uint32_t>(names_.size()));
  if (fresh) names_.emplace_back(name.empty() ? std::string_view("kernel") : name);
  return it->second;
}

policy::Step Planning::feed(const policy::Event& e, std::span<const std::uint64_t> ids, std::vector<policy::Command>& out,
                            std::uint64_t budget) {
  if (outbox_.load(std::memory_order_acquire) != nullptr) {
    std::unique_ptr<Answer> a(outbox_.exchange(nullptr, std::memory_order_acq_rel));
    if (a) controller_.offer(a->serial, std::move(a->plan));
  }
  const policy::Step st = controller_.on_event(e, ids, out);
  if (!pressure_seen_ && controller_.live_bytes() >= budget / 5 * 4) pressure_seen_ = true;
  if (!controller_.has_request()) [[likely]]
    return st;
  if (auto r = controller_.take_request()) {
    if (opt_.enabled) hand_over(std::move(*r), budget);
    else controller_.offer(r->serial, nullptr);
  }
  return st;
}

void Planning::configure(const Api* api, CUcontext ctx, PlanningOptions o) {
  api_ = api;
  opt_ = std::move(o);
  // The fixed cost per copy the planner's profile adds itself, left out of the measured rates;
  // no sample faster than twice the profile's link is believed.
  double max_rate = 0;
  if (auto g = sim::find_gpu_profile(opt_.simcuda ? "simcuda" : opt_.gpu)) {
    link_latency_s_ = g->link_latency_s;
    max_rate = 2 * g->link_bytes_per_s;
  }
  link_.configure(api, ctx, max_rate);
}

// Logged when first measured and when either way moved by a fifth since it was last logged.
void Planning::note_link(double out, double in) {
  auto moved = [](double now, double then) { return now > 0 && (then <= 0 || now > 1.2 * then || now < then / 1.2); };
  if (!moved(out, logged_out_) && !moved(in, logged_in_)) return;
  if (out > 0) logged_out_ = out;
  if (in > 0) logged_in_ = in;
  log(LogLevel::Info, "executor: the link as this job's moves measured it: %.2f GB/s to the host, %.2f GB/s to the device "
      "(%" PRIu64 " and %" PRIu64 " moves timed; 0: not yet); %s", out * 1e-9, in * 1e-9,
      link_.measured(true), link_.measured(false),
      opt_.measured_link ? "plans time their swaps with it where it is off the profile's by more than a tenth"
                         : "not used (CAPUCHIN_LINK=profile)");
}

// The request, completed with what only the executor knows, goes to the planner thread.
void Planning::hand_over(policy::PlanRequest r, std::uint64_t budget) {
  plan::SegmentJob& j = r.job;
  j.names = names_;
  j.budget = budget;
  j.simcuda = opt_.simcuda;
  j.allow_recompute = opt_.allow_recompute;
  j.keep_plan = opt_.keep_plan;
  j.gpu = opt_.gpu;
  j.dump_dir = opt_.dump_dir;
  link_.poll();
  note_link(link_.bytes_per_s(true, link_latency_s_), link_.bytes_per_s(false, link_latency_s_));
  // Within what a plan request may carry (proto::decode_plan_request refuses others), else none.
  auto sendable = [](double rate) { return rate >= plan::kMinLinkRate && rate <= plan::kMaxLinkRate ? rate : 0.0; };
  j.swap_out_bytes_per_s = sendable(link_rate(true));
  j.swap_in_bytes_per_s = sendable(link_rate(false));
  for (policy::Event& e : j.events) {
    if (e.op != static_cast<std::uint8_t>(trace::Op::Kernel)) continue;
    if (auto it = dur_ns_.find(e.sig); it != dur_ns_.end()) e.dur_ns = it->second;
  }
  // At most one request is outstanding (the controller waits for its answer), so nothing
  // the thread has not taken yet can be lost here.
  delete inbox_.exchange(new policy::PlanRequest(std::move(r)), std::memory_order_acq_rel);
  wake_.release();
}

void Planning::run() {
  for (;;) {
    wake_.acquire();
    if (stop_.load(std::memory_order_acquire)) return;
    std::unique_ptr<policy::PlanRequest> r(inbox_.exchange(nullptr, std::memory_order_acq_rel));
    if (!r) continue;
    const plan::SegmentJob& j = r->job;
    std::shared_ptr<const plan::SegmentPlan> p;
    // capuchind plans when attached (the session's view, its decision log and set-budget see
    // the plan); the job plans itself when it is not.
    if (auto rep = plan_remotely(j, std::chrono::milliseconds(kRemotePlanTimeoutMs))) {
      if (rep->ok) {
        log(LogLevel::Info, "executor: capuchind's %s", rep->plan.summary.c_str());
        auto q = std::make_shared<plan::SegmentPlan>(std::move(rep->plan));
        q->from_daemon = true;
        p = std::move(q);
      } else {
        log(LogLevel::Info, "executor: capuchind made no plan for iteration %" PRIu64 ": %s; planning here", j.segment,
            rep->why.c_str());
      }
    }
    if (p) {
      delete outbox_.exchange(new Answer{r->serial, std::move(p)}, std::memory_order_acq_rel);
      continue;
    }
    // Anytime: the planner's own plan at once (one planning), then the candidate the
    // simulator replays fastest (many plannings and replays: up to seconds on a large
    // iteration), which the controller adopts at the boundary after it arrives. Where the
    // first is all the job asked for (CAPUCHIN_PLAN=always), or the iteration fits the budget
    // as it is, it is the only answer.
    // The replay-chosen plan is posted as soon as it is chosen, and again once the replays
    // have refined it (swaps added or left out, in-triggers moved), if they kept any change: on simcuda, resnet18 at 0.5 of its peak,
    // the refined plan came three iterations after the chosen one, which those ran at 35.9 ms
    // against the planner's own plan's 65 (and the refined one at 34.9).
    const bool refine = !j.keep_plan;
    plan::SegmentJob first = j;
    first.quick = refine;
    const std::shared_ptr<const plan::SegmentPlan> made = answer(r->serial, first);
    if (!made || !refine || (made->decisions.empty() && made->natural_peak <= j.budget)) continue;
    if (stop_.load(std::memory_order_acquire)) return;
    plan::SegmentJob full = j;
    bool chosen_posted = false;
    full.on_chosen = [&](const plan::SegmentPlan& chosen) {
      post(r->serial, std::make_shared<const plan::SegmentPlan>(chosen), "chosen plan: ");
      chosen_posted = true;
    };
    if (auto refined = plan::plan_segment(full)) {
      // Not chosen yet (no candidate replayed: no plan), or changed by the refinement.
      if (!chosen_posted || refined->refined_moves > 0)
        post(r->serial, std::make_shared<const plan::SegmentPlan>(std::move(*refined)), chosen_posted ? "refined plan: " : "");
    } else {
      log(LogLevel::Info, "executor: no plan for iteration %" PRIu64 ": %s", j.segment, refined.error().c_str());
      post(r->serial, nullptr, nullptr);
    }
  }
}

void Planning::post(std::uint64_t serial, std::shared_ptr<const plan::SegmentPlan> p, const char* what) {
  if (p) log(LogLevel::Info, "executor: %s%s", what, p->summary.c_str());
  delete outbox_.exchange(new Answer{serial, std::move(p)}, std::memory_order_acq_rel);
}

// Plans `j` and posts the answer to request `serial` (a plan, or none), which it returns.
std::shared_ptr<const plan::SegmentPlan> Planning::answer(std::uint64_t serial, const plan::SegmentJob& j) {
  std::shared_ptr<const plan::SegmentPlan> p;
  if (auto made = plan::plan_segment(j)) {
    p = std::make_shared<const plan::SegmentPlan>(std::move(*made));
  } else {
    log(LogLevel::Info, "executor: no plan for iteration %" PRIu64 ": %s", j.segment, made.error().c_str());
  }
  post(serial, p, j.quick ? "first plan: " : "");
  return p;
}

int Planning::begin_timing(CUstream s, std::uint64_t sig) {
  ++launches_;
  if (!opt_.enabled || api_->event_elapsed == nullptr) return -1;
  // Kernel times serve the planner only: while the job has never held 80% of the budget there
  // is nothing to plan, and two event records per launch would be pure cost.
  if (!pressure_seen_) return -1;
  // Every launch is timed until a plan is followed (the plan to come needs every kernel's
  // time); after that, one iteration in kRetimeEvery keeps the times current, and the others
  // do not spend two event records per launch.
  if (controller_.following() && controller_.iteration() % kRetimeEvery != 0) return -1;
  if (free_pairs_.empty()) {
    if (pairs_.size() >= kTimingPairs) return -1;
    Pair p;
    if (!make_timing_pair(*api_, p.start, p.end)) return -1;
    pairs_.push_back(p);
    free_pairs_.push_back(static_cast<int>(pairs_.size() - 1));
  }
  const int k = free_pairs_.back();
  if (api_->event_record(pairs_[static_cast<std::size_t>(k)].start, s) != CUDA_SUCCESS) return -1;
  free_pairs_.pop_back();
  pairs_[static_cast<std::size_t>(k)].sig = sig;
  ++timed_;
  return k;
}

void Planning::end_timing(int pair, CUstream s) {
  if (pair < 0) return;
  if (api_->event_record(pairs_[static_cast<std::size_t>(pair)].end, s) != CUDA_SUCCESS) {
    free_pairs_.push_back(pair);  // not timed: the pair is free again
    return;
  }
  pending_.push_back(pair);
}

void Planning::arm_probe(std::uint64_t id, const plan::LateArrival& place, CUstream moved_on) {
  if (api_->event_elapsed == nullptr || armed_.count(id) != 0) return;
  if (free_probes_.empty()) {
    if (probes_.size() >= 1024) return;
    Probe p;
    if (!make_timing_pair(*api_, p.moved, p.ready)) return;
    probes_.push_back(p);
    free_probes_.push_back(static_cast<int>(probes_.size() - 1));
  }
  const int k = free_probes_.back();
  Probe& p = probes_[static_cast<std::size_t>(k)];
  if (api_->event_record(p.moved, moved_on) != CUDA_SUCCESS) return;  // not measured
  free_probes_.pop_back();
  p.id = id;
  p.place = place;
  armed_[id] = k;
  note_armed(id, true);
}

void Planning::note_armed(std::uint64_t id, bool armed) {
  const std::size_t bit = id % (kArmedWords * 64);
  std::uint16_t& n = armed_per_bit_[bit];
  n = armed ? n + 1 : n - 1;
  const std::uint64_t mask = std::uint64_t{1} << (bit & 63);
  if (n == 0) armed_bits_[bit >> 6] &= ~mask;
  else armed_bits_[bit >> 6] |= mask;
}

void Planning::stamp_probe(std::uint64_t id, CUstream launch_stream) {
  auto it = armed_.find(id);
  if (it == armed_.end()) return;
  const int k = it->second;
  armed_.erase(it);
  note_armed(id, false);
  if (api_->event_record(probes_[static_cast<std::size_t>(k)].ready, launch_stream) != CUDA_SUCCESS) {
    free_probes_.push_back(k);
    return;
  }
  stamped_.push_back(k);
}

void Planning::poll_probes(std::vector<std::pair<std::uint64_t, double>>& late) {
  std::size_t kept = 0;
  for (int k : stamped_) {
    Probe& p = probes_[static_cast<std::size_t>(k)];
    if (api_->event_query(p.moved) == CUDA_ERROR_NOT_READY || api_->event_query(p.ready) == CUDA_ERROR_NOT_READY) {
      stamped_[kept++] = k;
      continue;
    }
    float ms = 0;  // from the launch being ready to the data arriving: > 0 means it waited
    if (api_->event_elapsed(&ms, p.ready, p.moved) == CUDA_SUCCESS && ms > 1e-3f) {
      controller_.note_late(p.place, static_cast<double>(ms) * 1e-3);
      late.emplace_back(p.id, static_cast<double>(ms) * 1e-3);
    }
    free_probes_.push_back(k);
  }
  stamped_.resize(kept);
}

void Planning::drop_unstamped_probes() {
  for (const auto& [id, k] : armed_) free_probes_.push_back(k);
  armed_.clear();
  armed_bits_ = {};
  armed_per_bit_ = {};
}

void Planning::cancel_timing(int pair) {
  if (pair >= 0) free_pairs_.push_back(pair);
}

void Planning::poll_timings_slow(bool all) {
  for (std::size_t i = 0, n = pending_.size(); i < n; ++i) {
    const int k = pending_.front();
    Pair& p = pairs_[static_cast<std::size_t>(k)];
    const CUresult q = api_->event_query(p.end);
    if (q == CUDA_ERROR_NOT_READY && !all) return;  // launches complete roughly in order: the rest are not done either
    pending_.pop_front();
    if (q == CUDA_ERROR_NOT_READY) {
      pending_.push_back(k);
      continue;
    }
    float ms = 0;
    if (q == CUDA_SUCCESS && api_->event_elapsed(&ms, p.start, p.end) == CUDA_SUCCESS && ms > 0)
      dur_ns_[p.sig] = static_cast<std::uint64_t>(static_cast<double>(ms) * 1e6);
    free_pairs_.push_back(k);
  }
}

void Planning::warm_up() {
  plan::SegmentJob j;
  j.names = {"warm_up"};
  j.ids = {1};
  plan::SegmentEvent a;
  a.op = static_cast<std::uint8_t>(trace::Op::Alloc);
  a.id = 1;
  a.bytes = 4096;
  plan::SegmentEvent k;
  k.op = static_cast<std::uint8_t>(trace::Op::Kernel);
  k.nwrites = 1;
  plan::SegmentEvent f;
  f.op = static_cast<std::uint8_t>(trace::Op::Free);
  f.id = 1;
  j.events = {a, k, f};
  j.budget = 1u << 20;
  for (bool sim : {true, false}) {
    j.simcuda = sim;
    (void)plan::plan_segment(j);  // only its statics matter
  }
}

}  // namespace capuchin::interpose::exec
