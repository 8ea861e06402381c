// scheduler.cpp: simcuda's streams: one worker thread per stream executing its queue in order,
// dependencies between streams (events, the legacy default stream's implicit synchronisation),
// virtual time, stream capture into graphs, and the sticky context error.
//
// Contract: an op starts (in virtual time) at the latest of its stream's clock, the finish of
// every op it depends on, and the host's virtual clock when it was enqueued; it finishes after
// its cost. The host's clock advances to an op's finish when the host waits for it. The legacy
// default stream waits for all prior work of blocking streams, and blocking streams (including
// per-thread default streams) wait for prior legacy work; non-blocking streams do neither.
// With host time on (SIMCUDA_HOST_TIME, simcuda.h), the host's clock also advances at each
// submission and wait by the scaled wall time since any thread's last one returned.
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <random>

#include "internal.hpp"

namespace simcuda {

namespace {
thread_local CUstream_st* tls_per_thread_stream = nullptr;
// When a submission or wait last returned, on any thread (host time, see host_gap_ns), in
// steady-clock ns; 0 before the first. One host timeline: threads that take turns submitting
// (PyTorch's forward on the main thread, backward on autograd's device thread) add up once.
std::atomic<std::int64_t> g_left_simcuda_ns{0};

std::int64_t steady_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

}  // namespace

double Scheduler::host_gap_ns() {
  const double scale = host_time_scale_.load(std::memory_order_relaxed);
  const std::int64_t left = g_left_simcuda_ns.load(std::memory_order_relaxed);
  if (scale <= 0 || left == 0) return 0;
  return scale * static_cast<double>(std::max<std::int64_t>(0, steady_ns() - left));
}

void Scheduler::host_left() {
  if (host_time_scale_.load(std::memory_order_relaxed) <= 0) return;
  g_left_simcuda_ns.store(steady_ns(), std::memory_order_relaxed);
}

Scheduler::Scheduler() {
  if (const char* j = std::getenv("SIMCUDA_JITTER_US")) jitter_us_ = static_cast<unsigned>(std::atoi(j));
  if (const char* h = std::getenv("SIMCUDA_HOST_TIME"); h != nullptr && h[0] != '\0') {
    char* end = nullptr;
    const double scale = std::strtod(h, &end);
    if (end == h || *end != '\0' || !(scale >= 0))
      std::fprintf(stderr, "simcuda: SIMCUDA_HOST_TIME=%s is not a non-negative number; host time is off\n", h);
    else
      host_time_scale_.store(scale, std::memory_order_relaxed);
  }
  if (const char* t = std::getenv("SIMCUDA_TIMELINE"); t != nullptr && t[0] != '\0') {
    timeline_ = std::fopen(t, "w");
    if (timeline_ != nullptr)
      std::fprintf(timeline_, "# stream kind(0 kernel 1 copy 2 memset 3 event 4 marker 5 hostfn 6 free 7 prefetch 8 discard) "
                              "start_ns end_ns stream_free_ns not_before_ns dependency_ns bytes\n");
  }
  legacy_ = new CUstream_st;
  legacy_->kind = StreamKind::Legacy;
  legacy_->id = next_stream_id_++;
  streams_.push_back(legacy_);
  start_worker(legacy_);
}

void Scheduler::start_worker(CUstream_st* s) {
  s->worker = std::thread([this, s] { worker_loop(s); });
}

CUstream_st* Scheduler::per_thread_stream() {
  // Caller holds mu_.
  if (tls_per_thread_stream == nullptr) {
    auto* s = new CUstream_st;
    s->kind = StreamKind::PerThread;
    s->id = next_stream_id_++;
    streams_.push_back(s);
    start_worker(s);
    tls_per_thread_stream = s;
  }
  return tls_per_thread_stream;
}

CUstream_st* Scheduler::resolve(CUstream handle, DefaultStream which, CUresult* err) {
  std::lock_guard<std::mutex> lock(mu_);
  *err = CUDA_SUCCESS;
  if (handle == nullptr) return which == DefaultStream::Legacy ? legacy_ : per_thread_stream();
  if (handle == CU_STREAM_LEGACY) return legacy_;
  if (handle == CU_STREAM_PER_THREAD) return per_thread_stream();
  if (std::find(streams_.begin(), streams_.end(), handle) != streams_.end()) return handle;
  *err = CUDA_ERROR_INVALID_HANDLE;
  return nullptr;
}

bool Scheduler::is_stream(CUstream_st* s) {
  std::lock_guard<std::mutex> lock(mu_);
  return std::find(streams_.begin(), streams_.end(), s) != streams_.end();
}

CUstream_st* Scheduler::create_stream(unsigned flags, int priority) {
  auto* s = new CUstream_st;
  s->flags = flags;
  s->priority = priority;
  s->device = current_device();  // a stream belongs to the context that created it
  std::lock_guard<std::mutex> lock(mu_);
  s->id = next_stream_id_++;
  streams_.push_back(s);
  start_worker(s);
  return s;
}

CUresult Scheduler::destroy_stream(CUstream_st* s) {
  {
    std::unique_lock<std::mutex> lock(mu_);
    auto it = std::find(streams_.begin(), streams_.end(), s);
    if (it == streams_.end() || s->kind != StreamKind::Created) return CUDA_ERROR_INVALID_HANDLE;
    // The real driver returns at once and finishes the work; we drain first, then retire.
    CompletionPtr last = s->last_done;
    cv_.wait(lock, [&] { return !last || last->done; });
    s->stopping = true;
    streams_.erase(std::find(streams_.begin(), streams_.end(), s));
    cv_.notify_all();
  }
  s->worker.join();
  driver().memory.release_pending(s);
  delete s;
  return CUDA_SUCCESS;
}

void Scheduler::set_sticky(CUresult err) {
  CUresult expected = CUDA_SUCCESS;
  sticky_.compare_exchange_strong(expected, err);
}

bool Scheduler::capturing(CUstream_st* s) {
  std::lock_guard<std::mutex> lock(mu_);
  return s->capture != nullptr;
}

CUresult Scheduler::check_unsafe_call(CUstreamCaptureMode thread_mode) {
  if (thread_mode == CU_STREAM_CAPTURE_MODE_RELAXED) return CUDA_SUCCESS;
  std::lock_guard<std::mutex> lock(mu_);
  const std::thread::id me = std::this_thread::get_id();
  bool prohibited = false;
  for (CUstream_st* s : streams_) {
    CaptureGraph* g = s->capture.get();
    if (g == nullptr) continue;
    const bool conflicts = g->thread == me ? g->mode != CU_STREAM_CAPTURE_MODE_RELAXED
                                           : g->mode == CU_STREAM_CAPTURE_MODE_GLOBAL &&
                                                 thread_mode == CU_STREAM_CAPTURE_MODE_GLOBAL;
    if (!conflicts) continue;
    g->invalidated = true;
    prohibited = true;
  }
  return prohibited ? CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED : CUDA_SUCCESS;
}

void Scheduler::invalidate_capture(CUstream_st* s) {
  std::lock_guard<std::mutex> lock(mu_);
  if (s->capture) s->capture->invalidated = true;
}

CUresult Scheduler::enqueue(CUstream_st* s, OpPayload payload, CompletionPtr* done_out,
                            std::vector<CompletionPtr> extra_deps) {
  // Work runs on its stream's device; the legacy and per-thread default streams stand for the
  // current context's own (simcuda has one of each for all devices, so legacy-stream work of
  // two devices is ordered together: later than on real GPUs, never wrong).
  payload.device = stream_device(s);
  const HostTurn turn(*this);
  std::lock_guard<std::mutex> lock(mu_);
  host_clock_ns_ += turn.gap;  // the host reached this call that much later
  if (done_out) *done_out = nullptr;
  if (s->capture) {
    if (payload.kind == OpKind::FreeAsync || payload.kind == OpKind::Prefetch || payload.kind == OpKind::Discard) {
      s->capture->invalidated = true;  // stream-ordered allocation nodes are not simulated
      return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
    }
    if (payload.kind != OpKind::Marker && payload.kind != OpKind::EventRecord) {
      s->capture->nodes.push_back(std::move(payload));
      s->capture->captured[s]++;
    }
    return CUDA_SUCCESS;
  }
  Op op;
  op.deps = std::move(extra_deps);
  if (s == legacy_) {
    for (CUstream_st* t : streams_) {
      if (t == legacy_ || !t->blocking()) continue;
      if (t->capture) {  // an implicit dependency on a capturing stream breaks its capture
        t->capture->invalidated = true;
        return CUDA_ERROR_STREAM_CAPTURE_IMPLICIT;
      }
      // Done in real time or not: the op starts after its finish in virtual time.
      if (t->last_done) op.deps.push_back(t->last_done);
    }
  } else if (s->blocking() && legacy_->last_done) {
    op.deps.push_back(legacy_->last_done);
  }
  op.payload = std::move(payload);
  op.done = std::make_shared<Completion>();
  op.not_before_ns = host_clock_ns_;
  if (done_out) *done_out = op.done;
  s->last_done = op.done;
  s->queue.push_back(std::move(op));
  if (s->queue.back().payload.kind == OpKind::Kernel) launched_++;
  cv_.notify_all();
  return CUDA_SUCCESS;
}

void Scheduler::worker_loop(CUstream_st* s) {
  std::minstd_rand jitter_rng(static_cast<unsigned>(s->id * 7919 + static_cast<uint64_t>(
      std::chrono::steady_clock::now().time_since_epoch().count())));
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    cv_.wait(lock, [&] {
      if (s->queue.empty()) return s->stopping;
      for (const CompletionPtr& d : s->queue.front().deps)
        if (!d->done) return false;
      return true;
    });
    if (s->queue.empty()) return;
    Op op = std::move(s->queue.front());
    s->queue.pop_front();
    const double stream_free = s->clock_ns;
    double start = std::max(s->clock_ns, op.not_before_ns);
    double dep_ns = 0;
    for (const CompletionPtr& d : op.deps) dep_ns = std::max(dep_ns, d->finish_ns);
    start = std::max(start, dep_ns);
    lock.unlock();
    if (jitter_us_ > 0) usleep(jitter_rng() % jitter_us_);
    double cost = 0;
    execute(s, op, start, &cost);
    lock.lock();
    s->clock_ns = start + cost;
    s->ops_executed++;
    if (timeline_ != nullptr)  // why it started when it did: its stream, the host's submission, a dependency
      std::fprintf(timeline_, "%llu %d %.0f %.0f %.0f %.0f %.0f %zu\n", static_cast<unsigned long long>(s->id),
                   static_cast<int>(op.payload.kind), start, start + cost, stream_free, op.not_before_ns, dep_ns,
                   op.payload.bytes);
    op.done->finish_ns = s->clock_ns;
    op.done->done = true;
    cv_.notify_all();
  }
}

