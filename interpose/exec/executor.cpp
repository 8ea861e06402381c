// executor.cpp: the executor's hook entry points (executor.hpp), its bookkeeping (blocks,
// events, the decision log), passive mode (victims by DTR's cost / (bytes x staleness), which
// for swaps is least recently used weighted by the copy's fixed cost) and plan following
// (the current segment is matched event by event against the pattern; decisions are issued
// at their positions; a mismatch drops the plan). Segments are the stretches between host
// synchronisations, as in the simulator's capuchin policy (src/plan/capuchin_policy.cpp).
#include "executor.hpp"

#include <pthread.h>
#include <stdio_ext.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cinttypes>
#include <cstring>

#include "capture.hpp"
#include "capuchin/decision_log.hpp"
#include "capuchin/units.hpp"
#include "daemon_sink.hpp"
#include "real_api.hpp"
#include "state.hpp"

namespace capuchin::interpose::exec {

std::atomic<bool> g_on{false};

Executor* g_ex = nullptr;
std::atomic<int> g_start{0};  // 0: not yet, 1: started, 2: failed
__attribute__((tls_model("initial-exec"))) thread_local bool t_held = false;

namespace {

alignas(Executor) unsigned char g_mem[sizeof(Executor)];



double steady_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

const char* env(const char* name) {
  const char* v = std::getenv(name);
  return v != nullptr && v[0] != '\0' ? v : nullptr;
}

// Parses CAPUCHIN_KERNEL_OUTPUTS="name:param,name:param": kernels that are deterministic and
// write exactly one parameter (and read only the others), so replaying them recomputes it.
void parse_outputs(Executor& e, const char* text) {
  std::string s(text);
  std::size_t pos = 0;
  while (pos < s.size()) {
    std::size_t end = s.find(',', pos);
    if (end == std::string::npos) end = s.size();
    const std::string item = s.substr(pos, end - pos);
    const std::size_t colon = item.rfind(':');
    if (colon == std::string::npos || colon == 0 || colon + 1 >= item.size()) {
      log(LogLevel::Warn, "CAPUCHIN_KERNEL_OUTPUTS: '%s' is not name:param; ignored", item.c_str());
    } else {
      char* stop = nullptr;
      const unsigned long idx = std::strtoul(item.c_str() + colon + 1, &stop, 10);
      if (stop == nullptr || *stop != '\0' || idx > 1023) log(LogLevel::Warn, "CAPUCHIN_KERNEL_OUTPUTS: bad parameter in '%s'", item.c_str());
      else e.outputs_by_name[item.substr(0, colon)] = static_cast<unsigned>(idx);
    }
    pos = end + 1;
  }
}

// A forked child has the parent's memory but none of its threads: the executor's mutex may be
// held by a thread that does not exist here, its planner thread is gone, and CUDA cannot be
// used without an exec. The child passes every call through and its exit handler skips the
// executor (locking the mutex or joining the planner would hang it).
void at_fork_child() {
  g_on.store(false, std::memory_order_relaxed);
  g_start.store(2, std::memory_order_relaxed);
  t_held = false;
  // The parent's unwritten decision records are the parent's: the child's exit must not write them again.
  if (g_ex != nullptr && g_ex->log_file != nullptr) __fpurge(g_ex->log_file);
}

// Creates streams, resolves the budget (a fraction needs the device's memory: a context).
// Runs under e.mu at the first served call. CUDA_ERROR_INVALID_CONTEXT / NOT_INITIALIZED:
// not yet possible (the hook may initialise the runtime and retry).
CUresult start(Executor& e) {
  const char* missing = nullptr;
  if (!resolve(e.api, &missing)) {
    log(LogLevel::Warn, "CAPUCHIN_BUDGET set but the driver lacks %s; the executor is off (pass-through)", missing);
    return CUDA_ERROR_NOT_SUPPORTED;
  }
  size_t free_b = 0, total_b = 0;
  if (CUresult r = e.api.mem_get_info(&free_b, &total_b); r != CUDA_SUCCESS) return r;
  auto parsed = parse_size_or_fraction(e.budget_text);
  if (!parsed) {
    log(LogLevel::Error, "CAPUCHIN_BUDGET=%s: %s; the executor is off", e.budget_text.c_str(), parsed.error().message.c_str());
    return CUDA_ERROR_INVALID_VALUE;
  }
  e.budget = parsed->resolve(total_b);
  if (e.budget == 0) {
    log(LogLevel::Error, "CAPUCHIN_BUDGET=%s resolves to 0 bytes; the executor is off", e.budget_text.c_str());
    return CUDA_ERROR_INVALID_VALUE;
  }
  if (e.budget > total_b) log(LogLevel::Warn, "CAPUCHIN_BUDGET (%" PRIu64 " bytes) exceeds the device's %zu bytes", e.budget, total_b);
  if (CUresult r = e.api.stream_create(&e.evict_stream, CU_STREAM_NON_BLOCKING); r != CUDA_SUCCESS) return r;
  if (CUresult r = e.api.stream_create(&e.prefetch_stream, CU_STREAM_NON_BLOCKING); r != CUDA_SUCCESS) return r;
  e.simcuda = driver_export("simcuda_get_stats") != nullptr;
  if (e.backend == Backend::Pinned) {
    CUmemAllocationProp prop{};
    prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    size_t g = 0;
    if (!e.api.vmm() || e.api.mem_granularity(&g, &prop, CU_MEM_ALLOC_GRANULARITY_RECOMMENDED) != CUDA_SUCCESS || g == 0) {
      log(LogLevel::Warn, "CAPUCHIN_BACKEND=pinned needs the VMM API; using uvm");
      e.backend = Backend::Uvm;
    } else {
      e.vmm_gran = g;
      // Host remapping: a host-located physical chunk mapped at the tensor's own address, so
      // an access capture missed reads over the link instead of faulting (CUDA 13, simcuda).
      CUmemAllocationProp hp = prop;
      hp.location.type = CU_MEM_LOCATION_TYPE_HOST;
      hp.location.id = 0;
      CUmemGenericAllocationHandle h = 0;
      if (e.api.mem_create(&h, g, &hp, 0) == CUDA_SUCCESS) {
        e.host_remap = true;
        e.api.mem_release(h);
      } else {
        log(LogLevel::Warn, "CAPUCHIN_BACKEND=pinned: the driver cannot create host-located VMM memory, so "
                            "evicted tensors could not stay addressable; using uvm");
        e.backend = Backend::Uvm;
      }
    }
  }
  if (e.pool_limit == 0) e.pool_limit = std::max<std::uint64_t>(4 * e.budget, 1ull << 30);
  e.pool.configure(&e.api, e.vmm_gran, e.pool_limit);
  if (e.planning_enabled) e.start_planner();
  log(LogLevel::Info, "executor on: budget %s (%" PRIu64 " bytes), backend %s%s", e.budget_text.c_str(), e.budget,
      e.backend == Backend::Uvm ? "uvm" : "pinned", e.simcuda ? ", simcuda" : "");
  return CUDA_SUCCESS;
}

// Under e.mu: the executor is started (or fails for good).



}  // namespace

// The hook thread holds the executor's mutex from before_* to after_* (set only then).
void hold(Executor& e) {
  e.mu.lock();
  t_held = true;
}

void release(Executor& e) {
  t_held = false;
  e.mu.unlock();
}

std::uint64_t mix(std::uint64_t h, std::uint64_t v) {
  h ^= v + 0x9e3779b97f4a7c15ull + (h << 6) + (h >> 2);
  return h;
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
    g_start.store(2, std::memory_order_release);
    g_on.store(false, std::memory_order_relaxed);
  }
  return false;
}

