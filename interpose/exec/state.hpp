// state.hpp: the executor's internal state (one instance, guarded by Executor::mu) shared by
// executor.cpp (hooks, passive mode, plan following), backend.cpp (uvm and pinned moves),
// recompute.cpp and planner_thread.cpp (embedded planning). Not used outside interpose/exec.
#pragma once

#include <cuda.h>

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "api.hpp"
#include "capuchin/decision_log.hpp"
#include "capuchin/plan.hpp"
#include "host_pool.hpp"
#include "capuchin/segment_plan.hpp"

namespace capuchin::interpose::exec {

inline constexpr std::uint64_t kNoBlockId = plan::kNoSegmentId;

enum class Backend : std::uint8_t { Uvm, Pinned };

// How a block is backed. uvm serves every block as Managed; pinned serves a block as Vmm when
// the granularity wastes little of it (see Executor::kind_for), as Managed otherwise, so small
// and sub-granule tensors are charged what they use and stay evictable.
enum class Kind : std::uint8_t {
  Managed,  // one cuMemAllocManaged allocation; moves are cuMemPrefetchAsync
  Vmm,      // a VMM reservation: device chunk or host pieces mapped at base; moves are copies
};

// Where a block's data is. Invariant (pinned too): a live block's whole range is mapped and
// accessible in every state but Dropped, so any access, even one capture missed, reaches it.
enum class Where : std::uint8_t {
  Fresh,     // Managed only: never touched since its allocation; contents undefined
  Device,    // resident
  Incoming,  // a prefetch (or recomputation) is in flight; ready_event marks its end
  Evicting,  // Vmm: being copied out; device memory still held
  Host,      // on the host only (Managed: pages on the host; Vmm: host pieces mapped at base)
  Dropped,   // Vmm: nothing mapped; recomputed from its producer when needed
};

struct UseMark {
  CUstream stream = nullptr;
  int event = -1;  // index into the event pool, recorded on `stream` after the last use there
};

// The launch that last wrote a block, kept so it can be replayed (recompute).
struct Producer {
  CUfunction func = nullptr;
  unsigned grid[3], block[3], shmem = 0;
  CUstream stream = nullptr;
  std::vector<std::uint8_t> params;          // the parameter buffer
  std::vector<std::uint32_t> param_offset;   // per parameter
  std::vector<std::uint64_t> input_ids;      // blocks read (by id) and their versions then
  std::vector<std::uint32_t> input_versions;
  std::string name;
};

struct Block {
  std::uint64_t id = kNoBlockId;  // live allocation id; kNoBlockId while cached after a free
  CUdeviceptr base = 0;
  std::size_t bytes = 0;  // requested
  std::size_t span = 0;   // charged against the budget (backend granularity)
  Kind kind = Kind::Managed;
  Where where = Where::Fresh;
  std::uint64_t last_tick = 0;
  std::uint64_t stuck_tick = ~std::uint64_t{0};  // an eviction failed at this tick: not a victim again then
  UseMark uses[4];
  std::uint8_t nuses = 0;
  bool many_streams = false;  // used on more streams than `uses` holds: evictions synchronise
  int ready_event = -1;       // Incoming / Evicting: completion of the move
  int exec_event = -1;        // the latest replay reading or writing it (ordering.cpp)
  std::uint32_t version = 0;  // bumped by every event that may write it
  std::shared_ptr<Producer> producer;
  std::vector<std::uint64_t> dependents;  // dropped blocks whose producer reads this one
  std::uint32_t local = ~0u;              // k-th allocation of the current segment
  // cache bookkeeping (after free): the events the reuse must wait for
  int free_events[4] = {-1, -1, -1, -1};
  std::uint8_t nfree = 0;
  CUstream free_stream = nullptr;
  bool free_stream_valid = false;
  std::uint64_t freed_segment = 0;
  // Vmm blocks
  std::size_t reserved = 0;  // VA reserved at base (user span + staging span)
  CUmemGenericAllocationHandle dev = 0;
  std::vector<HostPiece> host;  // the host copy's pieces, mapped side by side
  bool staging_mapped = false;
};

// One event of the current segment, for the learner (trace events) and the pattern matcher;
// `timing` is the executor's own (its event pair), not part of what is planned.
struct SegEvent : plan::SegmentEvent {
  int timing = -1;  // kernel: index of its timing event pair
};
using ExecDecision = plan::SegmentDecision;
using ReadyPlan = plan::SegmentPlan;
using PlanJob = plan::SegmentJob;

class Executor {
 public:
  std::mutex mu;
  Api api;
  Backend backend = Backend::Uvm;
  std::uint64_t budget = 0;
  std::string budget_text;    // CAPUCHIN_BUDGET as given
  std::string budget_source;  // where the current budget came from, for messages
  std::uint64_t daemon_budget_gen = 0;  // daemon_budget() generation last applied
  std::size_t uvm_page = 64 * 1024;
  std::size_t vmm_gran = 2u << 20;
  std::size_t pinned_min = 0;     // pinned: smaller tensors are Managed (CAPUCHIN_PINNED_MIN)
  bool host_remap = false;       // pinned: host-located chunks can be mapped at the tensor's address
  std::uint64_t pool_limit = 0;  // pinned host chunks, bytes (CAPUCHIN_PINNED_POOL; 0: the default)
  HostPool pool;
  bool pool_full_warned = false;
  bool recompute_enabled = true;
  bool planning_enabled = true;
  unsigned plan_wait_ms = 200;
  bool simcuda = false;
  std::string gpu_name = "h100";  // CAPUCHIN_GPU: the profile plans model (not on simcuda)
  std::string dump_dir;           // CAPUCHIN_PLAN_DUMP: segments and plans written there

