// executor.cpp: the executor's start (configuration, streams, backend), its lock plumbing
// (Held, await*), feeding the policy (the plan's commands applied at their positions), the
// end of an iteration (budget adoption, the job's minimum, the cache trimmed, the log
// flushed), the executor's counters for the daemon, fork and exit.
#include <pthread.h>

#include <chrono>
#include <cinttypes>
#include <string_view>
#include <cstring>

#include "capture.hpp"
#include "capuchin/budget.hpp"
#include "capuchin/trace.hpp"
#include "capuchin/units.hpp"
#include "daemon_sink.hpp"
#include "executor.hpp"
#include "executor_impl.hpp"
#include "ordering.hpp"
#include "real_api.hpp"
#include "scratch.hpp"

namespace capuchin::interpose::exec {

std::atomic<bool> g_on{false};
Executor* g_ex = nullptr;

namespace {

alignas(Executor) unsigned char g_mem[sizeof(Executor)];
std::atomic<int> g_start{0};  // 0: not yet, 1: started, 2: failed for good
__attribute__((tls_model("initial-exec"))) thread_local Scratch* t_scratch = nullptr;
// Frees a thread's scratch when the thread exits (a later call on it, from another exit
// handler, makes a new one).
struct ScratchOwner {
  ~ScratchOwner() {
    delete t_scratch;
    t_scratch = nullptr;
  }
};
thread_local ScratchOwner t_scratch_owner;

double steady_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

const char* env(const char* name) {
  const char* v = std::getenv(name);
  return v != nullptr && v[0] != '\0' ? v : nullptr;
}

// A forked child has the parent's memory but none of its threads: the executor's mutex may be
// held by a thread that does not exist here, its planner thread is gone, and CUDA cannot be
// used without an exec. The child passes every call through and its exit skips the executor.
void at_fork_child() {
  g_on.store(false, std::memory_order_relaxed);
  g_start.store(2, std::memory_order_relaxed);
  if (g_ex != nullptr) g_ex->decisions.discard_after_fork();  // the parent's records are the parent's
}

// "the driver (13.0)": the driver and its version, for messages.
std::string driver_desc(const Api& api) {
  int v = 0;
  if (api.driver_version == nullptr || api.driver_version(&v) != CUDA_SUCCESS || v <= 0) return "the driver (version unknown)";
  return "the driver (" + std::to_string(v / 1000) + "." + std::to_string(v % 1000 / 10) + ")";
}

// Where host-located VMM memory can be created: CU_MEM_LOCATION_TYPE_HOST, else (drivers that
// offer only NUMA-node placement, as some 12.x) HOST_NUMA on the device's nearest node (cuda.h,
// cuMemCreate: id 0 where NUMA is not available). False when neither can be created.
bool probe_host_location(Executor& e, int device, std::size_t gran, CUmemLocation& where) {
  int numa = 0;
  if (e.api.device_attribute == nullptr ||
      e.api.device_attribute(&numa, CU_DEVICE_ATTRIBUTE_HOST_NUMA_ID, device) != CUDA_SUCCESS || numa < 0)
    numa = 0;
  for (CUmemLocation loc : {CUmemLocation{CU_MEM_LOCATION_TYPE_HOST, 0}, CUmemLocation{CU_MEM_LOCATION_TYPE_HOST_NUMA, numa}}) {
    CUmemAllocationProp hp{};
    hp.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    hp.location = loc;
    CUmemGenericAllocationHandle h = 0;
    if (e.api.mem_create(&h, gran, &hp, 0) != CUDA_SUCCESS) continue;
    if (e.api.mem_release(h) != CUDA_SUCCESS) log(LogLevel::Warn, "executor: releasing the probe chunk failed");
    where = loc;
    return true;
  }
  return false;
}

// The pinned backend needs the VMM API and host-located VMM memory (so evicted tensors stay
// addressable at their own address); without them the job runs on uvm, said once with why.
void choose_backend(Executor& e, int device) {
  if (e.opt.backend != Backend::Pinned) return;
  CUmemAllocationProp prop{};
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  prop.location.id = device;
  size_t g = 0;
  if (!e.api.vmm() || e.api.mem_granularity(&g, &prop, CU_MEM_ALLOC_GRANULARITY_RECOMMENDED) != CUDA_SUCCESS || g == 0) {
    log(LogLevel::Warn, "CAPUCHIN_BACKEND=pinned needs the VMM API, which %s lacks; using uvm", driver_desc(e.api).c_str());
    e.opt.backend = Backend::Uvm;
    return;
  }
  if (!probe_host_location(e, device, g, e.host_location)) {
    log(LogLevel::Warn, "CAPUCHIN_BACKEND=pinned: %s cannot create host-located VMM memory (neither "
                        "CU_MEM_LOCATION_TYPE_HOST nor HOST_NUMA), so evicted tensors could not stay addressable; using uvm",
        driver_desc(e.api).c_str());
    e.opt.backend = Backend::Uvm;
    return;
  }
  e.vmm_gran = g;
}

// What the driver lacks that makes capuchin do less, said once at start with its version.
void log_driver_features(const Executor& e) {
  const std::string drv = driver_desc(e.api);
  if (e.api.func_get_param_info == nullptr)
    log(LogLevel::Warn, "%s lacks cuFuncGetParamInfo (CUDA 12.4): kernel parameters cannot be scanned, so "
                        "launches are work whose accesses are unknown and nothing moves while one runs", drv.c_str());
  if (e.api.mem_discard == nullptr)
    log(LogLevel::Info, "%s lacks cuMemDiscardBatchAsync (CUDA 12.8): freed managed memory is not discarded", drv.c_str());
  const char* host = e.opt.backend != Backend::Pinned ? "unused"
                     : e.host_location.type == CU_MEM_LOCATION_TYPE_HOST ? "host" : "host-numa";
  log(LogLevel::Info, "executor: %s: cuMemPrefetchAsync_v2 yes, cuFuncGetParamInfo %s, cuMemDiscardBatchAsync %s, "
                      "host-located VMM %s", drv.c_str(), e.api.func_get_param_info ? "yes" : "no",
      e.api.mem_discard ? "yes" : "no", host);
}

// Under e.mu at the first served call. CUDA_ERROR_INVALID_CONTEXT / NOT_INITIALIZED: not yet
// possible (the runtime hook initialises the context and retries).
CUresult start(Executor& e) {
  // The runtime loads libcuda at its first call: a job whose first CUDA call allocates reaches
  // us before the driver is there. Not yet possible, rather than "this driver lacks ...".
  if (driver_export("cuDriverGetVersion") == nullptr) return CUDA_ERROR_NOT_INITIALIZED;
  const char* missing = nullptr;
  if (!resolve(e.api, &missing)) {
    log(LogLevel::Warn, "CAPUCHIN_BUDGET set but %s lacks %s; the executor is off (pass-through)",
        driver_desc(e.api).c_str(), missing);
    return CUDA_ERROR_NOT_SUPPORTED;
  }
  size_t free_b = 0, total_b = 0;
  if (CUresult r = e.api.mem_get_info(&free_b, &total_b); r != CUDA_SUCCESS) return r;
  auto parsed = parse_budget(e.opt.budget_text);
  if (!parsed) {
    log(LogLevel::Error, "CAPUCHIN_BUDGET=%s: %s; the executor is off", e.opt.budget_text.c_str(), parsed.error().message.c_str());
    return CUDA_ERROR_INVALID_VALUE;
  }
  if (parsed->needs_peak()) {
    // Nothing to resolve it against yet: the device's memory bounds the job meanwhile.
    e.pending_peak_multiple = parsed->ratio;
    e.ledger.budget = total_b;
    log(LogLevel::Info, "CAPUCHIN_BUDGET=%s: the job's natural peak is not known yet; no budget applies until its first "
                        "iteration has been learned", e.opt.budget_text.c_str());
  } else {
    e.ledger.budget = parsed->resolve(total_b, 0);
  }
  if (e.ledger.budget == 0) {
    log(LogLevel::Error, "CAPUCHIN_BUDGET=%s resolves to 0 bytes; the executor is off", e.opt.budget_text.c_str());
    return CUDA_ERROR_INVALID_VALUE;
  }
  if (e.ledger.budget > total_b)
    log(LogLevel::Warn, "CAPUCHIN_BUDGET (%" PRIu64 " bytes) exceeds the device's %zu bytes", e.ledger.budget, total_b);
  // The current context's device: the one this job (or rank) uses; mem_get_info above and
  // everything the executor makes (streams, prefetch targets, VMM chunks) are that device's.
  CUdevice dev = 0;
  if (e.api.ctx_get_device != nullptr && e.api.ctx_get_device(&dev) != CUDA_SUCCESS) dev = 0;
  e.moves.device = static_cast<int>(dev);
  int devices = 0;
  e.one_device = e.api.device_get_count != nullptr && e.api.device_get_count(&devices) == CUDA_SUCCESS &&
                 devices == 1 && e.moves.device == 0;
  set_job_device(e.moves.device);  // the daemon's hello names it
  CUcontext ctx = nullptr;
  if (e.api.ctx_get_current != nullptr && e.api.ctx_get_current(&ctx) != CUDA_SUCCESS) ctx = nullptr;
  e.events.init(&e.api, ctx);
  if (CUresult r = e.api.stream_create(&e.moves.out, CU_STREAM_NON_BLOCKING); r != CUDA_SUCCESS) return r;
  if (CUresult r = e.api.stream_create(&e.moves.in, CU_STREAM_NON_BLOCKING); r != CUDA_SUCCESS) return r;
  if (CUresult r = e.api.stream_create(&e.moves.drop, CU_STREAM_NON_BLOCKING); r != CUDA_SUCCESS) return r;
  e.events.set_own_streams(e.moves.out, e.moves.in, e.moves.drop);
  e.moves.api = &e.api;
  e.moves.events = &e.events;
  e.moves.ledger = &e.ledger;
  e.simcuda = driver_export("simcuda_get_stats") != nullptr;
  e.virtual_ns = reinterpret_cast<std::uint64_t (*)()>(driver_export("simcuda_host_virtual_ns"));
  choose_backend(e, e.moves.device);
  e.managed = make_managed_memory(e.moves, e.opt.uvm_page);
  if (e.opt.backend == Backend::Pinned) {
    if (e.opt.pool_limit == 0) e.opt.pool_limit = std::max<std::uint64_t>(4 * e.ledger.budget, 1ull << 30);
    e.pool.configure(&e.api, e.vmm_gran, e.opt.pool_limit, e.host_location);
    e.chunks.configure(&e.api, e.moves.device);
    e.ledger.watch_idle(&e.chunks, &e.moves.managed_out_bytes);
    e.vmm = make_vmm_memory(e.moves, e.vmm_gran, e.pool, e.chunks);
  }
  PlanningOptions po;
  po.enabled = !(env("CAPUCHIN_PLAN") != nullptr && std::strcmp(env("CAPUCHIN_PLAN"), "0") == 0);
  po.keep_plan = env("CAPUCHIN_PLAN") != nullptr && std::strcmp(env("CAPUCHIN_PLAN"), "always") == 0;
  po.simcuda = e.simcuda;
  po.allow_recompute = e.opt.recompute && (e.opt.backend == Backend::Pinned || e.managed->droppable());
  if (const char* v = env("CAPUCHIN_GPU")) po.gpu = v;
  if (const char* v = env("CAPUCHIN_PLAN_DUMP")) po.dump_dir = v;
  if (const char* v = env("CAPUCHIN_LINK"); v != nullptr && v[0] != '\0') {
    if (std::strcmp(v, "profile") == 0) po.measured_link = false;
    else if (std::strcmp(v, "measured") != 0)
      log(LogLevel::Warn, "CAPUCHIN_LINK=%s is neither measured nor profile: the measured link is used", v);
  }
  e.planning.configure(&e.api, e.events.context(), po);
  e.moves.meter = &e.planning.link();
  e.planning.start();
  log_driver_features(e);
  log(LogLevel::Info, "executor on: budget %s (%" PRIu64 " bytes), backend %s, device %d%s", e.opt.budget_text.c_str(),
      e.ledger.budget, e.opt.backend == Backend::Uvm ? "uvm" : "pinned", e.moves.device, e.simcuda ? ", simcuda" : "");
  return CUDA_SUCCESS;
}

}  // namespace

Scratch& scratch() {
  if (t_scratch == nullptr) {
    t_scratch = new Scratch;  // one per thread (see scratch.hpp)
    (void)&t_scratch_owner;   // registers its destructor for this thread
  }
  return *t_scratch;
}

bool started(Executor& e, CUresult* why) {
  const int s = g_start.load(std::memory_order_acquire);
  if (s == 1) return true;
  if (s == 2) {
    *why = CUDA_ERROR_NOT_SUPPORTED;
    return false;
  }
  const CUresult r = start(e);
  if (r == CUDA_SUCCESS) {
    g_start.store(1, std::memory_order_release);
    return true;
  }
  *why = r;
  if (r != CUDA_ERROR_INVALID_CONTEXT && r != CUDA_ERROR_NOT_INITIALIZED) {
    log(LogLevel::Warn, "executor: cannot start (CUresult %d); the job runs unmanaged (pass-through)", static_cast<int>(r));
    g_start.store(2, std::memory_order_release);
    g_on.store(false, std::memory_order_relaxed);
  }
  return false;
}

bool is_started() { return g_start.load(std::memory_order_acquire) == 1; }

void warm_up_planning() { Planning::warm_up(); }

// ---- the lock ----------------------------------------------------------------------------

Held::Held(Executor& e) : e_(e), lk_(e.mu) { e.held = &lk_; }

Held::~Held() {
  std::vector<CUdeviceptr> frees;
  if (!e_.frees_after_unlock.empty()) [[unlikely]]
    frees.swap(e_.frees_after_unlock);
  e_.held = nullptr;
  lk_.unlock();
  for (CUdeviceptr p : frees)  // cuMemFree of managed memory may synchronise: never under the lock
    if (CUresult r = e_.api.mem_free(p); r != CUDA_SUCCESS)
      log(LogLevel::Warn, "executor: freeing a cached managed block failed (CUresult %d)", static_cast<int>(r));
}

void Executor::await(Ev e) {
  if (!e || events.done(e)) return;
  Ev keep = events.ref(e);
  CUevent h = events.handle(keep);
  const CUresult r = unlocked([&] { return api.event_synchronize(h); });
  events.unref(keep);
  if (r != CUDA_SUCCESS) log(LogLevel::Warn, "executor: waiting for a move failed (CUresult %d)", static_cast<int>(r));
}

void Executor::await_stream(CUstream s) {
  if (CUresult r = unlocked([&] { return api.stream_synchronize(s); }); r != CUDA_SUCCESS)
    log(LogLevel::Warn, "executor: waiting for a stream failed (CUresult %d)", static_cast<int>(r));
}

void Executor::await_streams() {
  std::vector<Ev> latest;  // not scratch: await leaves the lock, another hook may use that
  activity.latest(events, latest);
  for (Ev& e : latest) {
    await(e);
    events.unref(e);
  }
}

// The executor's events are its own device's (cuEventRecord: "hEvent and hStream must be from
// the same context", cuda.h): work on another device's stream that uses its blocks (a copy
// to another GPU) is waited for on the host instead, said once.
Ev Executor::use_event(CUstream s, bool other_device) {
  if (!other_device) return activity.use_event(events, s);
  if (!other_device_use_noted) {
    other_device_use_noted = true;
    log(LogLevel::Info, "executor: work on another device uses device %d's tensors: each such call is waited for", moves.device);
  }
  return Ev{};
}


void Executor::await_quiet(Block& b) {
  ++b.pins;
  if (b.many_streams) {  // its uses were on more streams than it holds: every stream's latest work covers them
    const std::uint64_t gen = b.use_gen;
    await_streams();
    if (b.use_gen == gen) release_uses(events, b);  // uses marked meanwhile were not covered by the wait
  }
  for (int round = 0; round < 16 && !quiet_now(events, b); ++round) {
    std::vector<Ev>& w = scratch().waits;
    w.clear();
    quiet_events(b, w);
    for (Ev e : w)
      if (!events.done(e)) {
        await(e);
        break;  // the block's events may have changed meanwhile: list them again
      }
  }
  --b.pins;
}

void Executor::settle_managed_out(std::uint64_t incoming) {
  for (int round = 0; round < 64; ++round) {
    const Ev e = room_after_managed_outs(moves, incoming);
    if (!e) return;
    await(e);
  }
}

// ---- the policy --------------------------------------------------------------------------

// What differed, so that a job whose iterations never repeat exactly can be told why (the
// kind of event, its bytes, how many tensors a kernel touched).
void Executor::log_difference(std::uint32_t pos, std::uint32_t period, const policy::Event& was, const policy::Event& got,
                              bool relearn) {
  const auto what = [](const policy::Event& e, char* buf, std::size_t n) {
    const std::string_view op = trace::to_string(static_cast<trace::Op>(e.op));
    if (static_cast<trace::Op>(e.op) == trace::Op::Kernel)
      std::snprintf(buf, n, "a kernel touching %u tensors (signature %016" PRIx64 ")", e.nreads + e.nwrites, e.sig);
    else
      std::snprintf(buf, n, "%.*s of %" PRIu64 " bytes", static_cast<int>(op.size()), op.data(), e.bytes);
  };
  char a[96], b[96];
  what(was, a, sizeof a);
  what(got, b, sizeof b);
  log(LogLevel::Info, "executor: the iteration changed at position %u of %u (event %" PRIu64 "): %s where the last "
                      "iteration had %s; %s", pos, period, planning.controller().tick(), b, a,
      relearn ? "learning it again" : "followed on (a few differences per iteration are tolerated)");
}

policy::Step Executor::feed(const policy::Event& ev, std::span<const std::uint64_t> ids) {
  reclaim_finished_evictions();  // copies out that ended free their device memory now
  planning.poll_timings();       // kernel times measured so far, for the next plan request
  Scratch& sc = scratch();
  std::vector<policy::Command> cmds;
  cmds.swap(sc.cmds);
  cmds.clear();
  const std::uint32_t pos = planning.controller().position(), period = planning.controller().period();
  const policy::Step st = planning.feed(ev, ids, cmds, ledger.budget);
  if (st.any()) [[unlikely]]
    note_step(st, pos, period);
  if (!cmds.empty()) [[unlikely]]
    for (const policy::Command& c : cmds) apply(c);
  cmds.clear();
  sc.cmds.swap(cmds);  // the thread's scratch, as scratch() would return it again
  return st;
}

// What the controller's step changed: logged, recorded, and an iteration end acted on.
void Executor::note_step(policy::Step st, std::uint32_t pos, std::uint32_t period) {
  const policy::Controller& ctl = planning.controller();
  if (st.relearn && st.longer)
    log(LogLevel::Info, "executor: the iteration of %u events is a loop inside a longer one that repeats (event %" PRIu64
                        "): learning that", period, ctl.tick());
  else if (st.relearn)
    log_difference(pos, period, ctl.mismatched(), ctl.differed(), true);
  // Tolerated differences: the first few only (a logging step every N iterations would fill the log).
  if (st.tolerated && !st.relearn && tolerated_logged < kToleratedLogged) {
    ++tolerated_logged;
    log_difference(pos, period, ctl.mismatched(), ctl.differed(), false);
  }
  if (st.locked)
    log(LogLevel::Info, "executor: learned an iteration of %u events (event %" PRIu64 ")", planning.controller().period(),
        planning.controller().tick());
  if (st.boundary) end_iteration();
  decisions.set_iteration(planning.controller().iteration());
  if (st.relearn) decisions.record(Action::Relearn, kNoBlockId, 0, "pattern-changed");
  if (st.adopted && planning.controller().plan()) {
    const plan::SegmentPlan& p = *planning.controller().plan();
    char note[128];
    std::snprintf(note, sizeof note, "%zu decisions: %u swaps, %u recomputes%s", p.decisions.size(), p.swaps, p.recomputes,
                  p.fits ? "" : "; does not fit the budget alone");
    decisions.record(Action::Plan, kNoBlockId, 0, p.from_daemon ? "capuchind" : "embedded", p.expected_overhead_s, note);
    ++(p.from_daemon ? plans_from_daemon : plans_embedded);
    if (decisions.tally().of(Action::Evict) + decisions.tally().of(Action::Drop) > 0)
      natural_peak = std::max(natural_peak, p.natural_peak);  // the ledger's peak is no longer the natural one
  }
}

void Executor::invalidate_producers() {
  blocks.for_each_live([this](Block& b) {
    ++b.version;
    producers.give(b.producer);
    b.holds_data = true;
  });
}

void Executor::end_iteration() {
  judge_recomputation();
  planning.poll_timings(true);
  poll_lateness();
  planning.drop_unstamped_probes();
  report_need();
  resolve_peak_budget();
  adopt_daemon_budget();
  decisions.end_iteration();
  trim_cache();
  consider_standby();
  if (ondemand_per_iteration.size() >= 64) ondemand_per_iteration.erase(ondemand_per_iteration.begin());  // the last 64
  ondemand_per_iteration.push_back(0);
}

void Executor::judge_recomputation() {
  if (!opt.recompute) return;
  const double now_s = virtual_ns != nullptr ? static_cast<double>(virtual_ns()) * 1e-9 : steady_s();
  const policy::Controller& c = planning.controller();
  const auto& plan = c.plan();
  const RecomputeTrial::Step st =
      trial.at_iteration_end(now_s, c.following(), plan ? plan->recomputes : 0, c.stats().plans_adopted, c.stats().relearns);
  if (st.decided) {
    char note[160];
    std::snprintf(note, sizeof note, "iterations took %.3f ms with recomputation, %.3f ms without", st.with_s * 1e3,
                  st.without_s * 1e3);
    decisions.record(Action::Plan, kNoBlockId, 0, st.allow ? "recompute-kept" : "recompute-off", -1, note);
    log(LogLevel::Info, "executor: %s: %s", st.allow ? "recomputation kept" : "recomputation off", note);
  }
  if (st.change && planning.allow_recompute() != st.allow) {
    planning.set_allow_recompute(st.allow);
    planning.invalidate();
  }
}

// Blocks freed two iterations ago and not reused since go back to the driver (a job whose
// shapes change leaves blocks of sizes it never asks for again), once their work is done;
// busy ones wait for a later iteration end.
void Executor::trim_cache() {
  const std::uint64_t now = planning.controller().iteration();
  std::vector<Block*> gone = blocks.take_cached_if(
      [&](const Block& b) { return b.freed_iteration + 2 <= now && b.where != Where::Evicting && quiet_now(events, b); });
  for (Block* b : gone) {
    release_free_events(events, *b);
    events.unref(b->exec);
    events.unref(b->ready);
    if (b->kind == Kind::Managed) {
      ledger.forget(*b);
      frees_after_unlock.push_back(b->base);
    } else {
      mem(*b).release(*b);
    }
    delete_block(b);
  }
}

// Planned swap-ins that arrived after their launch was ready: a stall, measured on the device's
// clock (planning.hpp), and feedback for the next plan.
void Executor::poll_lateness() {
  std::vector<std::pair<std::uint64_t, double>> late;
  planning.poll_probes(late);
  for (const auto& [id, s] : late) {
    const Block* b = blocks.by_id(id);
    decisions.record_stall(id, b != nullptr ? b->span : 0, "prefetch-late", s);
  }
}

std::string Executor::budget_desc() const { return format_bytes(ledger.budget) + " (" + budget_source + ")"; }

void Executor::warn_pool_full() {
  if (pool_full_warned) return;
  pool_full_warned = true;
  log(LogLevel::Warn,
      "capuchin: the pinned backend's host pool is full (CAPUCHIN_PINNED_POOL=%s, %s in use): tensors cannot be evicted "
      "and stay resident; raise CAPUCHIN_PINNED_POOL or use CAPUCHIN_BACKEND=uvm",
      format_bytes(pool.limit()).c_str(), format_bytes(pool.bytes() - pool.free_bytes()).c_str());
}

// What one launch needs resident at once (`total`, the spans of `touched`). A launch over the
// budget is still served: what does not fit is used from host memory. Said once, when it first
// happens; the iteration's minimum follows at its end (report_need), with what the same blocks
// would take as managed memory, summed only for a launch needing more than any before.
void Executor::note_launch_need(std::uint64_t total, const std::vector<Block*>& touched, std::string_view kernel) {
  need.iteration_need = std::max(need.iteration_need, total);
  if (total > need.min_needed) {
    std::uint64_t total_managed = 0;
    for (const Block* b : touched) total_managed += managed->span_for(b->bytes);
    need.min_needed = total;
    need.min_needed_managed = total_managed;
    need.kernel = kernel;
  }
  if (total <= ledger.budget || need.warned) return;
  need.warned = true;
  log(LogLevel::Warn,
      "capuchin: the budget %s is below what this job needs at once: a launch of %.*s touches %s; what does not fit "
      "is used from host memory (correct, slow); the iteration's minimum follows at its end",
      budget_desc().c_str(), static_cast<int>(kernel.size()), kernel.data(), format_bytes(total).c_str());
  decisions.record(Action::Budget, kNoBlockId, total, "below-minimum", -1, "a launch needs more than the budget: served from host memory");
}

void Executor::report_need() {
  const bool over = need.iteration_need > ledger.budget && need.min_needed > need.reported;
  need.iteration_need = 0;
  if (!over) return;
  need.reported = need.min_needed;
  std::string other;
  if (opt.backend == Backend::Pinned && need.min_needed_managed < need.min_needed)
    other = "; with CAPUCHIN_BACKEND=uvm (no granule rounding) it needs " + format_bytes(need.min_needed_managed);
  log(LogLevel::Warn,
      "capuchin: this job needs a budget of at least %s (%" PRIu64 " bytes: its largest launch, %s, touches that much "
      "at once)%s; the budget is %s: raise it to at least that, or expect launches to read host memory",
      format_bytes(need.min_needed).c_str(), need.min_needed, need.kernel.c_str(), other.c_str(), budget_desc().c_str());
}

// A budget capuchind set (set-budget) applies from the next iteration; one below what the job
// is known to need is raised to that minimum and said so (never a job killed by its budget).
void Executor::adopt_daemon_budget() {
  std::uint64_t gen = 0;
  const std::uint64_t db = daemon_budget(&gen);
  if (gen == daemon_budget_gen) return;
  daemon_budget_gen = gen;
  if (db == 0 || db == ledger.budget) return;
  const std::uint64_t adopted = std::max(db, need.min_needed);
  char note[200];
  if (adopted != db)
    std::snprintf(note, sizeof note, "set-budget %" PRIu64 " bytes is below the job's minimum %" PRIu64 " bytes: using %" PRIu64,
                  db, need.min_needed, adopted);
  else
    std::snprintf(note, sizeof note, "budget %" PRIu64 " -> %" PRIu64 " bytes (set by capuchind)", ledger.budget, adopted);
  if (adopted != db) log(LogLevel::Warn, "capuchin: %s", note);
  adopt_budget(adopted, adopted != db ? "clamped-to-minimum" : "capuchind", note,
               adopted != db ? "set by capuchind, raised to the job's minimum" : "set by capuchind");
}

// Every budget change ends here: recorded, in force from the next iteration, a CAPUCHIN_BUDGET=Nx
// still waiting replaced, the next plan made for it.
void Executor::adopt_budget(std::uint64_t bytes, const char* reason, const char* note, std::string source) {
  wake("the budget changed");
  decisions.record(Action::Budget, kNoBlockId, bytes, reason, -1, note);
  ledger.budget = bytes;
  ledger.trim_idle();  // idle device chunks past a lower budget go now
  budget_source = std::move(source);
  pending_peak_multiple = 0;
  need.warned = false;
  planning.invalidate();
  // A lower budget is met now, not at the next allocation or prefetch: freed blocks still on
  // the device and idle tensors start moving out (the host does not wait here).
  if (ledger.resident() > bytes) (void)make_room(0, /*may_wait=*/false);
}

// CAPUCHIN_BUDGET=Nx: at the end of the first learned iteration, while nothing has been moved
// out, the most the executor has held is the job's natural peak; the budget is N times it
// (never below what one launch needs) and applies from the next iteration.
void Executor::resolve_peak_budget() {
  const Tally& t = decisions.tally();
  if (t.of(Action::Evict) + t.of(Action::Drop) == 0) natural_peak = std::max(natural_peak, ledger.peak());
  if (pending_peak_multiple == 0 || !planning.controller().locked() || natural_peak == 0) return;
  const auto wanted = static_cast<std::uint64_t>(pending_peak_multiple * static_cast<double>(natural_peak));
  const std::uint64_t adopted = std::max(wanted, need.min_needed);
  char note[200];
  std::snprintf(note, sizeof note, "CAPUCHIN_BUDGET=%s: %g x the natural peak %" PRIu64 " bytes = %" PRIu64 " bytes%s",
                opt.budget_text.c_str(), pending_peak_multiple, natural_peak, wanted,
                adopted != wanted ? ", raised to the job's minimum" : "");
  log(LogLevel::Info, "capuchin: %s", note);
  adopt_budget(adopted, "natural-peak", note,
               std::string("CAPUCHIN_BUDGET=") + opt.budget_text + " of the natural peak " + format_bytes(natural_peak));
  ledger.restart_peak();  // the resident peak the summary reports is the budget's
}

// ---- start, counters, exit ---------------------------------------------------------------

bool init() {
  const Config& c = config();
  if (c.budget[0] == '\0') return false;
  g_ex = new (g_mem) Executor();
  Executor& e = *g_ex;
  e.opt.budget_text = c.budget;
  e.budget_source = std::string("CAPUCHIN_BUDGET=") + c.budget;
  e.opt.backend = std::strcmp(c.backend, "pinned") == 0 ? Backend::Pinned : Backend::Uvm;
  e.decisions.open(env("CAPUCHIN_DECISION_LOG"), c.daemon, steady_s());
  if (const char* v = env("CAPUCHIN_KERNEL_OUTPUTS")) e.kernels.declare_outputs(v);
  if (const char* v = env("CAPUCHIN_RECOMPUTE")) {
    if (std::strcmp(v, "0") == 0 || std::strcmp(v, "off") == 0) e.opt.recompute = false;
    else if (std::strcmp(v, "declared") == 0) e.opt.infer_writes = false;
    else if (std::strcmp(v, "1") != 0 && std::strcmp(v, "auto") != 0)
      log(LogLevel::Warn, "CAPUCHIN_RECOMPUTE=%s is not one of auto, declared, off (or 1, 0); using auto", v);
  }
  if (e.opt.recompute && e.opt.infer_writes) e.kernels.want_layouts();
  if (const char* v = env("CAPUCHIN_PROBE_CHECKSUM")) {
    if (std::strcmp(v, "host") == 0) e.opt.device_checksum = false;
    else if (std::strcmp(v, "device") != 0)
      log(LogLevel::Warn, "CAPUCHIN_PROBE_CHECKSUM=%s is not one of device, host; using device", v);
  }
  if (const char* v = env("CAPUCHIN_UVM_PAGE")) {
    if (auto n = parse_size(v); n && *n > 0 && (*n & (*n - 1)) == 0) e.opt.uvm_page = *n;
    else log(LogLevel::Warn, "CAPUCHIN_UVM_PAGE=%s is not a power of two; using 64 KiB", v);
  }
  if (const char* v = env("CAPUCHIN_PINNED_MIN")) {
    if (auto n = parse_size(v)) e.opt.pinned_min = *n;
  }
  if (const char* v = env("CAPUCHIN_PINNED_POOL")) {
    if (auto n = parse_size(v)) e.opt.pool_limit = *n;
  }
  if (const char* v = env("CAPUCHIN_SERVE")) {
    if (std::strcmp(v, "all") == 0) e.opt.serve_libraries = true;
    else if (std::strcmp(v, "app") != 0) log(LogLevel::Warn, "CAPUCHIN_SERVE=%s: expected app or all; using app", v);
  }
  if (const char* v = env("CAPUCHIN_STANDBY")) {
    if (std::strcmp(v, "0") == 0 || std::strcmp(v, "off") == 0) e.opt.standby = false;
    else if (std::strcmp(v, "1") != 0 && std::strcmp(v, "on") != 0)
      log(LogLevel::Warn, "CAPUCHIN_STANDBY=%s is not one of on, off (or 1, 0); using on", v);
  }
  if (const char* v = env("CAPUCHIN_PLAN_WAIT_MS"))
    log(LogLevel::Warn, "CAPUCHIN_PLAN_WAIT_MS=%s is ignored: the executor never waits for a plan", v);
  pthread_atfork(nullptr, nullptr, at_fork_child);
  g_on.store(true, std::memory_order_release);
  return true;
}

bool counters(proto::ExecStats& out) {
  if (!on() || g_ex == nullptr || !is_started()) return false;
  Executor& e = *g_ex;
  std::unique_lock<std::mutex> lock(e.mu, std::try_to_lock);
  if (!lock.owns_lock()) return false;  // busy: the next pass
  const Tally& t = e.decisions.tally();
  out = proto::ExecStats{};
  out.evicted_bytes = t.evicted_bytes;
  out.prefetched_bytes = t.prefetched_bytes;
  out.recomputed_bytes = t.recomputed_bytes;
  out.stalls = t.of(Action::Stall) + t.of(Action::SwapinOnDemand);
  out.stall_s = t.stall_s;
  out.resident_bytes = e.ledger.resident();
  out.budget_bytes = e.pending_peak_multiple > 0 ? 0 : e.ledger.budget;
  out.peak_resident_bytes = e.ledger.peak();
  out.natural_peak_bytes = e.natural_peak;
  out.plans_from_daemon = e.plans_from_daemon;
  out.plans_embedded = e.plans_embedded;
  out.iterations = e.planning.controller().stats().iterations;
  return true;
}

void shutdown() {
  if (g_ex == nullptr || !is_started()) return;
  Executor& e = *g_ex;
  e.planning.stop();  // joined before the lock: it never takes it
  std::lock_guard<std::mutex> lock(e.mu);
  e.need.iteration_need = std::max(e.need.iteration_need, e.need.min_needed);
  e.report_need();
  std::string per;
  for (std::size_t i = 0; i < e.ondemand_per_iteration.size(); ++i) {
    if (i > 0) per += ',';
    per += std::to_string(e.ondemand_per_iteration[i]);
  }
  const Tally& t = e.decisions.tally();
  const policy::ControllerStats& cs = e.planning.controller().stats();
  e.planning.link().poll();  // moves not read yet, for the summary's rates
  if (e.pending_peak_multiple > 0)
    log(LogLevel::Warn, "capuchin: CAPUCHIN_BUDGET=%s never applied: no iteration of the job was learned (the summary "
                        "says budget=0)", e.opt.budget_text.c_str());
  log(LogLevel::Info,
      "executor summary: backend=%s budget=%" PRIu64 " peak_resident=%" PRIu64 " min_needed=%" PRIu64 " evictions=%" PRIu64
      " prefetches=%" PRIu64 " on_demand=%" PRIu64 " stalls=%" PRIu64 " drops=%" PRIu64 " recomputes=%" PRIu64
      " fallbacks=%" PRIu64 " iterations=%" PRIu64 " period=%u plans=%" PRIu64 " planned_iterations=%" PRIu64
      " relearns=%" PRIu64 " timed_launches=%" PRIu64 "/%" PRIu64 " host_pool_peak=%" PRIu64 " device_chunks=%" PRIu64 "/%" PRIu64 " on_demand_per_iteration=[%s]"
      " probations=%" PRIu64 " probation_bytes=%" PRIu64 " probation_copied=%" PRIu64 " checksum=%s"
      " replayable_shapes=%" PRIu64 " form_locks=%" PRIu64 " resized_events=%" PRIu64 " tolerated_events=%" PRIu64 " rebased=%" PRIu64 " longer_found=%" PRIu64
      " link_out_gbps=%.2f link_in_gbps=%.2f standbys=%" PRIu64 " wakes=%" PRIu64 " standing_by=%d events=%zu event_calls_saved=%" PRIu64
      " shortages=%" PRIu64 " shortages_indexed=%" PRIu64,
      e.opt.backend == Backend::Pinned ? "pinned" : "uvm", e.pending_peak_multiple > 0 ? 0 : e.ledger.budget, e.ledger.peak(), e.need.min_needed, t.of(Action::Evict), t.of(Action::Prefetch),
      t.of(Action::SwapinOnDemand), t.of(Action::Stall), t.of(Action::Drop), t.of(Action::Recompute), t.of(Action::Fallback),
      cs.iterations, e.planning.controller().period(), cs.plans_adopted, cs.iterations_followed, cs.relearns,
      e.planning.launches_timed(), e.planning.launches_seen(), e.pool.peak_bytes(), e.chunks.reused(), e.chunks.created() + e.chunks.reused(), per.c_str(), e.write_sets.probations(),
      e.write_sets.bytes_hashed(), e.write_sets.bytes_copied(), e.checksums.used() ? "device" : "host",
      e.write_sets.replayable_shapes(), cs.form_locks, cs.resized, cs.tolerated, cs.rebased, cs.longer_found,
      e.planning.link().bytes_per_s(true, e.planning.link_latency_s()) * 1e-9,
      e.planning.link().bytes_per_s(false, e.planning.link_latency_s()) * 1e-9, e.standbys, e.wakes, e.standby.on() ? 1 : 0,
      e.events.created(), e.events.calls_saved(), e.shortages, e.shortages_indexed);
  e.decisions.finish();
}

}  // namespace capuchin::interpose::exec
