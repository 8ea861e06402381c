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
#include "capuchin/plan.hpp"
#include "capuchin/segment_plan.hpp"

namespace capuchin::interpose::exec {

inline constexpr std::uint64_t kNoBlockId = plan::kNoSegmentId;

enum class Backend : std::uint8_t { Uvm, Pinned };

// Where a block's data is.
enum class Where : std::uint8_t {
  Fresh,     // never on the device (uvm: never touched); contents undefined
  Device,    // resident
  Incoming,  // a prefetch (or recomputation) is in flight; ready_event marks its end
  Evicting,  // pinned: being copied out; device memory still held
  Host,      // on the host only (uvm: managed pages on the host; pinned: host chunk mapped at base)
  Dropped,   // nowhere; recomputed from its producer when needed (pinned)
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
  Where where = Where::Fresh;
  bool plain = false;     // plain device memory (pinned backend, small): never evicted
  std::uint64_t last_tick = 0;
  UseMark uses[4];
  std::uint8_t nuses = 0;
  bool many_streams = false;  // used on more streams than `uses` holds: evictions synchronise
  int ready_event = -1;       // Incoming / Evicting: completion of the move
  std::uint32_t version = 0;  // bumped by every event that may write it
  std::shared_ptr<Producer> producer;
  std::vector<std::uint64_t> dependents;  // dropped blocks whose producer reads this one
  std::uint32_t local = ~0u;              // k-th allocation of the current segment
  // cache bookkeeping (after free): the events the reuse must wait for
  int free_events[4] = {-1, -1, -1, -1};
  std::uint8_t nfree = 0;
  CUstream free_stream = nullptr;
  bool free_stream_valid = false;
  // pinned backend
  std::size_t reserved = 0;  // VA reserved at base (user span + staging span)
  CUmemGenericAllocationHandle dev = 0, host = 0;
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
  std::string budget_text;
  std::uint64_t daemon_budget_gen = 0;  // daemon_budget() generation last applied
  std::size_t uvm_page = 64 * 1024;
  std::size_t vmm_gran = 2u << 20;
  std::size_t pinned_min = 1u << 20;
  bool host_remap = false;       // pinned: host-located chunks can be mapped at the tensor's address
  std::uint64_t pool_limit = 0;  // pinned host chunks, bytes
  std::uint64_t pool_bytes = 0;
  bool recompute_enabled = true;
  bool planning_enabled = true;
  unsigned plan_wait_ms = 200;
  bool simcuda = false;
  std::string gpu_name = "h100";  // CAPUCHIN_GPU: the profile plans model (not on simcuda)
  std::string dump_dir;           // CAPUCHIN_PLAN_DUMP: segments and plans written there

  CUstream evict_stream = nullptr, prefetch_stream = nullptr;
  int last_evict_event = -1;  // recorded on evict_stream after the latest eviction
  bool evict_pending = false;  // evictions issued since the prefetch stream last waited

  std::uint64_t resident = 0;    // bytes charged: Device + Incoming + Evicting + cached resident + plain
  std::uint64_t peak_resident = 0;
  std::uint64_t plain_bytes = 0;
  std::uint64_t live_bytes = 0;  // spans of live (not freed) blocks
  std::uint64_t min_needed = 0;  // most bytes one launch needed at once (+ plain)
  std::uint64_t tick = 0;

  std::unordered_map<std::uint64_t, Block*> by_id;
  std::map<CUdeviceptr, Block*> by_base;            // live blocks, for address lookups
  std::multimap<std::size_t, Block*> cache;         // freed blocks by span, for reuse
  std::vector<CUevent> events;
  std::vector<int> event_refs;
  std::vector<int> free_events;

  // decision log
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
  Block* find_addr(std::uint64_t addr);
  Block* find_id(std::uint64_t id) {
    auto it = by_id.find(id);
    return it == by_id.end() ? nullptr : it->second;
  }
  int event_get();
  void event_ref(int e) { if (e >= 0) ++event_refs[static_cast<std::size_t>(e)]; }
  void event_unref(int e);
  void mark_use(Block* b, CUstream s, int ev);
  void wait_uses(Block* b, CUstream on);
  bool make_room(std::uint64_t need, const char* reason);
  Block* pick_victim();
  void evict(Block* b, const char* reason, double expected = -1);
  // uvm: moves b's pages to the host on evict_stream, after what evict_stream already waits
  // for and after b's own swap-in if one is in flight; `dead` data is discarded instead where
  // the driver can. Records the eviction event; b is Host afterwards.
  void uvm_move_out(Block* b, bool dead);
  void prefetch(Block* b, const char* reason, bool on_demand, double expected = -1);
  CUresult ensure_resident(Block* b, CUstream s, bool for_write);
  void apply_decisions();
  void note_event(SegEvent ev, const std::uint64_t* ids, unsigned nids);
  void materialize_dependents(Block* b);
  void end_segment();

  // --- backend.cpp
  CUresult backend_alloc(Block* b);
  void backend_release(Block* b);
  void backend_evict(Block* b);
  bool backend_finish_evict(Block* b, bool wait);
  void backend_prefetch(Block* b, bool keep_data);
  void backend_finish_prefetch(Block* b);
  void backend_cancel_evict(Block* b);
  void backend_drop(Block* b);
  void reclaim_completed(bool wait_all);

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
