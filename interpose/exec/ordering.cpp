// ordering.cpp: events that order the job's work and the executor's around a block (see ordering.hpp).
#include "ordering.hpp"

#include <pthread.h>

#include <algorithm>

#include "config.hpp"

namespace capuchin::interpose::exec {

namespace {
void waits(const EventPool& ev, CUstream on, Ev e) {
  if (const CUresult r = ev.order(on, e); r != CUDA_SUCCESS)
    log(LogLevel::Error, "executor: cuStreamWaitEvent failed (CUresult %d)", static_cast<int>(r));
}
}  // namespace

namespace {
void add_use(EventPool& ev, Block& b, CUstream s, Ev e) {
  for (std::uint8_t i = 0; i < b.nuses; ++i) {
    if (b.uses[i].stream == s) {
      if (b.uses[i].ev == e) return;  // the stream's deferred event marks it already
      ev.unref(b.uses[i].ev);
      b.uses[i].ev = ev.ref(e);
      return;
    }
  }
  if (b.nuses < 4) b.uses[b.nuses++] = UseMark{s, ev.ref(e)};
  else b.many_streams = true;
}
}  // namespace

void mark_use_slow(EventPool& ev, Block& b, CUstream s, Ev e) {
  ++b.use_gen;
  release_free_events(ev, b);  // the new use is ordered after them
  add_use(ev, b, s, e);
}

void mark_covering_use(EventPool& ev, Block& b, CUstream s, Ev e) {
  ++b.use_gen;
  add_use(ev, b, s, e);
}

void order_after_uses(const EventPool& ev, const Block& b, CUstream on) {
  for (std::uint8_t i = 0; i < b.nuses; ++i) waits(ev, on, b.uses[i].ev);
  for (Ev e : b.free_events) waits(ev, on, e);
  waits(ev, on, b.exec);
}

void quiet_events(const Block& b, std::vector<Ev>& out) {
  for (std::uint8_t i = 0; i < b.nuses; ++i)
    if (b.uses[i].ev) out.push_back(b.uses[i].ev);
  for (Ev e : b.free_events) out.push_back(e);
  if (b.exec) out.push_back(b.exec);
  if (b.ready) out.push_back(b.ready);
  if (b.retire_after) out.push_back(b.retire_after);
}

bool quiet_now(const EventPool& ev, const Block& b) {
  if (b.many_streams) return false;
  for (std::uint8_t i = 0; i < b.nuses; ++i)
    if (!ev.done(b.uses[i].ev)) return false;
  for (Ev e : b.free_events)
    if (!ev.done(e)) return false;
  return ev.done(b.exec) && ev.done(b.ready) && ev.done(b.retire_after);
}

void add_free_event(EventPool& ev, Block& b, Ev& e) {
  if (!e) return;
  // Frees on one stream with no work forwarded between them share its deferred event: once.
  if (std::find(b.free_events.begin(), b.free_events.end(), e) != b.free_events.end()) {
    ev.unref(e);
    return;
  }
  // They are released at the block's next first use: a block allocated and freed again and
  // again without a use in between would keep every free's. Past a few, the finished ones go
  // (nothing waits for finished work); below that, no driver call is made here.
  constexpr std::size_t kPruneAt = 8;
  if (b.free_events.size() >= kPruneAt)
    std::erase_if(b.free_events, [&](Ev& f) {
      if (!ev.done(f)) return false;
      ev.unref(f);
      return true;
    });
  b.free_events.push_back(e);  // the reference moves with it
  e = Ev{};
}

void release_free_events(EventPool& ev, Block& b) {
  for (Ev& e : b.free_events) ev.unref(e);
  b.free_events.clear();
}

void release_uses(EventPool& ev, Block& b) {
  for (std::uint8_t i = 0; i < b.nuses; ++i) ev.unref(b.uses[i].ev);
  b.nuses = 0;
  b.many_streams = false;
}

void set_exec_event(EventPool& ev, Block& b, Ev e) {
  ev.unref(b.exec);
  b.exec = ev.ref(e);
}

void order_after_replay(EventPool& ev, Block& b, CUstream s) {
  if (!b.exec) return;
  if (ev.done(b.exec)) {
    ev.unref(b.exec);
    return;
  }
  waits(ev, s, b.exec);
}

void StreamActivity::note(EventPool& ev, CUstream s, Ev e) {
  if (!e) return;
  const std::uint64_t thread = s == CU_STREAM_PER_THREAD ? static_cast<std::uint64_t>(pthread_self()) : 0;
  for (Entry& x : entries_) {
    if (x.stream != s || x.thread != thread) continue;
    if (x.ev == e) return;
    // A deferred event replaced by another (a recorded one: mark_unknown_use) is recorded now:
    // blocks still hold it, and it could not be found to record before the stream goes.
    ev.settle(x.ev);
    ev.unref(x.ev);
    x.ev = ev.ref(e);
    return;
  }
  // A stream seen for the first time: first forget those whose work is done (destroyed ones).
  // One still deferred (done() found its stream idle) is recorded first: blocks may still hold
  // it, and once forgotten here, no settle before its stream is destroyed or captured could
  // find it (a later done() would ask a stream that may be gone or capturing).
  std::erase_if(entries_, [&](Entry& x) {
    if (!ev.done(x.ev)) return false;
    ev.settle(x.ev);
    ev.unref(x.ev);
    return true;
  });
  entries_.push_back(Entry{s, thread, ev.ref(e)});
}

Ev StreamActivity::use_event(EventPool& ev, CUstream s) {
  if (s == CU_STREAM_PER_THREAD) {
    Ev e = ev.record(s);
    note(ev, s, e);
    return e;
  }
  for (Entry& x : entries_)
    if (x.stream == s && x.thread == 0 && ev.deferred(x.ev)) return ev.ref(x.ev);
  Ev e = ev.defer(s);
  note(ev, s, e);
  return e;
}

void StreamActivity::settle(const EventPool& ev, CUstream s) const {
  for (const Entry& x : entries_)
    if (x.stream == s) ev.settle(x.ev);
}

void StreamActivity::settle_all(const EventPool& ev) const {
  for (const Entry& x : entries_) ev.settle(x.ev);
}

void StreamActivity::order_after(const EventPool& ev, CUstream on) const {
  for (const Entry& x : entries_)
    if (x.stream != on) waits(ev, on, x.ev);
}

void StreamActivity::latest(EventPool& ev, std::vector<Ev>& out) const {
  for (const Entry& x : entries_)
    if (!ev.done(x.ev)) out.push_back(ev.ref(x.ev));
}

}  // namespace capuchin::interpose::exec