std::uint64_t kernel_sig(CUfunction f, const std::vector<Block*>& blocks) {
  std::uint64_t h = mix(static_cast<std::uint64_t>(trace::Op::Kernel) << 56, reinterpret_cast<std::uint64_t>(f));
  for (const Block* b : blocks) h = mix(h, b->bytes);
  return h;
}

bool planning_on_kernel_times(const Executor& e) { return e.planning_enabled && e.api.event_elapsed != nullptr; }

Executor& ex() { return *g_ex; }

bool counters(Counters& out) {
  if (!on() || g_ex == nullptr) return false;
  Executor& e = *g_ex;
  std::unique_lock<std::mutex> lock(e.mu, std::try_to_lock);
  if (!lock.owns_lock()) return false;  // busy (e.g. waiting for a plan this thread must send): next pass
  out = Counters{e.evicted_bytes, e.prefetched_bytes, e.recomputed_bytes, e.n_stall + e.n_ondemand, e.resident};
  return true;
}

double Executor::now_s() const { return steady_s() - t0; }

void Executor::write_record(const DecisionRecord& r) {
  std::string line = to_json_line(r);
  line.push_back('\n');
  if (log_file != nullptr) std::fwrite(line.data(), 1, line.size(), log_file);
  if (log_to_daemon) daemon_lines += line;
}

