// entry.cpp: the executor's hook entry points (executor.hpp): allocations (served from the
// backend; freed blocks cached for reuse in stream order), frees, launches (touched blocks
// made resident or recomputed, pinned while the launch is forwarded without the lock, their
// use recorded after), copies and memsets (the same), host syncs and graph launches. Each is
// one event for the policy (planning.hpp), described by a signature the controller matches
// iterations by: the op in the top byte, the rest hashed (sizes, function, direction). While
// the executor stands by (standby.hpp) launches, copies and graph launches pass to the driver
// unwatched, and allocations, frees and syncs feed the policy nothing.

#include <algorithm>
#include <atomic>
#include <thread>
#include <cinttypes>
#include <cstring>
#include <optional>
#include <string_view>

#include "capture.hpp"
#include "capuchin/learn.hpp"
#include "capuchin/trace.hpp"
#include "executor.hpp"
#include "executor_impl.hpp"
#include "call_site.hpp"
#include "ordering.hpp"
#include "scratch.hpp"

namespace capuchin::interpose::exec {

bool is_started();

namespace {

using trace::Op;

// Freed managed blocks per span kept on the device once the budget binds (free()).
constexpr std::uint32_t kWarmPerSpan = 2;

using learn::mix_signature;
using learn::op_signature;

policy::Event event(Op op, std::uint64_t sig) {
  policy::Event e;
  e.op = static_cast<std::uint8_t>(op);
  e.sig = sig;
  return e;
}

Executor* running() { return g_ex != nullptr && is_started() ? g_ex : nullptr; }

// From the settle before work with unknown accesses until that work is counted in
// unknown_in_flight (Executor::settling): nothing is dropped, and only this thread moves blocks
// out. release() once it is counted, or on leaving by an error.
class SettleWindow {
 public:
  explicit SettleWindow(Executor& e) : e_(e) {
    ++e_.settling;
    ++scratch().settling;
  }
  ~SettleWindow() { release(); }
  SettleWindow(const SettleWindow&) = delete;
  SettleWindow& operator=(const SettleWindow&) = delete;
  void release() {
    if (!held_) return;
    --e_.settling;
    --scratch().settling;
    held_ = false;
  }

