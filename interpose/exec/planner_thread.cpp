// planner_thread.cpp: embedded planning (the default; the daemon issue moves it out of
// process). At each host synchronisation the executor hands the segment it just observed to
// this thread, which writes it as a trace (the tensors live at its start first, as
// allocations), prepares it for the simulator on a GPU profile, makes a Capuchin plan for the
// next segment (plan::make_plan) and publishes it with its decisions keyed to pattern
// positions and tensors (the k-th allocation of the segment, or a carried allocation id).
//
// Contract: runs only on its own thread, touches no CUDA and no executor state but the
// plan_mu-guarded hand-over; a segment that cannot be planned publishes nothing (the
// executor stays passive). Profile: simcuda's cost constants when running on simcuda (the
// figures are simulated), else CAPUCHIN_GPU (a `capuchin sim --list-gpus` name, default h100).
#include <algorithm>
#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <unordered_map>
#include <unordered_set>

#include "capture.hpp"
#include "capuchin/learn.hpp"
#include "capuchin/sim.hpp"
#include "capuchin/trace.hpp"
#include "capuchin/trace_model.hpp"
#include "state.hpp"

namespace capuchin::interpose::exec {

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
      if (auto made = plan::plan_segment(*j)) {
        log(LogLevel::Info, "executor: %s", made->summary.c_str());
        p = std::make_shared<const ReadyPlan>(std::move(*made));
      } else {
        log(LogLevel::Info, "executor: no plan for iteration %" PRIu64 ": %s", j->segment, made.error().c_str());
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
