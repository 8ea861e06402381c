// executor_impl.hpp: the executor's state, composed of parts that each own theirs: the
// blocks (block.hpp), their memory per kind (memory.hpp), the events that order them
// (event_pool.hpp, ordering.hpp), the decision log and counts (decisions.hpp), the policy and
// its planner thread (planning.hpp) and the kernels it may replay (kernels.hpp). The Executor
// ties them together: the hook entry points (entry.cpp), residency (residency.cpp),
// recomputation (recompute.cpp), and start, iteration ends and exit (executor.cpp).
//
// Locking: one mutex, `mu`, guards all of it. Entry points hold it through a Held guard for
// the bookkeeping only: the job's own launch or copy is forwarded after it is released (the
// blocks it touches stay pinned meanwhile), and a wait on the host (a move that must complete
// before memory is unmapped, a stream or context sync as a fallback) happens in await*, which
// leaves the lock and takes it again: callers pin the blocks they hold across it and look at
// their state again afterwards. Nothing waits for a plan. While the executor stands by
// (standby.hpp), launches, copies and graph launches take no lock at all; a wake leaves the
// lock while it waits for the ones being forwarded, and nothing moves out meanwhile.
#pragma once

#include <cuda.h>

#include <deque>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "api.hpp"
#include "block.hpp"
#include "capture_mode.hpp"
#include "chains.hpp"
#include "decisions.hpp"
#include "event_pool.hpp"
#include "host_pool.hpp"
#include "kernels.hpp"
#include "ledger.hpp"
#include "memory.hpp"
#include "ordering.hpp"
#include "planning.hpp"
#include "standby.hpp"
#include "recompute_trial.hpp"
#include "device_checksum.hpp"
#include "write_sets.hpp"

namespace capuchin::interpose::exec {

enum class Backend : std::uint8_t { Uvm, Pinned };

struct ExecOptions {
  std::string budget_text;          // CAPUCHIN_BUDGET as given
  Backend backend = Backend::Uvm;   // CAPUCHIN_BACKEND
  bool recompute = true;            // CAPUCHIN_RECOMPUTE (0 / off: never)
  bool infer_writes = true;         // CAPUCHIN_RECOMPUTE=declared: only CAPUCHIN_KERNEL_OUTPUTS' kernels
  bool device_checksum = true;      // CAPUCHIN_PROBE_CHECKSUM=host: probations checksum through host copies
  std::size_t uvm_page = 64 * 1024; // CAPUCHIN_UVM_PAGE
  std::size_t pinned_min = 0;       // CAPUCHIN_PINNED_MIN: smaller tensors are Managed
  std::uint64_t pool_limit = 0;     // CAPUCHIN_PINNED_POOL (0: the default)
  bool serve_libraries = false;     // CAPUCHIN_SERVE=all: also CUDA libraries' own allocations
  bool standby = true;              // CAPUCHIN_STANDBY=0: never stand by (standby.hpp)
};

// What one launch needs resident at once, the most over the job (its minimum budget).
struct NeedTracker {
  std::uint64_t min_needed = 0, min_needed_managed = 0, iteration_need = 0, reported = 0;
  std::string kernel;
  bool warned = false;
};

class Executor;

// The executor's lock for one hook call. Blocks released on the way (trimmed from the cache)
// whose last driver call may synchronise (cuMemFree of managed memory) are freed after it.
// While a graph capture is in progress the thread's capture mode is relaxed throughout, so the
// executor's own queries, waits and allocations cannot invalidate it (capture_mode.hpp).
class Held {
 public:
  explicit Held(Executor& e);
  ~Held();
  Held(const Held&) = delete;
  Held& operator=(const Held&) = delete;

