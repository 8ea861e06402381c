// internal.hpp: simcuda's driver state (memory, streams, kernels) shared by the driver's .cpp
// files. Not installed; only libcuda.so.1 (simcuda) compiles against it.
//
// Contract: one process-wide Driver (driver()), never destroyed (worker threads may outlive
// static destructors). Two locks: Memory::mu guards address space, allocations and residency;
// Scheduler::mu guards queues, completions, events and capture. Never wait on the scheduler's
// condition variable while holding Memory::mu. Everything else is documented where declared.
#pragma once

#include <cuda.h>

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "simcuda/simcuda.h"

// The opaque CUDA handle types are ours to define (the headers only forward-declare them).
struct CUfunc_st;
// A registered kernel's context-independent handle (cuda.h: CUkernel, from cuLibraryGetKernel;
// cudart's cudaGetKernel / __cudaGetKernel), distinct from its CUfunction: what the CUDA 13
// runtime's compiler-generated launches pass to the driver (crt/host_runtime.h: __cudaLaunch
// calls __cudaGetKernel, then __cudaLaunchKernel).
struct CUkern_st {
  CUfunc_st* function = nullptr;
};
struct CUfunc_st {
  std::string name;
  const void* host_stub = nullptr;
  std::vector<size_t> param_offsets;
  std::vector<size_t> param_sizes;
  size_t param_buffer_bytes = 0;  // max(offset + size)
  simcuda_kernel_body body = nullptr;
  double fixed_ns = 0;
  CUkern_st kernel;  // its CUkernel is &kernel: not the first member, so never the function's address
};

// A device's primary context (the only contexts simcuda has): one per device, never destroyed.
struct CUctx_st {
  int device = 0;
};

namespace simcuda {

constexpr int kDriverVersion = 13000;
// SIMCUDA_DEVICES: how many devices the driver shows (1 to kMaxDevices, default 1); each has
// SIMCUDA_DEVICE_BYTES of memory and its own primary context. Read once.
constexpr int kMaxDevices = 8;
int device_count();
inline bool valid_device(int dev) { return dev >= 0 && dev < device_count(); }
// Bit d: device d may access a VMM mapping (cuMemSetAccess).
using DeviceMask = uint32_t;

// Where an op stands: set done (with its virtual finish time) once executed.
struct Completion {
  std::atomic<bool> done{false};  // also read under Memory's lock (stream-ordered frees)
  double finish_ns = 0;           // guarded by Scheduler::mu
};
using CompletionPtr = std::shared_ptr<Completion>;

enum class OpKind : uint8_t { Kernel, Copy, Memset, EventRecord, Marker, HostFn, FreeAsync, Prefetch, Discard };
enum class CopyRoute : uint8_t { HostToDevice, DeviceToHost, DeviceToDevice, HostToHost };

// A copy's geometry: `rows` rows of `width` bytes per slice, `slices` slices; row r of slice z
// starts at base + z * slice_pitch + r * pitch on each side. A plain copy is one row.
struct CopyShape {
  size_t width = 0;
  size_t rows = 1;
  size_t slices = 1;
  size_t dst_pitch = 0, src_pitch = 0;
  size_t dst_slice_pitch = 0, src_slice_pitch = 0;
  size_t moved() const { return width * rows * slices; }
  // Bytes from a side's first byte to its last (what must lie inside one allocation).
  size_t dst_span() const { return span(dst_pitch, dst_slice_pitch); }
  size_t src_span() const { return span(src_pitch, src_slice_pitch); }
  size_t span(size_t pitch, size_t slice_pitch) const {
    if (width == 0 || rows == 0 || slices == 0) return 0;
    return (slices - 1) * slice_pitch + (rows - 1) * pitch + width;
  }
  static CopyShape linear(size_t bytes) {
    CopyShape s;
    s.width = s.dst_pitch = s.src_pitch = bytes;
    return s;
  }
};

// What an op does; copyable, so a captured graph stores these as its nodes.
struct OpPayload {
  OpKind kind = OpKind::Marker;
  // Kernel
  CUfunc_st* func = nullptr;
  std::vector<uint8_t> params;
  unsigned grid[3] = {1, 1, 1};
  unsigned block[3] = {1, 1, 1};
  unsigned shared_mem = 0;
  // Copy / memset / prefetch / free
  uintptr_t dst = 0;
  uintptr_t src = 0;
  size_t bytes = 0;     // a copy's moved bytes (shape.moved())
  CopyShape shape;      // a copy's geometry
  CopyRoute route = CopyRoute::DeviceToDevice;
  bool pinned = false;
  uint32_t memset_value = 0;
  unsigned memset_elem = 1;
  CUmemLocation location{};
  // The device the op runs on: its stream's (a created stream's context's device; the legacy
  // and per-thread streams are the current context's at enqueue).
  int device = 0;
  // Host function
  CUhostFn host_fn = nullptr;
  void* user_data = nullptr;
};

struct Op {
  OpPayload payload;
  std::vector<CompletionPtr> deps;
  CompletionPtr done;
  double not_before_ns = 0;  // the host's virtual clock when enqueued
};

// What a stream's next captured node depends on: for each stream of the capture, how many of
// the nodes it captured (its first k) are ordered before it (itself included, through
// program order; others through event waits, transitively).
using CaptureFrontier = std::map<CUstream_st*, size_t>;

struct CaptureGraph {
  std::vector<OpPayload> nodes;
  bool invalidated = false;
  CUstreamCaptureMode mode = CU_STREAM_CAPTURE_MODE_GLOBAL;
  uint64_t id = 0;
  CUstream_st* origin = nullptr;  // the stream BeginCapture was called on
  // Streams that joined through an event wait (the origin included): the nodes each captured
  // and its frontier. EndCapture on the origin fails with CUDA_ERROR_STREAM_CAPTURE_UNJOINED
  // unless the origin's frontier covers every node of every joined stream.
  std::map<CUstream_st*, size_t> captured;
  std::map<CUstream_st*, CaptureFrontier> frontier;
  std::thread::id thread;       // the thread BeginCapture was called on
  CUgraph_st* into = nullptr;   // cuStreamBeginCaptureToGraph: the graph nodes are added to
};

enum class StreamKind : uint8_t { Legacy, PerThread, Created };

}  // namespace simcuda