double copy_cost_ns(const OpPayload& op) {
  const double bytes = static_cast<double>(op.bytes);
  switch (op.route) {
    case CopyRoute::HostToDevice:
    case CopyRoute::DeviceToHost:
      return SIMCUDA_COPY_LATENCY_NS +
             bytes / (op.pinned ? SIMCUDA_PINNED_BYTES_PER_NS : SIMCUDA_PAGEABLE_BYTES_PER_NS);
    case CopyRoute::DeviceToDevice:
      return SIMCUDA_COPY_LATENCY_NS + 2 * bytes / SIMCUDA_DEVICE_BYTES_PER_NS;
    case CopyRoute::HostToHost:
      return SIMCUDA_COPY_LATENCY_NS + bytes / SIMCUDA_PAGEABLE_BYTES_PER_NS;
  }
  return 0;
}

void Scheduler::execute(CUstream_st* /*s*/, Op& op, double /*start_ns*/, double* cost_ns) {
  OpPayload& p = op.payload;
  Memory& mem = driver().memory;
  const bool failed = sticky() != CUDA_SUCCESS;  // a failed context runs no more device work
  switch (p.kind) {
    case OpKind::Kernel: {
      if (failed) return;
      bool illegal = false;
      *cost_ns = run_kernel(p, &illegal);
      executed_++;
      if (illegal) set_sticky(CUDA_ERROR_ILLEGAL_ADDRESS);
      return;
    }
    case OpKind::Copy: {
      if (failed || p.bytes == 0) return;
      const bool dst_dev = p.route == CopyRoute::HostToDevice || p.route == CopyRoute::DeviceToDevice;
      const bool src_dev = p.route == CopyRoute::DeviceToHost || p.route == CopyRoute::DeviceToDevice;
      const CopyShape& sh = p.shape;
      if ((dst_dev && !mem.range_valid_for_copy(p.dst, sh.dst_span(), true)) ||
          (src_dev && !mem.range_valid_for_copy(p.src, sh.src_span(), true))) {
        set_sticky(CUDA_ERROR_ILLEGAL_ADDRESS);
        return;
      }
      for (size_t z = 0; z < sh.slices; ++z)
        for (size_t r = 0; r < sh.rows; ++r)
          std::memmove(reinterpret_cast<void*>(p.dst + z * sh.dst_slice_pitch + r * sh.dst_pitch),
                       reinterpret_cast<const void*>(p.src + z * sh.src_slice_pitch + r * sh.src_pitch), sh.width);
      mem.note_copy(p.route, p.bytes);
      if (dst_dev) mem.note_write(p.dst, sh.dst_span());
      *cost_ns = copy_cost_ns(p);
      return;
    }
    case OpKind::Memset: {
      // `rows` rows of p.bytes elements, `dst_pitch` bytes apart (one row for a plain memset).
      if (failed) return;
      const size_t row = p.bytes * p.memset_elem;
      const size_t rows = p.shape.rows;
      const size_t span = rows == 0 ? 0 : (rows - 1) * p.shape.dst_pitch + row;
      if (!mem.range_valid_for_copy(p.dst, span, true)) {
        set_sticky(CUDA_ERROR_ILLEGAL_ADDRESS);
        return;
      }
      for (size_t r = 0; r < rows; ++r) {
        auto* d = reinterpret_cast<unsigned char*>(p.dst + r * p.shape.dst_pitch);
        if (p.memset_elem == 1) {
          std::memset(d, static_cast<int>(p.memset_value & 0xff), p.bytes);
        } else {
          for (size_t i = 0; i < p.bytes; ++i) std::memcpy(d + i * p.memset_elem, &p.memset_value, p.memset_elem);
        }
      }
      mem.note_write(p.dst, span);
      *cost_ns = SIMCUDA_COPY_LATENCY_NS + static_cast<double>(row * rows) / SIMCUDA_DEVICE_BYTES_PER_NS;
      return;
    }
    case OpKind::Prefetch:
      if (!failed) mem.prefetch(p.dst, p.bytes, p.location, cost_ns);
      return;
    case OpKind::Discard:  // bookkeeping in the driver: no device time of its own
      if (!failed) mem.discard(p.dst, p.bytes);
      return;
    case OpKind::HostFn:
      p.host_fn(p.user_data);
      return;
    case OpKind::EventRecord:
    case OpKind::Marker:
    case OpKind::FreeAsync:
      return;
  }
}