// A decision identical to the previous one (action, tensor, reason) is counted, not written:
// flush_repeats() writes one record saying how many followed (at the next different decision,
// the iteration's end and exit), so a loop of failed attempts cannot fill a disk.
void Executor::record(const char* action, const Block* b, std::uint64_t bytes, const char* reason, double expected_s,
                      const char* note) {
  if (std::strcmp(action, "evict") == 0) evicted_bytes += bytes;
  else if (std::strcmp(action, "prefetch") == 0 || std::strcmp(action, "swapin_on_demand") == 0) prefetched_bytes += bytes;
  else if (std::strcmp(action, "recompute") == 0) recomputed_bytes += bytes;
  if (log_file == nullptr && !log_to_daemon) return;
  const std::uint64_t tensor = b != nullptr ? b->id : kNoBlockId;
  const char* why = reason != nullptr ? reason : "";
  if (last_record.tensor == tensor && last_record.action == action &&
      last_record.reason == why && std::strcmp(action, "plan") != 0) {
    ++last_record.repeats;
    return;
  }
  flush_repeats();
  DecisionRecord r;
  r.t = now_s();
  r.pid = getpid();
  r.iteration = segment;
  r.action = action;
  if (tensor != kNoBlockId) r.tensor = tensor;
  r.bytes = bytes;
  r.reason = why;
  if (expected_s >= 0) r.expected_s = expected_s;
  if (note != nullptr) r.note = note;
  write_record(r);
  last_record = LastRecord{action, why, tensor, bytes, 0};
}

void Executor::flush_repeats() {
  if (last_record.repeats == 0) {
    last_record.action.clear();
    return;
  }
  DecisionRecord r;
  r.t = now_s();
  r.pid = getpid();
  r.iteration = segment;
  r.action = last_record.action;
  if (last_record.tensor != kNoBlockId) r.tensor = last_record.tensor;
  r.bytes = last_record.bytes;
  r.reason = last_record.reason;
  r.note = "repeated " + std::to_string(last_record.repeats) + " more times";
  write_record(r);
  last_record = LastRecord{};
}

Block* Executor::find_addr(std::uint64_t addr) {
  auto it = by_base.upper_bound(addr);
  if (it == by_base.begin()) return nullptr;
  --it;
  Block* b = it->second;
  return addr < b->base + b->bytes ? b : nullptr;
}

int Executor::event_get() {
  if (free_events.empty()) {
    CUevent ev = nullptr;
    if (api.event_create(&ev, CU_EVENT_DISABLE_TIMING) != CUDA_SUCCESS) return -1;
    events.push_back(ev);
    event_refs.push_back(0);
    free_events.push_back(static_cast<int>(events.size() - 1));
  }
  const int e = free_events.back();
  free_events.pop_back();
  event_refs[static_cast<std::size_t>(e)] = 1;
  return e;
}

void Executor::event_unref(int e) {
  if (e < 0) return;
  if (--event_refs[static_cast<std::size_t>(e)] == 0) free_events.push_back(e);
}

int Executor::timing_pair() {
  if (api.event_elapsed == nullptr || timing_used >= 65536) return -1;
  if (timing_used == timing.size()) {
    CUevent a = nullptr, b = nullptr;
    if (api.event_create(&a, CU_EVENT_DEFAULT) != CUDA_SUCCESS) return -1;
    if (api.event_create(&b, CU_EVENT_DEFAULT) != CUDA_SUCCESS) return -1;
    timing.push_back({a, b});
  }
  return static_cast<int>(timing_used++);
}