  CUstream evict_stream = nullptr, prefetch_stream = nullptr;
  int last_evict_event = -1;  // recorded on evict_stream after the latest eviction
  bool evict_pending = false;  // evictions issued since the prefetch stream last waited
  bool managed_out_unsettled = false;  // managed evictions issued since the host last waited for them

  std::uint64_t resident = 0;    // bytes charged: Device + Incoming + Evicting + cached resident
  std::uint64_t peak_resident = 0;
  std::uint64_t live_bytes = 0;  // spans of live (not freed) blocks
  std::uint64_t min_needed = 0;  // most bytes one launch needed at once (the job's minimum budget so far)
  std::uint64_t min_needed_managed = 0;  // the same launch as uvm charges it
  std::string min_needed_kernel;
  std::uint64_t seg_need = 0;       // the same, over the current segment
  std::uint64_t need_reported = 0;  // the minimum last reported (report_need)
  bool need_warned = false;         // a launch over this budget was reported
  std::uint64_t tick = 0;

  std::unordered_map<std::uint64_t, Block*> by_id;
  std::map<CUdeviceptr, Block*> by_base;            // live blocks, for address lookups
  std::multimap<std::size_t, Block*> cache;         // freed blocks by span, for reuse
  std::vector<CUevent> events;
  std::vector<int> event_refs;
  std::vector<int> free_events;

  // decision log
  struct LastRecord {
    std::string action, reason;
    std::uint64_t tensor = kNoBlockId, bytes = 0, repeats = 0;
  } last_record;
  std::FILE* log_file = nullptr;
  bool log_to_daemon = false;
  std::string daemon_lines;
  double t0 = 0;

  // statistics
  std::uint64_t evicted_bytes = 0, prefetched_bytes = 0, recomputed_bytes = 0;  // from record()
  std::uint64_t n_evict = 0, n_prefetch = 0, n_ondemand = 0, n_stall = 0, n_recompute = 0, n_drop = 0,
                n_fallback = 0, n_plans = 0, n_plan_waits_expired = 0;
  std::vector<std::uint32_t> ondemand_per_segment;

  // segments (iterations between host syncs) and plan following
  std::uint64_t segment = 0;
  std::vector<SegEvent> seg;
  std::vector<std::uint64_t> seg_ids;
  std::vector<std::string> names;
  std::unordered_map<std::uint64_t, std::uint32_t> name_index;  // CUfunction -> names index
  std::vector<std::pair<std::uint64_t, std::uint64_t>> seg_carried;
  std::vector<std::uint64_t> seg_locals;  // ids of the segment's allocations, in order
  std::vector<std::uint64_t> prev_locals;  // the previous segment's allocations, by place
  std::vector<std::uint64_t> pattern;     // signatures the current segment is matched against
  bool matching = false;
  std::uint32_t match_pos = 0;
  std::shared_ptr<const ReadyPlan> plan;  // applies while matching
  std::size_t next_decision = 0;
  std::uint64_t plan_segment_applied = 0;
  bool late_since_plan = false;

  // kernels whose write set is declared (CAPUCHIN_KERNEL_OUTPUTS): name -> output parameter
  std::unordered_map<std::string, unsigned> outputs_by_name;
  struct FuncInfo {
    bool known = false;
    int output = -1;  // the written parameter, -1: unknown write set
    std::vector<std::uint32_t> offset, size;
    std::uint32_t buffer = 0;
    std::string name;
  };
  std::unordered_map<CUfunction, FuncInfo> funcs;

  // kernel timing: an event pair around each launch of the segment (measured durations for the planner)
  std::vector<std::pair<CUevent, CUevent>> timing;
  std::size_t timing_used = 0;
  int timing_pair();

  // the launch in progress (between before_launch and after_launch)
  std::vector<Block*> cur;
  Block* cur_output = nullptr;
  std::shared_ptr<Producer> cur_producer;
  bool cur_unknown = false;