 private:
  Executor& e_;
  bool held_ = true;
};

}  // namespace

__attribute__((tls_model("initial-exec"))) thread_local const void* t_alloc_caller = nullptr;

bool alloc(CUdeviceptr* out, std::size_t bytes, CUstream s, bool per_thread, bool stream_ordered, CUresult* r) {
  const void* caller = t_alloc_caller;
  t_alloc_caller = nullptr;  // noted for this call only
  if (g_ex == nullptr || out == nullptr || bytes == 0) return false;
  Executor& e = *g_ex;
  Held held(e);
  CUresult why = CUDA_SUCCESS;
  if (!started(e, &why)) {
    if (why == CUDA_ERROR_INVALID_CONTEXT || why == CUDA_ERROR_NOT_INITIALIZED) {
      *r = why;
      return true;  // the runtime hook initialises the context and retries
    }
    return false;
  }
  // A thread with no context yet (its first CUDA call allocates: PyTorch's autograd thread):
  // "not yet possible", as before the start: the runtime hook makes the runtime bind one, as
  // the real call would, and asks again; a driver hook lets the driver answer (not_yet()).
  int dev = 0;
  CUresult no_device = CUDA_SUCCESS;
  const bool known = current_device(e, &dev, &no_device);
  if (!known && no_device == CUDA_ERROR_INVALID_CONTEXT) {
    *r = no_device;
    return true;
  }
  if (!on_executor_device(e, bytes, known ? &dev : nullptr)) return false;
  if (!e.opt.serve_libraries && in_cuda_library(e, caller)) {
    e.decisions.record(Action::Fallback, kNoBlockId, bytes, "library-allocation",
                       -1, "a CUDA library's own memory: left to the driver (CAPUCHIN_SERVE=all serves it)");
    return false;
  }
  // cudaMalloc while a capture is in progress is the driver's to allow or refuse (CUDA refuses
  // it unless the thread's capture mode is relaxed); serving it would need event queries and
  // managed allocations of our own, on the application's behalf.
  if (!stream_ordered && any_capture_active()) {
    e.decisions.record(Action::Fallback, kNoBlockId, bytes, "capture-in-progress", -1,
                       "a non-stream-ordered allocation during a graph capture: left to the driver");
    return false;
  }
  if (stream_ordered && capture_sequence(reinterpret_cast<std::uint64_t>(s), per_thread) != 0) {
    e.decisions.record(Action::Fallback, kNoBlockId, bytes, "stream-capture", -1, "allocated by the driver inside a graph capture");
    return false;  // a graph's allocation node: the driver's, outside the budget
  }
  const CUstream ds = driver_stream(s, per_thread);
  const Kind kind = e.kind_for(bytes);
  const std::size_t span = (kind == Kind::Vmm ? *e.vmm : *e.managed).span_for(bytes);
  // A freed block of the same span and kind, when stream order (or completion) allows.
  Block* b = e.blocks.take_cached(span, kind, [&](Block& c) {
    if (stream_ordered && c.free_stream_valid && c.free_stream == ds) return true;
    bool done = true;
    for (Ev f : c.free_events) done = done && e.events.done(f);
    if (done) return true;
    if (!stream_ordered) return false;
    for (Ev f : c.free_events) (void)e.events.order(ds, f);  // fails only on a broken context
    return true;
  });
  if (b != nullptr) {
    b->bytes = bytes;
    b->free_stream_valid = false;
    // Its free events stay until the new owner's first use: a move before that still waits for
    // the old owner's work. Host or dropped Vmm memory is refilled once that work is done.
    if (b->kind == Kind::Vmm && (b->where == Where::Host || b->where == Where::Dropped || b->where == Where::Incoming))
      e.await_quiet(*b);
    if (b->where == Where::Incoming) e.mem(*b).complete_prefetch(*b, ds);
    if (const CUresult refill = e.make_ready(*b, true); refill != CUDA_SUCCESS) {
      log(LogLevel::Warn, "executor: a cached block of %zu bytes could not be refilled (CUresult %d); returned to the driver",
          span, static_cast<int>(refill));
      e.await_quiet(*b);
      release_free_events(e.events, *b);
      e.events.unref(b->ready);
      e.events.unref(b->exec);
      e.ledger.forget(*b);
      if (b->kind == Kind::Managed) e.frees_after_unlock.push_back(b->base);
      else e.mem(*b).release(*b);
      e.delete_block(b);
      b = nullptr;
    }
  }
  if (b == nullptr) {
    b = new Block;
    b->bytes = bytes;
    b->kind = kind;
    b->span = span;
    if (e.make_ready(*b, false) != CUDA_SUCCESS) {
      e.ledger.forget(*b);  // nothing when it was never charged
      delete b;
      e.decisions.record(Action::Fallback, kNoBlockId, bytes, "backend-alloc-failed", -1, "served by the real allocator");
      return false;
    }
  }
  b->id = record_alloc(b->base, bytes, stream_ordered ? AllocSub::Async : AllocSub::Device,
                       reinterpret_cast<std::uint64_t>(s), per_thread ? kPerThread : 0);
  b->holds_data = false;
  e.blocks.add_live(b);
  ++b->pins;  // not a victim of its own allocation's commands
  if (!e.standby.on()) [[likely]] {
    policy::Event ev = event(Op::Alloc, op_signature(Op::Alloc, bytes));
    ev.form = learn::form_signature(Op::Alloc, 0);  // forms leave sizes out (policy::Event::form)
    ev.id = b->id;
    ev.bytes = b->span;
    e.feed(ev, {});
  } else if (b->where != Where::Device) {  // no launch will make it resident (nor charge it): now
    // In the allocating stream's order, which the job's first use follows; cudaMalloc has none
    // (the first use, on any stream, would not wait for a discard the reuse is ordered after).
    if (!stream_ordered || e.ensure_resident(*b, ds) != CUDA_SUCCESS || b->where != Where::Device) {
      e.wake("a new block could not be made resident in stream order");
      b->holds_data = false;  // new: the wake counted it as written by unwatched work
    }
  }
  --b->pins;
  e.ledger.touch(*b, e.tick());
  *out = b->base;
  *r = CUDA_SUCCESS;
  return true;
}

bool free(CUdeviceptr p, CUstream s, bool per_thread, bool stream_ordered, CUresult* r) {
  Executor* ex = running();
  if (ex == nullptr) return false;
  Executor& e = *ex;
  const bool other_device = stream_ordered && other_device_current(e);  // asked of the driver before the lock
  Held held(e);
  Block* b = e.blocks.by_base(p);
  if (b == nullptr) return false;
  // Outside stream order its reuse waits for its uses, which unwatched calls did not mark: the
  // wake marks them (a stream-ordered free is ordered by its stream's deferred event, which
  // covers every call forwarded on the stream).
  ++b->pins;
  if (!stream_ordered && e.standing_by()) e.wake("a free outside stream order");
  if (!e.standby.on()) [[likely]] {
    policy::Event ev = event(Op::Free, op_signature(Op::Free, b->bytes));
    ev.form = learn::form_signature(Op::Free, 0);
    ev.id = b->id;
    e.feed(ev, {});
  }
  e.materialize_dependents(*b);  // after the commands: a drop among them may depend on it
  --b->pins;
  if (b->exports > 0) {  // its handles' pin ends with it
    b->exports = 0;
    if (b->pins > 0) --b->pins;
  }
  record_free(p, reinterpret_cast<std::uint64_t>(s), per_thread ? kPerThread : 0);
  const CUstream ds = driver_stream(s, per_thread);
  e.blocks.remove_live(b);
  if (stream_ordered) {
    Ev fe = e.use_event(ds, other_device);  // the stream's deferred event: the work before the free
    if (!fe) e.await_stream(ds);  // no event to order the reuse by: the work before the free is done now
    add_free_event(e.events, *b, fe);
    b->free_stream = ds;
    b->free_stream_valid = !other_device;  // another device's stream handle orders nothing of ours
  } else if (b->many_streams) {
    e.await_streams();  // its uses, on more streams than it holds, are covered by every stream's latest work
  } else {
    for (std::uint8_t i = 0; i < b->nuses; ++i) {
      Ev u = e.events.ref(b->uses[i].ev);
      add_free_event(e.events, *b, u);
    }
  }
  // A replay still running, or one that was reading it, is work before the free too.
  if (b->where == Where::Incoming && !b->staging_mapped) {
    add_free_event(e.events, *b, b->ready);
    e.ledger.move(*b, Where::Device);
  }
  add_free_event(e.events, *b, b->exec);
  release_uses(e.events, *b);
  // Once the budget binds (the job has held 80% of it, or another block of this size would not
  // fit now) its pages are discarded at once, after the work before the free: room made early on
  // capuchin's out stream, no dead data moved. Until then it stays on the device for a reuse of
  // its size, which then needs no driver call (a discarded block is filled again at its first
  // use); a shortage would discard it then (start_victims: freed blocks first). Discarding at
  // every free cost a current driver about 5 calls per free and 3 per reuse with no pressure at
  // all (bench_host_cost); discarding only at shortages made bound replays up to 12% slower in
  // simcuda (room made late, behind the out stream's evictions).
  const bool budget_binds = e.planning.pressure_seen() || !e.ledger.fits(b->span);
  // Except a few per span (kWarmPerSpan) while another block of the size still fits, kept for
  // the next reuse of their size: a job frees and allocates tensors of the same sizes over and
  // over, and a discarded block is filled again at its reuse, each a driver call (a UVM
  // operation) besides the events ordering them. A shortage moves these out first
  // (start_victims: freed blocks before live ones); with no room left they are not kept (the
  // room would come late, behind the out stream's evictions).
  Ev discarded;
  if (budget_binds && b->kind == Kind::Managed && b->where == Where::Device && e.ledger.fits(b->span) &&
      e.blocks.warm(b->span) < kWarmPerSpan) {
    b->warm = true;  // counted by cache(), below
  } else if (budget_binds && e.mem(*b).discard_dead(*b, discarded)) {
    e.reuse_after_move_out(*b, discarded);
  }
  b->id = kNoBlockId;
  e.producers.give(b->producer);
  b->dependents.clear();
  b->version = 0;
  if (b->where == Where::Evicting) e.mem(*b).cancel_evict(*b);
  b->freed_iteration = e.planning.controller().iteration();
  e.blocks.cache(b);
  *r = CUDA_SUCCESS;
  return true;
}

void exported(CUdeviceptr p) {
  Executor* ex = running();
  if (ex == nullptr) return;
  Executor& e = *ex;
  Held held(e);
  Block* b = e.blocks.by_addr(p);
  if (b == nullptr) return;
  if (b->exports++ > 0) return;  // pinned already (a handle granted, or another request in flight)
  ++b->pins;  // until its free: never a victim again
  if (CUresult r = e.ensure_resident(*b, nullptr); r != CUDA_SUCCESS)
    log(LogLevel::Warn, "executor: tensor %" PRIu64 " whose handle is handed out could not be made resident (CUresult %d)",
        b->id, static_cast<int>(r));
  if (b->where == Where::Incoming) e.mem(*b).complete_prefetch(*b, nullptr);
  e.decisions.record(Action::Fallback, b->id, b->span, "handle-exported", -1,
                     "an IPC or allocation handle of its memory was handed out: it stays resident until freed");
}

void export_failed(CUdeviceptr p) {
  Executor* ex = running();
  if (ex == nullptr) return;
  Executor& e = *ex;
  Held held(e);
  Block* b = e.blocks.by_addr(p);
  if (b == nullptr || b->exports == 0) return;
  if (--b->exports > 0) return;  // another handle of it was granted (or is being asked for): it stays
  if (b->pins > 0) --b->pins;
  static bool said = false;
  if (!said) {
    said = true;
    log(LogLevel::Warn, "the driver refused a handle to tensor %" PRIu64 ", which capuchin serves from %s memory (no IPC "
        "handle exists for it); memory shared between processes must be allocated outside the budget (by a CUDA library, or "
        "without CAPUCHIN_BUDGET)",
        b->id, b->kind == Kind::Vmm ? "VMM" : "managed");
  }
}

CUresult before_unknown_work(CUstream s, bool per_thread) {
  if (standby_pass(s, per_thread)) return CUDA_SUCCESS;
  Executor* ex = running();
  if (ex == nullptr) return CUDA_SUCCESS;
  Held held(*ex);
  if (ex->standby.on()) [[unlikely]] {
    if (standby_pass(s, per_thread)) return CUDA_SUCCESS;  // it began standing by after this call looked
    ex->wake("a graph launch on a stream it cannot note");
  }
  SettleWindow settle(*ex);
  if (CUresult r = ex->settle_for_unknown_access(driver_stream(s, per_thread)); r != CUDA_SUCCESS) return r;
  ex->invalidate_producers();  // it may write anything: no replay may read what it changes
  ++ex->unknown_in_flight;     // nothing moves out until it is recorded (after_unknown_work)
  return CUDA_SUCCESS;
}

void after_unknown_work(CUstream s, bool per_thread, bool launched) {
  if (standby_done()) return;
  Executor* ex = running();
  if (ex == nullptr) return;
  Held held(*ex);
  if (ex->unknown_in_flight > 0) --ex->unknown_in_flight;
  if (launched) ex->mark_unknown_use(driver_stream(s, per_thread));
}

namespace {

// One parameter's bytes. Most are pointers or 32-bit scalars: copied inline, not by a library
// call each (a launch with 15 parameters made 15 calls).
inline void copy_param(std::uint8_t* to, const void* from, std::uint32_t n) {
  if (n == 8) std::memcpy(to, from, 8);
  else if (n == 4) std::memcpy(to, from, 4);
  else std::memcpy(to, from, n);
}

// The producer of a declared output, kept so the launch can be replayed.
std::shared_ptr<Producer> capture_producer(Executor& e, const Launch& l, const KernelInfo& ki, CUstream ds,
                                           const std::vector<Block*>& cur, const Block* output, std::uint64_t stamp,
                                           std::uint64_t sig) {
  std::shared_ptr<Producer> p = e.producers.take();
  p->launch = stamp;
  p->sig = sig;
  p->func = l.func;
  std::memcpy(p->grid, l.grid, sizeof p->grid);
  std::memcpy(p->block, l.block, sizeof p->block);
  p->shmem = l.shmem;
  p->stream = ds;
  p->kernel = &ki;
  p->params.assign(ki.buffer, 0);
  for (std::size_t i = 0; i < ki.offset.size(); ++i)
    if (l.params[i] != nullptr) copy_param(p->params.data() + ki.offset[i], l.params[i], ki.size[i]);
  p->inputs.clear();
  p->inputs.reserve(cur.size());  // one allocation, not one per doubling
  for (const Block* b : cur)
    if (b != output) p->inputs.push_back({b->id, b->version});
  return p;
}

// Probations in flight (begun in before_launch, ended after the launch or its failure), and
// whether a graph capture has begun in this process: then no probation starts again (the
// window between the two checks, a probation begun while another thread starts the first
// capture, is not closed).
std::atomic<int> g_probations_in_flight{0};
std::atomic<bool> g_no_more_probations{false};

bool may_probe() { return !g_no_more_probations.load(std::memory_order_seq_cst) && !any_capture_active(); }

void end_probation(Launch& l) {
  if (l.probation && l.probation->counted) {
    l.probation->counted = false;
    g_probations_in_flight.fetch_sub(1, std::memory_order_seq_cst);
  }
}

// The launch's parameter words (8-byte aligned, as the scan reads them) that point into none
// of its blocks and could be addresses (the driver is asked outside the lock).
void collect_other_words(const Launch& l, const KernelInfo& ki, const std::vector<Block*>& cur, std::vector<std::uint64_t>& out) {
  for (std::size_t i = 0; i < ki.offset.size() && l.params != nullptr; ++i) {
    const auto* p = static_cast<const std::uint8_t*>(l.params[i]);
    for (std::uint32_t at = 0; p != nullptr && at + 8 <= ki.size[i]; at += 8) {
      std::uint64_t w;
      std::memcpy(&w, p + at, 8);
      if (w < (std::uint64_t{1} << 16)) continue;  // a size, a count, a flag
      if (std::none_of(cur.begin(), cur.end(), [&](const Block* b) { return w >= b->base && w < b->base + b->span; }))
        out.push_back(w);
    }
  }
}

// This launch is its shape's probation: the blocks it touches, by position, to hash, and the
// events of their last uses, to wait for.
void start_probation(Executor& e, Launch& l, const KernelInfo& ki, const Shape& shape, const std::vector<Block*>& cur,
                     CUstream ds) {
  g_probations_in_flight.fetch_add(1, std::memory_order_seq_cst);
  l.probation = std::make_unique<Probation>();
  Probation& p = *l.probation;
  p.counted = true;
  if (!may_probe()) p.ok = false;  // a capture began meanwhile: nothing is done
  p.stream = ds;
  p.device = e.opt.device_checksum ? &e.checksums : nullptr;  // null: through host copies
  collect_other_words(l, ki, cur, p.other_words);
  p.ranges.reserve(cur.size());
  for (std::size_t i = 0; i < cur.size(); ++i) {
    const Block& b = *cur[i];
    p.ranges.push_back({b.id, b.base, b.bytes, ((shape.fresh_mask >> i) & 1u) != 0});
    if (b.many_streams) p.ok = false;  // its uses are not all recorded: not probed this time
    for (std::uint8_t u = 0; u < b.nuses; ++u)
      if (b.uses[u].ev) {
        p.held.push_back(e.events.ref(b.uses[u].ev));
        p.waits.push_back(e.events.handle(p.held.back()));
      }
  }
}

void release_probation(Executor& e, Launch& l) {
  for (Ev ev : l.probation->held) e.events.unref(ev);
  l.probation->held.clear();
}

// After a probation (under the lock): the shape's verdict learned and logged, and the producers
// before_launch made for its fresh blocks kept for the outputs only.
void conclude_probation(Executor& e, Launch& l) {
  const Probation& p = *l.probation;
  const WriteSets::Known k = p.verdict;
  KernelInfo* ki = l.func != nullptr ? &e.kernels.info(l.func, l.layout) : nullptr;
  if (ki != nullptr) e.write_sets.learn(*ki, l.shape, k);
  e.write_sets.count_bytes(p.bytes_hashed, p.bytes_copied);
  std::uint64_t first = kNoBlockId, out_bytes = 0;
  for (std::size_t i = 0; i < p.ranges.size(); ++i)
    if (((k.outputs >> i) & 1u) != 0) {
      if (first == kNoBlockId) first = p.ranges[i].id;
      out_bytes += p.ranges[i].bytes;
    }
  e.decisions.record(Action::Verdict, first, out_bytes, to_string(k.verdict), -1, ki != nullptr ? ki->name.c_str() : nullptr);
  std::erase_if(l.made, [&](const auto& m) {
    if (k.verdict != Verdict::Replayable) return true;
    for (std::size_t i = 0; i < p.ranges.size(); ++i)
      if (p.ranges[i].id == m.first) return ((k.outputs >> i) & 1u) == 0;
    return true;
  });
}

void unpin(Executor& e, const std::uint64_t* ids, unsigned n) {
  for (unsigned i = 0; i < n; ++i)
    if (Block* b = e.blocks.by_id(ids[i]); b != nullptr && b->pins > 0) --b->pins;
}
void unpin(const std::vector<Block*>& blocks) {
  for (Block* b : blocks)
    if (b->pins > 0) --b->pins;
}

}  // namespace

std::vector<Block*>& launch_blocks() { return scratch().launch; }

CUresult before_launch(Launch& l, const std::uint64_t* words, unsigned nwords, std::vector<Block*>& touched) {
  touched.clear();
  if (standby_pass(l.stream, l.per_thread)) [[unlikely]] {
    l.standby = true;
    return CUDA_SUCCESS;
  }
  Executor* ex = running();
  if (ex == nullptr) return CUDA_SUCCESS;
  // Being captured into a graph: nothing may be enqueued around it; its accesses are made
  // safe when the graph is launched (before_unknown_work).
  if (capture_sequence(reinterpret_cast<std::uint64_t>(l.stream), l.per_thread) != 0) return CUDA_SUCCESS;
  Executor& e = *ex;
  // The thread's device, asked of the driver before the lock (set-up state only is read).
  l.other_device = other_device_current(e);
  Held held(e);
  if (e.standby.on()) [[unlikely]] {
    if (standby_pass(l.stream, l.per_thread)) {  // it began standing by after this call looked
      l.standby = true;
      return CUDA_SUCCESS;
    }
    e.wake("a launch on a stream it cannot note");
  }
  std::vector<Block*>& cur = touched;
  // Each block once, in first-seen order: a stamp per launch, not a search of the blocks found so
  // far (an optimizer's multi-tensor launch names hundreds).
  const std::uint64_t stamp = e.next_launch_stamp();
  auto take = [&](std::uint64_t word) {
    Block* b = e.blocks.by_addr(word);
    if (b == nullptr || b->launch_seen == stamp) return;
    if (cur.size() == kMaxLaunchWords) {  // more blocks than a launch event holds
      l.complete_scan = false;
      return;
    }
    b->launch_seen = stamp;
    ++b->pins;  // unpinned by after_launch (or on an error, below)
    cur.push_back(b);
  };
  if (l.words_truncated && l.layout != nullptr)  // more candidate words than recorded: every one, here
    for_each_candidate(l.layout, l.params, l.extra, take);
  else
    for (unsigned i = 0; i < nwords; ++i) take(words[i]);
  if (cur.empty() && l.complete_scan && l.other_device) return CUDA_SUCCESS;  // another device's launch
  std::uint64_t total = 0;
  std::uint64_t sig = op_signature(Op::Kernel, reinterpret_cast<std::uint64_t>(l.func));
  for (Block* b : cur) {
    total += b->span;
    sig = mix_signature(sig, b->bytes);
  }
  sig = op_signature(Op::Kernel, sig);
  const CUstream ds = driver_stream(l.stream, l.per_thread);
  if (e.planning.probes_armed())  // when this launch could run, before it is made to wait for data
    for (Block* b : cur)
      if (e.planning.may_be_armed(b->id)) e.planning.stamp_probe(b->id, ds);
  KernelInfo* ki = l.func != nullptr ? &e.kernels.info(l.func, l.layout) : nullptr;
  Block* output = nullptr;
  if (ki != nullptr && ki->output >= 0 && l.params != nullptr && static_cast<std::size_t>(ki->output) < ki->offset.size()) {
    std::uint64_t ptr = 0;
    std::memcpy(&ptr, l.params[ki->output], sizeof ptr);
    output = e.blocks.by_addr(ptr);
    if (output != nullptr && output->launch_seen != stamp) output = nullptr;  // not among the blocks taken
  }
  // Undeclared kernels: the shape's inferred write set, or a probation to learn it.
  WriteSets::Known known;
  Shape shape;
  bool probe = false;  // begun at the end, once nothing can fail
  if (output == nullptr && ki != nullptr && e.opt.recompute && e.opt.infer_writes && l.complete_scan && !l.other_device &&
      !l.attributes) {
    const bool probing = may_probe();
    if (WriteSets::worth_a_shape(*ki, probing)) shape = shape_of(l.func, *ki, l.params, cur, l);
    if (shape.usable) known = e.write_sets.lookup(*ki, shape.key);
    if (known.verdict == Verdict::Unknown && shape.usable && probing && e.write_sets.begin_probation(*ki)) probe = true;
  }
  // What it writes: the declared output, a replayable shape's outputs, else (unknown) everything.
  const std::uint32_t writes = output != nullptr ? 0u : known.verdict == Verdict::Replayable ? known.outputs : 0u;
  const bool writes_known = output != nullptr || writes != 0;
  auto written = [&](std::size_t i) { return !writes_known || (output != nullptr ? cur[i] == output : ((writes >> i) & 1u) != 0); };
  // The policy's event: reads then the writes when they are known, else a touch list.
  std::vector<std::uint64_t>& order = scratch().ids;
  order.clear();
  for (std::size_t i = 0; i < cur.size(); ++i)
    if (!writes_known || !written(i)) order.push_back(cur[i]->id);
  const std::uint32_t nreads = static_cast<std::uint32_t>(order.size());
  for (std::size_t i = 0; writes_known && i < cur.size(); ++i)
    if (written(i)) order.push_back(cur[i]->id);
  policy::Event ev = event(Op::Kernel, sig);
  ev.form = learn::form_signature(Op::Kernel, mix_signature(reinterpret_cast<std::uint64_t>(l.func), cur.size()));
  ev.touch = !writes_known;
  // Writes unknown and no probation of its shape begun here: none can be (no usable shape, a
  // refusal, none left or allowed), so they stay unknown and the planner must not count on
  // recomputing what it touched (SegmentEvent). A probation that ends refusing does not replan
  // (the plan's drops of such tensors then fall back to swap-outs).
  ev.unreplayable = !writes_known && !probe;
  ev.nreads = nreads;
  ev.nwrites = static_cast<std::uint32_t>(order.size()) - nreads;
  ev.bytes = total;
  if (ki == nullptr) ev.name = e.planning.name_index(0, "kernel");
  else if ((ev.name = ki->name_index) == ~0u)  // one lookup per function, not per launch
    ev.name = ki->name_index = e.planning.name_index(reinterpret_cast<std::uint64_t>(l.func), ki->name);
  e.feed(ev, order);
  // Recomputations first: dropped blocks whose producer reads what this launch may write,
  // then dropped blocks it touches.
  for (std::size_t i = 0; i < cur.size(); ++i)
    if (written(i)) e.materialize_dependents(*cur[i]);
  e.note_launch_need(total, cur, ki != nullptr && !ki->name.empty() ? std::string_view(ki->name) : "a kernel");
  for (Block* b : cur) {
    if (CUresult r = e.ensure_resident(*b, ds); r != CUDA_SUCCESS) {
      unpin(cur);
      return r;
    }
  }
  // Accesses unknown: nothing may be missing from its address, moving or dropped, from the
  // settle until the launch is counted in unknown_in_flight (below). After its own blocks are
  // in: room made for them may have started evictions, which the settle cancels.
  std::optional<SettleWindow> settle;
  if (!l.complete_scan) {
    settle.emplace(e);
    if (CUresult r = e.settle_for_unknown_access(ds); r != CUDA_SUCCESS) {
      unpin(cur);
      return r;
    }
  }
  const std::uint64_t now = e.tick();
  for (std::size_t i = 0; i < cur.size(); ++i) {
    Block* b = cur[i];
    e.ledger.touch(*b, now);
    ++b->forwarded;
    b->holds_data = true;
    // What it may write is changed from now on (another thread may look before after_launch):
    // no replay of its old producer.
    if (written(i)) {
      ++b->version;
      e.producers.give(b->producer);
    }
  }
  if (!l.complete_scan) {
    e.invalidate_producers();
    ++e.unknown_in_flight;
    settle->release();
  }
  l.active = true;
  l.driver_stream = ds;
  l.output = output != nullptr ? output->id : kNoBlockId;
  // Timing events are the executor's device's; a probation's copies and replay are not the kernel's time.
  l.timing = l.other_device || probe ? -1 : e.planning.begin_timing(ds, sig);
  if (output != nullptr && e.opt.recompute && e.mem(*output).droppable() && !ki->offset.empty() && !l.attributes &&
      !l.other_device)
    l.producer = capture_producer(e, l, *ki, ds, cur, output, stamp, sig);
  // A replayable shape's outputs, and a probation's candidates (kept if it says replayable).
  if (probe) start_probation(e, l, *ki, shape, cur, ds);
  const std::uint32_t may_make = writes != 0 ? writes : probe ? shape.fresh_mask : 0u;
  for (std::size_t i = 0; may_make != 0 && i < cur.size(); ++i)
    if (((may_make >> i) & 1u) != 0 && e.mem(*cur[i]).droppable())
      l.made.emplace_back(cur[i]->id, capture_producer(e, l, *ki, ds, cur, cur[i], stamp, sig));
  l.shape = shape.key;
  return CUDA_SUCCESS;
}

void after_launch(Launch& l, const std::vector<Block*>& touched, bool launched) {
  if (l.standby) [[unlikely]] {
    l.standby = false;
    standby_done();
    return;
  }
  end_probation(l);  // before the lock: before_capture waits for it without the lock
  if (!l.active) return;
  l.active = false;
  Executor& e = *g_ex;
  Held held(e);
  const CUstream ds = l.driver_stream;
  Ev ev;
  if (launched) {
    e.planning.end_timing(l.timing, ds);
    ev = e.use_event(ds, l.other_device);
    if (!ev) e.await_stream(ds);  // no event to order later moves by: the launch is done now
    if (l.output != kNoBlockId)
      if (Block* out = e.blocks.by_id(l.output)) e.producers.hand(out->producer, std::move(l.producer));
    if (l.probation) conclude_probation(e, l);
    for (auto& [id, producer] : l.made)
      if (Block* out = e.blocks.by_id(id)) e.producers.hand(out->producer, std::move(producer));
    if (!l.complete_scan) e.mark_unknown_use(ds);
  } else {
    e.planning.cancel_timing(l.timing);
  }
  if (!l.complete_scan && e.unknown_in_flight > 0) --e.unknown_in_flight;
  // Still pinned, so still the blocks the launch used: a block freed meanwhile (id cleared)
  // cannot have been reused while pinned; it gets no use mark, so its reuse is ordered by
  // what its free recorded only.
  for (Block* b : touched) {
    if (ev && b->id != kNoBlockId) mark_use(e.events, *b, ds, ev);
    if (b->forwarded > 0) --b->forwarded;
    if (b->pins > 0) --b->pins;
  }
  e.events.unref(ev);
  l.producer.reset();
  l.made.clear();
  if (l.probation) release_probation(e, l);
  l.probation.reset();
}

void probe_before(Launch& l) {
  if (l.probation && l.probation->ok) probation_before(g_ex->api, *l.probation);
}

void probe_done(Launch& l) { end_probation(l); }

const Api& probation_api() { return g_ex->api; }

CUresult before_copy(std::uint64_t dst, std::uint64_t src, std::size_t bytes, CUstream s, bool per_thread, bool memset,
                     CopyToken& t) {
  if (standby_pass(s, per_thread)) [[unlikely]] {
    t.standby = true;
    return CUDA_SUCCESS;
  }
  Executor* ex = running();
  if (ex == nullptr) return CUDA_SUCCESS;
  if (capture_sequence(reinterpret_cast<std::uint64_t>(s), per_thread) != 0) return CUDA_SUCCESS;  // see before_launch
  Executor& e = *ex;
  const bool other_device = other_device_current(e);  // asked of the driver before the lock
  Held held(e);
  if (e.standby.on()) [[unlikely]] {
    if (standby_pass(s, per_thread)) {  // it began standing by after this call looked
      t.standby = true;
      return CUDA_SUCCESS;
    }
    e.wake("a copy on a stream it cannot note");
  }
  Block* d = dst != 0 ? e.blocks.by_addr(dst) : nullptr;
  Block* sb = !memset && src != 0 ? e.blocks.by_addr(src) : nullptr;
  if (!memset && d == nullptr && sb == nullptr) return CUDA_SUCCESS;  // not ours
  if (memset && d == nullptr && other_device) return CUDA_SUCCESS;  // another device's memset
  const CUstream ds = driver_stream(s, per_thread);
  policy::Event ev;
  std::uint64_t one[1];
  std::span<const std::uint64_t> ids;
  if (memset) {
    ev = event(Op::Kernel, op_signature(Op::Kernel, mix_signature(0x5e75e7, bytes)));
    ev.form = learn::form_signature(Op::Kernel, mix_signature(0x5e75e7, d != nullptr ? 1 : 0));
    ev.name = e.planning.name_index(1, "memset");
    ev.bytes = bytes;
    if (d != nullptr) one[0] = d->id, ev.nwrites = 1, ids = std::span<const std::uint64_t>(one, 1);
  } else {
    const auto dir = d != nullptr && sb != nullptr ? trace::CopyDir::D2D : d != nullptr ? trace::CopyDir::H2D : trace::CopyDir::D2H;
    ev = event(Op::Copy, op_signature(Op::Copy, mix_signature(static_cast<std::uint64_t>(dir), bytes)));
    ev.form = learn::form_signature(Op::Copy, static_cast<std::uint64_t>(dir));
    ev.dir = static_cast<std::uint8_t>(dir);
    ev.bytes = bytes;
    ev.id = sb != nullptr ? sb->id : kNoBlockId;
    ev.id2 = d != nullptr ? d->id : kNoBlockId;
  }
  if (d != nullptr) ++d->pins;
  if (sb != nullptr && sb != d) ++sb->pins;
  t = CopyToken{true, other_device, ds, d != nullptr ? d->id : kNoBlockId, sb != nullptr && sb != d ? sb->id : kNoBlockId};
  e.feed(ev, ids);
  if (d != nullptr) e.materialize_dependents(*d);
  // uvm: the driver migrates or reads managed pages as the copy needs them; pinned: evicted
  // tensors stay addressable (host pieces), but moves in flight and dropped ones are settled.
  // A dropped block (either kind) is recomputed first: its pages hold nothing.
  for (Block* b : {sb, d}) {
    if (b == nullptr) continue;
    order_after_replay(e.events, *b, ds);
    if (b->kind == Kind::Managed && b->where != Where::Dropped) {  // a dropped one is recomputed below
      if (b->where == Where::Incoming) e.mem(*b).complete_prefetch(*b, ds);
      continue;
    }
    if (b->where == Where::Incoming || b->where == Where::Evicting || b->where == Where::Dropped) {
      if (CUresult r = e.ensure_resident(*b, ds); r != CUDA_SUCCESS) {
        const std::uint64_t pinned[2] = {t.dst, t.src};
        unpin(e, pinned, 2);
        t.active = false;
        return r;
      }
    }
  }
  const std::uint64_t now = e.tick();
  if (sb != nullptr) e.ledger.touch(*sb, now), ++sb->forwarded;
  if (d != nullptr && d != sb) e.ledger.touch(*d, now), ++d->forwarded;
  if (d != nullptr) {  // changed from now on (another thread may look before after_copy)
    ++d->version;
    e.producers.give(d->producer);
    d->holds_data = true;
  }
  if (sb != nullptr) sb->holds_data = true;
  return CUDA_SUCCESS;
}

void after_copy(CopyToken& t, bool ok) {
  if (t.standby) [[unlikely]] {
    t.standby = false;
    standby_done();
    return;
  }
  if (!t.active) return;
  t.active = false;
  Executor& e = *g_ex;
  Held held(e);
  if (ok) {
    Ev ev = e.use_event(t.driver_stream, t.other_device);
    if (!ev) e.await_stream(t.driver_stream);
    for (std::uint64_t id : {t.src, t.dst}) {
      Block* b = id != kNoBlockId ? e.blocks.by_id(id) : nullptr;
      if (b != nullptr && ev) mark_use(e.events, *b, t.driver_stream, ev);
    }
    e.events.unref(ev);
  }
  for (std::uint64_t id : {t.src, t.dst})
    if (Block* b = id != kNoBlockId ? e.blocks.by_id(id) : nullptr; b != nullptr && b->forwarded > 0) --b->forwarded;
  const std::uint64_t pinned[2] = {t.dst, t.src};
  unpin(e, pinned, 2);
}

void before_stream_destroy(CUstream s, bool per_thread) {
  Executor* ex = running();
  if (ex == nullptr) return;
  Held held(*ex);
  if (ex->standing_by() && ex->standby.noted(driver_stream(s, per_thread)))
    ex->wake("a stream it noted is destroyed");  // its event recorded while the stream exists
  ex->activity.settle(ex->events, driver_stream(s, per_thread));
}

void before_capture() {
  // A probation's synchronisations and copies would invalidate a capture: none starts from now
  // on, and the ones in flight (other threads) end first (never under the lock: they take it).
  // Set before the executor has started too: no standby ever begins in a process that captures.
  g_no_more_probations.store(true, std::memory_order_seq_cst);
  Executor* ex = running();
  if (ex == nullptr) return;
  while (g_probations_in_flight.load(std::memory_order_seq_cst) != 0) std::this_thread::yield();
  Held held(*ex);
  ex->wake("a graph capture begins");  // its events are recorded before the capture
  ex->activity.settle_all(ex->events);
}

void on_sync() {
  Executor* ex = running();
  if (ex == nullptr) return;
  Executor& e = *ex;
  Held held(e);
  if (e.standby.on()) {  // nothing fed; a budget set meanwhile (capuchin budget) is taken here
    e.adopt_daemon_budget();
    return;
  }
  e.feed(event(Op::Sync, op_signature(Op::Sync, 0)), {});
  e.reclaim_finished_evictions();
  e.planning.poll_timings(true);
  e.poll_lateness();
}

bool capture_ever_begun() { return g_no_more_probations.load(std::memory_order_seq_cst); }

}  // namespace capuchin::interpose::exec