// Passive victim: not used by the current launch (last_tick == tick), not one whose eviction
// just failed (stuck_tick == tick); freed blocks still on the device first (their data is
// dead); else the least h = cost / (bytes x staleness) with a swap round trip as the cost
// (DTR's heuristic, as the simulator's policy).
Block* Executor::pick_victim() {
  Block* best = nullptr;
  double best_h = 0;
  for (auto& [span, b] : cache) {
    if (b->where == Where::Device || (b->kind == Kind::Managed && b->where == Where::Incoming)) return b;
  }
  const double link = simcuda ? 25e9 : 50e9;
  for (auto& [id, b] : by_id) {
    if (b->last_tick == tick || b->stuck_tick == tick) continue;
    const bool movable = b->where == Where::Device || (b->where == Where::Incoming && !b->staging_mapped);
    if (!movable) continue;
    const double cost = 2 * (2e-6 + static_cast<double>(b->span) / link);
    const double stale = static_cast<double>(tick - b->last_tick) + 1;
    const double h = cost / (static_cast<double>(b->span) * stale);
    if (best == nullptr || h < best_h) best = b, best_h = h;
  }
  return best;
}

// Frees budget for `need` more bytes. Each round evicts one victim or makes no progress on it
// (its stuck_tick is set, so it is not picked again this tick): the loop ends.
bool Executor::make_room(std::uint64_t need, const char* reason) {
  if (backend == Backend::Pinned) reclaim_completed(false);
  while (resident + need > budget) {
    Block* v = pick_victim();
    if (v == nullptr) {
      if (backend == Backend::Pinned) {
        const std::uint64_t before = resident;
        reclaim_completed(true);
        if (resident < before) continue;
        // Prefetches in flight become ordinary resident tensors (victims) once landed.
        bool landed = false;
        for (auto& [id, b] : by_id)
          if (b->where == Where::Incoming && b->staging_mapped && b->last_tick != tick) backend_finish_prefetch(b), landed = true;
        if (landed) continue;
      }
      return false;
    }
    if (v->id == kNoBlockId) {  // a freed block: its data is dead
      if (v->kind == Kind::Vmm) {
        backend_drop(v);
      } else {
        for (std::uint8_t i = 0; i < v->nfree; ++i)  // the work before its free
          (void)api.stream_wait_event(evict_stream, events[static_cast<std::size_t>(v->free_events[i])], 0);
        managed_move_out(v, true);
      }
      continue;
    }
    if (!evict(v, reason)) {
      v->stuck_tick = tick;
      continue;
    }
    if (v->where == Where::Evicting) backend_finish_evict(v, true);
    if (v->where == Where::Device) v->stuck_tick = tick;  // its host copy could not be mapped
  }
  return true;
}

bool Executor::evict(Block* b, const char* reason, double expected) {
  if (b->kind == Kind::Vmm) {
    // Recomputed in place: on the device already; the copy out waits for the replay (a use).
    // If the copy cannot start, it stays Incoming: its consumers still wait for the replay.
    const bool replaying = b->where == Where::Incoming && !b->staging_mapped;
    const int replay = replaying ? b->ready_event : -1;
    if (replaying) b->ready_event = -1, b->where = Where::Device;
    if (!backend_evict(b)) {  // no host pieces left: stays resident
      if (replaying) b->ready_event = replay, b->where = Where::Incoming;
      return false;
    }
    event_unref(replay);
  } else {
    wait_uses(b, evict_stream);
    managed_move_out(b, false);
  }
  ++n_evict;
  record("evict", b, b->span, reason, expected);
  return true;
}

bool Executor::prefetch(Block* b, const char* reason, bool on_demand, double expected) {
  const bool keep = b->where == Where::Host;
  if (b->kind == Kind::Vmm) {
    if (!backend_prefetch(b, keep)) return false;
  } else {
    managed_move_in(b);
  }
  peak_resident = std::max(peak_resident, resident);
  if (reason == nullptr || !keep) return true;  // first touch: no decision to record
  if (on_demand) {
    ++n_ondemand;
    if (!ondemand_per_segment.empty()) ++ondemand_per_segment.back();
    record("swapin_on_demand", b, b->span, reason, expected);
  } else {
    ++n_prefetch;
    record("prefetch", b, b->span, reason, expected);
  }
  return true;
}