  // embedded planner thread
  std::thread planner;
  std::mutex plan_mu;
  std::condition_variable plan_cv;
  std::unique_ptr<PlanJob> job;  // pending
  std::shared_ptr<const ReadyPlan> ready;
  std::uint64_t ready_segment = ~std::uint64_t{0};
  bool planner_stop = false;

  // --- executor.cpp
  double now_s() const;
  void record(const char* action, const Block* b, std::uint64_t bytes, const char* reason, double expected_s = -1,
              const char* note = nullptr);
  void flush_repeats();
  void write_record(const DecisionRecord& r);
  Block* find_addr(std::uint64_t addr);
  Block* find_id(std::uint64_t id) {
    auto it = by_id.find(id);
    return it == by_id.end() ? nullptr : it->second;
  }
  int event_get();
  void event_ref(int e) { if (e >= 0) ++event_refs[static_cast<std::size_t>(e)]; }
  void event_unref(int e);
  // --- ordering.cpp: events that order the job's work and the executor's around a block
  void mark_use(Block* b, CUstream s, int ev);
  void wait_uses(Block* b, CUstream on);  // `on` waits for b's uses, free events and replay
  void wait_quiet(Block* b);              // the host waits for them
  void add_free_event(Block* b, int ev);
  void release_free_events(Block* b);
  void set_exec_event(Block* b, int ev);
  void wait_exec_work(Block* b, CUstream s);  // s waits for a replay of or from b still running
  void mark_unknown_use(CUstream s);
  CUresult settle_for_unknown_access(CUstream s);
  bool make_room(std::uint64_t need, const char* reason);
  Block* pick_victim();
  bool evict(Block* b, const char* reason, double expected = -1);  // false: b cannot move now
  bool prefetch(Block* b, const char* reason, bool on_demand, double expected = -1);  // false: b stays
  CUresult ensure_resident(Block* b, CUstream s, bool for_write);
  void apply_decisions();
  void note_event(SegEvent ev, const std::uint64_t* ids, unsigned nids);
  void materialize_dependents(Block* b);
  std::string budget_desc() const;
  void note_launch_need(std::uint64_t total, std::uint64_t total_managed, const char* kernel);
  void report_need();
  void adopt_daemon_budget();
  void end_segment();

  // --- backend.cpp: memory and moves per Kind (contracts there)
  Kind kind_for(std::size_t bytes) const;
  std::size_t span_for(Kind k, std::size_t bytes) const;
  CUresult backend_alloc(Block* b);  // b->kind and b->bytes set; Managed: Fresh; Vmm: Device, or Host under pressure
  CUresult backend_reuse(Block* b);  // a cached block handed out again, left as backend_alloc leaves a new one
  void backend_release(Block* b);    // a cached block back to the driver
  bool backend_evict(Block* b);      // Vmm: starts the copy out; false: b stays resident (pool full)
  bool backend_finish_evict(Block* b, bool wait);
  void backend_cancel_evict(Block* b);
  bool backend_prefetch(Block* b, bool keep_data);  // Vmm; false: no device memory (b unchanged)
  void backend_finish_prefetch(Block* b);
  void backend_drop(Block* b);
  void reclaim_completed(bool wait_all);
  void managed_move_out(Block* b, bool dead);  // to the host on evict_stream (after b's swap-in in flight)
  void managed_move_in(Block* b);              // to the device on prefetch_stream (after evictions issued)
  void trim_cache();
  CUresult vmm_fill(Block* b, const char* reason);
  void return_pieces(CUdeviceptr at, std::vector<HostPiece>& pieces, std::uint64_t id);
  void settle_managed_evictions();
  bool reclaim_cached_host();
  std::vector<HostPiece> take_host(std::size_t span);
  void vmm_empty(Block* b);

  // --- recompute.cpp
  FuncInfo& func_info(CUfunction f, const FuncLayout* layout);
  bool recompute_valid(const Block* b) const;
  bool try_drop(Block* b, const char* reason, double expected);
  bool recompute(Block* b, const char* reason, double expected);

  // --- planner_thread.cpp
  void start_planner();
  void stop_planner();
  void submit(std::unique_ptr<PlanJob> j);
};

Executor& ex();

// Shared by executor.cpp and entry.cpp.
extern Executor* g_ex;
extern std::atomic<int> g_start;  // 0: not yet, 1: started, 2: failed
extern __attribute__((tls_model("initial-exec"))) thread_local bool t_held;
void hold(Executor& e);
void release(Executor& e);
std::uint64_t mix(std::uint64_t h, std::uint64_t v);
bool started(Executor& e, CUresult* why);  // under e.mu: started now, or why not
std::uint64_t kernel_sig(CUfunction f, const std::vector<Block*>& blocks);
bool planning_on_kernel_times(const Executor& e);

}  // namespace capuchin::interpose::exec
