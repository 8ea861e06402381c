// event_pool.hpp: the executor's CUDA events, reference-counted and named by a typed handle.
//
// An Ev names a pooled event, or none. Blocks, moves and replays hold references to the
// events that order them (ordering.cpp); an event goes back to the pool when its last
// reference is dropped, and is re-recorded by its next user.
//
// Deferred events (defer): the job's launches and copies mark the blocks they use with their
// stream's deferred event instead of recording one after each call (a cuEventRecord per launch
// is host time on a real driver). It is recorded on that stream the first time anything asks
// about it (done, order, handle), and then covers every call forwarded on the stream before
// that moment, the marked ones included: a later wait may cover more work than the use, never
// less. done() asks the stream first (cuStreamQuery, where the driver has it): an idle stream
// has finished every call forwarded on it, so the event is done and stays deferred. The owner
// must settle a stream's deferred event before the stream is destroyed or begins a capture
// (StreamActivity::settle, and before it forgets a stream's entry): a record on a destroyed or
// capturing stream would fail or be captured. Should a record fail anyway, the whole context is waited for (host
// waits, logged once): the uses it covered are then complete.
//
// Contract: every call runs under the executor's lock and none waits on the host; to wait for
// an event, the executor takes a reference and its handle, leaves the lock and synchronises
// on the handle (Executor::await): handles never move or die before the pool does. A failed
// cuEventCreate or cuEventRecord gives none (logged once): callers then order by waiting for
// the stream instead. cuStreamWaitEvent's result is returned; it fails only on a broken
// context, which the job's own next call reports. Events are created in the executor's
// context (the one it started in), whatever context the calling thread has current, so they
// can be recorded on the executor's streams (cuEventRecord: "hEvent and hStream must be from
// the same context", cuda.h); one recorded on a stream of another device gives none.
#pragma once

#include <cuda.h>

#include <cstdint>
#include <vector>

#include "api.hpp"

namespace capuchin::interpose::exec {

// For its lifetime, `ctx` is the calling thread's current context when another one is (a
// thread on another device, cudaSetDevice, calling into the executor, whose events and
// context-wide waits are its own device's); the thread's own is current again afterwards.
// Without the context entry points, or with no ctx, nothing changes.
class InContext {
 public:
  InContext(const Api& api, CUcontext ctx);
  ~InContext();
  InContext(const InContext&) = delete;
  InContext& operator=(const InContext&) = delete;
  bool failed() const { return failed_; }  // ctx could not be made current

 private:
  const Api& api_;
  bool pushed_ = false, failed_ = false;
};

// Two timing events (CU_EVENT_DEFAULT: cuEventElapsedTime reads them) made in the current
// context, both or neither: false when either could not be made (the first is destroyed again,
// best effort: a leaked event costs nothing the job sees).
bool make_timing_pair(const Api& api, CUevent& a, CUevent& b);

struct Ev {
  std::int32_t i = -1;
  explicit operator bool() const { return i >= 0; }
  bool operator==(const Ev&) const = default;
};

class EventPool {
 public:
  void init(const Api* api, CUcontext ctx) {
    api_ = api;
    ctx_ = ctx;
  }
  // The executor's own streams (moves.out, in, drop): made at its start, never destroyed or
  // captured while it runs, so a wait one of them made for an event's recording still holds
  // for every later call on it (order() then skips the repeat). A job's stream handle can be
  // destroyed and its value reused for a new stream, which has waited for nothing.
  void set_own_streams(CUstream out, CUstream in, CUstream drop) {
    own_[0] = out, own_[1] = in, own_[2] = drop;
  }
  CUcontext context() const { return ctx_; }  // the executor's
  // A fresh event recorded on `s`, holding one reference; none when it could not be made.
  Ev record(CUstream s);
  // A fresh event to be recorded on `s` when first asked about (see above), one reference;
  // none when no event could be made.
  Ev defer(CUstream s);
  bool deferred(Ev e) const { return e && pending_[static_cast<std::size_t>(e.i)] != nullptr; }
  // Records e now if it is deferred (the stream is about to go away or to be captured).
  void settle(Ev e) const;
  // One more reference to e (returned for convenience); none stays none.
  Ev ref(Ev e) {
    if (e) ++refs_[static_cast<std::size_t>(e.i)];
    return e;
  }
  // Drops the reference `e` holds and clears it (inline: every use mark and free drops one).
  void unref(Ev& e) {
    if (!e) return;
    if (--refs_[static_cast<std::size_t>(e.i)] == 0) {
      pending_[static_cast<std::size_t>(e.i)] = nullptr;  // never needed: never recorded
      free_.push_back(e.i);
    }
    e = Ev{};
  }
  // Moves a reference from `from` into `to` (dropping what `to` held).
  void assign(Ev& to, Ev& from) {
    unref(to);
    to = from;
    from = Ev{};
  }
  // Completed, or none (cuEventQuery: never waits). A recorded event seen complete is
  // remembered so until its slot is recorded again: later asks make no driver call.
  bool done(Ev e) const;
  // s waits for e in stream order (never waits). No driver call when e was seen complete (a
  // wait for finished work orders nothing), or when s is one of the executor's own streams and
  // already waits for this recording of e (cuStreamWaitEvent orders every later call on s).
  CUresult order(CUstream s, Ev e) const;
  // Driver calls order() and done() did not need to make (the executor's summary).
  std::uint64_t calls_saved() const { return calls_saved_; }
  CUevent handle(Ev e) const {  // recorded first if deferred: the caller waits on it
    settle(e);
    return e ? events_[static_cast<std::size_t>(e.i)] : nullptr;
  }
  std::size_t created() const { return events_.size(); }

 private:
  const Api* api_ = nullptr;
  std::vector<CUevent> events_;
  std::vector<std::int32_t> refs_;
  std::vector<std::int32_t> free_;
  // Per event: the stream it is still to be recorded on (deferred), else null. Recording a
  // deferred event changes no meaning (it marks the uses it was given for), hence mutable:
  // done() and order() record it on the way.
  mutable std::vector<CUstream> pending_;
  // Per event, about its current recording (reset when its slot is recorded or deferred again):
  // seen complete by done() (bit 7); which of the executor's own streams wait for it already
  // (order(); bit k: own_[k]).
  static constexpr std::uint8_t kComplete = 0x80;
  mutable std::vector<std::uint8_t> seen_;
  CUstream own_[3] = {};
  mutable std::uint64_t calls_saved_ = 0;
  // The bit of s among the executor's own streams, 0 for any other stream.
  std::uint8_t own_bit(CUstream s) const {
    for (int k = 0; k < 3; ++k)
      if (s != nullptr && s == own_[k]) return static_cast<std::uint8_t>(1u << k);
    return 0;
  }
  void fresh_recording(std::int32_t i) { seen_[static_cast<std::size_t>(i)] = 0; }
  mutable bool settle_failed_logged_ = false;
  bool create_failed_logged_ = false;
  CUcontext ctx_ = nullptr;  // the executor's (null: unknown, the current one is used)
  CUresult create(CUevent* ev) const;
  std::int32_t take_slot();  // a free slot (created when none), -1 when none could be made
};

}  // namespace capuchin::interpose::exec
