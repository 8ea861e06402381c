// memory.hpp: how blocks get memory and move, one implementation per Kind behind one
// interface (managed_memory.cpp, vmm_memory.cpp), so the residency code (residency.cpp)
// never asks which backend it runs on.
//
// Contract (both kinds):
//   - No method waits on the host. Where a step needs earlier work to be complete on the
//     host's clock (unmapping memory a kernel may still read), the method states it as a
//     precondition ("pre: quiet" = every event quiet_events() lists completed; "pre: ready" =
//     b.ready completed) and the caller makes it true first (Executor::await, outside its lock).
//   - Every driver call's result is checked: a failure leaves the block where it was, mapped
//     and consistent, is logged, and shows as a false or error return. A call whose result
//     cannot change what happens next says so where its result is dropped.
//   - `where` changes only through the Ledger (resident bytes stay exact).
#pragma once

#include <cuda.h>

#include <deque>
#include <memory>

#include "api.hpp"
#include "block.hpp"
#include "ledger.hpp"
#include "host_pool.hpp"
#include "link_meter.hpp"

namespace capuchin::interpose::exec {

// What both kinds share: the driver, the events, the budget ledger and capuchin's streams.
struct MoveContext {
  const Api* api = nullptr;
  EventPool* events = nullptr;
  Ledger* ledger = nullptr;
  CUstream out = nullptr;  // moves to the host
  CUstream in = nullptr;   // moves to the device
  // Discards of dropped managed blocks: no data moves and their uses are over, so they are not
  // queued behind the out stream's copies (the room they make comes at once, as in the plan).
  CUstream drop = nullptr;
  int device = 0;          // the context's device
  LinkMeter* meter = nullptr;  // times the moves that carry data (link_meter.hpp); none: untimed
  // Managed moves out (and discards) in flight, in issue order: the ledger counts their bytes
  // as gone at once, the device only when `out` gets there. A move in (stream-ordered) and a
  // Vmm chunk (taken on the host's clock) wait for just enough of them to fit the budget.
  std::deque<std::pair<Ev, std::uint64_t>> managed_outs;
  std::uint64_t managed_out_bytes = 0;
};

// Enqueues one move with `move()` (a driver call putting a copy on `s`), timed by the context's
// link meter when `timed` and there is one (LinkMeter: only moves that carry data); returns
// the driver's result unchanged.
template <class Move>
CUresult timed_move(MoveContext& c, CUstream s, std::uint64_t bytes, bool to_host, bool timed, Move&& move) {
  const int pair = timed && c.meter != nullptr ? c.meter->begin(s, bytes, to_host) : -1;
  const CUresult r = move();
  if (pair >= 0) c.meter->end(pair, s, r == CUDA_SUCCESS);
  return r;
}

class BlockMemory {
 public:
  // moves_out_incoming: whether this kind's blocks may start moving out while a move in is in
  // flight (Managed: stream-ordered; Vmm: not until the mappings swapped).
  explicit BlockMemory(bool moves_out_incoming) : moves_out_incoming_(moves_out_incoming) {}
  virtual ~BlockMemory() = default;
  virtual Kind kind() const = 0;
  virtual std::size_t span_for(std::size_t bytes) const = 0;
  // A new block (b.bytes set; b.span set here): memory reserved at a new b.base. Managed:
  // Fresh. Vmm: device memory mapped when `room` (the caller made room and settled managed
  // moves out), else host pieces (Host: the first access brings it in).
  virtual CUresult create(Block& b, bool room) = 0;
  // A cached block handed out again; its data is dead. Vmm Host or Dropped: pre: quiet.
  virtual CUresult reuse(Block& b, bool room) = 0;
  // Back to the driver. Pre: quiet.
  virtual void release(Block& b) = 0;
  // Starts moving a resident live block out, after its uses in stream order (pre:
  // !b.many_streams). Managed: Host at once (stream-ordered). Vmm: Evicting until b.ready.
  // false: it cannot move now (no host memory) and stays.
  virtual bool evict(Block& b) = 0;
  // A freed block's device memory, its data dead (pre for Vmm: quiet): Host / Dropped.
  virtual void evict_dead(Block& b) = 0;
  // At a free: Managed, where the driver can discard (cuMemDiscardBatchAsync): its pages are
  // dropped after the work before the free (Fresh: no device memory, nothing to move back),
  // and the returned event marks the discard (a reuse waits for it). Vmm, or no discard: none.
  // true when a discard was issued; `done` then holds its event (none if none could be recorded:
  // the caller waits for the out stream instead).
  virtual bool discard_dead(Block& b, Ev& done) { (void)b, (void)done; return false; }
  // Vmm: an eviction whose copy completed (pre: ready): device memory released, the host copy
  // mapped at base: Host. Managed: nothing to do.
  virtual void complete_evict(Block& b) = 0;
  // An eviction undone before completing: Device; its copy's host pieces retire after it.
  virtual void cancel_evict(Block& b) = 0;
  // Starts moving a block in. Host with keep_data: Incoming until b.ready, on capuchin's in
  // stream. Without data: Managed Fresh is populated on `user` (the stream of the work that
  // needs it, when given: a device fill, in that work's order, not queued behind the in
  // stream's copies; Device at once, no event: the work follows it on that stream);
  // Vmm (a new host-backed or dropped block) gets device memory mapped at once: Device. Pre
  // for Vmm: managed moves out settled. false: no device memory (b unchanged).
  virtual bool prefetch(Block& b, bool keep_data, const CUstream* user) = 0;
  // A move in done for work on `s`: Managed: s waits for it. Vmm: pre: ready; mappings swap.
  virtual void complete_prefetch(Block& b, CUstream s) = 0;
  // The memory at base released without a copy (pre: quiet, droppable()): Dropped. Vmm:
  // unmapped; Managed: discarded on the drop stream, b.ready marking it (the caller waits for
  // it: the ledger counts the room at once).
  virtual void drop(Block& b) = 0;
  // Dropped: memory for a recomputation on `s` to write. Vmm: device memory when `room`, else
  // host pieces. Managed: pages populated on the device in s's order.
  virtual CUresult fill(Block& b, bool room, CUstream s) = 0;
  // Vmm: host pieces from cached blocks' dead host copies may be reclaimed (the pool is full).
  virtual bool pool_exhausted() const { return false; }