// Makes b usable by work enqueued next on stream s (the launch being forwarded). A block that
// cannot be brought in (no room under the budget, no device memory) stays where it is, which
// is addressable: the work reads it over the link (Vmm) or faults it in (Managed). Slow, never
// wrong; only a dropped tensor that cannot be recomputed is an error.
CUresult Executor::ensure_resident(Block* b, CUstream s, bool for_write) {
  (void)for_write;
  wait_exec_work(b, s);
  switch (b->where) {
    case Where::Device:
      return CUDA_SUCCESS;
    case Where::Incoming: {
      const bool done = b->ready_event < 0 || api.event_query(events[static_cast<std::size_t>(b->ready_event)]) == CUDA_SUCCESS;
      if (!done) {
        ++n_stall;
        late_since_plan = true;
        record("stall", b, b->span, "prefetch-late");
      }
      if (b->staging_mapped) {
        backend_finish_prefetch(b);
      } else {
        if (b->ready_event >= 0) (void)api.stream_wait_event(s, events[static_cast<std::size_t>(b->ready_event)], 0);
        event_unref(b->ready_event);
        b->ready_event = -1;
        b->where = Where::Device;
      }
      return CUDA_SUCCESS;
    }
    case Where::Evicting:
      backend_cancel_evict(b);
      return CUDA_SUCCESS;
    case Where::Fresh:
    case Where::Host: {
      const bool fresh = b->where == Where::Fresh;
      if (!make_room(b->span, "pressure")) {
        ++n_fallback;
        record("fallback", b, b->span, "no-room", -1, "no evictable tensor: used from host memory");
        return CUDA_SUCCESS;
      }
      if (!prefetch(b, fresh ? nullptr : "on-demand", true)) {
        ++n_fallback;
        record("fallback", b, b->span, "no-device-memory", -1, "used from host memory");
        return CUDA_SUCCESS;
      }
      if (b->where == Where::Incoming && !b->staging_mapped) {
        if (b->ready_event >= 0) (void)api.stream_wait_event(s, events[static_cast<std::size_t>(b->ready_event)], 0);
        event_unref(b->ready_event);
        b->ready_event = -1;
        b->where = Where::Device;
      } else if (b->where == Where::Incoming) {
        backend_finish_prefetch(b);
      }
      return CUDA_SUCCESS;
    }
    case Where::Dropped:
      if (!recompute(b, "on-demand", -1)) {
        record("oom", b, b->span, "recompute-failed", -1, "a dropped tensor could not be recomputed");
        log(LogLevel::Error, "executor: tensor %" PRIu64 " was dropped and cannot be recomputed", b->id);
        return CUDA_ERROR_ILLEGAL_STATE;
      }
      return ensure_resident(b, s, for_write);
  }
  return CUDA_SUCCESS;
}

// Where the budget came from, for messages: the user's CAPUCHIN_BUDGET or capuchind's set-budget.
std::string Executor::budget_desc() const {
  return format_bytes(budget) + " (" + budget_source + ")";
}

// Records what one launch needs resident at once (`total`; `total_managed` as uvm would charge
// it). A launch over the budget is still served: what does not fit is used from host memory.
// Said once, when it first happens; the iteration's minimum follows at its end (report_need).
void Executor::note_launch_need(std::uint64_t total, std::uint64_t total_managed, const char* kernel) {
  seg_need = std::max(seg_need, total);
  if (total > min_needed) {
    min_needed = total;
    min_needed_managed = total_managed;
    min_needed_kernel = kernel;
  }
  if (total <= budget || need_warned) return;
  need_warned = true;
  log(LogLevel::Warn,
      "capuchin: the budget %s is below what this job needs at once: a launch of %s touches %s; what does not fit "
      "is used from host memory (correct, slow); the iteration's minimum follows at its end",
      budget_desc().c_str(), kernel, format_bytes(total).c_str());
  record("budget", nullptr, total, "below-minimum", -1, "a launch needs more than the budget: served from host memory");
}

