// kernel_timing.cpp: the event-pair pool behind sampled kernel timing (see kernel_timing.hpp).
#include "kernel_timing.hpp"

#include <atomic>

#include "capture.hpp"
#include "capture_mode.hpp"
#include "config.hpp"
#include "real_api.hpp"

namespace capuchin::interpose::timing {

std::uint32_t g_every = 0;
__attribute__((tls_model("initial-exec"))) thread_local std::uint32_t t_countdown = 0;

namespace {

using EventCreateFn = CUresult (*)(CUevent*, unsigned);
using EventRecordFn = CUresult (*)(CUevent, CUstream);
using EventQueryFn = CUresult (*)(CUevent);
using EventElapsedFn = CUresult (*)(float*, CUevent, CUevent);

enum PairState : std::uint32_t { kFree = 0, kBusy = 1 };

// A pair is Busy from its claim by a hook until the drain reads it (or the hook gives it
// back). Its events are created by the first hook that claims it and then reused.
struct Pair {
  std::atomic<std::uint32_t> state{kFree};
  CUevent start = nullptr, end = nullptr;
};

constexpr std::uint32_t kPairs = 1024;  // in flight at once: enough for a GPU's queue at 1 in 16
Pair g_pairs[kPairs];
std::atomic<std::uint32_t> g_next{0};
std::atomic<EventCreateFn> g_create{nullptr};
std::atomic<EventRecordFn> g_record{nullptr};
std::atomic<EventQueryFn> g_query{nullptr};
std::atomic<EventElapsedFn> g_elapsed{nullptr};

// The driver's event entry points, resolved at the first timed launch that finds them: capture
// can start before the runtime has loaded libcuda (a job's first CUDA call), so a miss is
// tried again, up to kTries timed launches, before timing is said to be off.
enum Resolved : int { kUnknown = 0, kYes = 1, kNo = 2 };
constexpr int kTries = 64;
std::atomic<int> g_resolved{kUnknown};
std::atomic<int> g_tries{0};

bool resolved() {
  const int s = g_resolved.load(std::memory_order_acquire);
  if (s != kUnknown) [[likely]] return s == kYes;
  auto create = reinterpret_cast<EventCreateFn>(driver_symbol("cuEventCreate"));
  auto record = reinterpret_cast<EventRecordFn>(driver_symbol("cuEventRecord"));
  auto query = reinterpret_cast<EventQueryFn>(driver_symbol("cuEventQuery"));
  auto elapsed = reinterpret_cast<EventElapsedFn>(driver_symbol("cuEventElapsedTime_v2"));
  if (elapsed == nullptr) elapsed = reinterpret_cast<EventElapsedFn>(driver_symbol("cuEventElapsedTime"));
  if (create && record && query && elapsed) {
    g_create.store(create, std::memory_order_relaxed);
    g_record.store(record, std::memory_order_relaxed);
    g_query.store(query, std::memory_order_relaxed);
    g_elapsed.store(elapsed, std::memory_order_relaxed);
    int expect = kUnknown;
    g_resolved.compare_exchange_strong(expect, kYes, std::memory_order_acq_rel);
    return g_resolved.load(std::memory_order_acquire) == kYes;
  }
  if (g_tries.fetch_add(1, std::memory_order_relaxed) + 1 >= kTries) {
    int expect = kUnknown;
    if (g_resolved.compare_exchange_strong(expect, kNo, std::memory_order_acq_rel))
      log(LogLevel::Info, "kernel timing off: the driver lacks the event entry points");
  }
  return false;
}

void release(Pair& p) { p.state.store(kFree, std::memory_order_release); }

}  // namespace

void start(std::uint32_t every) { g_every = every; }

void reset_after_fork() {
  // The parent's events mean nothing here: forget them (leaked) and start afresh.
  for (Pair& p : g_pairs) {
    p.start = p.end = nullptr;
    p.state.store(kFree, std::memory_order_relaxed);
  }
  t_countdown = 0;
}

std::uint32_t begin_slow(CUstream stream) {
  if (any_capture_active() || !resolved()) return 0;
  const std::uint32_t i = g_next.fetch_add(1, std::memory_order_relaxed) % kPairs;
  Pair& p = g_pairs[i];
  std::uint32_t expect = kFree;
  if (!p.state.compare_exchange_strong(expect, kBusy, std::memory_order_acquire)) return 0;
  if (p.start == nullptr) {
    CUevent a = nullptr, b = nullptr;
    const EventCreateFn create = g_create.load(std::memory_order_relaxed);
    if (create(&a, CU_EVENT_DEFAULT) != CUDA_SUCCESS || create(&b, CU_EVENT_DEFAULT) != CUDA_SUCCESS) {
      release(p);  // (an event created alone is leaked: rare, and harmless)
      return 0;
    }
    p.start = a;
    p.end = b;
  }
  if (g_record.load(std::memory_order_relaxed)(p.start, stream) != CUDA_SUCCESS) {  // e.g. a stream of another context
    release(p);
    return 0;
  }
  return i + 1;
}

bool end_slow(std::uint32_t pair, CUstream stream, bool launched) {
  Pair& p = g_pairs[pair - 1];
  if (launched && g_record.load(std::memory_order_relaxed)(p.end, stream) == CUDA_SUCCESS) return true;
  release(p);
  return false;
}

Poll poll(std::uint32_t pair, std::uint64_t* dur_ns, bool give_up) {
  if (pair == 0 || pair > kPairs) return Poll::Failed;
  Pair& p = g_pairs[pair - 1];
  // The drain polls while the application may be capturing a graph in global mode: its
  // queries must not be "potentially unsafe" calls then (capture_mode.hpp).
  thread_local bool mode_left = false;
  if (!mode_left) mode_left = leave_global_capture_mode();
  const CUresult q = g_query.load(std::memory_order_relaxed)(p.end);
  if (q == CUDA_ERROR_NOT_READY && !give_up) return Poll::NotReady;
  float ms = 0;
  const bool ok = q == CUDA_SUCCESS && g_elapsed.load(std::memory_order_relaxed)(&ms, p.start, p.end) == CUDA_SUCCESS && ms >= 0;
  release(p);
  if (!ok) return Poll::Failed;
  *dur_ns = static_cast<std::uint64_t>(static_cast<double>(ms) * 1e6 + 0.5);
  return Poll::Ready;
}

}  // namespace capuchin::interpose::timing