struct CUstream_st {
  simcuda::StreamKind kind = simcuda::StreamKind::Created;
  unsigned flags = 0;  // CU_STREAM_DEFAULT or CU_STREAM_NON_BLOCKING
  int priority = 0;
  int device = 0;  // the device of the context that created it (created streams)
  uint64_t id = 0;
  bool blocking() const { return (flags & CU_STREAM_NON_BLOCKING) == 0; }
  // Guarded by Scheduler::mu.
  std::deque<simcuda::Op> queue;
  simcuda::CompletionPtr last_done;  // completion of the last op enqueued
  double clock_ns = 0;               // virtual finish time of the last executed op
  double enqueued_until_ns = 0;      // best-known virtual finish of everything enqueued
  uint64_t ops_executed = 0;
  bool stopping = false;
  std::shared_ptr<simcuda::CaptureGraph> capture;
  std::thread worker;
};

struct CUevent_st {
  unsigned flags = 0;
  int device = 0;  // the device of the context that created it
  simcuda::CompletionPtr last;  // guarded by Scheduler::mu; null until recorded
  bool recorded_in_capture = false;
  std::shared_ptr<simcuda::CaptureGraph> capture;
  simcuda::CaptureFrontier capture_deps;  // the recording stream's frontier when recorded in a capture
};

struct CUgraph_st {
  std::vector<simcuda::OpPayload> nodes;
};

struct CUgraphExec_st {
  std::vector<simcuda::OpPayload> nodes;
};

