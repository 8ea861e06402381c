// standby.cpp: when the executor stands by and when it wakes (standby.hpp), and the hooks'
// fast path through it.
//
// It stands by at an iteration end once `calm_needed` iterations in a row moved nothing (no
// eviction, drop, prefetch, recomputation or stall) and peaked at 90% of the budget or less,
// with every live block on the device (fresh managed ones are populated then, where they fit
// without a move), one device shown by the driver, no graph capture active or ever begun in the
// process (one beginning wakes it, but could start between the wake and the capture being seen),
// and no graph launch, settle or wake in progress. Woken, it waits (without the lock, moves
// barred meanwhile: `waking`) for the calls still being forwarded, orders what the unwatched
// calls used after each stream they were issued on (mark_unwatched_uses: one join event that
// every live block counts as used by), forgets the producers it kept (an unwatched launch may
// have rewritten an input), and the policy learns the iteration again from the live allocations. Each wake doubles
// `calm_needed` (at most kMaxCalmNeeded), so a job that keeps brushing its budget stops
// standing by. wake() may leave the lock: its callers hold no block they have not pinned.
#include "standby.hpp"

#include <algorithm>
#include <cinttypes>
#include <thread>
#include <utility>

#include "capture.hpp"
#include "config.hpp"
#include "executor.hpp"
#include "executor_impl.hpp"
#include "ordering.hpp"

