// capture.cpp: process-wide capture state (init, lazy start, exit, fork) and the record_*
// functions the hooks call (see capture.hpp).
#include "capture.hpp"
#include "distinct_words.hpp"

#include <cuda_runtime_api.h>
#include <pthread.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <mutex>
#include <new>
#include <string>

#include "capuchin/version.hpp"
#include "daemon_sink.hpp"
#include "drain.hpp"
#include "exec/executor.hpp"
#include "kernel_timing.hpp"
#include "real_api.hpp"
#include "sink.hpp"

namespace capuchin::interpose {

__attribute__((tls_model("initial-exec"))) thread_local int t_hook_depth = 0;
std::atomic<bool> g_capturing{false};
std::atomic<bool> g_started{false};

namespace {

// Never destroyed: hooks may run on other threads while static destructors run.
struct State {
  Config config;
  RingPool pool;
  FuncCache cache;
  // The span of device allocations recorded so far (scan_launch's fast reject).
  std::atomic<std::uint64_t> span_lo{~std::uint64_t{0}}, span_hi{0};
  Drain* drain = nullptr;
  std::mutex* start_mu = nullptr;
  std::atomic<std::uint64_t> next_id{0};
  std::atomic<std::uint64_t> host_bytes{0};
  // Streams being captured: {stream handle + 1, capture sequence}, the origin of a capture or a
  // stream that joined it through an event wait (capture_joined). Lock-free readers.
  static constexpr int kMaxCaptures = 64;
  std::atomic<std::uint64_t> capture_stream[kMaxCaptures] = {};
  std::atomic<std::uint32_t> capture_seq[kMaxCaptures] = {};
  std::atomic<bool> capture_joined[kMaxCaptures] = {};
  std::atomic<int> active_captures{0};  // slots in use
  std::atomic<std::uint32_t> next_capture{0};
  // Events recorded on a capturing stream: {event handle, capture sequence}; empty while no
  // capture is active. Written under join_mu (event records and waits during a capture only).
  static constexpr int kMaxCaptureEvents = 256;
  std::atomic<std::uint64_t> event_handle[kMaxCaptureEvents] = {};
  std::atomic<std::uint32_t> event_seq[kMaxCaptureEvents] = {};
  std::mutex* join_mu = nullptr;
};
alignas(State) unsigned char g_state_mem[sizeof(State)];
State* g_state = nullptr;
// State's two mutexes live here, not on the heap: a forked child makes them afresh in place.
// Its fork handler must not allocate or free: a lock another thread of the parent held in the
// allocator at the fork stays held in the child (ASan's allocator hung the child this way).
alignas(std::mutex) unsigned char g_mutex_mem[2][sizeof(std::mutex)];

State& st() { return *g_state; }

std::uint64_t stream_key(std::uint64_t stream, bool per_thread) {
  if (stream == 0 && per_thread) stream = 0x2;
  return stream + 1;
}

void start_locked() {
  State& s = st();
  std::unique_ptr<Sink> sink;
  if (s.config.sink == SinkKind::File) {
    trace::Header h;
    h.source = "capuchin-interpose";
    char notes[256];
    std::snprintf(notes, sizeof notes, "recorded by libcapuchin.so %s from pid %d", capuchin::kVersion.data(),
                  static_cast<int>(getpid()));
    h.notes = notes;
    auto opened = open_file_sink(s.config.record_path, h);
    if (opened) {
      sink = std::move(*opened);
      log(LogLevel::Info, "recording to %s", s.config.record_path);
    } else {
      // Say what really happens: no trace; the daemon still hears the job (capture goes on for
      // it); a budget still applies (the executor does not depend on the recording).
      const bool daemon = s.config.daemon;
      log(LogLevel::Error, "cannot record to %s: %s; no trace is written%s%s", s.config.record_path,
          opened.error().message.c_str(), daemon ? "; the job stays attached to capuchind" : "; capture is off",
          exec::on() ? "; CAPUCHIN_BUDGET still applies" : "");
      if (!daemon) {
        g_capturing.store(false, std::memory_order_relaxed);
        return;
      }
      sink = make_null_sink();
    }
  } else {
    sink = make_null_sink();
  }
  if (s.config.daemon) sink = make_daemon_sink(s.config, std::move(sink));  // tees to the file, if any
  timing::start(s.config.timing_every);
  s.drain = new Drain;
  if (!s.drain->start(s.pool, s.cache, std::move(sink), s.config.drain_interval_us, &timing::poll)) {
    log(LogLevel::Error, "cannot start the drain thread; capture is off");
    g_capturing.store(false, std::memory_order_relaxed);
  }
}

void at_fork_child() {
  if (g_state == nullptr) return;
  State& s = st();
  forget_current_slot();
  t_hook_depth = 0;
  if (!g_capturing.load(std::memory_order_relaxed) && !g_started.load(std::memory_order_relaxed)) return;
  // The parent's drain thread, sink and locks do not exist here: leak them, start afresh.
  s.pool.reset_after_fork();
  timing::reset_after_fork();
  s.drain = nullptr;
  s.start_mu = new (g_mutex_mem[0]) std::mutex;  // the parent's may be held by a thread not here
  s.join_mu = new (g_mutex_mem[1]) std::mutex;
  g_started.store(false, std::memory_order_release);
  if (s.config.sink == SinkKind::File && !s.config.record_path_has_pid) {
    g_capturing.store(false, std::memory_order_relaxed);
    log(LogLevel::Info, "forked child does not record (CAPUCHIN_RECORD has no %%p)");
    return;
  }
  s.config.expand_record_path();
  g_capturing.store(s.config.capturing(), std::memory_order_relaxed);
}

}  // namespace

const Config& config() { return st().config; }

bool started_with_disable() { return g_state != nullptr && st().config.disabled; }

bool init_from_env() {
  if (g_state != nullptr) return g_capturing.load(std::memory_order_relaxed);
  g_state = new (g_state_mem) State();
  State& s = st();
  s.config = Config::from_env();
  s.start_mu = new (g_mutex_mem[0]) std::mutex;
  s.join_mu = new (g_mutex_mem[1]) std::mutex;
  if (s.config.disabled) {
    log(LogLevel::Info, "CAPUCHIN_DISABLE set: pure pass-through");
    return false;
  }
  if (!s.config.capturing()) {
    log(LogLevel::Debug, "no CAPUCHIN_RECORD / CAPUCHIN_SINK: pass-through");
    return false;
  }
  if (!s.pool.init(s.config.max_threads, s.config.ring_records) || !s.cache.init()) {
    log(LogLevel::Error, "cannot map the event rings; capture is off");
    return false;
  }
  pthread_atfork(nullptr, nullptr, at_fork_child);
  g_capturing.store(true, std::memory_order_release);
  return true;
}

void ensure_started_slow() {
  if (g_state == nullptr) return;
  State& s = st();
  std::lock_guard<std::mutex> lock(*s.start_mu);
  if (g_started.load(std::memory_order_relaxed)) return;
  if (g_capturing.load(std::memory_order_relaxed)) start_locked();
  g_started.store(true, std::memory_order_release);
}

void shutdown_capture(char* summary, std::size_t summary_bytes) {
  if (g_state == nullptr) return;
  State& s = st();
  const bool was = g_capturing.exchange(false, std::memory_order_acq_rel);
  if (summary != nullptr && summary_bytes > 0) summary[0] = '\0';
  if (!was && s.drain == nullptr) return;
  std::lock_guard<std::mutex> lock(*s.start_mu);
  if (s.drain == nullptr) return;
  const CaptureStats stats = s.drain->stop();
  delete s.drain;  // joined; hooks never touch the Drain (only the pool it read)
  s.drain = nullptr;
  const std::string line = summarize(stats);
  if (summary != nullptr && summary_bytes > 0) std::snprintf(summary, summary_bytes, "%s", line.c_str());
  const bool lossy = stats.ring_lost_events + stats.no_slot_events + stats.sink_failed_events +
                         stats.unknown_ids_dropped + stats.unscanned_launches + stats.truncated_launches >
                     0;
  log(lossy ? LogLevel::Warn : LogLevel::Info, "capture summary: %s", line.c_str());
}

// --- recording -----------------------------------------------------------------------------

namespace {

constexpr std::uint64_t kRingAhead = 8;  // records: put's prefetch distance

// Writes one event in place into the caller's ring: the head record (kind, flags, stamp,
// zeroed payload, then `fill` sets the rest) and continuation records with ids. Written in
// place, not built on the stack and copied: the copy's wide loads of just-stored narrow
// fields stall on store forwarding (measured: a third of record_launch_ids' samples).
template <class Fill>
inline void put(Kind kind, std::uint8_t flags, const std::uint64_t* ids, unsigned nids, Fill&& fill) {
  State& s = st();
  ThreadSlot* slot = current_slot(s.pool);
  if (slot == nullptr) {
    s.pool.no_slot_events.fetch_add(1, std::memory_order_relaxed);
    return;
  }
  const unsigned conts = (nids + kIdsPerCont - 1) / kIdsPerCont;
  if (!slot->has_room(1 + conts)) {
    slot->drop();
    return;
  }
  const std::uint64_t pos = slot->head.load(std::memory_order_relaxed);
  // The lines a few events ahead, asked for now: the ring's next lines are long out of this
  // core's cache (the drain read them last), and the stamp's locked add below waits for every
  // store before it, the record's included (perf put half of record_alloc's samples there).
  for (unsigned c = 0; c <= conts; ++c) __builtin_prefetch(slot->reserve_at(pos + kRingAhead + c), 1, 3);
  Record* r = slot->reserve_at(pos);
  r->kind = kind;
  r->flags = flags;
  r->sub = 0;
  r->cont = static_cast<std::uint8_t>(conts);
  r->aux = 0;
  r->h.ts = s.pool.next_stamp();
  r->h.a = r->h.b = r->h.c = r->h.d = r->h.e = r->h.f = 0;
  fill(*r);
  for (unsigned c = 0; c < conts; ++c) {
    Record* cr = slot->reserve_at(pos + 1 + c);
    cr->kind = Kind::Ids;
    const unsigned n = nids - c * kIdsPerCont < kIdsPerCont ? nids - c * kIdsPerCont : kIdsPerCont;
    cr->cont = static_cast<std::uint8_t>(n);
    for (unsigned j = 0; j < n; ++j) cr->ids[j] = ids[c * kIdsPerCont + j];
  }
  slot->commit(1 + conts);
}
inline void put(Kind kind, std::uint8_t flags) {
  put(kind, flags, nullptr, 0, [](Record&) {});
}

// The span of every device allocation recorded so far (it only grows): a parameter word
// outside it cannot point into one. Relaxed: a launch that uses an allocation happens after
// the allocation was recorded, so it sees a span that covers it.
void widen_span(State& s, std::uint64_t lo, std::uint64_t hi) {
  std::uint64_t cur = s.span_lo.load(std::memory_order_relaxed);
  while (lo < cur && !s.span_lo.compare_exchange_weak(cur, lo, std::memory_order_relaxed)) {
  }
  cur = s.span_hi.load(std::memory_order_relaxed);
  while (hi > cur && !s.span_hi.compare_exchange_weak(cur, hi, std::memory_order_relaxed)) {
  }
}

}  // namespace

std::uint64_t record_alloc(std::uint64_t base, std::uint64_t bytes, AllocSub sub, std::uint64_t stream,
                           std::uint8_t flags) {
  if (bytes == 0) return kNoId;
  State& s = st();
  const std::uint64_t id = s.next_id.fetch_add(1, std::memory_order_relaxed);
  widen_span(s, base, base + bytes);
  put(Kind::Alloc, flags, nullptr, 0, [&](Record& r) {
    r.sub = static_cast<std::uint8_t>(sub);
    r.h.a = id;
    r.h.b = base;
    r.h.c = bytes;
    r.h.d = stream;
  });
  return id;
}

void record_free(std::uint64_t base, std::uint64_t stream, std::uint8_t flags) {
  put(Kind::Free, flags, nullptr, 0, [&](Record& r) {
    r.h.b = base;
    r.h.d = stream;
  });
}

void record_unmap(std::uint64_t base, std::uint64_t bytes) {
  put(Kind::Unmap, 0, nullptr, 0, [&](Record& r) {
    r.h.b = base;
    r.h.c = bytes;
  });
}

void record_host_alloc(std::uint64_t base, std::uint64_t bytes) {
  if (bytes == 0) return;
  st().host_bytes.fetch_add(bytes, std::memory_order_relaxed);
  put(Kind::HostAlloc, 0, nullptr, 0, [&](Record& r) {
    r.h.b = base;
    r.h.c = bytes;
  });
}

void record_host_free(std::uint64_t base) {
  put(Kind::HostFree, 0, nullptr, 0, [&](Record& r) {
    r.h.b = base;
  });
}

DeviceSpan device_span() {
  State& s = st();
  return DeviceSpan{s.span_lo.load(std::memory_order_relaxed), s.span_hi.load(std::memory_order_relaxed)};
}

const ScanRun* scan_runs(const FuncLayout& layout) { return st().cache.runs(layout); }


unsigned scan_launch(const FuncLayout* layout, void** params, void** extra, std::uint64_t* words,
                     std::uint8_t* flags) {
  DistinctWords<kMaxLaunchWords> distinct(words);
  for_each_candidate(layout, params, extra, [&](std::uint64_t w) { distinct.add(w); });
  const unsigned n = distinct.count();
  if (distinct.truncated()) *flags |= kTruncated;
  return n;
}

void record_launch_words(const FuncLayout* layout, std::uint64_t func, const std::uint64_t* words, unsigned n,
                         std::uint64_t stream, std::uint8_t flags, std::uint32_t timing) {
  State& s = st();
  const std::uint32_t seq = capture_sequence(stream, (flags & kPerThread) != 0);
  put(Kind::Launch, static_cast<std::uint8_t>(flags | (seq != 0 ? kCaptured : 0)), words, n, [&](Record& r) {
    r.aux = layout != nullptr ? s.cache.index_of(layout) : ~0u;
    r.h.a = func;
    r.h.b = n;
    r.h.d = stream;
    r.h.e = seq;  // a captured launch carries its capture sequence in e (aux is the layout)
    r.h.f = timing;
  });
}

void record_launch(const FuncLayout* layout, std::uint64_t func, void** params, void** extra, std::uint64_t stream,
                   std::uint8_t flags, std::uint32_t timing) {
  std::uint64_t words[kMaxLaunchWords];
  const unsigned n = scan_launch(layout, params, extra, words, &flags);
  record_launch_words(layout, func, words, n, stream, flags, timing);
}

void record_copy(std::uint64_t dst, std::uint64_t src, std::uint64_t bytes, CopyHint hint, std::uint64_t stream,
                 std::uint8_t flags) {
  const std::uint32_t seq = capture_sequence(stream, (flags & kPerThread) != 0);
  put(Kind::Copy, static_cast<std::uint8_t>(flags | (seq != 0 ? kCaptured : 0)), nullptr, 0, [&](Record& r) {
    r.sub = static_cast<std::uint8_t>(hint);
    r.aux = seq;
    r.h.a = src;
    r.h.b = dst;
    r.h.c = bytes;
    r.h.d = stream;
  });
}

void record_memset(std::uint64_t dst, std::uint64_t bytes, std::uint64_t stream, std::uint8_t flags) {
  const std::uint32_t seq = capture_sequence(stream, (flags & kPerThread) != 0);
  put(Kind::Memset, static_cast<std::uint8_t>(flags | (seq != 0 ? kCaptured : 0)), nullptr, 0, [&](Record& r) {
    r.aux = seq;
    r.h.a = dst;
    r.h.c = bytes;
    r.h.d = stream;
  });
}

void record_sync(SyncSub sub) {
  put(Kind::Sync, 0, nullptr, 0, [&](Record& r) {
    r.sub = static_cast<std::uint8_t>(sub);
  });
}

namespace {

// Claims a capture slot for `key`; false when all are taken.
bool claim_capture_slot(State& s, std::uint64_t key, std::uint32_t seq, bool joined) {
  for (int i = 0; i < State::kMaxCaptures; ++i) {
    std::uint64_t expect = 0;
    if (s.capture_stream[i].compare_exchange_strong(expect, key, std::memory_order_acq_rel)) {
      s.capture_joined[i].store(joined, std::memory_order_relaxed);
      s.capture_seq[i].store(seq, std::memory_order_release);
      s.active_captures.fetch_add(1, std::memory_order_acq_rel);
      return true;
    }
  }
  return false;
}

void release_capture_slot(State& s, int i) {
  s.capture_seq[i].store(0, std::memory_order_release);
  s.capture_joined[i].store(false, std::memory_order_relaxed);
  s.capture_stream[i].store(0, std::memory_order_release);
  s.active_captures.fetch_sub(1, std::memory_order_acq_rel);
}

int find_event(State& s, std::uint64_t event) {
  for (int i = 0; i < State::kMaxCaptureEvents; ++i)
    if (s.event_handle[i].load(std::memory_order_relaxed) == event) return i;
  return -1;
}

}  // namespace

void record_capture_begin(std::uint64_t stream, std::uint8_t flags) {
  State& s = st();
  const std::uint64_t key = stream_key(stream, (flags & kPerThread) != 0);
  const std::uint32_t seq = s.next_capture.fetch_add(1, std::memory_order_relaxed) + 1;
  if (!claim_capture_slot(s, key, seq, false)) {
    log(LogLevel::Warn, "more than %d concurrent stream captures; this one is not tracked", State::kMaxCaptures);
    return;
  }
  put(Kind::CaptureBegin, flags, nullptr, 0, [&](Record& r) {
    r.aux = seq;
    r.h.d = stream;
  });
}

void record_capture_end(std::uint64_t stream, std::uint64_t graph, std::uint8_t flags, bool ended) {
  State& s = st();
  const std::uint64_t key = stream_key(stream, (flags & kPerThread) != 0);
  for (int i = 0; i < State::kMaxCaptures; ++i) {
    if (s.capture_stream[i].load(std::memory_order_acquire) != key) continue;
    // A joined stream cannot end the capture (CUDA: ..._UNMATCHED): unless the driver ended it
    // anyway (graph returned), it goes on.
    if (!ended || (s.capture_joined[i].load(std::memory_order_relaxed) && graph == 0)) return;
    const std::uint32_t seq = s.capture_seq[i].load(std::memory_order_acquire);
    {
      std::lock_guard<std::mutex> lock(*s.join_mu);
      for (int j = 0; j < State::kMaxCaptures; ++j)  // the origin and every joined stream
        if (s.capture_stream[j].load(std::memory_order_acquire) != 0 &&
            s.capture_seq[j].load(std::memory_order_acquire) == seq)
          release_capture_slot(s, j);
      for (int j = 0; j < State::kMaxCaptureEvents; ++j)
        if (s.event_handle[j].load(std::memory_order_relaxed) != 0 &&
            s.event_seq[j].load(std::memory_order_relaxed) == seq)
          s.event_handle[j].store(0, std::memory_order_relaxed);
    }
    if (graph != 0) {
      put(Kind::CaptureEnd, flags, nullptr, 0, [&](Record& r) {
        r.aux = seq;
        r.h.a = graph;
      });
    }
    return;
  }
}

void note_event_record(std::uint64_t event, std::uint64_t stream, std::uint8_t flags, bool external) {
  State& s = st();
  if (s.active_captures.load(std::memory_order_acquire) == 0 || event == 0) [[likely]] return;
  const std::uint32_t seq = external ? 0 : capture_sequence(stream, (flags & kPerThread) != 0);
  std::lock_guard<std::mutex> lock(*s.join_mu);
  int i = find_event(s, event);
  if (seq == 0) {  // recorded outside the capture (or as an external event): no longer a join point
    if (i >= 0) s.event_handle[i].store(0, std::memory_order_relaxed);
    return;
  }
  if (i < 0) i = find_event(s, 0);
  if (i < 0) {
    static std::atomic<bool> warned{false};
    if (!warned.exchange(true))
      log(LogLevel::Warn, "more than %d events recorded during stream captures; streams waiting on the others "
          "are not seen joining their capture", State::kMaxCaptureEvents);
    return;
  }
  s.event_seq[i].store(seq, std::memory_order_relaxed);
  s.event_handle[i].store(event, std::memory_order_relaxed);
}

void note_stream_wait(std::uint64_t stream, std::uint8_t flags, std::uint64_t event) {
  State& s = st();
  if (s.active_captures.load(std::memory_order_acquire) == 0 || event == 0) [[likely]] return;
  const bool per_thread = (flags & kPerThread) != 0;
  std::lock_guard<std::mutex> lock(*s.join_mu);
  const int i = find_event(s, event);
  if (i < 0) return;  // not an event of a capture in progress
  if (capture_sequence(stream, per_thread) != 0) return;  // already in this (or another) capture
  const std::uint32_t seq = s.event_seq[i].load(std::memory_order_relaxed);
  if (!claim_capture_slot(s, stream_key(stream, per_thread), seq, true))
    log(LogLevel::Warn, "more than %d streams in stream captures; a stream joining one is not tracked",
        State::kMaxCaptures);
}

void record_instantiate(std::uint64_t graph, std::uint64_t exec) {
  put(Kind::Instantiate, 0, nullptr, 0, [&](Record& r) {
    r.h.a = graph;
    r.h.b = exec;
  });
}

void record_graph_launch(std::uint64_t exec, std::uint64_t stream, std::uint8_t flags) {
  put(Kind::GraphLaunch, flags, nullptr, 0, [&](Record& r) {
    r.h.a = exec;
    r.h.d = stream;
  });
}

void record_iteration() { put(Kind::Iteration, 0); }

bool any_capture_active() { return st().active_captures.load(std::memory_order_acquire) != 0; }

std::uint32_t capture_sequence(std::uint64_t stream, bool per_thread) {
  State& s = st();
  if (s.active_captures.load(std::memory_order_acquire) == 0) [[likely]] return 0;
  const std::uint64_t key = stream_key(stream, per_thread);
  for (int i = 0; i < State::kMaxCaptures; ++i)
    if (s.capture_stream[i].load(std::memory_order_acquire) == key)
      return s.capture_seq[i].load(std::memory_order_acquire);
  return 0;
}

// --- parameter layouts ---------------------------------------------------------------------

namespace {

// Each query through a pointer of its own exact prototype (calling through another is
// undefined, and clang's -fsanitize=function reports it): the handle is a CUfunction or a CUkernel.
template <class H>
using ParamInfoFn = CUresult (*)(H, size_t, size_t*, size_t*);  // cuFuncGetParamInfo / cuKernelGetParamInfo
template <class H>
using NameFn = CUresult (*)(const char**, H);  // cuFuncGetName / cuKernelGetName

// The parameters of a handle, asked index by index until the driver says the index is past
// the last one (CUDA_ERROR_INVALID_VALUE). The count, or -1 when index 0 fails otherwise
// (*first: that CUresult): the driver does not take this handle for this query.
template <class H>
int query_params(ParamInfoFn<H> fn, H h, ParamSpec* specs, std::uint32_t max, CUresult* first) {
  std::uint32_t n = 0;
  for (; n < max; ++n) {
    size_t off = 0, size = 0;
    const CUresult r = fn(h, n, &off, &size);
    if (n == 0) *first = r;
    if (r != CUDA_SUCCESS) break;
    specs[n] = ParamSpec{static_cast<std::uint32_t>(off), static_cast<std::uint32_t>(size)};
  }
  if (n == 0 && *first != CUDA_ERROR_INVALID_VALUE) return -1;
  return static_cast<int>(n);
}

}  // namespace

HandleParams describe_handle(void* f, ParamSpec* specs, std::uint32_t max) {
  HandleParams h;
  auto func_info = reinterpret_cast<ParamInfoFn<CUfunction>>(driver_symbol("cuFuncGetParamInfo"));
  auto func_name = reinterpret_cast<NameFn<CUfunction>>(driver_symbol("cuFuncGetName"));
  auto kernel_info = reinterpret_cast<ParamInfoFn<CUkernel>>(driver_symbol("cuKernelGetParamInfo"));
  auto kernel_name = reinterpret_cast<NameFn<CUkernel>>(driver_symbol("cuKernelGetName"));
  h.queries = func_info != nullptr || kernel_info != nullptr;
  if (f == nullptr || !h.queries) return h;
  const auto func = static_cast<CUfunction>(f);
  const auto kernel = static_cast<CUkernel>(f);
  int n = func_info != nullptr ? query_params(func_info, func, specs, max, &h.func_result) : -1;
  if (n < 0 && h.func_result == CUDA_ERROR_FUNCTION_NOT_LOADED) {
    if (auto load = reinterpret_cast<CUresult (*)(CUfunction)>(driver_symbol("cuFuncLoad")); load != nullptr && load(func) == CUDA_SUCCESS)
      n = query_params(func_info, func, specs, max, &h.func_result);
  }
  // "No parameters" from a handle the driver cannot name is no answer (a CUkernel given to
  // cuFuncGetParamInfo): a layout saying a launch touches nothing when it may touch anything
  // would let its tensors move under it.
  const auto named = [&](auto fn, auto handle) {
    if (fn == nullptr || (h.name_result = fn(&h.name, handle)) != CUDA_SUCCESS) h.name = nullptr;
    if (h.name == nullptr && n == 0) n = -1;
  };
  if (n >= 0) named(func_name, func);
  if (n < 0 && kernel_info != nullptr) {
    n = query_params(kernel_info, kernel, specs, max, &h.kernel_result);
    if (n >= 0) named(kernel_name, kernel);
  }
  h.count = n;
  return h;
}

namespace {

const FuncLayout* describe(FuncCache& cache, std::uint64_t key, void* f) {
  ParamSpec specs[1024];  // 8 KiB of stack, on the cold path of a function's first launch
  const HandleParams h = describe_handle(f, specs, 1024);
  if (!h.queries) {
    static std::atomic<bool> warned{false};
    if (!warned.exchange(true))
      log(LogLevel::Warn, "the driver lacks cuFuncGetParamInfo (CUDA 12.4): launches cannot be scanned, "
                          "so the tensors they touch are unknown");
    return nullptr;
  }
  if (h.count < 0 || h.count == 1024) {
    static std::atomic<bool> warned{false};
    if (!warned.exchange(true))
      log(LogLevel::Warn, "kernel %p: the driver gives no parameter layout (cuFuncGetParamInfo %d, cuKernelGetParamInfo %d, "
                          "name %d%s); its launches go unscanned: the tensors they touch are unknown (said once)",
          f, static_cast<int>(h.func_result), static_cast<int>(h.kernel_result), static_cast<int>(h.name_result),
          h.count == 1024 ? ", over 1024 parameters" : "");
    return nullptr;
  }
  const FuncLayout* l = cache.insert(key, key, specs, static_cast<std::uint32_t>(h.count), h.name);
  if (l == nullptr) log(LogLevel::Warn, "kernel parameter cache is full; launches of %s go unscanned", h.name ? h.name : "?");
  return l;
}

}  // namespace

const FuncLayout* layout_for_function(CUfunction f) {
  State& s = st();
  const auto key = reinterpret_cast<std::uint64_t>(f);
  bool refused = false;
  if (const FuncLayout* l = s.cache.lookup(key, &refused)) [[likely]] return l;
  if (f == nullptr || refused) return nullptr;
  const FuncLayout* l = describe(s.cache, key, f);
  if (l == nullptr) s.cache.refuse(key);  // its later launches go unscanned without asking again
  return l;
}

const FuncLayout* layout_for_stub(const void* stub) {
  State& s = st();
  // Host stubs and CUfunctions never share an address, but keep the keys apart anyway.
  const std::uint64_t key = reinterpret_cast<std::uint64_t>(stub) ^ 0x8000000000000000ull;
  if (const FuncLayout* l = s.cache.lookup(key)) [[likely]] return l;
  using GetFuncFn = cudaError_t (*)(cudaFunction_t*, const void*);
  auto get_func = reinterpret_cast<GetFuncFn>(runtime_symbol("cudaGetFuncBySymbol"));
  CUfunction f = nullptr;
  if (get_func == nullptr || get_func(&f, stub) != cudaSuccess || f == nullptr) return nullptr;
  const FuncLayout* l = layout_for_function(f);
  if (l != nullptr) s.cache.alias(key, l);
  return l;
}

}  // namespace capuchin::interpose