namespace simcuda {

enum class AllocKind : uint8_t { Device, Managed, Pinned };

struct Allocation {
  uintptr_t base = 0;
  size_t bytes = 0;          // requested
  size_t span = 0;           // address-space bytes (rounded)
  uint64_t accounted = 0;    // capacity charge (0 for managed and pinned)
  AllocKind kind = AllocKind::Device;
  int device = 0;            // the device whose memory it is (Device); managed and pinned: any
  bool stream_ordered = false;
  bool registered = false;   // pinned by cuMemHostRegister (not ours to unmap)
  CompletionPtr freed_by;    // set by cuMemFreeAsync: use after it completes is illegal
  CUstream_st* free_stream = nullptr;
};

struct ManagedBlock {
  bool resident = false;
  int device = 0;  // where it is resident (when resident)
  // Holds data somewhere (written by a kernel, a copy or a memset, or made resident). A block
  // that was never populated, or was discarded, has no data to move: cuMemPrefetchAsync's
  // contract: "If no physical memory has been allocated for this region, then this memory
  // region will be populated and mapped on the destination device" (cuda.h), so making it
  // resident costs a device-side fill, not a transfer over the link.
  bool populated = false;
  uint64_t stamp = 0;
  bool prefer_host = false;
};

struct VmmHandle {
  int fd = -1;
  size_t bytes = 0;
  bool on_host = false;
  int device = 0;  // the device whose memory it is (when not on the host)
  bool released = false;
  int mappings = 0;
  int retained = 0;  // cuMemRetainAllocationHandle references, each released by a cuMemRelease
};

// Released VMM handles' physical pages (memfds), kept for a later cuMemCreate of the same size.
// A new memfd is zeroed by the kernel page by page as it is first touched, and a closed one
// gives its pages back: the pinned backend moves tensors through cuMemCreate / cuMemRelease, and
// a mobilenet_v2 replay at half its peak (6 iterations) spent three quarters of its time in the
// host kernel (32 of 42 s), most of it allocating, zeroing, faulting in and freeing those pages.
// A recycled memfd is filled with poison (0xFF, as freed device ranges are) before it is handed
// out again, so it holds neither zeros nor its last contents. At most `limit` bytes (all
// devices' capacity, at most 2 GiB) in at most kMaxSpares memfds are kept (each is an open
// file: a process's soft limit is often 1024); past that the oldest are closed. Poisoning
// writes every page of the memfd, touched or not. Not locked: Memory holds it under its mutex.
class SpareMemfds {
 public:
  void set_limit(uint64_t limit) { limit_ = limit; }
  // A poisoned memfd of exactly `bytes`, or -1 when none is kept (the caller creates one).
  int take(size_t bytes);
  // Keeps `fd` (of `bytes`) for a later take, or closes it (and, past the limit, older ones).
  void give(int fd, size_t bytes);
  static constexpr size_t kMaxSpares = 128;

 private:
  struct Spare {
    int fd;
    size_t bytes;
  };
  std::vector<Spare> spares_;  // oldest first
  uint64_t bytes_ = 0, limit_ = 0;
};

struct VmmMapping {
  uintptr_t base = 0;
  size_t bytes = 0;
  CUmemGenericAllocationHandle handle = 0;
  DeviceMask access = 0;  // the devices cuMemSetAccess made it accessible to
};

// One device's memory in use and its peak (device allocations, VMM chunks on it, managed
// blocks resident on it).
struct DeviceUse {
  uint64_t used = 0;
  uint64_t managed_resident = 0;
  uint64_t peak = 0;
};

struct Stats {
  uint64_t peak = 0;  // of all devices' memory in use together
  uint64_t faults = 0;
  uint64_t evictions = 0;
  uint64_t htod = 0;
  uint64_t dtoh = 0;
  uint64_t dtod = 0;
};

enum class PointerClass : uint8_t { Unknown, Device, Managed, Pinned, VmmDevice, VmmHost };

// Device memory, Unified Memory residency and the VMM calls. All methods lock mu. One address
// space for every device (unified addressing); each device has its own capacity and use.
class Memory {
 public:
  Memory();
  uint64_t capacity() const { return capacity_; }  // each device's

  CUresult alloc_device(int device, size_t bytes, CUstream_st* stream, bool stream_ordered, CUdeviceptr* out);
  CUresult free_device(CUdeviceptr ptr);  // caller synchronised the device first
  CUresult free_async(CUdeviceptr ptr, CUstream_st* stream, const CompletionPtr& done);
  void release_pending(CUstream_st* stream);  // host learnt: stream's frees completed
  void release_all_pending();
  CUresult alloc_managed(size_t bytes, CUdeviceptr* out);
  CUresult free_managed(CUdeviceptr ptr);
  CUresult alloc_pinned(size_t bytes, void** out);
  CUresult free_pinned(void* ptr);
  CUresult register_host(void* ptr, size_t bytes);    // cuMemHostRegister: pin existing memory
  CUresult unregister_host(void* ptr);

  PointerClass classify(uintptr_t ptr, size_t bytes, Allocation* alloc_out = nullptr);  // copies the record
  // API-time check (within the allocation's requested bytes), or with `mapped_pages` the
  // execution-time check a GPU makes: within the allocation's mapped pages. Work enqueued before
  // a stream-ordered free may run after the range was handed to a smaller allocation.
  bool range_valid_for_copy(uintptr_t ptr, size_t bytes, bool mapped_pages = false);
  bool is_managed(uintptr_t ptr);