namespace capuchin::interpose::exec {

namespace {

// The calling thread's last noted stream and the standby it was noted in (Standby::epoch_): a
// thread issuing on one stream searches the table once per standby.
__attribute__((tls_model("initial-exec"))) thread_local std::uint64_t t_noted_epoch = 0;
__attribute__((tls_model("initial-exec"))) thread_local std::uint64_t t_noted_stream = 0;
// The hook call in progress on this thread passed unwatched (standby_done ends it).
__attribute__((tls_model("initial-exec"))) thread_local bool t_passed = false;

constexpr std::uint32_t kFirstCalmNeeded = 3;
constexpr std::uint32_t kMaxCalmNeeded = 1024;

}  // namespace

bool Standby::pass_slow(CUstream ds) {
  // Another thread's per-thread default stream cannot be named at a wake: watched.
  if (ds == CU_STREAM_PER_THREAD) return false;
  calls_.fetch_add(1, std::memory_order_seq_cst);
  if (!on_.load(std::memory_order_seq_cst)) {
    calls_.fetch_sub(1, std::memory_order_release);
    return false;
  }
  const std::uint64_t key = reinterpret_cast<std::uint64_t>(ds) + 1;
  const std::uint64_t epoch = epoch_.load(std::memory_order_acquire);
  if (t_noted_epoch == epoch && t_noted_stream == key) return true;
  for (auto& slot : streams_) {
    std::uint64_t v = slot.load(std::memory_order_acquire);
    if (v == 0 && slot.compare_exchange_strong(v, key, std::memory_order_acq_rel)) v = key;
    if (v == key) {
      t_noted_epoch = epoch;
      t_noted_stream = key;
      return true;
    }
  }
  calls_.fetch_sub(1, std::memory_order_release);  // every slot taken: watched (and the executor woken)
  return false;
}

bool standby_pass(CUstream s, bool per_thread) {
  Executor* ex = g_ex;
  if (ex == nullptr || !ex->standby.pass(driver_stream(s, per_thread))) [[likely]]
    return false;
  t_passed = true;
  return true;
}

bool standby_done() {
  if (!t_passed) [[likely]]
    return false;
  t_passed = false;
  g_ex->standby.done();
  return true;
}

void Executor::consider_standby() {
  const Tally& t = decisions.tally();
  const std::uint64_t moved_so_far = t.of(Action::Evict) + t.of(Action::Drop) + t.of(Action::Prefetch) + t.of(Action::Recompute) +
                              t.of(Action::SwapinOnDemand) + t.of(Action::Stall);
  const bool moved = moved_so_far != moves_at_boundary;
  moves_at_boundary = moved_so_far;
  const std::uint64_t peak = ledger.window_peak();
  ledger.restart_window();
  if (calm_needed == 0) calm_needed = kFirstCalmNeeded;
  const bool calm = !moved && ledger.budget > 0 && pending_peak_multiple == 0 && peak <= ledger.budget / 10 * 9;
  calm_iterations = calm ? calm_iterations + 1 : 0;
  if (!opt.standby || standby.on() || waking != 0 || calm_iterations < calm_needed) return;
  if (!one_device || unknown_in_flight != 0 || settling != 0 || !evict_queue.empty() || capture_ever_begun() ||
      any_capture_active())
    return;
  // Every live block on the device: fresh managed ones (allocated, not yet used: the boundary is
  // often just after an allocation) are populated now, as their first launch would, so that
  // what unwatched launches use is charged; only where they fit as they are (no room made: that
  // would move a live tensor just before the standby begins).
  bool all_resident = true;
  std::vector<Block*> fresh;
  std::uint64_t fresh_bytes = 0;
  blocks.for_each_live([&](Block& b) {
    if (b.exec || !b.dependents.empty()) all_resident = false;
    else if (b.where == Where::Fresh && b.kind == Kind::Managed) fresh.push_back(&b), fresh_bytes += b.span;
    else if (b.where != Where::Device) all_resident = false;
  });
  if (!all_resident || !ledger.fits(fresh_bytes)) return;
  for (Block* b : fresh) {
    ++b->pins;
    CUstream on = moves.in;  // a migration (managed): safe beside a use on any stream, and no barrier on the legacy one
    const CUresult r = ensure_resident(*b, on);
    --b->pins;
    if (r != CUDA_SUCCESS || b->where != Where::Device) return;
  }
  if (!evict_queue.empty() || waking != 0) return;  // (populating fits without moves: checked again all the same)
  standby.enter();
  ++standbys;
  log(LogLevel::Info, "executor: standing by: %u iterations moved nothing and peaked at %.0f%% of the budget or less; launches "
                      "and copies pass to the driver unwatched until one needs a move (event %" PRIu64 ")",
      calm_iterations, 100.0 * static_cast<double>(peak) / static_cast<double>(ledger.budget), tick());
}

// What the unwatched calls used ends with each noted stream's work so far: later moves wait for
// it. Each stream's event is noted as its latest work, and capuchin's out stream waits for them
// all: one event there (a join) marks every live block, as one use (marking each block with one
// event per stream would leave it on "too many streams" past four, and every later move of it
// waiting on the host). Where that cannot be done, each stream's own event marks every block.
// (No capture is in progress: one beginning wakes the executor first.)
void Executor::mark_unwatched_uses() {
  std::vector<std::pair<CUstream, Ev>> ends;
  bool joined = moves.out != nullptr;
  for (CUstream s : woken_streams) {
    Ev e = events.record(s);
    if (!e) {
      if (api.stream_synchronize(s) != CUDA_SUCCESS)  // a broken stream: under the lock, rarely
        log(LogLevel::Warn, "executor: a stream used while standing by could not be waited for");
      continue;
    }
    activity.note(events, s, e);
    joined = joined && events.order(moves.out, e) == CUDA_SUCCESS;
    ends.emplace_back(s, e);
  }
  Ev join = joined && !ends.empty() ? events.record(moves.out) : Ev{};
  if (join) {
    blocks.for_each_live([&](Block& b) { mark_covering_use(events, b, moves.out, join); });
    events.unref(join);
  } else {
    for (const std::pair<CUstream, Ev>& end : ends)  // (not a structured binding: clang cannot capture one)
      blocks.for_each_live([&](Block& b) { mark_covering_use(events, b, end.first, end.second); });
  }
  for (auto& [s, e] : ends) events.unref(e);
}

void Executor::wake(const char* why) {
  // Another thread's wake waiting for the passed calls: done only once it has marked them.
  while (waking > 0) [[unlikely]]
    unlocked([] {
      std::this_thread::yield();
      return CUDA_SUCCESS;
    });
  if (!standby.on()) [[likely]]
    return;
  standby.stop();
  // The calls still being forwarded end without the lock (one may wait in the driver for work
  // that waits for another thread's call). Nothing moves out meanwhile (moves_out_barred).
  ++waking;
  unlocked([&] {
    standby.drain();
    return CUDA_SUCCESS;
  });
  --waking;
  standby.take_streams(woken_streams);
  mark_unwatched_uses();
  invalidate_producers();
  const std::uint64_t now = tick();
  ledger.touch_all([&](auto&& f) { blocks.for_each_live(f); }, now);  // the clock stood still: none looks idlest
  std::vector<std::pair<std::uint64_t, std::uint64_t>> live;
  blocks.for_each_live([&](Block& b) { live.emplace_back(b.id, b.span); });
  std::sort(live.begin(), live.end());  // the controller's order does not depend on the table's
  planning.resume(live);
  decisions.record(Action::Relearn, kNoBlockId, 0, "standby-woken", -1, why);
  ++wakes;
  calm_iterations = 0;
  calm_needed = std::min(calm_needed * 2, kMaxCalmNeeded);
  log(LogLevel::Info, "executor: watching every call again (%s); learning the iteration again (%zu streams used meanwhile)",
      why, woken_streams.size());
}

}  // namespace capuchin::interpose::exec