// At an iteration's end: if it needed more than the budget, says once (per new minimum) what
// the whole job needs and what would help.
void Executor::report_need() {
  if (seg_need <= budget || min_needed <= need_reported) {
    seg_need = 0;
    return;
  }
  seg_need = 0;
  need_reported = min_needed;
  std::string other;
  if (backend == Backend::Pinned && min_needed_managed < min_needed)
    other = "; with CAPUCHIN_BACKEND=uvm (no granule rounding) it needs " + format_bytes(min_needed_managed);
  log(LogLevel::Warn,
      "capuchin: this job needs a budget of at least %s (%" PRIu64 " bytes: its largest launch, %s, touches that much "
      "at once)%s; the budget is %s: raise it to at least that, or expect launches to read host memory",
      format_bytes(min_needed).c_str(), min_needed, min_needed_kernel.c_str(), other.c_str(), budget_desc().c_str());
}

// A budget capuchind set (set-budget) applies from the next iteration; one below what the job
// is known to need is raised to that minimum and said so (never a job killed by its budget).
void Executor::adopt_daemon_budget() {
  std::uint64_t gen = 0;
  const std::uint64_t db = daemon_budget(&gen);
  if (gen == daemon_budget_gen) return;
  daemon_budget_gen = gen;
  if (db == 0 || db == budget) return;
  const std::uint64_t adopted = std::max(db, min_needed);
  char note[200];
  if (adopted != db)
    std::snprintf(note, sizeof note, "set-budget %" PRIu64 " bytes is below the job's minimum %" PRIu64 " bytes: using %" PRIu64,
                  db, min_needed, adopted);
  else
    std::snprintf(note, sizeof note, "budget %" PRIu64 " -> %" PRIu64 " bytes (set by capuchind)", budget, adopted);
  if (adopted != db) log(LogLevel::Warn, "capuchin: %s", note);
  record("budget", nullptr, adopted, adopted != db ? "clamped-to-minimum" : "capuchind", -1, note);
  budget = adopted;
  budget_source = adopted != db ? "set by capuchind, raised to the job's minimum" : "set by capuchind";
  need_warned = false;
  late_since_plan = true;
}

void Executor::materialize_dependents(Block* b) {
  if (b->dependents.empty()) return;
  std::vector<std::uint64_t> deps;
  deps.swap(b->dependents);
  for (std::uint64_t id : deps) {
    Block* d = find_id(id);
    if (d != nullptr && d->where == Where::Dropped) recompute(d, "input-changes", -1);
  }
}

void Executor::apply_decisions() {
  if (!plan) return;
  const std::uint32_t pos = match_pos - 1;
  const auto& ds = plan->decisions;
  while (next_decision < ds.size() && ds[next_decision].at <= pos) {
    const ExecDecision& d = ds[next_decision++];
    if (d.at < pos) continue;
    Block* b = nullptr;
    if (d.prev) {
      if (d.k < prev_locals.size()) b = find_id(prev_locals[d.k]);
    } else if (d.local) {
      if (d.k < seg_locals.size()) b = find_id(seg_locals[d.k]);
    } else {
      b = find_id(d.id);
    }
    if (b == nullptr) {
      log(LogLevel::Debug, "executor: decision %s at %u: no tensor (%s %u)", to_string(d.act).data(), d.at,
          d.prev ? "previous" : d.local ? "local" : "id", d.k);
      continue;
    }
    // pinned: Managed blocks under 1 MiB move only under pressure (passive), as when they were
    // unmovable: planned swaps of them measured worse (the pinned recompute test: twice the
    // on-demand swap-ins, of 64 KiB weights); the planner does not model them well yet.
    if (backend == Backend::Pinned && b->kind == Kind::Managed && b->bytes < (1u << 20)) continue;
    const char* reason = to_string(d.reason).data();
    switch (d.act) {
      case plan::Act::Drop:
        if (b->kind == Kind::Vmm && recompute_enabled && b->where == Where::Device && b->last_tick != tick &&
            try_drop(b, reason, d.cost_s))
          break;
        [[fallthrough]];
      case plan::Act::Evict:
        if ((b->where == Where::Device || (b->kind == Kind::Managed && b->where == Where::Incoming)) && b->last_tick != tick)
          (void)evict(b, reason, d.cost_s);
        break;
      case plan::Act::Recompute:
        if (b->where == Where::Dropped) {
          recompute(b, reason, d.cost_s);
          break;
        }
        [[fallthrough]];
      case plan::Act::Prefetch:
        if (b->where == Where::Evicting) backend_finish_evict(b, true);
        // Room as the plan expects it: blocks freed since (dead data) go first, then the
        // passive choice (the plan counted memory a little differently: granules, stragglers).
        if (b->where == Where::Host && make_room(b->span, "plan"))
          prefetch(b, reason, false, d.cost_s);
        else if (b->where == Where::Host)
          log(LogLevel::Debug, "executor: prefetch of %" PRIu64 " at %u skipped: %" PRIu64 " resident of %" PRIu64,
              b->id, d.at, resident, budget);
        break;
    }
  }
}