 private:
  Executor& e_;
  RelaxedCaptureScope relaxed_;  // before lk_: relaxed until the frees after the unlock are done
  std::unique_lock<std::mutex> lk_;
};

class Executor {
 public:
  ExecOptions opt;
  std::mutex mu;
  std::unique_lock<std::mutex>* held = nullptr;  // the holder's lock (await leaves and retakes it)
  Api api;
  EventPool events;
  Ledger ledger;
  BlockTable blocks;
  ProducerPool producers;
  StreamActivity activity;  // every stream's latest forwarded work (ordering.hpp)
  MoveContext moves;
  HostPool pool;
  DeviceChunks chunks;  // pinned: device chunks idle between moves (the ledger trims them)
  std::unique_ptr<BlockMemory> managed, vmm;  // vmm: pinned backend only
  std::size_t vmm_gran = 2u << 20;
  CUmemLocation host_location{CU_MEM_LOCATION_TYPE_HOST, 0};  // where host copies are created (pinned)
  DecisionLog decisions;
  Planning planning;
  KernelTable kernels;
  WriteSets write_sets;  // inferred write sets of launch shapes (write_sets.hpp)
  DeviceChecksum checksums;  // the probations' checksum kernels, per context (device_checksum.hpp)
  RecomputeTrial trial;  // recomputation kept only where it measured faster (recompute_trial.hpp)
  std::uint64_t (*virtual_ns)() = nullptr;  // simcuda's host virtual clock, the trial's clock there
  NeedTracker need;
  std::string budget_source;            // where the budget came from, for messages
  // CAPUCHIN_BUDGET=Nx: N while the job's natural peak is not known yet (no budget applies
  // until the first learned iteration ends; resolve_peak_budget), then 0.
  double pending_peak_multiple = 0;
  std::uint64_t natural_peak = 0;       // the job's peak without capuchin, once seen (0: not yet)
  std::uint64_t plans_from_daemon = 0, plans_embedded = 0;  // plans adopted, by who made them
  std::uint64_t daemon_budget_gen = 0;  // daemon_budget() generation last applied
  bool simcuda = false;
  bool pool_full_warned = false;
  // The driver shows one device, the executor's: no other can be current, so a launch, copy or
  // free need not ask the driver which is (cuDeviceGetCount is fixed from cuInit on).
  bool one_device = false;
  bool other_device_noted = false;  // an allocation on another device was passed through (logged once)
  bool device_unknown_noted = false;  // an allocation with no current device was passed through (logged once)
  bool other_device_use_noted = false;  // another device's work used the executor's blocks (logged once)
  static constexpr int kToleratedLogged = 8;
  int tolerated_logged = 0;  // differences from the learned iteration followed on and logged (the first few)
  std::uint64_t evictions_started = 0;
  std::uint64_t shortages = 0;  // start_victims calls that looked for live victims (Block::tried_in_shortage)
  std::uint64_t shortages_indexed = 0;  // those that asked the Ledger's VictimIndex
  // Work whose accesses are unknown (graph launches, unscanned launches) forwarded and not yet
  // recorded: while any is in flight nothing moves out (it may use any block).
  std::uint32_t unknown_in_flight = 0;
  // Calls making work with unknown accesses ready (from settle_for_unknown_access until their
  // unknown_in_flight count; SettleWindow, entry.cpp). Settling waits without the lock; a drop
  // landing then would be missed by it (the work could read an unmapped tensor), and
  // invalidate_producers would take the dropped tensor's only way back; a Vmm eviction begun by
  // another thread then could unmap a tensor under the work. So meanwhile nothing is dropped, and
  // only the settling thread itself moves blocks out (to make room for its recomputations).
  std::uint32_t settling = 0;
  // Vmm evictions in the order they were issued (the out stream completes them in it), with
  // the move_seq they were issued under (an entry whose block moved on since is stale).
  std::deque<std::pair<Block*, std::uint64_t>> evict_queue;
  std::vector<std::uint32_t> ondemand_per_iteration{0};
  // Standing by while the budget does not bind (standby.hpp; standby.cpp says when).
  Standby standby;
  std::uint32_t calm_iterations = 0;    // iteration ends in a row with nothing moved, at 90% of the budget or less
  std::uint32_t calm_needed = 0;        // before a standby (0: the first); doubled at each wake
  std::uint64_t moves_at_boundary = 0;  // the tally's moves at the last iteration end
  std::uint64_t standbys = 0, wakes = 0;
  std::uint32_t waking = 0;  // a wake waits (without the lock) for calls being forwarded: nothing moves out
  std::vector<CUstream> woken_streams;  // Standby::take_streams', kept for its capacity
  std::vector<CUdeviceptr> frees_after_unlock;  // managed memory of trimmed blocks
  FlatMap<bool> library_callers;  // allocation call sites (return addresses): in a CUDA library?

