// ordering.cpp: stream order between the job's work and the executor's own, per block.
//
// Three kinds of events are kept on a block (indices into the executor's event pool, each
// holding a reference):
//   - uses: recorded after the job's last launch or copy touching it, one per stream; a move
//     out (eviction, drop, unmap) waits for them;
//   - free events: what the work of a freed block's previous owner must pass before its
//     memory is unmapped; kept across a reuse until the new owner's first use, which the
//     program orders after the allocation (and so after them);
//   - the executor's work event: a replay (recomputation) that reads or writes it, issued on
//     the producer's stream: the job's work on every stream waits for it until it completed.
// Contract: all of it runs under Executor::mu; no function here blocks the host except
// wait_quiet and the bounded-array fallbacks, which wait for events already recorded.
#include "capture.hpp"
#include "state.hpp"

namespace capuchin::interpose::exec {

void Executor::mark_use(Block* b, CUstream s, int ev) {
  release_free_events(b);  // the new use is ordered after them
  for (std::uint8_t i = 0; i < b->nuses; ++i) {
    if (b->uses[i].stream == s) {
      event_ref(ev);
      event_unref(b->uses[i].event);
      b->uses[i].event = ev;
      return;
    }
  }
  if (b->nuses < 4) {
    event_ref(ev);
    b->uses[b->nuses++] = UseMark{s, ev};
  } else {
    b->many_streams = true;
  }
}

void Executor::wait_uses(Block* b, CUstream on) {
  if (b->many_streams) {
    (void)api.ctx_synchronize();
    return;
  }
  for (std::uint8_t i = 0; i < b->nuses; ++i)
    if (b->uses[i].event >= 0) (void)api.stream_wait_event(on, events[static_cast<std::size_t>(b->uses[i].event)], 0);
  for (std::uint8_t i = 0; i < b->nfree; ++i)
    (void)api.stream_wait_event(on, events[static_cast<std::size_t>(b->free_events[i])], 0);
  if (b->exec_event >= 0) (void)api.stream_wait_event(on, events[static_cast<std::size_t>(b->exec_event)], 0);
}

// Waits on the host for every recorded use, free and replay of b (before its memory is
// unmapped or released).
void Executor::wait_quiet(Block* b) {
  if (b->many_streams) (void)api.ctx_synchronize();
  for (std::uint8_t i = 0; i < b->nuses; ++i)
    if (b->uses[i].event >= 0) (void)api.event_synchronize(events[static_cast<std::size_t>(b->uses[i].event)]);
  for (std::uint8_t i = 0; i < b->nfree; ++i)
    (void)api.event_synchronize(events[static_cast<std::size_t>(b->free_events[i])]);
  if (b->exec_event >= 0) (void)api.event_synchronize(events[static_cast<std::size_t>(b->exec_event)]);
}

// Takes over one reference to `ev`. At most four are kept: the oldest is waited for to make room.
void Executor::add_free_event(Block* b, int ev) {
  if (ev < 0) return;
  if (b->nfree == 4) {
    (void)api.event_synchronize(events[static_cast<std::size_t>(b->free_events[0])]);
    event_unref(b->free_events[0]);
    for (int i = 1; i < 4; ++i) b->free_events[i - 1] = b->free_events[i];
    --b->nfree;
  }
  b->free_events[b->nfree++] = ev;
}

void Executor::release_free_events(Block* b) {
  for (std::uint8_t i = 0; i < b->nfree; ++i) event_unref(b->free_events[i]);
  b->nfree = 0;
}

void Executor::set_exec_event(Block* b, int ev) {
  event_ref(ev);
  event_unref(b->exec_event);
  b->exec_event = ev;
}

void Executor::wait_exec_work(Block* b, CUstream s) {
  if (b->exec_event < 0) return;
  CUevent ev = events[static_cast<std::size_t>(b->exec_event)];
  if (api.event_query(ev) == CUDA_SUCCESS) {
    event_unref(b->exec_event);
    b->exec_event = -1;
    return;
  }
  (void)api.stream_wait_event(s, ev, 0);
}

// Work whose accesses are unknown (a graph launch, a launch whose parameters could not be
// scanned) may touch any block: it is a use of every live block.
void Executor::mark_unknown_use(CUstream s) {
  const int ev = event_get();
  if (ev < 0) {
    (void)api.stream_synchronize(s);
    return;
  }
  (void)api.event_record(events[static_cast<std::size_t>(ev)], s);
  for (auto& [id, b] : by_id) mark_use(b, s, ev);
  event_unref(ev);
}

// Before work whose accesses are unknown: nothing may be missing from its address or moving
// (dropped tensors recomputed, evictions cancelled, prefetches landed, replays waited for).
CUresult Executor::settle_for_unknown_access(CUstream s) {
  std::vector<Block*> all;
  all.reserve(by_id.size());
  for (auto& [id, b] : by_id) all.push_back(b);
  for (Block* b : all) {
    if (b->where == Where::Dropped && !recompute(b, "unknown-access", -1)) {
      log(LogLevel::Error, "executor: tensor %llu was dropped and cannot be recomputed before work whose accesses are "
                           "unknown", static_cast<unsigned long long>(b->id));
      return CUDA_ERROR_ILLEGAL_STATE;
    }
  }
  for (Block* b : all) {
    if (b->where == Where::Evicting) backend_cancel_evict(b);
    if (b->where == Where::Incoming) (void)ensure_resident(b, s, true);
    wait_exec_work(b, s);
  }
  return CUDA_SUCCESS;
}

}  // namespace capuchin::interpose::exec