  // Kernel-side declaration: false when [ptr, ptr+bytes) may not be touched by `device`.
  bool declare_access(uintptr_t ptr, size_t bytes, int device, double* cost_ns);
  void prefetch(uintptr_t ptr, size_t bytes, const CUmemLocation& to, double* cost_ns);
  // cuMemDiscardBatchAsync, one range: whole blocks inside it lose their data and their device
  // memory (partly covered blocks keep theirs, as their other bytes may be live).
  void discard(uintptr_t ptr, size_t bytes);
  // A copy or memset wrote [ptr, ptr+bytes): managed blocks there hold data now.
  void note_write(uintptr_t ptr, size_t bytes);
  CUresult advise(uintptr_t ptr, size_t bytes, CUmem_advise advice, const CUmemLocation& loc);

  // VMM
  CUresult address_reserve(size_t bytes, size_t alignment, CUdeviceptr hint, CUdeviceptr* out);
  CUresult address_free(CUdeviceptr ptr, size_t bytes);
  CUresult create(size_t bytes, const CUmemAllocationProp& prop, CUmemGenericAllocationHandle* out);
  CUresult release(CUmemGenericAllocationHandle handle);
  CUresult retain_handle(uintptr_t addr, CUmemGenericAllocationHandle* out);  // cuMemRetainAllocationHandle
  CUresult map(CUdeviceptr ptr, size_t bytes, size_t offset, CUmemGenericAllocationHandle handle);
  CUresult unmap(CUdeviceptr ptr, size_t bytes);
  CUresult set_access(CUdeviceptr ptr, size_t bytes, DeviceMask grant, DeviceMask revoke);

  void note_copy(CopyRoute route, size_t bytes);
  void get_stats(simcuda_stats* out);  // memory figures: all devices together
  DeviceUse device_use(int device);
  void reset_stats();

 private:
  struct PendingFree {
    uintptr_t base;
    size_t span;
    CompletionPtr done;
  };
  uintptr_t va_alloc(size_t span, size_t alignment);
  void va_release(uintptr_t base, size_t span);
  void protect(uintptr_t base, size_t span);
  void unprotect(uintptr_t base, size_t span);
  void unretain(uintptr_t base, size_t span, bool discard);
  void discard_retained();
  bool reserve_capacity(int device, uint64_t bytes);  // evicts device's managed blocks if needed
  void charge(int device, uint64_t bytes);
  void uncharge(int device, uint64_t bytes);
  bool evict_one_managed(int device, uintptr_t keep_block);
  bool make_resident(uintptr_t block, int device, double* cost_ns);
  void make_host_resident(uintptr_t block, double* cost_ns);
  Allocation* find_allocation(uintptr_t ptr);
  const VmmMapping* find_mapping(uintptr_t ptr);
  // The handle's last reference went (released, no mapping left): its pages leave the device.
  void retire_handle(std::unordered_map<CUmemGenericAllocationHandle, VmmHandle>::iterator h);

  std::mutex mu_;
  uint64_t capacity_ = 0;
  double to_host_share_ = 1.0;  // SIMCUDA_MANAGED_TO_HOST_SHARE: managed migrations to the host, of the pinned rate
  // Page-locked host memory cuMemHostAlloc may hold at once (SIMCUDA_PINNED_BYTES; unlimited by
  // default), and what it holds: past the limit it returns CUDA_ERROR_OUT_OF_MEMORY, as a real
  // driver does once the host cannot lock more pages. Guarded by mu_.
  uint64_t pinned_limit_ = ~uint64_t{0};
  uint64_t pinned_bytes_ = 0;
  uint64_t used_ = 0;  // all devices together
  DeviceUse devices_[kMaxDevices];
  uintptr_t region_ = 0;
  size_t region_bytes_ = 0;
  std::map<uintptr_t, size_t> va_free_;  // base -> bytes
  // Freed ranges that keep their physical pages (PROT_NONE, poisoned with 0xFF): base -> bytes,
  // disjoint. A real device does not clear memory it hands out again (cuMemAlloc: "The memory
  // is not cleared"), and reusing populated pages spares the host a page fault per 4 KiB: giving
  // them back at every free made a mobilenet_v2 replay fault 11 GB in 8 iterations, two thirds
  // of its time. At most retain_limit_ bytes (all devices' capacity) are kept; past it all are
  // given back. retained_bytes_ is their sum (kept, not summed at every free).
  std::map<uintptr_t, size_t> retained_;
  uint64_t retained_bytes_ = 0;
  uint64_t retain_limit_ = 0;
  std::map<uintptr_t, Allocation> allocations_;
  std::map<CUstream_st*, std::vector<PendingFree>> pending_;
  std::map<uintptr_t, ManagedBlock> blocks_;                // block base -> state
  std::set<std::pair<uint64_t, uintptr_t>> lru_;            // (stamp, block) of resident blocks
  uint64_t stamp_ = 0;
  std::map<uintptr_t, size_t> reservations_;                // VMM reserved ranges
  std::map<uintptr_t, VmmMapping> mappings_;
  std::unordered_map<CUmemGenericAllocationHandle, VmmHandle> handles_;
  SpareMemfds spare_memfds_;
  CUmemGenericAllocationHandle next_handle_ = 1;
  Stats stats_;
};

enum class DefaultStream : uint8_t { Legacy, PerThread };

// Streams, events, their worker threads, virtual time, capture and the sticky error.
class Scheduler {
 public:
  Scheduler();
  CUstream_st* resolve(CUstream handle, DefaultStream which, CUresult* err);
  CUstream_st* create_stream(unsigned flags, int priority);
  CUresult destroy_stream(CUstream_st* s);
  bool is_stream(CUstream_st* s);

