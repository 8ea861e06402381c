// executor.cpp: the executor's hook entry points (executor.hpp), its bookkeeping (blocks,
// events, the decision log), passive mode (victims by DTR's cost / (bytes x staleness), which
// for swaps is least recently used weighted by the copy's fixed cost) and plan following
// (the current segment is matched event by event against the pattern; decisions are issued
// at their positions; a mismatch drops the plan). Segments are the stretches between host
// synchronisations, as in the simulator's capuchin policy (src/plan/capuchin_policy.cpp).
#include "executor.hpp"

#include <pthread.h>
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

namespace {

alignas(Executor) unsigned char g_mem[sizeof(Executor)];
Executor* g_ex = nullptr;
std::atomic<int> g_start{0};  // 0: not yet, 1: started, 2: failed
// The hook thread holds the executor's mutex from before_* to after_* (set only then).
__attribute__((tls_model("initial-exec"))) thread_local bool t_held = false;

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

void at_fork_child() { g_on.store(false, std::memory_order_relaxed); }

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
  if (e.planning_enabled) e.start_planner();
  log(LogLevel::Info, "executor on: budget %s (%" PRIu64 " bytes), backend %s%s", e.budget_text.c_str(), e.budget,
      e.backend == Backend::Uvm ? "uvm" : "pinned", e.simcuda ? ", simcuda" : "");
  return CUDA_SUCCESS;
}

// Under e.mu: the executor is started (or fails for good).
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

}  // namespace

Executor& ex() { return *g_ex; }

double Executor::now_s() const { return steady_s() - t0; }

void Executor::record(const char* action, const Block* b, std::uint64_t bytes, const char* reason, double expected_s,
                      const char* note) {
  if (log_file == nullptr && !log_to_daemon) return;
  DecisionRecord r;
  r.t = now_s();
  r.pid = getpid();
  r.iteration = segment;
  r.action = action;
  if (b != nullptr && b->id != kNoBlockId) r.tensor = b->id;
  r.bytes = bytes;
  r.reason = reason != nullptr ? reason : "";
  if (expected_s >= 0) r.expected_s = expected_s;
  if (note != nullptr) r.note = note;
  std::string line = to_json_line(r);
  line.push_back('\n');
  if (log_file != nullptr) std::fwrite(line.data(), 1, line.size(), log_file);
  if (log_to_daemon) daemon_lines += line;
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

void Executor::mark_use(Block* b, CUstream s, int ev) {
  for (std::uint8_t i = 0; i < b->nuses; ++i) {
    if (b->uses[i].stream == s) {
      event_ref(ev);
      event_unref(b->uses[i].event);
      b->uses[i].event = ev;
      return;
    }
  }
  if (b->nuses < 4) {
    event_ref(ev);
    b->uses[b->nuses++] = UseMark{s, ev};
  } else {
    b->many_streams = true;
  }
}

void Executor::wait_uses(Block* b, CUstream on) {
  if (b->many_streams) {
    api.ctx_synchronize();
    return;
  }
  for (std::uint8_t i = 0; i < b->nuses; ++i)
    if (b->uses[i].event >= 0) api.stream_wait_event(on, events[static_cast<std::size_t>(b->uses[i].event)], 0);
}

// Passive victim: not used by the current launch (last_tick == tick), not plain; freed blocks
// still on the device first (their data is dead); else the least h = cost / (bytes x
// staleness) with a swap round trip as the cost (DTR's heuristic, as the simulator's policy).
Block* Executor::pick_victim() {
  Block* best = nullptr;
  double best_h = 0;
  for (auto& [span, b] : cache) {
    if (b->where == Where::Device || (backend == Backend::Uvm && b->where == Where::Incoming)) return b;
  }
  const double link = simcuda ? 25e9 : 50e9;
  for (auto& [id, b] : by_id) {
    if (b->plain || b->last_tick == tick) continue;
    const bool movable = b->where == Where::Device || (b->where == Where::Incoming && !b->staging_mapped);
    if (!movable) continue;
    const double cost = 2 * (2e-6 + static_cast<double>(b->span) / link);
    const double stale = static_cast<double>(tick - b->last_tick) + 1;
    const double h = cost / (static_cast<double>(b->span) * stale);
    if (best == nullptr || h < best_h) best = b, best_h = h;
  }
  return best;
}

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
      if (backend == Backend::Pinned) {
        backend_drop(v);
      } else {
        for (std::uint8_t i = 0; i < v->nfree; ++i)  // the work before its free
          api.stream_wait_event(evict_stream, events[static_cast<std::size_t>(v->free_events[i])], 0);
        if (v->where == Where::Incoming && v->ready_event >= 0) {
          api.stream_wait_event(evict_stream, events[static_cast<std::size_t>(v->ready_event)], 0);
          event_unref(v->ready_event);
          v->ready_event = -1;
        }
        CUdeviceptr p = v->base;
        size_t n = v->bytes;
        if (api.mem_discard == nullptr || api.mem_discard(&p, &n, 1, 0, evict_stream) != CUDA_SUCCESS) {
          CUmemLocation host{CU_MEM_LOCATION_TYPE_HOST, 0};
          api.mem_prefetch(v->base, v->bytes, host, 0, evict_stream);
        }
        const int ev = event_get();
        if (ev >= 0) {
          api.event_record(events[static_cast<std::size_t>(ev)], evict_stream);
          event_unref(last_evict_event);
          last_evict_event = ev;
          evict_pending = true;
        }
        v->where = Where::Host;
        resident -= v->span;
      }
      continue;
    }
    evict(v, reason);
    if (backend == Backend::Pinned && v->where == Where::Evicting && !backend_finish_evict(v, true)) return false;
  }
  return true;
}

