// planning.hpp: the executor's side of the capuchin policy. The job's events go to the
// policy controller (include/capuchin/controller.hpp, the code the simulator's `capuchin`
// policy runs); its plan requests go to a planner thread, which asks capuchind when the job
// is attached (the same plan::plan_segment, out of process, so the session view, decision log
// and set-budget see the plan the job applies) and plans here when it is not or the daemon
// does not answer; answers are offered back to the controller at the next event. Kernel
// durations are measured with event pairs and kept per launch signature for the planner: every
// launch until a plan is followed, then one iteration in eight.
//
// Contract: feed() and the timing calls run under the executor's lock and never wait: the
// hand-over with the planner thread is one atomic exchange each way and a semaphore release.
// The planner thread touches no CUDA and no executor state. A request that cannot be planned
// is answered with no plan (the controller stays passive for that iteration shape).
#pragma once

#include <cuda.h>

#include <array>
#include <atomic>
#include <deque>
#include <memory>
#include <semaphore>
#include <span>
#include <string>
#include <string_view>
#include <thread>
#include <unordered_map>
#include <vector>

#include "api.hpp"
#include "capuchin/controller.hpp"
#include "link_meter.hpp"

namespace capuchin::interpose::exec {

struct PlanningOptions {
  bool enabled = true;          // CAPUCHIN_PLAN (0: passive only)
  bool simcuda = false;         // plan on simcuda's cost constants (the figures are simulated)
  bool allow_recompute = false;
  bool keep_plan = false;       // CAPUCHIN_PLAN=always: never the pressure rules alone instead of a plan
  std::string gpu = "h100";     // CAPUCHIN_GPU: the profile plans model (not on simcuda)
  std::string dump_dir;         // CAPUCHIN_PLAN_DUMP: iterations and plans written there
  bool measured_link = true;    // CAPUCHIN_LINK (profile: swaps timed at the profile's rate, not the measured one)
};

class Planning {
 public:
  Planning() = default;
  Planning(const Planning&) = delete;
  Planning& operator=(const Planning&) = delete;
  ~Planning();

  void configure(const Api* api, CUcontext ctx, PlanningOptions o);  // ctx: the executor's
  // The link's speed as this job's moves measured it (the move code times its copies with it);
  // plan requests carry its rates. latency_s: the fixed cost per copy of the planner's profile.
  LinkMeter& link() { return link_; }
  double link_latency_s() const { return link_latency_s_; }
  // The rate each way swaps are timed with: the measured one (the copies' fixed cost left out),
  // 0 until measured or where CAPUCHIN_LINK=profile.
  double link_rate(bool to_host) const { return opt_.measured_link ? link_.bytes_per_s(to_host, link_latency_s_) : 0; }
  // Plans a tiny iteration once (see executor.hpp, warm_up_planning).
  static void warm_up();
  void start();  // the planner thread (when planning is enabled)
  void stop();   // joins it (not after a fork: the thread does not exist there)

  // One event of the job: offers an answer that arrived, feeds the controller, hands a new
  // request to the planner thread (for `budget`). The commands to issue now go to `out`.
  policy::Step feed(const policy::Event& e, std::span<const std::uint64_t> ids, std::vector<policy::Command>& out,
                    std::uint64_t budget);
  // A name index for kernel events (the planner's trace names kernels).
  std::uint32_t name_index(std::uint64_t key, std::string_view name);
  void invalidate() { controller_.invalidate_plan(); }
  // Events are fed again after a standby (standby.hpp): learning starts over with `live`.
  void resume(std::span<const std::pair<std::uint64_t, std::uint64_t>> live) { controller_.resume(live); }
  // Plans from the next request on may (not) recompute (RecomputeTrial's decision).
  void set_allow_recompute(bool allow) { opt_.allow_recompute = allow; }
  bool allow_recompute() const { return opt_.allow_recompute; }
  // The job has held 80% of the budget: its budget binds (never reset).
  bool pressure_seen() const { return pressure_seen_; }
  const policy::Controller& controller() const { return controller_; }
  bool enabled() const { return opt_.enabled; }