  // What the residency code asks instead of the kind:
  // whether b can start moving out now (Managed: also while a move in is in flight). Not
  // virtual: start_victims asks it of every block on the device at each shortage;
  bool movable(const Block& b) const {
    return b.where == Where::Device || (moves_out_incoming_ && b.where == Where::Incoming);
  }
  // whether the host itself must see b's move in end before b's first use (Vmm: the mappings
  // swap on the host once the copy ended; Managed: the use waits in stream order);
  virtual bool host_completes(const Block& b) const = 0;
  // whether this kind's memory is taken on the host's clock (Vmm: cuMemCreate needs it free
  // now, so moves out must have ended; Managed: stream-ordered);
  virtual bool host_clock_memory() const = 0;
  // whether a block of this kind can be dropped and recomputed in place (Vmm; Managed where
  // the driver can discard);
  virtual bool droppable() const = 0;
  // whether a freed block of this kind still on the device may go without waiting for its
  // last work (Managed: discarded in stream order; Vmm: unmapped, so only once quiet).
  virtual bool dead_goes_in_stream_order() const = 0;

 private:
  const bool moves_out_incoming_;
};

std::unique_ptr<BlockMemory> make_managed_memory(MoveContext& ctx, std::size_t page);
// granularity: the VMM allocation granularity; pool: the host pool it evicts into.
std::unique_ptr<BlockMemory> make_vmm_memory(MoveContext& ctx, std::size_t granularity, HostPool& pool, DeviceChunks& chunks);

// A managed move out of `bytes` was just issued on ctx.out (or a discard): its event, with a
// reference for the caller (the block's `ready`: its move back in waits for it).
Ev note_managed_out(MoveContext& ctx, std::uint64_t bytes);
// The managed move out that must complete before memory the ledger already counts (it holds
// the block moving in) is really free on the device: none when the moves still in flight fit
// the budget's slack. Completed moves are forgotten on the way.
// `incoming`: bytes about to be taken that the ledger does not count yet (a Vmm chunk).
Ev room_after_managed_outs(MoveContext& ctx, std::uint64_t incoming = 0);

}  // namespace capuchin::interpose::exec