// Feeds one event to the matcher and issues the plan's decisions at its position; then logs it.
void Executor::note_event(SegEvent ev, const std::uint64_t* ids, unsigned nids) {
  if (matching) {
    if (match_pos >= pattern.size() || pattern[match_pos] != ev.sig) {
      matching = false;
      if (plan) record("relearn", nullptr, 0, "pattern-changed");
      plan.reset();
    } else {
      ++match_pos;
      if (!plan) {
        std::lock_guard<std::mutex> lock(plan_mu);
        if (ready && ready->segment + 1 == segment && ready->sigs == pattern) {
          plan = ready;
          next_decision = 0;
          ++n_plans;
          char note[96];
          std::snprintf(note, sizeof note, "%zu decisions: %u swaps, %u recomputes%s", plan->decisions.size(), plan->swaps,
                        plan->recomputes, plan->fits ? "" : "; does not fit the budget alone");
          record("plan", nullptr, 0, plan->from_daemon ? "capuchind" : "embedded", plan->expected_overhead_s, note);
        }
      }
      apply_decisions();
    }
  }
  ev.ids_off = static_cast<std::uint32_t>(seg_ids.size());
  seg_ids.insert(seg_ids.end(), ids, ids + nids);
  seg.push_back(ev);
}

void Executor::end_segment() {
  const bool repeated = matching && match_pos == pattern.size();
  for (SegEvent& ev : seg) {  // measured kernel times (the segment ended at a host sync)
    if (ev.timing < 0) continue;
    const auto& [a, b] = timing[static_cast<std::size_t>(ev.timing)];
    float ms = 0;
    if (api.event_elapsed(&ms, a, b) == CUDA_SUCCESS && ms > 0) ev.dur_ns = static_cast<std::uint64_t>(static_cast<double>(ms) * 1e6);
    ev.timing = -1;
  }
  timing_used = 0;
  std::vector<std::uint64_t> sigs;
  sigs.reserve(seg.size());
  for (const SegEvent& e : seg) sigs.push_back(e.sig);
  report_need();
  adopt_daemon_budget();  // the next segment is planned for it
  if (planning_enabled && !(repeated && plan && !late_since_plan)) {
    auto j = std::make_unique<PlanJob>();
    j->segment = segment;
    j->events.assign(seg.begin(), seg.end());
    j->ids = seg_ids;
    j->names = names;
    j->carried = seg_carried;
    if (repeated) j->prev_locals = prev_locals;  // places mean the same only in a repeated segment
    j->budget = budget;
    j->baseline = live_bytes;
    j->simcuda = simcuda;
    j->allow_recompute = backend == Backend::Pinned && recompute_enabled;
    j->gpu = gpu_name;
    j->dump_dir = dump_dir;
    submit(std::move(j));
    pattern = std::move(sigs);
    plan.reset();
    if (plan_wait_ms > 0) {
      std::unique_lock<std::mutex> lock(plan_mu);
      if (!plan_cv.wait_for(lock, std::chrono::milliseconds(plan_wait_ms), [&] { return ready_segment == segment; }))
        ++n_plan_waits_expired;  // the plan came too late for the segment's start
    }
  }
  flush_repeats();  // counted in the iteration they happened in
  ++segment;
  trim_cache();
  ondemand_per_segment.push_back(0);
  seg.clear();
  seg_ids.clear();
  prev_locals = seg_locals;
  seg_locals.clear();
  seg_carried.clear();
  for (auto& [id, b] : by_id) seg_carried.push_back({id, b->span});
  matching = planning_enabled && !pattern.empty();
  match_pos = 0;
  next_decision = 0;
  late_since_plan = false;
  if (log_file != nullptr) std::fflush(log_file);
  if (log_to_daemon && !daemon_lines.empty()) {
    queue_decision_lines(std::move(daemon_lines));
    daemon_lines.clear();
  }
}