void Scheduler::wait_for(const CompletionPtr& c, std::unique_lock<std::mutex>& lock) {
  if (!c) return;
  cv_.wait(lock, [&] { return c->done.load(); });
  host_clock_ns_ = std::max(host_clock_ns_, c->finish_ns);
}

CUresult Scheduler::synchronize_stream(CUstream_st* s) {
  const HostTurn turn(*this);
  {
    std::unique_lock<std::mutex> lock(mu_);
    host_clock_ns_ += turn.gap;
    if (s->capture) {
      s->capture->invalidated = true;
      return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
    }
    CompletionPtr last = s->last_done;
    wait_for(last, lock);
  }
  driver().memory.release_pending(s);
  return sticky();
}

CUresult Scheduler::synchronize_device() {
  const HostTurn turn(*this);
  {
    std::unique_lock<std::mutex> lock(mu_);
    host_clock_ns_ += turn.gap;
    for (CUstream_st* s : streams_) {
      if (s->capture) {
        s->capture->invalidated = true;
        return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
      }
    }
    std::vector<CompletionPtr> all;
    for (CUstream_st* s : streams_) all.push_back(s->last_done);
    for (const CompletionPtr& c : all) wait_for(c, lock);
  }
  driver().memory.release_all_pending();
  return sticky();
}

