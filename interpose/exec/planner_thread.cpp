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
#include <cinttypes>
#include <cstdlib>

#include "capture.hpp"
#include "capuchin/learn.hpp"
#include "capuchin/sim.hpp"
#include "capuchin/trace.hpp"
#include "capuchin/trace_model.hpp"
#include "state.hpp"

namespace capuchin::interpose::exec {

namespace {

sim::GpuProfile simcuda_profile(std::uint64_t memory) {
  sim::GpuProfile g;
  g.name = "simcuda";
  g.description = "simcuda reference GPU (cost constants of tests/simcuda/include/simcuda/simcuda.h)";
  g.memory_bytes = memory;
  g.fp32_flops = 10e12;
  g.hbm_bytes_per_s = 900e9;
  g.link_bytes_per_s = 25e9;
  g.link_latency_s = 1.5e-6;
  g.sources = "simcuda.h";
  return g;
}

}  // namespace

std::shared_ptr<const ReadyPlan> plan_segment(const PlanJob& job, std::string* why) {
  std::string text = trace::format_header(trace::Header{}) + "\n";
  trace::EventView v;
  for (const auto& [id, span] : job.carried) {
    v = {};
    v.op = trace::Op::Alloc;
    v.id = id;
    v.bytes = span;
    text += trace::format_event(v) + "\n";
  }
  for (const SegEvent& e : job.events) {
    v = {};
    v.op = static_cast<trace::Op>(e.op);
    switch (v.op) {
      case trace::Op::Alloc:
        v.id = e.id;
        v.bytes = e.bytes;
        break;
      case trace::Op::Free:
        v.id = e.id;
        break;
      case trace::Op::Kernel: {
        const std::uint64_t* ids = job.ids.data() + e.ids_off;
        v.name = job.names[e.name];
        if (e.touch) {
          v.flags |= trace::kHasTouch;
          v.touch = {ids, e.nreads};
        } else {
          v.flags |= trace::kHasReadsWrites;
          v.reads = {ids, e.nreads};
          v.writes = {ids + e.nreads, e.nwrites};
        }
        v.flags |= trace::kHasBytes;
        v.bytes = e.bytes;
        break;
      }
      case trace::Op::Copy:
        v.dir = static_cast<trace::CopyDir>(e.dir);
        v.bytes = e.bytes;
        if (e.id != kNoBlockId) v.src = e.id, v.flags |= trace::kHasSrc;
        if (e.id2 != kNoBlockId) v.dst = e.id2, v.flags |= trace::kHasDst;
        break;
      default:
        break;
    }
    text += trace::format_event(v) + "\n";
  }
  auto parsed = trace::parse_trace(text, "segment");
  if (!parsed) {
    *why = parsed.error().message();
    return nullptr;
  }
  const trace::Trace& t = *parsed;
  sim::GpuProfile gpu;
  sim::Efficiency eff;
  if (job.simcuda) {
    gpu = simcuda_profile(job.budget);
    eff.compute = eff.memory = eff.link = 1.0;
    eff.launch_latency_s = 2e-6;
  } else {
    const char* name = std::getenv("CAPUCHIN_GPU");
    auto g = sim::find_gpu_profile(name != nullptr ? name : "h100");
    if (!g) {
      *why = g.error().message;
      return nullptr;
    }
    gpu = *g;
  }
  auto prep = sim::prepare(t, gpu, eff);
  if (!prep) {
    *why = prep.error().message;
    return nullptr;
  }
  const std::uint32_t begin = static_cast<std::uint32_t>(job.carried.size());
  const learn::Pattern pattern = learn::make_pattern(t, trace::Iteration{0, begin, static_cast<std::uint32_t>(t.events.size())});
  plan::PlanOptions opt;
  opt.budget_bytes = job.budget;
  opt.baseline_bytes = job.baseline;
  opt.allow_recompute = job.allow_recompute;
  plan::Plan p = plan::make_plan(*prep, pattern, opt);
  if (!p.fits) {
    opt.margin = 0.10;
    plan::Plan q = plan::make_plan(*prep, pattern, opt);
    if (q.planned_peak_bytes < p.planned_peak_bytes) p = std::move(q);
  }
  auto out = std::make_shared<ReadyPlan>();
  out->segment = job.segment;
  for (const SegEvent& e : job.events) out->sigs.push_back(e.sig);
  out->fits = p.fits;
  out->recomputes = p.recomputes;
  out->swaps = p.swaps;
  out->expected_overhead_s = p.expected_overhead_s;
  for (const plan::Decision& d : p.decisions) {
    ExecDecision x;
    x.at = d.at;
    x.act = d.act;
    x.local = d.tensor.local;
    x.k = d.tensor.index;
    x.id = d.tensor.local ? 0 : t.tensors[d.tensor.index].id;
    x.bytes = d.bytes;
    x.access = d.access;
    x.reason = d.reason;
    x.cost_s = d.cost_s;
    out->decisions.push_back(x);
  }
  return out;
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
      std::string why;
      std::shared_ptr<const ReadyPlan> p = plan_segment(*j, &why);
      if (!p) log(LogLevel::Info, "executor: no plan for iteration %" PRIu64 ": %s", j->segment, why.c_str());
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