// ---- hook entry points -----------------------------------------------------------------

bool init() {
  const Config& c = config();
  if (c.budget[0] == '\0') return false;
  g_ex = new (g_mem) Executor();
  Executor& e = *g_ex;
  e.t0 = steady_s();
  e.budget_text = c.budget;
  e.budget_source = std::string("CAPUCHIN_BUDGET=") + c.budget;
  e.backend = std::strcmp(c.backend, "pinned") == 0 ? Backend::Pinned : Backend::Uvm;
  if (const char* v = env("CAPUCHIN_DECISION_LOG")) {
    e.log_file = std::fopen(v, "a");
    if (e.log_file == nullptr) log(LogLevel::Error, "cannot open CAPUCHIN_DECISION_LOG=%s: %s", v, std::strerror(errno));
  }
  e.log_to_daemon = c.daemon;
  if (const char* v = env("CAPUCHIN_KERNEL_OUTPUTS")) parse_outputs(e, v);
  if (const char* v = env("CAPUCHIN_RECOMPUTE")) e.recompute_enabled = std::strcmp(v, "0") != 0;
  if (const char* v = env("CAPUCHIN_PLAN")) e.planning_enabled = std::strcmp(v, "0") != 0;
  if (const char* v = env("CAPUCHIN_PLAN_WAIT_MS")) e.plan_wait_ms = static_cast<unsigned>(std::strtoul(v, nullptr, 10));
  if (const char* v = env("CAPUCHIN_GPU")) e.gpu_name = v;
  if (const char* v = env("CAPUCHIN_PLAN_DUMP")) e.dump_dir = v;
  if (const char* v = env("CAPUCHIN_UVM_PAGE")) {
    if (auto n = parse_size(v); n && (*n & (*n - 1)) == 0) e.uvm_page = *n;
    else log(LogLevel::Warn, "CAPUCHIN_UVM_PAGE=%s is not a power of two; using 64 KiB", v);
  }
  if (const char* v = env("CAPUCHIN_PINNED_MIN")) {
    if (auto n = parse_size(v)) e.pinned_min = *n;
  }
  if (const char* v = env("CAPUCHIN_PINNED_POOL")) {
    if (auto n = parse_size(v)) e.pool_limit = *n;
  }
  e.ondemand_per_segment.push_back(0);
  pthread_atfork(nullptr, nullptr, at_fork_child);
  g_on.store(true, std::memory_order_release);
  return true;
}

void shutdown() {
  if (g_ex == nullptr || g_start.load() != 1) return;
  Executor& e = *g_ex;
  std::lock_guard<std::mutex> lock(e.mu);
  e.stop_planner();
  e.seg_need = std::max(e.seg_need, e.min_needed);
  e.report_need();
  std::string per;
  for (std::size_t i = 0; i < e.ondemand_per_segment.size(); ++i) {
    if (i) per += ',';
    per += std::to_string(e.ondemand_per_segment[i]);
  }
  log(LogLevel::Info,
      "executor summary: budget=%" PRIu64 " peak_resident=%" PRIu64 " min_needed=%" PRIu64 " evictions=%" PRIu64
      " prefetches=%" PRIu64 " on_demand=%" PRIu64 " stalls=%" PRIu64 " drops=%" PRIu64 " recomputes=%" PRIu64
      " fallbacks=%" PRIu64 " plans=%" PRIu64 " plan_waits_expired=%" PRIu64 " host_pool_peak=%" PRIu64
      " on_demand_per_iteration=[%s]",
      e.budget, e.peak_resident, e.min_needed, e.n_evict, e.n_prefetch, e.n_ondemand, e.n_stall, e.n_drop,
      e.n_recompute, e.n_fallback, e.n_plans, e.n_plan_waits_expired, e.pool.peak_bytes(), per.c_str());
  e.flush_repeats();
  if (e.log_file != nullptr) std::fflush(e.log_file);
  if (e.log_to_daemon && !e.daemon_lines.empty()) queue_decision_lines(std::move(e.daemon_lines));  // sent as the link closes
}

}  // namespace capuchin::interpose::exec
