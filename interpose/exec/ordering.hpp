// ordering.hpp: stream order between the job's work and the executor's own, per block.
//
// Three kinds of events are kept on a block, each holding a reference (event_pool.hpp):
//   - uses: recorded after the job's last launch or copy touching it, one per stream; a move
//     out (eviction, drop, unmap) waits for them;
//   - free events: what the work of a freed block's previous owner must pass before its
//     memory is unmapped; kept across a reuse until the new owner's first use, which the
//     program orders after the allocation (and so after them);
//   - the executor's replay event: a recomputation that reads or writes it, issued on the
//     producer's stream: the job's work on every stream waits for it until it completed.
// Contract: all of it runs under the executor's lock and never waits on the host: what the
// host must wait for is handed out as events (quiet_events) for Executor::await. Results of
// cuStreamWaitEvent are logged when they fail: it fails only on a broken context, which the
// job's next call reports.
#pragma once

#include <vector>

#include "block.hpp"

namespace capuchin::interpose::exec {

// b was used on `s` by work that `ev` follows (a reference is taken).
void mark_use_slow(EventPool& ev, Block& b, CUstream s, Ev e);
// e (on s) ends work that may have used b, which is not known to have: marked like a use, but
// b's free events stay (a block reused and not yet used by its new owner still waits for its
// old owner's work). The executor's wake after a standby.
void mark_covering_use(EventPool& ev, Block& b, CUstream s, Ev e);
inline void mark_use(EventPool& ev, Block& b, CUstream s, Ev e) {
  // Most uses: the same stream's deferred event marked it already (nothing recorded since) and
  // no free events are left to release: only the use count moves.
  if (b.nuses > 0 && b.uses[0].stream == s && b.uses[0].ev == e && b.free_events.empty()) [[likely]] {
    ++b.use_gen;
    return;
  }
  mark_use_slow(ev, b, s, e);
}
// `on` waits for b's uses, free events and replay. Pre: !b.many_streams (the host waits instead).
void order_after_uses(const EventPool& ev, const Block& b, CUstream on);
// Everything the host must see completed before b's memory is unmapped or released.
void quiet_events(const Block& b, std::vector<Ev>& out);
// Takes over the reference `e` holds, as an event the previous owner's work must pass (with 8
// or more held already, the finished ones are dropped first).
void add_free_event(EventPool& ev, Block& b, Ev& e);
void release_free_events(EventPool& ev, Block& b);
void release_uses(EventPool& ev, Block& b);
// b's replay event (a reference is taken), and `s` waiting for a replay still running.
void set_exec_event(EventPool& ev, Block& b, Ev e);
void order_after_replay(EventPool& ev, Block& b, CUstream s);
// Whether every event on b completed (never waits).
bool quiet_now(const EventPool& ev, const Block& b);

// The latest work the job forwarded on each stream. Work can reach a block without capuchin
// seeing it (a pointer table in device memory, a library's FIFO): before a block's memory is
// moved out or unmapped, every stream's latest work must be done too, not only the uses marked
// on it (a stream's latest event covers all its earlier work; one already done costs nothing).
// A per-thread default stream is one entry per thread (the same handle names each thread's own).
// Entries whose work completed are dropped when a new stream shows (short-lived streams do not
// accumulate). A few streams: searched linearly.
class StreamActivity {
 public:
  // Work forwarded on `s` by the calling thread ends with `e` (a reference is taken).
  void note(EventPool& ev, CUstream s, Ev e);
  // The event that ends the job's work forwarded on `s` so far, one reference for the caller:
  // the stream's deferred event (event_pool.hpp), made when the last one was recorded (asked
  // about) or there is none; a per-thread default stream's is recorded now (its handle names
  // the calling thread's stream: no other thread could record it later). None when no event
  // could be made: the caller then waits for the stream.
  Ev use_event(EventPool& ev, CUstream s);
  // Records `s`'s deferred event now: before the stream is destroyed or begins a capture.
  void settle(const EventPool& ev, CUstream s) const;
  void settle_all(const EventPool& ev) const;
  // `on` waits, in stream order, for every other stream's latest work.
  void order_after(const EventPool& ev, CUstream on) const;
  // Every stream's latest work not known to be done, one reference each.
  void latest(EventPool& ev, std::vector<Ev>& out) const;

 private:
  struct Entry {
    CUstream stream;
    std::uint64_t thread;  // the owner of a per-thread default stream, else 0
    Ev ev;
  };
  std::vector<Entry> entries_;
};

}  // namespace capuchin::interpose::exec
