// executor.hpp: what the hooks call when CAPUCHIN_BUDGET is set: the executor serves the
// job's device allocations from its own backend (uvm: managed memory; pinned: VMM chunks
// with host remapping) and keeps their resident bytes within the budget by evicting,
// prefetching, dropping and recomputing tensors around the job's launches, following the
// capuchin policy's plans (planning.hpp) from the iteration after they are made.
//
// Contract: everything here runs only when on() (a budget was given and the driver offers
// what the backend needs); otherwise hooks keep the pass-through capture path. A before_*
// call takes the executor's lock for its bookkeeping and releases it before returning: the
// job's launch or copy is forwarded without it, the blocks it touches pinned until the
// matching after_* call, which the hook makes exactly once (with launched = false when the
// call failed). No hook waits for a plan. Every function returns CUDA's own codes; when in
// doubt the executor passes that allocation through and logs `fallback`. A launch is never
// forwarded before the tensors it touches are resident or on their way in stream order.
#pragma once

#include <cuda.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "capuchin/protocol.hpp"
#include "write_sets.hpp"

namespace capuchin::interpose {
struct FuncLayout;
}

namespace capuchin::interpose::exec {

extern std::atomic<bool> g_on;
inline bool on() { return g_on.load(std::memory_order_relaxed); }

// From the library's start (library.cpp), once the configuration is read: sets the executor
// up when CAPUCHIN_BUDGET is set (it starts at the first served call). Returns whether it is on.
bool init();
// At exit: the planner stopped, the final statistics line, the decision log flushed. Hooks
// stay safe afterwards (pass-through).
void shutdown();
// Plans a tiny iteration once, so every function-local static the planner uses (simdjson's
// implementation, GPU profiles) is constructed before the exit handler is registered: static
// destructors run in reverse, so they then run after it (a planner still parsing while
// simdjson's statics were destroyed aborted a job at exit).
void warm_up_planning();

// The executor's running totals, for the daemon's session view (taken under the executor's
// lock if it is free: call from the drain thread, never from a hook). false when the
// executor is off or busy: the drain never waits for it.
bool counters(proto::ExecStats& out);

// Allocation hooks. true: the executor handled the call and *r is its result; false: the hook
// forwards to the real call (not ours, or a fallback).
bool alloc(CUdeviceptr* out, std::size_t bytes, CUstream s, bool per_thread, bool stream_ordered, CUresult* r);
// An alloc() result meaning "not yet possible": no context on the calling thread, or the driver
// not loaded. The runtime hook makes the runtime initialise and asks again; a driver hook
// forwards the call, so the driver gives its own answer (cuMemAllocAsync on an explicit stream
// needs no current context: cuda.h).
inline bool not_yet(CUresult r) { return r == CUDA_ERROR_INVALID_CONTEXT || r == CUDA_ERROR_NOT_INITIALIZED; }
bool free(CUdeviceptr p, CUstream s, bool per_thread, bool stream_ordered, CUresult* r);
// Before an IPC handle or the allocation handle of memory at `p` is handed out
// (cudaIpcGetMemHandle, cuIpcGetMemHandle, cuMemRetainAllocationHandle: another process, or NCCL
// registering a buffer): another party will reach the memory by what backs it, not by its
// address, so a block of ours there is made resident and never moves again until it is freed.
// The hook then forwards the call, and calls export_failed when the driver refused it (it has
// no IPC handle for managed or VMM memory): that request handed nothing out; the block may move
// again once no other request of it is granted or in flight (they are counted).
void exported(CUdeviceptr p);
void export_failed(CUdeviceptr p);
// The caller of the allocation hook being served (the application's return address, taken in
// the exported wrapper): allocations that CUDA libraries make for themselves (NCCL, cuDNN,
// cuBLAS, ...) are left to the driver unless CAPUCHIN_SERVE=all.
extern __attribute__((tls_model("initial-exec"))) thread_local const void* t_alloc_caller;
inline void note_alloc_caller(const void* return_address) { t_alloc_caller = return_address; }

struct Producer;
struct Block;
struct Launch {
  CUfunction func = nullptr;  // null when unknown (no layout)
  const FuncLayout* layout = nullptr;
  unsigned grid[3] = {1, 1, 1}, block[3] = {1, 1, 1};
  unsigned shmem = 0;
  CUstream stream = nullptr;
  bool per_thread = false;
  void** params = nullptr;
  void** extra = nullptr;
  bool complete_scan = true;  // false: unscanned, or more blocks than an event holds (accesses unknown)
  bool words_truncated = false;  // scan_launch kept only the first kMaxLaunchWords candidate words
  bool other_device = false;     // issued while another device was current (set by before_launch)
  bool standby = false;          // passed unwatched (standby.hpp): after_launch only ends the pass
  // Launch attributes (cuLaunchKernelEx, cudaLaunchKernelExC: clusters, ...), which a replay
  // through cuLaunchKernel would not have: such a launch is never made a producer.
  bool attributes = false;
  // set by before_launch for after_launch
  bool active = false;
  CUstream driver_stream = nullptr;
  std::uint64_t output = ~std::uint64_t{0};  // the declared output's id
  int timing = -1;
  std::shared_ptr<Producer> producer;
  // Inferred write sets (write_sets.hpp), set by before_launch: the producers of the outputs
  // of a replayable shape (by block id), or this launch's probation.
  std::vector<std::pair<std::uint64_t, std::shared_ptr<Producer>>> made;
  std::unique_ptr<Probation> probation;
  std::uint64_t shape = 0;
};
// Before forwarding a launch whose parameters hold `words` (scan_launch's candidate
// pointers; all of them unless l.words_truncated, when the parameters are scanned again
// here): resolves them to the executor's blocks, pinned until after_launch, into `touched`.
// CUDA_SUCCESS: forward it; an error (out of memory): return it without launching (nothing
// left pinned).
CUresult before_launch(Launch& l, const std::uint64_t* words, unsigned nwords, std::vector<Block*>& touched);
// After it (launched: the call succeeded), with the same blocks.
void after_launch(Launch& l, const std::vector<Block*>& touched, bool launched);
// Between them, when before_launch made the launch its shape's probation (l.probation): the
// device is synchronised and the blocks hashed before the call, and after it they are hashed,
// the call made again through `relaunch` and what it changed restored (write_sets.hpp). No lock
// is held; the verdict is learned in after_launch.
void probe_before(Launch& l);
const Api& probation_api();  // the executor's driver table (set once at its start)
void probe_done(Launch& l);  // the probation no longer calls the driver (a capture may begin)
template <class Relaunch>
void probe_after(Launch& l, Relaunch&& relaunch) {
  if (l.probation && l.probation->ok) l.probation->verdict = probation_after(probation_api(), *l.probation, relaunch);
  probe_done(l);
}
// The calling thread's list for `touched` (its executor scratch, scratch.hpp: off the job's
// stack, and valid in hooks that run during the thread's exit).
std::vector<Block*>& launch_blocks();

// Copies and memsets (dst/src: addresses; 0 when a side is host memory).
struct CopyToken {
  bool active = false;
  bool other_device = false;  // issued while another device was current
  CUstream driver_stream = nullptr;
  std::uint64_t dst = ~std::uint64_t{0}, src = ~std::uint64_t{0};  // allocation ids (none: not ours)
  bool standby = false;  // passed unwatched (standby.hpp): after_copy only ends the pass
};
CUresult before_copy(std::uint64_t dst, std::uint64_t src, std::size_t bytes, CUstream s, bool per_thread, bool memset,
                     CopyToken& t);
void after_copy(CopyToken& t, bool ok);
// After a host synchronisation returned: an event of the iteration like any other.
void on_sync();
// The hooks' fast path while the executor stands by (standby.hpp): true when this call on `s`
// is forwarded unwatched (no lock taken); standby_done() then follows the driver's return on the
// same thread, and returns whether there was such a call to end. before_launch / after_launch,
// before_copy / after_copy and before_unknown_work / after_unknown_work call them first.
bool standby_pass(CUstream s, bool per_thread);
bool standby_done();
// Before a stream is destroyed (cuStreamDestroy, cudaStreamDestroy): the deferred event that
// marks the job's uses on it is recorded while the stream exists (event_pool.hpp).
void before_stream_destroy(CUstream s, bool per_thread);
// Before any stream begins a capture: every stream's deferred event is recorded first (a record
// on the capturing stream would be captured; one on the legacy stream would invalidate it).
void before_capture();
// Before work whose accesses are unknown (a graph launch): every tensor is put back where its
// address works (pinned: dropped ones recomputed, moves in flight settled) and the launching
// stream waits for moves in flight (uvm).
CUresult before_unknown_work(CUstream s, bool per_thread);
// After it was issued (launched: the call succeeded): it counts as a use of every tensor, so
// no later move or unmap overtakes it.
void after_unknown_work(CUstream s, bool per_thread, bool launched);

}  // namespace capuchin::interpose::exec