  std::uint64_t launch_stamps = 0;  // launches resolved so far (Block::launch_seen)
  std::uint64_t next_launch_stamp() { return ++launch_stamps; }

  BlockMemory& mem(const Block& b) { return b.kind == Kind::Vmm ? *vmm : *managed; }
  const BlockMemory& mem(const Block& b) const { return b.kind == Kind::Vmm ? *vmm : *managed; }
  std::uint64_t tick() const { return planning.controller().tick(); }
  Kind kind_for(std::size_t bytes) const;

  // --- executor.cpp
  void await(Ev e);                  // the host waits for e, outside the lock
  // A freed block's managed memory discarded (or moved out) on capuchin's out stream, the move's
  // event `moved` (a reference, taken over; none: the host waits for the out stream): its next
  // owner waits for it, on any stream (a discard drops what is written before it runs).
  void reuse_after_move_out(Block& b, Ev& moved);
  void await_stream(CUstream s);     // ... for a stream (when no event could be recorded)
  // The event ending the job's work forwarded on `s` so far (the stream's deferred event,
  // StreamActivity::use_event, noted as its latest work); none when `s` is another device's (see
  // executor.cpp) or no event could be made, and the caller then waits for the stream.
  Ev use_event(CUstream s, bool other_device);
  void await_streams();              // ... for every stream's latest forwarded work (StreamActivity)
  void await_quiet(Block& b);        // every event quiet_events(b) lists (pins b meanwhile)
  void settle_managed_out(std::uint64_t incoming);  // enough managed moves out complete for `incoming` more Vmm bytes
  policy::Step feed(const policy::Event& e, std::span<const std::uint64_t> ids);  // + commands applied
  void note_step(policy::Step st, std::uint32_t pos, std::uint32_t period);      // feed's rare part
  // The event that differed from the learned iteration: learning again, or followed on.
  void log_difference(std::uint32_t pos, std::uint32_t period, const policy::Event& was, const policy::Event& got,
                      bool relearn);
  void end_iteration();
  void judge_recomputation();  // the trial's step at an iteration end
  void poll_lateness();
  // Every live block may have been written (work whose accesses are unknown): no recomputation
  // from its current producer.
  void invalidate_producers();
  void note_launch_need(std::uint64_t total, const std::vector<Block*>& touched, std::string_view kernel);
  void report_need();
  void adopt_daemon_budget();
  void resolve_peak_budget();
  void adopt_budget(std::uint64_t bytes, const char* reason, const char* note, std::string source);
  void trim_cache();
  std::string budget_desc() const;
  void warn_pool_full();

  // --- standby.cpp
  void consider_standby();     // at an iteration end: stand by when the budget has not bound for a while
  // Every call watched again (nothing when not standing by). May leave the lock (callers hold
  // no block they have not pinned); returns once what the unwatched calls used is ordered.
  void wake(const char* why);
  void mark_unwatched_uses();  // wake's: every live block used by the noted streams' work so far

