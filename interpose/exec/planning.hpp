// planning.hpp: the executor's side of the capuchin policy. The job's events go to the
// policy controller (include/capuchin/controller.hpp, the code the simulator's `capuchin`
// policy runs); its plan requests go to a planner thread, which asks capuchind when the job
// is attached (the same plan::plan_segment, out of process, so the session view, decision log
// and set-budget see the plan the job applies) and plans here when it is not or the daemon
// does not answer; answers are offered back to the controller at the next event. Kernel
// durations are measured with event pairs and kept per launch signature for the planner.
//
// Contract: feed() and the timing calls run under the executor's lock and never wait: the
// hand-over with the planner thread is one atomic exchange each way and a semaphore release.
// The planner thread touches no CUDA and no executor state. A request that cannot be planned
// is answered with no plan (the controller stays passive for that iteration shape).
#pragma once

#include <cuda.h>

#include <atomic>
#include <memory>
#include <semaphore>
#include <span>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "api.hpp"
#include "capuchin/controller.hpp"

namespace capuchin::interpose::exec {

struct PlanningOptions {
  bool enabled = true;          // CAPUCHIN_PLAN (0: passive only)
  bool simcuda = false;         // plan on simcuda's cost constants (the figures are simulated)
  bool allow_recompute = false;
  std::string gpu = "h100";     // CAPUCHIN_GPU: the profile plans model (not on simcuda)
  std::string dump_dir;         // CAPUCHIN_PLAN_DUMP: iterations and plans written there
};

class Planning {
 public:
  Planning() = default;
  Planning(const Planning&) = delete;
  Planning& operator=(const Planning&) = delete;
  ~Planning();

  void configure(const Api* api, PlanningOptions o) { api_ = api, opt_ = std::move(o); }
  void start();  // the planner thread (when planning is enabled)
  void stop();   // joins it (not after a fork: the thread does not exist there)

  // One event of the job: offers an answer that arrived, feeds the controller, hands a new
  // request to the planner thread (for `budget`). The commands to issue now go to `out`.
  policy::Step feed(const policy::Event& e, std::span<const std::uint64_t> ids, std::vector<policy::Command>& out,
                    std::uint64_t budget);
  // A name index for kernel events (the planner's trace names kernels).
  std::uint32_t name_index(std::uint64_t key, const std::string& name);
  void note_late(std::uint64_t id, double late_s) { controller_.note_late(id, late_s); }
  void invalidate() { controller_.invalidate_plan(); }
  const policy::Controller& controller() const { return controller_; }
  bool enabled() const { return opt_.enabled; }

  // Kernel timing: an event pair around a launch (-1 when none is free or timing is off),
  // completed pairs read without waiting into per-signature durations.
  int begin_timing(CUstream s, std::uint64_t sig);
  void end_timing(int pair, CUstream s);
  void poll_timings();
  std::size_t measured_signatures() const { return dur_ns_.size(); }

 private:
  struct Answer {
    std::uint64_t serial = 0;
    std::shared_ptr<const plan::SegmentPlan> plan;
  };
  struct Pair {
    CUevent start = nullptr, end = nullptr;
    std::uint64_t sig = 0;
  };
  void run();
  void hand_over(policy::PlanRequest r, std::uint64_t budget);

  const Api* api_ = nullptr;
  PlanningOptions opt_;
  policy::Controller controller_;
  std::vector<std::string> names_;
  std::unordered_map<std::uint64_t, std::uint32_t> name_of_;
  // the planner thread and the hand-over
  std::thread thread_;
  std::binary_semaphore wake_{0};
  std::atomic<policy::PlanRequest*> inbox_{nullptr};
  std::atomic<Answer*> outbox_{nullptr};
  std::atomic<bool> stop_{false};
  // kernel durations
  std::vector<Pair> pairs_;
  std::vector<int> free_pairs_, pending_;
  std::unordered_map<std::uint64_t, std::uint64_t> dur_ns_;  // by kernel signature
};

}  // namespace capuchin::interpose::exec
