// planner_thread.cpp: the executor's planner thread. At each host synchronisation the
// executor hands it the segment it just observed; it asks capuchind to plan it when the job
// is attached (plan_remotely: the daemon runs the same plan::plan_segment, so its session
// view, decision log and set-budget see the plan the job applies) and plans it here when it
// is not, or the daemon does not answer within kRemotePlanTimeoutMs, or cannot plan it.
//
// Contract: runs only on its own thread, touches no CUDA and no executor state but the
// plan_mu-guarded hand-over; a segment that cannot be planned publishes nothing (the
// executor stays passive). Profile: simcuda's cost constants when running on simcuda (the
// figures are simulated), else CAPUCHIN_GPU (a `capuchin sim --list-gpus` name, default h100).
#include <chrono>
#include <cinttypes>

#include "capture.hpp"
#include "capuchin/segment_plan.hpp"
#include "capuchin/trace.hpp"
#include "daemon_sink.hpp"
#include "state.hpp"

namespace capuchin::interpose::exec {

namespace {
constexpr int kRemotePlanTimeoutMs = 2000;  // then the job plans itself
}  // namespace

void warm_up_planning() {
  PlanJob j;
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
    (void)plan::plan_segment(j);
  }
}

void Executor::start_planner() {
  planner = std::thread([this] {
    for (;;) {
      std::unique_ptr<PlanJob> j;
      {
        std::unique_lock<std::mutex> lock(plan_mu);
        plan_cv.wait(lock, [&] { return planner_stop || job != nullptr; });
        if (planner_stop) return;
        j = std::move(job);
      }
      std::shared_ptr<const ReadyPlan> p;
      // capuchind plans when attached (the same function, out of process: the session's view,
      // its decision log and set-budget see it); the job plans itself when it is not.
      if (auto rep = plan_remotely(*j, std::chrono::milliseconds(kRemotePlanTimeoutMs))) {
        if (rep->ok) {
          log(LogLevel::Info, "executor: capuchind's %s", rep->plan.summary.c_str());
          auto q = std::make_shared<ReadyPlan>(std::move(rep->plan));
          q->from_daemon = true;
          p = std::move(q);
        } else {
          log(LogLevel::Info, "executor: capuchind made no plan for iteration %" PRIu64 ": %s; planning here",
              j->segment, rep->why.c_str());
        }
      }
      if (!p) {
        if (auto made = plan::plan_segment(*j)) {
          log(LogLevel::Info, "executor: %s", made->summary.c_str());
          p = std::make_shared<const ReadyPlan>(std::move(*made));
        } else {
          log(LogLevel::Info, "executor: no plan for iteration %" PRIu64 ": %s", j->segment, made.error().c_str());
        }
      }
      {
        std::lock_guard<std::mutex> lock(plan_mu);
        if (p) ready = std::move(p);
        ready_segment = j->segment;
      }
      plan_cv.notify_all();
    }
  });
}

void Executor::stop_planner() {
  {
    std::lock_guard<std::mutex> lock(plan_mu);
    planner_stop = true;
  }
  plan_cv.notify_all();
  if (planner.joinable()) planner.join();
}

void Executor::submit(std::unique_ptr<PlanJob> j) {
  {
    std::lock_guard<std::mutex> lock(plan_mu);
    job = std::move(j);  // a newer segment replaces one not yet planned
  }
  plan_cv.notify_all();
}

}  // namespace capuchin::interpose::exec