  // Enqueues (or captures) an op. Returns the op's completion (null when captured).
  CUresult enqueue(CUstream_st* s, OpPayload payload, CompletionPtr* done_out = nullptr,
                   std::vector<CompletionPtr> extra_deps = {});
  CUresult wait_event(CUstream_st* s, CUevent_st* e);
  CUresult record_event(CUstream_st* s, CUevent_st* e);

  CUresult synchronize_stream(CUstream_st* s);
  CUresult synchronize_device();
  CUresult synchronize_event(CUevent_st* e);
  CUresult query_stream(CUstream_st* s);
  CUresult query_event(CUevent_st* e);
  CUresult elapsed_ms(CUevent_st* start, CUevent_st* end, float* ms);

  CUresult begin_capture(CUstream_st* s, CUstreamCaptureMode mode, CUgraph_st* into = nullptr);
  CUresult end_capture(CUstream_st* s, CUgraph* graph);
  CUresult capture_status(CUstream_st* s, CUstreamCaptureStatus* status, cuuint64_t* id);
  bool capturing(CUstream_st* s);
  // A "potentially unsafe API call" (cuda.h, cuThreadExchangeStreamCaptureMode) made by the
  // calling thread, whose interaction mode is `thread_mode`. It is prohibited when the thread
  // has a capture of its own not begun RELAXED (unless the thread is RELAXED), or when another
  // thread has a GLOBAL capture and this thread is in GLOBAL mode. Prohibited: the captures it
  // conflicts with are invalidated and CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED returned (what
  // PyTorch's NCCL watchdog met with cudaEventQuery, pytorch#104487 / #148594).
  CUresult check_unsafe_call(CUstreamCaptureMode thread_mode);
  void invalidate_capture(CUstream_st* s);
  CUresult launch_graph(CUgraphExec_st* exec, CUstream_st* s);

  CUresult sticky() const { return sticky_.load(std::memory_order_acquire); }
  void set_sticky(CUresult err);
  uint64_t stream_virtual_ns(CUstream handle);
  double max_virtual_ns();
  double host_virtual_ns();
  void set_host_time_scale(double scale) { host_time_scale_.store(scale, std::memory_order_relaxed); }
  std::vector<std::pair<uint64_t, double>> stream_clocks();
  uint64_t kernels_launched() const { return launched_.load(); }
  uint64_t kernels_executed() const { return executed_.load(); }