  // --- residency.cpp
  // Room for `bytes` more; may_wait = false: only what is free without the host waiting.
  bool make_room(std::uint64_t bytes, bool may_wait = true);
  bool evict(Block& b, const char* reason, double expected = -1);
  bool prefetch(Block& b, const char* reason, bool on_demand, double expected = -1, const CUstream* user = nullptr,
                bool may_wait = true);
  // Resident and no replay of it pending: nothing to do (the launch path's common case inline).
  CUresult ensure_resident(Block& b, CUstream s) {
    if (b.where == Where::Device && !b.exec) [[likely]]
      return CUDA_SUCCESS;
    return ensure_resident_slow(b, s);
  }
  CUresult ensure_resident_slow(Block& b, CUstream s);
  void apply(const policy::Command& c);
  void reclaim_finished_evictions();  // completes finished Vmm evictions (never waits)
  void delete_block(Block* b);        // a block given back to the driver: forgotten everywhere
  CUresult settle_for_unknown_access(CUstream s);
  void mark_unknown_use(CUstream s);
  CUresult make_ready(Block& b, bool room);  // a new or reused block's memory (memory.hpp create/reuse)

  // --- recompute.cpp (chains: chains.hpp)
  // Recomputable now: its producer's inputs are there or recomputable, chains::kMaxChain deep at most.
  bool recompute_valid(const Block& b) const;
  bool try_drop(Block& b, const char* reason, double expected);
  bool recompute(Block& b, const char* reason, double expected);
  bool inputs_in_use(const Block& b) const;
  // Whether the pressure rule may drop at all now, and its price of dropping b: its producer's
  // measured time, where that is less than `swap_s` and b may be dropped; else -1 (swapped).
  bool pressure_drops_allowed() const;
  // (Standing by, or a wake in progress: what unwatched calls used is not ordered yet.)
  bool drops_barred() const { return unknown_in_flight > 0 || settling > 0 || waking > 0 || standby.on(); }
  bool standing_by() const { return standby.on() || waking > 0; }  // or waking: wake() first
  bool moves_out_barred() const;  // unknown work unrecorded, or another thread settling
  // No stream has forwarded work still running: waiting for "every stream's latest work" (a drop)
  // would return at once.
  bool streams_idle_now();
  double pressure_drop_cost(const Block& b, double swap_s) const;
  // The memory a replay writes into: each of `outs` filled (all, or none: false).
  bool fill_for_replay(const std::vector<Block*>& outs, bool room, CUstream s);
  // The first n of `outs`, filled for a replay that will not run: dropped again once their
  // fills on s are done.
  void drop_unused_fills(const std::vector<Block*>& outs, std::size_t n, CUstream s);
  // A replay on `s` just issued: a use of its inputs and outputs, the outputs Incoming until it ends.
  void mark_replay(CUstream s, const std::vector<Block*>& inputs, const std::vector<Block*>& outs);
  void materialize_dependents(Block& b) {
    if (!b.dependents.empty()) [[unlikely]]
      materialize_dependents_slow(b);
  }
  void materialize_dependents_slow(Block& b);

 private:
  // Runs a host wait with the lock released, and takes it again.
  template <class Wait>
  CUresult unlocked(Wait&& wait) {
    std::unique_lock<std::mutex>* lk = held;
    held = nullptr;
    lk->unlock();
    const CUresult r = wait();
    lk->lock();
    held = lk;
    return r;
  }
  bool start_victims(std::uint64_t short_bytes, bool may_wait);
  bool start_victims_priced(std::uint64_t short_bytes, SwapPrice price, std::uint64_t now, std::uint64_t freed, bool drops);
  bool move_out_victim(Block& b, std::uint64_t now, std::uint64_t& freed);
  // A cached block's memory moved out (its data dead), its next owner ordered after the move.
  // cool_warm: warm blocks (kept at their free) moved out until `bytes` fit.
  void evict_cached(Block& c);
  void cool_warm(std::uint64_t bytes);
  bool await_eviction_in_flight();
  bool await_dead_block();
  bool land_idle_prefetch();
};

extern Executor* g_ex;
// A graph capture has begun in this process (before_capture; never reset): no standby since.
bool capture_ever_begun();
bool started(Executor& e, CUresult* why);  // under e.mu: started now, or why not

}  // namespace capuchin::interpose::exec