CUresult Scheduler::synchronize_event(CUevent_st* e) {
  const HostTurn turn(*this);
  std::unique_lock<std::mutex> lock(mu_);
  host_clock_ns_ += turn.gap;
  CompletionPtr last = e->last;
  wait_for(last, lock);
  return sticky();
}

// Queries answer in virtual time: work is done when its finish is not after the host's clock
// (cuda.h, cuStreamQuery: SUCCESS "if all operations in the stream ... have completed" at the
// moment the host asks), whether or not its worker has already run it in real time. A query
// moves no clock: the host's clock moves only when it waits (simcuda.h), so a program's virtual
// timeline does not depend on how far the workers got, nor on queries from other threads (the
// interposer's drain polls its timing events). Before 2026-12-07 a query said SUCCESS once the
// worker had run the work: capuchin's executor, told a stream was idle, skipped ordering its
// copy out after that stream's 20 ms kernel, and the copy started in virtual time under it
// (interpose.exec_unseen_pointer_table_write_pinned failed about once in 30 runs).
bool Scheduler::done_at_host_clock(const CompletionPtr& c) const {
  return !c || (c->done && c->finish_ns <= host_clock_ns_);
}

CUresult Scheduler::query_stream(CUstream_st* s) {
  std::lock_guard<std::mutex> lock(mu_);
  if (sticky() != CUDA_SUCCESS) return sticky();
  return done_at_host_clock(s->last_done) ? CUDA_SUCCESS : CUDA_ERROR_NOT_READY;
}