 private:
  void worker_loop(CUstream_st* s);
  void start_worker(CUstream_st* s);
  void execute(CUstream_st* s, Op& op, double start_ns, double* cost_ns);
  void wait_for(const CompletionPtr& c, std::unique_lock<std::mutex>& lock);
  bool done_at_host_clock(const CompletionPtr& c) const;  // under mu_: c finished by the host's clock
  CUstream_st* per_thread_stream();
  // SIMCUDA_HOST_TIME (simcuda.h): a submission or wait opens a HostTurn, whose `gap` is the
  // scaled host time since the last one returned (0 when off) and whose end stamps the return.
  struct HostTurn {
    explicit HostTurn(Scheduler& s) : sched(s), gap(s.host_gap_ns()) {}
    ~HostTurn() { sched.host_left(); }
    HostTurn(const HostTurn&) = delete;
    HostTurn& operator=(const HostTurn&) = delete;
    Scheduler& sched;
    const double gap;
  };
  double host_gap_ns();
  void host_left();

  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<CUstream_st*> streams_;  // live, including legacy and per-thread ones
  CUstream_st* legacy_ = nullptr;
  double host_clock_ns_ = 0;
  std::FILE* timeline_ = nullptr;  // SIMCUDA_TIMELINE: every executed operation (debugging)
  uint64_t next_stream_id_ = 1;
  uint64_t next_capture_id_ = 1;
  std::atomic<CUresult> sticky_{CUDA_SUCCESS};
  std::atomic<uint64_t> launched_{0};
  std::atomic<uint64_t> executed_{0};
  unsigned jitter_us_ = 0;
  std::atomic<double> host_time_scale_{0};
};

struct Driver {
  Memory memory;
  Scheduler scheduler;
  std::mutex kernels_mu;
  std::vector<std::unique_ptr<CUfunc_st>> kernels;
  std::unordered_map<const void*, CUfunc_st*> kernel_by_stub;
  std::atomic<bool> initialized{false};  // set by cuInit
  CUctx_st primary_ctx[kMaxDevices];  // device d's primary context: primary_ctx[d] (device set by Driver())
  int primary_refs[kMaxDevices] = {};  // guarded by kernels_mu
  Driver() {
    for (int i = 0; i < kMaxDevices; ++i) primary_ctx[i].device = i;
  }
};

Driver& driver();
inline Driver& d() { return driver(); }  // the API files' shorthand
bool driver_initialized();
// The calling thread's current context (a device's primary context, or null).
CUctx_st*& current_ctx();
// The current context's device (0 when none is current: callers check readiness first).
int current_device();
// The device a stream's work runs on: a created stream's context's; the default streams the
// current context's.
int stream_device(const CUstream_st* s);
// One of the devices' primary contexts (what a CUcontext may be).
bool is_context(const CUctx_st* ctx);
// CUDA_SUCCESS when the driver is initialised, a context is current and the context has not
// failed; else the error the real driver gives (NOT_INITIALIZED, INVALID_CONTEXT, the sticky one).
CUresult check_ready();
bool is_function(CUfunc_st* f);
// The function a CUkernel handle names; nullptr when h is none.
CUfunc_st* function_of_kernel(const void* h);
// What a launch may be given (cuda.h, cuLaunchKernel: "f: Function CUfunction or Kernel
// CUkernel to launch"): the function, or nullptr when h is neither.
CUfunc_st* launchable(CUfunction h);
// Whether cuMemCreate offers host-located memory of this location type (SIMCUDA_HOST_VMM:
// all, the default; numa: HOST_NUMA only, as some 12.x drivers; none).
bool host_vmm_supported(CUmemLocationType type);
// The calling thread's stream capture interaction mode (cuThreadExchangeStreamCaptureMode;
// CU_STREAM_CAPTURE_MODE_GLOBAL unless changed).
CUstreamCaptureMode& thread_capture_mode();
// check_unsafe_call for the calling thread: the first check of every potentially unsafe call
// (synchronising calls, event and stream queries, cuMemAlloc, cuMemAllocManaged, cuMemFree).
inline CUresult check_unsafe_call() { return driver().scheduler.check_unsafe_call(thread_capture_mode()); }
// How a copy's caller typed one side: Any (found from the address, as cuMemcpy does) or Device
// (cuMemcpy2D's CU_MEMORYTYPE_DEVICE: must be device memory).
enum class SidePlace : uint8_t { Any, Device };
// Checks and enqueues a (possibly strided) copy on the stream `handle` resolves to (the default
// stream for sync copies, which then wait for it). Each side's span must lie in one allocation.
CUresult enqueue_copy(DefaultStream ds, CUstream handle, uintptr_t dst, uintptr_t src, const CopyShape& shape,
                      bool sync, SidePlace dst_place = SidePlace::Any, SidePlace src_place = SidePlace::Any);
// Registers the kernels equivalents.cpp provides for PTX entries (cuModuleGetFunction's),
// once; safe from any thread.
void register_builtin_equivalents();

// Runs a kernel op on the calling (worker) thread, on op.device; returns its virtual cost in ns.
double run_kernel(const OpPayload& op, bool* illegal_address);
// The JSON statistics document (SIMCUDA_STATS_FILE).
std::string stats_json();
double copy_cost_ns(const OpPayload& op);

}  // namespace simcuda