  // Kernel timing: an event pair around a launch (-1 when none is free, timing is off, or this
  // iteration is not timed), completed pairs read without waiting into per-signature durations.
  int begin_timing(CUstream s, std::uint64_t sig);
  void end_timing(int pair, CUstream s);
  void cancel_timing(int pair);  // the launch was not made: the pair is free again
  // Reads completed pairs, oldest first, until one is still in flight (never waits); all:
  // look at every pending pair (at syncs and iteration ends).
  void poll_timings(bool all = false) {
    if (!pending_.empty()) poll_timings_slow(all);  // every event asks; few find a timing in flight
  }
  void poll_timings_slow(bool all);
  std::uint64_t launches_seen() const { return launches_; }
  // The last measured time of a kernel of signature `sig`; 0 when none was measured.
  double duration_s(std::uint64_t sig) const {
    const auto it = dur_ns_.find(sig);
    return it != dur_ns_.end() ? static_cast<double>(it->second) * 1e-9 : 0.0;
  }
  std::uint64_t launches_timed() const { return timed_; }

  // Lateness of planned swap-ins, measured on the device's clock: a timing event after the
  // swap-in on the stream that moves it (arm), one on the launching stream before the first
  // launch that touches the block (stamp: before the launch is made to wait for the data);
  // once both completed, a launch that was ready before its data arrived was late by the
  // difference, which the controller learns (poll_probes: the blocks and seconds, for the log).
  void arm_probe(std::uint64_t id, const plan::LateArrival& place, CUstream moved_on);
  void stamp_probe(std::uint64_t id, CUstream launch_stream);
  void poll_probes(std::vector<std::pair<std::uint64_t, double>>& late);
  void drop_unstamped_probes();  // at an iteration's end: swap-ins nothing touched
  bool probes_armed() const { return !armed_.empty(); }
  // False: no probe is armed for `id` (true: one may be). Under pressure probes are armed most of
  // the time and a launch's blocks seldom have one: this spares them a hash lookup each.
  bool may_be_armed(std::uint64_t id) const {
    const std::size_t bit = id % (kArmedWords * 64);
    return (armed_bits_[bit >> 6] >> (bit & 63)) & 1u;
  }

 private:
  std::shared_ptr<const plan::SegmentPlan> answer(std::uint64_t serial, const plan::SegmentJob& j);  // the planner thread's
  // Posts an answer to request `serial` (a plan, or none) and logs it after `what`.
  void post(std::uint64_t serial, std::shared_ptr<const plan::SegmentPlan> p, const char* what);
  struct Answer {
    std::uint64_t serial = 0;
    std::shared_ptr<const plan::SegmentPlan> plan;
  };
  struct Pair {
    CUevent start = nullptr, end = nullptr;
    std::uint64_t sig = 0;
  };
  struct Probe {
    CUevent moved = nullptr, ready = nullptr;  // after the swap-in; before the launch
    std::uint64_t id = 0;
    plan::LateArrival place;
  };
  void run();
  void hand_over(policy::PlanRequest r, std::uint64_t budget);
  void note_link(double out, double in);

  const Api* api_ = nullptr;
  PlanningOptions opt_;
  policy::Controller controller_{policy::ControllerOptions{.prefault = true}};  // on the hook path: no page faults
  std::vector<std::string> names_;
  std::unordered_map<std::uint64_t, std::uint32_t> name_of_;
  // the planner thread and the hand-over
  std::thread thread_;
  std::binary_semaphore wake_{0};
  std::atomic<policy::PlanRequest*> inbox_{nullptr};
  std::atomic<Answer*> outbox_{nullptr};
  std::atomic<bool> stop_{false};
  LinkMeter link_;
  double link_latency_s_ = 10e-6;
  double logged_out_ = 0, logged_in_ = 0;  // the rates last logged (note_link)
  // kernel durations
  std::vector<Pair> pairs_;
  std::vector<int> free_pairs_;
  std::deque<int> pending_;
  std::unordered_map<std::uint64_t, std::uint64_t> dur_ns_;  // by kernel signature
  std::uint64_t launches_ = 0, timed_ = 0;                   // begin_timing calls; pairs recorded
  bool pressure_seen_ = false;  // the job has held 80% of the budget (kernel times are then worth taking)
  std::vector<Probe> probes_;
  std::vector<int> free_probes_, stamped_;
  std::unordered_map<std::uint64_t, int> armed_;  // block id -> probe waiting for its launch
  // Bit (id mod 256) set while an id in armed_ has it (may_be_armed), with how many have it.
  static constexpr std::size_t kArmedWords = 4;
  std::array<std::uint64_t, kArmedWords> armed_bits_{};
  std::array<std::uint16_t, kArmedWords * 64> armed_per_bit_{};  // at most 1024 probes
  void note_armed(std::uint64_t id, bool armed);
};

}  // namespace capuchin::interpose::exec