CUresult Scheduler::query_event(CUevent_st* e) {
  std::lock_guard<std::mutex> lock(mu_);
  if (sticky() != CUDA_SUCCESS) return sticky();
  return done_at_host_clock(e->last) ? CUDA_SUCCESS : CUDA_ERROR_NOT_READY;
}

CUresult Scheduler::record_event(CUstream_st* s, CUevent_st* e) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (s->capture) {
      e->recorded_in_capture = true;
      e->capture = s->capture;
      e->capture_deps = s->capture->frontier[s];
      e->capture_deps[s] = s->capture->captured[s];
      return CUDA_SUCCESS;
    }
  }
  OpPayload p;
  p.kind = OpKind::EventRecord;
  CompletionPtr done;
  CUresult r = enqueue(s, std::move(p), &done);
  if (r != CUDA_SUCCESS) return r;
  std::lock_guard<std::mutex> lock(mu_);
  e->last = done;
  e->recorded_in_capture = false;
  e->capture = nullptr;
  e->capture_deps.clear();
  return CUDA_SUCCESS;
}

CUresult Scheduler::wait_event(CUstream_st* s, CUevent_st* e) {
  CompletionPtr dep;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (e->recorded_in_capture && e->capture) {
      const std::shared_ptr<CaptureGraph> g = e->capture;
      if (s->capture && s->capture != g) {  // two independent captures would merge
        s->capture->invalidated = true;
        g->invalidated = true;
        return CUDA_ERROR_STREAM_CAPTURE_MERGE;
      }
      if (!s->capture) {  // fork: s joins the capture, ordered after what the event covers
        s->capture = g;
        g->frontier[s].clear();
        g->captured.emplace(s, 0);
      }
      // s's next nodes are ordered after everything the event covers (a join when s is the
      // origin and the event was recorded on a forked stream).
      CaptureFrontier& f = g->frontier[s];
      for (const auto& [t, n] : e->capture_deps)
        if (t != s) f[t] = std::max(f[t], n);
      return CUDA_SUCCESS;
    }
    dep = e->last;
  }
  if (!dep) return CUDA_SUCCESS;
  OpPayload p;
  p.kind = OpKind::Marker;
  return enqueue(s, std::move(p), nullptr, {dep});
}

CUresult Scheduler::elapsed_ms(CUevent_st* start, CUevent_st* end, float* ms) {
  std::lock_guard<std::mutex> lock(mu_);
  if ((start->flags | end->flags) & CU_EVENT_DISABLE_TIMING) return CUDA_ERROR_INVALID_HANDLE;
  if (!start->last || !end->last) return CUDA_ERROR_INVALID_HANDLE;
  if (!done_at_host_clock(start->last) || !done_at_host_clock(end->last)) return CUDA_ERROR_NOT_READY;  // as a query
  *ms = static_cast<float>((end->last->finish_ns - start->last->finish_ns) / 1e6);
  return CUDA_SUCCESS;
}