void Executor::evict(Block* b, const char* reason, double expected) {
  if (backend == Backend::Pinned && b->where == Where::Incoming && !b->staging_mapped) {
    // Recomputed in place: on the device already; the copy out waits for the replay (a use).
    event_unref(b->ready_event);
    b->ready_event = -1;
    b->where = Where::Device;
  }
  if (backend == Backend::Pinned) {
    backend_evict(b);
    if (b->where != Where::Evicting) return;  // no host chunk left: stays resident
  } else {
    wait_uses(b, evict_stream);
    if (b->where == Where::Incoming && b->ready_event >= 0) {
      api.stream_wait_event(evict_stream, events[static_cast<std::size_t>(b->ready_event)], 0);
      event_unref(b->ready_event);
      b->ready_event = -1;
    }
    CUmemLocation host{CU_MEM_LOCATION_TYPE_HOST, 0};
    api.mem_prefetch(b->base, b->bytes, host, 0, evict_stream);
    const int ev = event_get();
    if (ev >= 0) {
      api.event_record(events[static_cast<std::size_t>(ev)], evict_stream);
      event_unref(last_evict_event);
      last_evict_event = ev;
      evict_pending = true;
    }
    b->where = Where::Host;
    resident -= b->span;
  }
  ++n_evict;
  record("evict", b, b->span, reason, expected);
}

void Executor::prefetch(Block* b, const char* reason, bool on_demand, double expected) {
  const bool keep = b->where == Where::Host;
  if (backend == Backend::Pinned) {
    backend_prefetch(b, keep);
  } else {
    if (evict_pending && last_evict_event >= 0) {
      api.stream_wait_event(prefetch_stream, events[static_cast<std::size_t>(last_evict_event)], 0);
      evict_pending = false;
    }
    CUmemLocation dev{CU_MEM_LOCATION_TYPE_DEVICE, 0};
    api.mem_prefetch(b->base, b->bytes, dev, 0, prefetch_stream);
    const int ev = event_get();
    if (ev >= 0) api.event_record(events[static_cast<std::size_t>(ev)], prefetch_stream);
    b->ready_event = ev;
    b->where = Where::Incoming;
    resident += b->span;
  }
  peak_resident = std::max(peak_resident, resident);
  if (reason == nullptr || !keep) return;  // first touch: no decision to record
  if (on_demand) {
    ++n_ondemand;
    if (!ondemand_per_segment.empty()) ++ondemand_per_segment.back();
    record("swapin_on_demand", b, b->span, reason, expected);
  } else {
    ++n_prefetch;
    record("prefetch", b, b->span, reason, expected);
  }
}

// Makes b usable by work enqueued next on stream s (the launch being forwarded).
CUresult Executor::ensure_resident(Block* b, CUstream s, bool for_write) {
  (void)for_write;
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
      if (backend == Backend::Pinned && b->staging_mapped) {
        backend_finish_prefetch(b);
      } else {
        if (b->ready_event >= 0) api.stream_wait_event(s, events[static_cast<std::size_t>(b->ready_event)], 0);
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
        record("oom", b, b->span, "no-victim", -1, "budget exceeded: no evictable tensor");
        if (backend == Backend::Pinned) {
          log(LogLevel::Error,
              "capuchin: out of memory: tensor %" PRIu64 " (%zu bytes charged) cannot be brought in under "
              "CAPUCHIN_BUDGET=%s (%" PRIu64 " bytes): %" PRIu64 " bytes are resident and none can be evicted "
              "(%" PRIu64 " unevictable); the job needs at least %" PRIu64 " bytes",
              b->id, b->span, budget_text.c_str(), budget, resident, plain_bytes, min_needed);
          if (log_level() >= LogLevel::Debug) {
            for (auto& [id, x] : by_id)
              log(LogLevel::Debug, "  block %" PRIu64 " where %d span %zu plain %d current %d", id, static_cast<int>(x->where),
                  x->span, x->plain, x->last_tick == tick);
            for (Block* x : cur) log(LogLevel::Debug, "  cur %" PRIu64, x->id);
            for (auto& [sp, x] : cache)
              log(LogLevel::Debug, "  cached where %d span %zu", static_cast<int>(x->where), x->span);
          }
          return CUDA_ERROR_OUT_OF_MEMORY;
        }
      }
      prefetch(b, fresh ? nullptr : "on-demand", true);
      if (b->where == Where::Incoming && !(backend == Backend::Pinned && b->staging_mapped)) {
        if (b->ready_event >= 0) api.stream_wait_event(s, events[static_cast<std::size_t>(b->ready_event)], 0);
        event_unref(b->ready_event);
        b->ready_event = -1;
        b->where = Where::Device;
        return CUDA_SUCCESS;
      }
      if (b->where == Where::Incoming) backend_finish_prefetch(b);
      return b->where == Where::Device ? CUDA_SUCCESS : CUDA_ERROR_OUT_OF_MEMORY;
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
    if (b == nullptr || b->plain) {
      log(LogLevel::Debug, "executor: decision %s at %u: no tensor (%s %u)", to_string(d.act).data(), d.at,
          d.prev ? "previous" : d.local ? "local" : "id", d.k);
      continue;
    }
    const char* reason = to_string(d.reason).data();
    switch (d.act) {
      case plan::Act::Drop:
        if (backend == Backend::Pinned && recompute_enabled && b->where == Where::Device && b->last_tick != tick &&
            try_drop(b, reason, d.cost_s))
          break;
        [[fallthrough]];
      case plan::Act::Evict:
        if ((b->where == Where::Device || (backend == Backend::Uvm && b->where == Where::Incoming)) && b->last_tick != tick)
          evict(b, reason, d.cost_s);
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
          record("plan", nullptr, 0, "embedded", plan->expected_overhead_s, note);
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
  if (planning_enabled && !(repeated && plan && !late_since_plan)) {
    auto j = std::make_unique<PlanJob>();
    j->segment = segment;
    j->events = seg;
    j->ids = seg_ids;
    j->names = names;
    j->carried = seg_carried;
    if (repeated) j->prev_locals = prev_locals;  // places mean the same only in a repeated segment
    j->budget = budget;
    j->baseline = live_bytes;
    j->simcuda = simcuda;
    j->allow_recompute = backend == Backend::Pinned && recompute_enabled;
    submit(std::move(j));
    pattern = std::move(sigs);
    plan.reset();
    if (plan_wait_ms > 0) {
      std::unique_lock<std::mutex> lock(plan_mu);
      plan_cv.wait_for(lock, std::chrono::milliseconds(plan_wait_ms), [&] { return ready_segment == segment; });
    }
  }
  ++segment;
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
  std::string per;
  for (std::size_t i = 0; i < e.ondemand_per_segment.size(); ++i) {
    if (i) per += ',';
    per += std::to_string(e.ondemand_per_segment[i]);
  }
  log(LogLevel::Info,
      "executor summary: budget=%" PRIu64 " peak_resident=%" PRIu64 " min_needed=%" PRIu64 " evictions=%" PRIu64
      " prefetches=%" PRIu64 " on_demand=%" PRIu64 " stalls=%" PRIu64 " drops=%" PRIu64 " recomputes=%" PRIu64
      " fallbacks=%" PRIu64 " plans=%" PRIu64 " on_demand_per_iteration=[%s]",
      e.budget, e.peak_resident, e.min_needed, e.n_evict, e.n_prefetch, e.n_ondemand, e.n_stall, e.n_drop,
      e.n_recompute, e.n_fallback, e.n_plans, per.c_str());
  if (e.log_file != nullptr) std::fflush(e.log_file);
}

bool alloc(CUdeviceptr* out, std::size_t bytes, CUstream s, bool per_thread, bool stream_ordered, CUresult* r) {
  if (g_ex == nullptr || out == nullptr || bytes == 0) return false;
  Executor& e = *g_ex;
  std::lock_guard<std::mutex> lock(e.mu);
  CUresult why = CUDA_SUCCESS;
  if (!started(e, &why)) {
    if (why == CUDA_ERROR_INVALID_CONTEXT || why == CUDA_ERROR_NOT_INITIALIZED) {
      *r = why;
      return true;  // the runtime hook initialises the context and retries
    }
    return false;
  }
  const CUstream ds = driver_stream(s, per_thread);
  if (stream_ordered && capture_sequence(reinterpret_cast<std::uint64_t>(s), per_thread) != 0) {
    ++e.n_fallback;
    e.record("fallback", nullptr, bytes, "stream-capture", -1, "allocated by the driver inside a graph capture");
    return false;  // a graph's allocation node: the driver's, outside the budget
  }
  SegEvent ev;
  ev.op = static_cast<std::uint8_t>(trace::Op::Alloc);
  ev.sig = mix(static_cast<std::uint64_t>(trace::Op::Alloc) << 56, bytes);
  ++e.tick;
  const bool small_pinned = e.backend == Backend::Pinned && bytes < e.pinned_min;
  std::size_t span = e.backend == Backend::Uvm ? (bytes + e.uvm_page - 1) / e.uvm_page * e.uvm_page
                     : small_pinned            ? (bytes + 4095) / 4096 * 4096
                                               : (bytes + e.vmm_gran - 1) / e.vmm_gran * e.vmm_gran;
  if (span + (small_pinned ? 0 : e.plain_bytes) > e.budget) {
    log(LogLevel::Error,
        "capuchin: out of memory: an allocation of %zu bytes (%zu charged) cannot fit CAPUCHIN_BUDGET=%s (%" PRIu64
        " bytes)%s; the job needs at least %zu bytes",
        bytes, span, e.budget_text.c_str(), e.budget, e.plain_bytes ? " with the unevictable memory held" : "",
        static_cast<std::size_t>(span + e.plain_bytes));
    e.record("oom", nullptr, span, "allocation-exceeds-budget");
    *r = CUDA_ERROR_OUT_OF_MEMORY;
    return true;
  }
  // Reuse a freed block of the same span when stream order (or completion) allows.
  Block* b = nullptr;
  auto range = e.cache.equal_range(span);
  for (int pass = 0; pass < 2 && b == nullptr; ++pass) {
    for (auto it = range.first; it != range.second; ++it) {
      Block* c = it->second;
      if (pass == 0 && c->where != Where::Device) continue;
      bool ready = stream_ordered && c->free_stream_valid && c->free_stream == ds;
      if (!ready) {
        ready = true;
        for (std::uint8_t i = 0; i < c->nfree && ready; ++i)
          ready = e.api.event_query(e.events[static_cast<std::size_t>(c->free_events[i])]) == CUDA_SUCCESS;
      }
      if (!ready && stream_ordered) {
        for (std::uint8_t i = 0; i < c->nfree; ++i)
          e.api.stream_wait_event(ds, e.events[static_cast<std::size_t>(c->free_events[i])], 0);
        ready = true;
      }
      if (!ready) continue;
      b = c;
      e.cache.erase(it);
      break;
    }
  }
  if (b != nullptr) {
    if (b->where == Where::Host || b->where == Where::Dropped) b->where = Where::Fresh;  // dead data: nothing to copy back
    for (std::uint8_t i = 0; i < b->nfree; ++i) e.event_unref(b->free_events[i]);
    b->nfree = 0;
    b->free_stream_valid = false;
    b->bytes = bytes;
  } else {
    b = new Block;
    b->bytes = bytes;
    b->span = span;
    if (e.backend == Backend::Pinned && !e.make_room(span, "pressure")) {
      delete b;
      e.record("oom", nullptr, span, "no-victim");
      log(LogLevel::Error, "capuchin: out of memory: %zu bytes requested under CAPUCHIN_BUDGET=%s (%" PRIu64
                           " bytes), %" PRIu64 " resident and nothing evictable", bytes, e.budget_text.c_str(),
          e.budget, e.resident);
      *r = CUDA_ERROR_OUT_OF_MEMORY;
      return true;
    }
    const CUresult a = e.backend_alloc(b);
    if (a != CUDA_SUCCESS) {
      delete b;
      ++e.n_fallback;
      e.record("fallback", nullptr, bytes, "backend-alloc-failed", -1, "served by the real allocator");
      return false;
    }
  }
  const MemKind kind = MemKind::Device;
  b->id = record_alloc(b->base, bytes, kind, stream_ordered ? AllocSub::Async : AllocSub::Device,
                       reinterpret_cast<std::uint64_t>(s), per_thread ? kPerThread : 0);
  b->last_tick = e.tick;
  b->local = static_cast<std::uint32_t>(e.seg_locals.size());
  e.by_id[b->id] = b;
  e.by_base[b->base] = b;
  e.live_bytes += b->span;
  e.seg_locals.push_back(b->id);
  ev.id = b->id;
  ev.bytes = b->span;
  e.note_event(ev, nullptr, 0);
  *out = b->base;
  *r = CUDA_SUCCESS;
  return true;
}

bool free(CUdeviceptr p, CUstream s, bool per_thread, bool stream_ordered, CUresult* r) {
  if (g_ex == nullptr || g_start.load(std::memory_order_acquire) != 1) return false;
  Executor& e = *g_ex;
  std::lock_guard<std::mutex> lock(e.mu);
  auto it = e.by_base.find(p);
  if (it == e.by_base.end()) return false;
  Block* b = it->second;
  ++e.tick;
  e.materialize_dependents(b);
  SegEvent ev;
  ev.op = static_cast<std::uint8_t>(trace::Op::Free);
  ev.sig = mix(static_cast<std::uint64_t>(trace::Op::Free) << 56, b->bytes);
  ev.id = b->id;
  e.note_event(ev, nullptr, 0);
  record_free(p, reinterpret_cast<std::uint64_t>(s), per_thread ? kPerThread : 0);
  const CUstream ds = driver_stream(s, per_thread);
  e.by_base.erase(it);
  e.by_id.erase(b->id);
  e.live_bytes -= b->span;
  if (stream_ordered) {
    const int fe = e.event_get();
    if (fe >= 0) {
      e.api.event_record(e.events[static_cast<std::size_t>(fe)], ds);
      b->free_events[b->nfree++] = fe;
    }
    b->free_stream = ds;
    b->free_stream_valid = true;
  } else if (b->many_streams) {
    e.api.ctx_synchronize();
  } else {
    for (std::uint8_t i = 0; i < b->nuses; ++i) {
      if (b->uses[i].event < 0) continue;
      e.event_ref(b->uses[i].event);
      b->free_events[b->nfree++] = b->uses[i].event;
    }
  }
  for (std::uint8_t i = 0; i < b->nuses; ++i) e.event_unref(b->uses[i].event);
  b->nuses = 0;
  b->many_streams = false;
  b->id = kNoBlockId;
  b->producer.reset();
  b->dependents.clear();
  b->version = 0;
  if (e.backend == Backend::Pinned && b->where == Where::Evicting) e.backend_cancel_evict(b);
  if (e.backend == Backend::Pinned && b->where == Where::Incoming && b->staging_mapped) e.backend_finish_prefetch(b);
  if (b->plain) {
    // Plain device memory goes back to the driver (cuMemFree synchronises, as cudaFree does).
    e.resident -= b->span;
    e.plain_bytes -= b->span;
    e.backend_release(b);
    for (std::uint8_t i = 0; i < b->nfree; ++i) e.event_unref(b->free_events[i]);
    delete b;
  } else {
    e.cache.insert({b->span, b});
  }
  *r = CUDA_SUCCESS;
  return true;
}

CUresult before_unknown_work(CUstream s, bool per_thread) {
  if (g_ex == nullptr || g_start.load(std::memory_order_acquire) != 1) return CUDA_SUCCESS;
  Executor& e = *g_ex;
  std::lock_guard<std::mutex> lock(e.mu);
  ++e.tick;
  const CUstream ds = driver_stream(s, per_thread);
  std::vector<Block*> all;
  for (auto& [id, b] : e.by_id) all.push_back(b);
  for (Block* b : all) {
    if (b->where == Where::Dropped && !e.recompute(b, "unknown-access", -1)) return CUDA_ERROR_ILLEGAL_STATE;
    if (b->where == Where::Evicting) e.backend_cancel_evict(b);
    if (b->where == Where::Incoming) e.ensure_resident(b, ds, true);
  }
  return CUDA_SUCCESS;
}

CUresult before_launch(const Launch& l, const std::uint64_t* ids, unsigned n) {
  if (g_ex == nullptr || g_start.load(std::memory_order_acquire) != 1) return CUDA_SUCCESS;
  Executor& e = *g_ex;
  if (capture_sequence(reinterpret_cast<std::uint64_t>(l.stream), l.per_thread) != 0) {
    // Being captured into a graph: nothing may be enqueued around it; its accesses are made
    // safe when the graph is launched (before_unknown_work).
    return CUDA_SUCCESS;
  }
  hold(e);  // released in after_launch (or here, on an error)
  ++e.tick;
  e.cur.clear();
  e.cur_output = nullptr;
  e.cur_producer.reset();
  e.cur_unknown = !l.complete_scan;
  std::uint64_t total = 0;
  std::vector<std::uint64_t> old_ticks;
  for (unsigned i = 0; i < n; ++i) {
    if (Block* b = e.find_id(ids[i])) {
      e.cur.push_back(b);
      old_ticks.push_back(b->last_tick);
      b->last_tick = e.tick;
      if (!b->plain) total += b->span;  // plain blocks are in plain_bytes already
    }
  }
  const CUstream ds = driver_stream(l.stream, l.per_thread);
  Executor::FuncInfo* fi = l.func != nullptr ? &e.func_info(l.func, l.layout) : nullptr;
  if (fi != nullptr && fi->output >= 0 && l.params != nullptr && static_cast<std::size_t>(fi->output) < fi->offset.size()) {
    std::uint64_t ptr = 0;
    std::memcpy(&ptr, l.params[fi->output], sizeof ptr);
    e.cur_output = e.find_addr(ptr);
    if (e.cur_output != nullptr && std::find(e.cur.begin(), e.cur.end(), e.cur_output) == e.cur.end()) e.cur_output = nullptr;
  }
  const bool known_writes = e.cur_output != nullptr;
  // Kernel event for the learner: reads then writes (declared outputs), else touch.
  SegEvent ev;
  ev.op = static_cast<std::uint8_t>(trace::Op::Kernel);
  ev.sig = kernel_sig(l.func, e.cur);
  if (fi != nullptr) {
    auto [it, fresh] = e.name_index.try_emplace(reinterpret_cast<std::uint64_t>(l.func), static_cast<std::uint32_t>(e.names.size()));
    if (fresh) e.names.push_back(fi->name.empty() ? "kernel" : fi->name);
    ev.name = it->second;
  } else {
    auto [it, fresh] = e.name_index.try_emplace(0, static_cast<std::uint32_t>(e.names.size()));
    if (fresh) e.names.push_back("kernel");
    ev.name = it->second;
  }
  std::vector<std::uint64_t> order;
  order.reserve(e.cur.size());
  for (Block* b : e.cur)
    if (b != e.cur_output) order.push_back(b->id);
  if (known_writes) order.push_back(e.cur_output->id);
  ev.touch = !known_writes;
  ev.nreads = static_cast<std::uint32_t>(known_writes ? order.size() - 1 : order.size());
  ev.nwrites = known_writes ? 1 : 0;
  for (Block* b : e.cur) ev.bytes += b->span;
  e.note_event(ev, order.data(), static_cast<unsigned>(order.size()));

  // Recomputations first, while this launch's tensors are not yet protected (a replay needs
  // room for its own inputs and output, not for this launch's): dropped tensors whose producer
  // reads what this launch may write, then dropped tensors it touches.
  for (std::size_t i = 0; i < e.cur.size(); ++i) e.cur[i]->last_tick = old_ticks[i];
  for (Block* b : e.cur)
    if (!known_writes || b == e.cur_output) e.materialize_dependents(b);
  if (e.cur_unknown && e.backend == Backend::Pinned) {
    // Accesses unknown: nothing may be missing from its address.
    for (auto& [id, b] : e.by_id)
      if (b->where == Where::Dropped) e.recompute(b, "unknown-access", -1);
  }
  for (Block* b : e.cur)
    if (b->where == Where::Dropped) e.recompute(b, "on-demand", -1);
  for (Block* b : e.cur) b->last_tick = e.tick;
  if (total + e.plain_bytes > e.budget) {
    e.record("oom", nullptr, total, "launch-exceeds-budget");
    log(LogLevel::Error,
        "capuchin: out of memory: a launch of %s touches %" PRIu64 " bytes; with %" PRIu64
        " unevictable bytes that exceeds CAPUCHIN_BUDGET=%s (%" PRIu64 " bytes); the job needs at least %" PRIu64 " bytes",
        fi != nullptr && !fi->name.empty() ? fi->name.c_str() : "a kernel", total, e.plain_bytes, e.budget_text.c_str(),
        e.budget, total + e.plain_bytes);
    e.seg.pop_back();
    release(e);
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  e.min_needed = std::max(e.min_needed, total + e.plain_bytes);
  for (Block* b : e.cur) {
    if (CUresult r = e.ensure_resident(b, ds, !known_writes || b == e.cur_output); r != CUDA_SUCCESS) {
      e.seg.pop_back();
      release(e);
      return r;
    }
  }
  if (planning_on_kernel_times(e)) {
    const int tp = e.timing_pair();
    if (tp >= 0) {
      e.api.event_record(e.timing[static_cast<std::size_t>(tp)].first, ds);
      e.seg.back().timing = tp;
    }
  }
  if (known_writes && e.recompute_enabled && e.backend == Backend::Pinned && fi != nullptr && !fi->offset.empty()) {
    auto p = std::make_shared<Producer>();
    p->func = l.func;
    std::memcpy(p->grid, l.grid, sizeof p->grid);
    std::memcpy(p->block, l.block, sizeof p->block);
    p->shmem = l.shmem;
    p->stream = ds;
    p->name = fi->name;
    p->params.assign(fi->buffer, 0);
    p->param_offset = fi->offset;
    for (std::size_t i = 0; i < fi->offset.size(); ++i)
      if (l.params[i] != nullptr) std::memcpy(p->params.data() + fi->offset[i], l.params[i], fi->size[i]);
    for (Block* b : e.cur) {
      if (b == e.cur_output) continue;
      p->input_ids.push_back(b->id);
      p->input_versions.push_back(b->version);
    }
    e.cur_producer = std::move(p);
  }
  return CUDA_SUCCESS;
}

void after_launch(const Launch& l, bool launched) {
  if (!t_held) return;
  Executor& e = *g_ex;
  const CUstream ds = driver_stream(l.stream, l.per_thread);
  if (launched && !e.seg.empty() && e.seg.back().timing >= 0)
    e.api.event_record(e.timing[static_cast<std::size_t>(e.seg.back().timing)].second, ds);
  if (launched) {
    const int ev = e.event_get();
    if (ev >= 0) e.api.event_record(e.events[static_cast<std::size_t>(ev)], ds);
    for (Block* b : e.cur) {
      if (ev >= 0) e.mark_use(b, ds, ev);
      if (e.cur_output == nullptr || b == e.cur_output) {
        ++b->version;
        b->producer.reset();
      }
    }
    if (e.cur_output != nullptr) e.cur_output->producer = std::move(e.cur_producer);
    e.event_unref(ev);
  } else if (!e.seg.empty()) {
    e.seg.pop_back();
  }
  e.cur.clear();
  e.cur_output = nullptr;
  e.cur_producer.reset();
  release(e);
}

CUresult before_copy(std::uint64_t dst, std::uint64_t src, std::size_t bytes, CUstream s, bool per_thread, bool memset) {
  if (g_ex == nullptr || g_start.load(std::memory_order_acquire) != 1) return CUDA_SUCCESS;
  if (capture_sequence(reinterpret_cast<std::uint64_t>(s), per_thread) != 0) return CUDA_SUCCESS;  // see before_launch
  Executor& e = *g_ex;
  hold(e);  // released in after_copy (or here, on an error)
  ++e.tick;
  e.cur.clear();
  e.cur_output = nullptr;
  Block* d = dst != 0 ? e.find_addr(dst) : nullptr;
  Block* sblk = !memset && src != 0 ? e.find_addr(src) : nullptr;
  SegEvent ev;
  const CUstream ds = driver_stream(s, per_thread);
  std::uint64_t ids[2];
  unsigned nids = 0;
  if (memset) {
    ev.op = static_cast<std::uint8_t>(trace::Op::Kernel);
    auto [it, fresh] = e.name_index.try_emplace(1, static_cast<std::uint32_t>(e.names.size()));
    if (fresh) e.names.push_back("memset");
    ev.name = it->second;
    ev.sig = mix(static_cast<std::uint64_t>(trace::Op::Kernel) << 56, bytes ^ 0x5e75e7);
    ev.bytes = bytes;
    if (d != nullptr) ids[nids++] = d->id, ev.nwrites = 1;
  } else {
    if (d == nullptr && sblk == nullptr) return CUDA_SUCCESS;  // not ours: after_copy releases
    ev.op = static_cast<std::uint8_t>(trace::Op::Copy);
    ev.dir = static_cast<std::uint8_t>(d != nullptr && sblk != nullptr ? trace::CopyDir::D2D
                                       : d != nullptr              ? trace::CopyDir::H2D
                                                                   : trace::CopyDir::D2H);
    ev.sig = mix(static_cast<std::uint64_t>(trace::Op::Copy) << 56 | static_cast<std::uint64_t>(ev.dir) << 48, bytes);
    ev.bytes = bytes;
    ev.id = sblk != nullptr ? sblk->id : kNoBlockId;
    ev.id2 = d != nullptr ? d->id : kNoBlockId;
  }
  e.note_event(ev, ids, nids);
  if (sblk != nullptr) e.cur.push_back(sblk);
  if (d != nullptr && d != sblk) e.cur.push_back(d);
  for (Block* b : e.cur) b->last_tick = e.tick;
  if (d != nullptr) e.materialize_dependents(d);
  e.cur_output = d;
  // uvm: the driver migrates or reads managed pages as the copy needs; pinned: evicted
  // tensors stay addressable (host chunk), but moves in flight and dropped ones are settled.
  for (Block* b : e.cur) {
    if (e.backend == Backend::Uvm) {
      if (b->where == Where::Incoming && b->ready_event >= 0)
        e.api.stream_wait_event(ds, e.events[static_cast<std::size_t>(b->ready_event)], 0);
      continue;
    }
    if (b->where == Where::Incoming || b->where == Where::Evicting || b->where == Where::Dropped) {
      if (CUresult r = e.ensure_resident(b, ds, b == d); r != CUDA_SUCCESS) {
        e.cur.clear();
        release(e);
        return r;
      }
    }
  }
  e.cur_producer.reset();
  e.cur_unknown = false;
  // remember the stream for after_copy
  e.cur_producer = std::make_shared<Producer>();
  e.cur_producer->stream = ds;
  return CUDA_SUCCESS;
}

void after_copy(bool ok) {
  if (!t_held) return;
  Executor& e = *g_ex;
  if (ok && !e.cur.empty() && e.cur_producer) {
    const CUstream ds = e.cur_producer->stream;
    const int ev = e.event_get();
    if (ev >= 0) e.api.event_record(e.events[static_cast<std::size_t>(ev)], ds);
    for (Block* b : e.cur) {
      if (ev >= 0) e.mark_use(b, ds, ev);
      if (b == e.cur_output) {
        ++b->version;
        b->producer.reset();
      }
    }
    e.event_unref(ev);
  }
  e.cur.clear();
  e.cur_output = nullptr;
  e.cur_producer.reset();
  release(e);
}

void on_sync() {
  if (g_ex == nullptr || g_start.load(std::memory_order_acquire) != 1) return;
  Executor& e = *g_ex;
  std::lock_guard<std::mutex> lock(e.mu);
  ++e.tick;
  SegEvent ev;
  ev.op = static_cast<std::uint8_t>(trace::Op::Sync);
  ev.sig = static_cast<std::uint64_t>(trace::Op::Sync) << 56;
  e.note_event(ev, nullptr, 0);
  if (e.backend == Backend::Pinned) e.reclaim_completed(false);
  e.end_segment();
}

}  // namespace capuchin::interpose::exec