CUresult Scheduler::begin_capture(CUstream_st* s, CUstreamCaptureMode mode, CUgraph_st* into) {
  std::lock_guard<std::mutex> lock(mu_);
  if (s == legacy_) return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
  if (s->capture) return CUDA_ERROR_ILLEGAL_STATE;
  s->capture = std::make_shared<CaptureGraph>();
  s->capture->mode = mode;
  s->capture->thread = std::this_thread::get_id();
  s->capture->into = into;
  s->capture->id = next_capture_id_++;
  s->capture->origin = s;
  s->capture->captured[s] = 0;
  return CUDA_SUCCESS;
}

CUresult Scheduler::end_capture(CUstream_st* s, CUgraph* graph) {
  std::lock_guard<std::mutex> lock(mu_);
  if (!s->capture) return CUDA_ERROR_ILLEGAL_STATE;
  std::shared_ptr<CaptureGraph> g = s->capture;
  // cuda.h, cuStreamEndCapture: unless begun RELAXED, "this call must be from the same thread".
  if (g->mode != CU_STREAM_CAPTURE_MODE_RELAXED && g->thread != std::this_thread::get_id())
    return CUDA_ERROR_STREAM_CAPTURE_WRONG_THREAD;
  if (s != g->origin) {  // a stream that joined through an event: the capture goes on, broken
    g->invalidated = true;
    return CUDA_ERROR_STREAM_CAPTURE_UNMATCHED;
  }
  for (CUstream_st* t : streams_)
    if (t->capture == g) t->capture = nullptr;
  if (g->invalidated) {
    *graph = nullptr;
    return CUDA_ERROR_STREAM_CAPTURE_INVALIDATED;
  }
  // Every node a joined stream captured must be ordered before the end of the origin stream.
  const CaptureFrontier& joined = g->frontier[s];
  for (const auto& [t, n] : g->captured) {
    if (t == s || n == 0) continue;
    auto it = joined.find(t);
    if (it == joined.end() || it->second < n) {
      *graph = nullptr;
      return CUDA_ERROR_STREAM_CAPTURE_UNJOINED;
    }
  }
  // Captured into an existing graph: its nodes come after the graph's own (replayed in that
  // order, a valid linearisation of the dependencies the capture began with).
  auto* out = g->into != nullptr ? g->into : new CUgraph_st;
  out->nodes.insert(out->nodes.end(), std::make_move_iterator(g->nodes.begin()), std::make_move_iterator(g->nodes.end()));
  *graph = out;
  return CUDA_SUCCESS;
}

CUresult Scheduler::capture_status(CUstream_st* s, CUstreamCaptureStatus* status, cuuint64_t* id) {
  std::lock_guard<std::mutex> lock(mu_);
  if (!s->capture) {
    *status = CU_STREAM_CAPTURE_STATUS_NONE;
  } else {
    *status = s->capture->invalidated ? CU_STREAM_CAPTURE_STATUS_INVALIDATED : CU_STREAM_CAPTURE_STATUS_ACTIVE;
    if (id) *id = s->capture->id;
  }
  return CUDA_SUCCESS;
}

CUresult Scheduler::launch_graph(CUgraphExec_st* exec, CUstream_st* s) {
  for (const OpPayload& node : exec->nodes) {
    CUresult r = enqueue(s, node);
    if (r != CUDA_SUCCESS) return r;
  }
  return CUDA_SUCCESS;
}

uint64_t Scheduler::stream_virtual_ns(CUstream handle) {
  std::lock_guard<std::mutex> lock(mu_);
  CUstream_st* s = nullptr;
  if (handle == nullptr || handle == CU_STREAM_LEGACY) s = legacy_;
  else if (handle == CU_STREAM_PER_THREAD) s = tls_per_thread_stream;
  else if (std::find(streams_.begin(), streams_.end(), handle) != streams_.end()) s = handle;
  return s ? static_cast<uint64_t>(s->clock_ns) : 0;
}

double Scheduler::max_virtual_ns() {
  std::lock_guard<std::mutex> lock(mu_);
  double m = host_clock_ns_;
  for (CUstream_st* s : streams_) m = std::max(m, s->clock_ns);
  return m;
}

double Scheduler::host_virtual_ns() {
  std::lock_guard<std::mutex> lock(mu_);
  return host_clock_ns_;
}

std::vector<std::pair<uint64_t, double>> Scheduler::stream_clocks() {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<std::pair<uint64_t, double>> out;
  for (CUstream_st* s : streams_) out.emplace_back(s->id, s->clock_ns);
  return out;
}

}  // namespace simcuda
