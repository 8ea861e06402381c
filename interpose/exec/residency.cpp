// residency.cpp: keeping what the job's work touches on the device within the budget. Room is
// made by moving victims out (freed blocks still on the device first, their data is dead;
// then live ones in policy::order_victims' order, the rule the simulator's policy uses);
// blocks are brought in for their accesses; the plan's commands are applied where they
// still make sense (a command about a block in use, or no longer where the plan expected
// it, is skipped: the plan is advice, never a reason for a wrong byte).
//
// Contract: a launch is never forwarded before the blocks it touches are resident or on their
// way in stream order; a block that cannot be brought in (no room, no device memory) stays
// where it is, which is addressable (Vmm: read over the link; Managed: faulted in): slow,
// never wrong. Only a dropped block that cannot be recomputed is an error. Waits on the host
// go through await*, outside the lock (executor_impl.hpp).
#include <cinttypes>
#include <thread>

#include "capture.hpp"
#include "chains.hpp"
#include "capuchin/sim.hpp"
#include "capuchin/victims.hpp"
#include "executor_impl.hpp"
#include "ordering.hpp"
#include "scratch.hpp"

namespace capuchin::interpose::exec {

namespace {
// What a swap round trip costs, for the passive victim order and against a recomputation's
// measured time (pressure_drop_cost): each way at the rate this job's moves measured
// (LinkMeter) where it differs by more than a tenth (sim::measured_link_share's band), else
// simcuda's (the planner's simcuda profile's, segment_plan.cpp) or, on a GPU, a generic PCIe 5
// link's.
struct LinkRates {
  double out, in, latency;
};
LinkRates link_rates(const Planning& planning, bool simcuda) {
  const double generic = simcuda ? 25e9 : 55e9, latency = simcuda ? 1.5e-6 : 10e-6;
  auto rate = [&](double measured) { return sim::outside_link_band(measured, generic) ? measured : generic; };
  return {rate(planning.link_rate(true)), rate(planning.link_rate(false)), latency};
}
}  // namespace

// Vmm when rounding to the granularity wastes at most 1/16 of the span (and the tensor is not
// under CAPUCHIN_PINNED_MIN): a 1 MiB tensor is Managed (charged 1 MiB, not a 2 MiB granule),
// a 2 MiB or 31 MiB one is Vmm.
Kind Executor::kind_for(std::size_t bytes) const {
  if (opt.backend != Backend::Pinned || vmm == nullptr || bytes < opt.pinned_min) return Kind::Managed;
  const std::size_t span = (bytes + vmm_gran - 1) / vmm_gran * vmm_gran;
  return (span - bytes) * 16 <= span ? Kind::Vmm : Kind::Managed;
}

CUresult Executor::make_ready(Block& b, bool reuse) {
  bool room = false;
  if (mem(b).host_clock_memory() && (!reuse || b.where == Where::Host || b.where == Where::Dropped)) {
    room = make_room(b.span);
    if (room) settle_managed_out(b.span);
  }
  return reuse ? mem(b).reuse(b, room) : mem(b).create(b, room);
}

void Executor::reclaim_finished_evictions() {
  while (!evict_queue.empty()) {
    auto [b, seq] = evict_queue.front();
    if (b->where != Where::Evicting || b->move_seq != seq) {  // cancelled or completed already
      evict_queue.pop_front();
      continue;
    }
    if (b->pins != 0 || !events.done(b->ready)) return;  // the out stream is in order: the rest are not done either
    mem(*b).complete_evict(*b);
    evict_queue.pop_front();
  }
}

void Executor::delete_block(Block* b) {
  if (Ledger::listed(*b)) [[unlikely]] {  // charged still: every caller forgets it first
    log(LogLevel::Error, "executor: a block of %zu bytes deleted while charged to the budget; forgotten now", b->span);
    ledger.forget(*b);
  }
  std::erase_if(evict_queue, [b](const auto& q) { return q.first == b; });
  blocks.forget(b);
  producers.give(b->producer);  // counted while a block holds it
  delete b;
}

bool Executor::moves_out_barred() const {
  return unknown_in_flight > 0 || waking > 0 || standby.on() || (settling > 0 && scratch().settling == 0);
}

bool Executor::streams_idle_now() {
  std::vector<Ev>& w = scratch().latest;
  w.clear();
  activity.latest(events, w);
  bool idle = true;
  for (Ev& e : w) {
    idle = idle && events.done(e);
    events.unref(e);
  }
  return idle;
}

// Moves victims out until about `short_bytes` are on their way out. true: some move started.
// A victim is dropped (pressure_drop_cost) only where the job's work needs no waiting for:
// may_wait, and no stream has work running (a drop waits for every stream's latest work; the
// simulator's rule, which this follows, knows no such wait). The host still waits for a managed
// drop's own discard (try_drop). Evictions stay in stream order.
bool Executor::start_victims(std::uint64_t short_bytes, bool may_wait) {
  if (moves_out_barred()) return false;  // work that may touch any block is running unrecorded
  std::uint64_t freed = 0;
  bool started_any = false;
  // Freed blocks still on the device: their data is dead (Vmm ones once their work is done).
  std::vector<Block*>& dead = scratch().blocks;
  dead.clear();
  blocks.for_each_cached_on_device([&](Block& c) {
    if (c.pins != 0) return;
    if (mem(c).movable(c) && (mem(c).dead_goes_in_stream_order() || quiet_now(events, c))) dead.push_back(&c);
  });
  for (Block* c : dead) {
    if (freed >= short_bytes) return true;
    evict_cached(*c);
    freed += c->span;
    started_any = true;
  }
  // Live ones, in the passive order.
  const std::uint64_t now = tick();
  const LinkRates link = link_rates(planning, simcuda);
  const bool drops = may_wait && !drops_barred() && pressure_drops_allowed() && streams_idle_now();
  // A swap's two copies, priced per byte once: a division per candidate and direction was most
  // of this loop's time (a shortage prices every block on the device).
  const SwapPrice price{2 * link.latency, 1.0 / link.out + 1.0 / link.in};
  // A drop is priced block by block (its producer's time): where one may be priced, every block
  // on the device is priced; else the index, once started, finds each next victim.
  const std::uint64_t shortage = ++shortages;
  if (drops && producers.held_by_blocks() != 0)
    return start_victims_priced(short_bytes, price, now, freed, drops) || started_any;
  // The index costs every use a relink: started once a shortage priced many blocks.
  if (!ledger.victims().on()) {
    const bool started = start_victims_priced(short_bytes, price, now, freed, drops);
    if (scratch().victims.size() >= VictimIndex::kWorthFrom && !ledger.victims().on()) ledger.index_victims();
    return started || started_any;
  }
  ++shortages_indexed;
  // A block tried by this shortage or a later one (on another thread, while evict() waited) is
  // not tried again here: else two threads could retry each other's failures for ever.
  auto accepts = [&](const Block& b) {
    return b.live && b.pins == 0 && b.stuck_tick != now && b.tried_in_shortage < shortage && mem(b).movable(b);
  };
  while (freed < short_bytes && !moves_out_barred()) {  // (barred: begun while an eviction waited)
    // Looked for again after each move: evict() may have waited outside the lock.
    Block* b = ledger.victims().best(price, now, accepts);
    if (b == nullptr) break;
    b->tried_in_shortage = shortage;  // each block once per shortage, as in the priced order
    started_any = move_out_victim(*b, now, freed) || started_any;
  }
  return started_any;
}

// A victim moved out (its bytes counted freed), or marked stuck for this tick.
bool Executor::move_out_victim(Block& b, std::uint64_t now, std::uint64_t& freed) {
  if (!evict(b, "pressure")) {
    b.stuck_tick = now;
    return false;
  }
  freed += b.span;
  return true;
}

// start_victims where a drop may be priced, or before the index is worth its upkeep: every block
// on the device priced (as a drop only where `drops`: not where the caller may not wait, streams
// are busy or the plan followed was made without drops), the order kept while victims move
// (evict() and try_drop() may wait: each is looked up again by id).
bool Executor::start_victims_priced(std::uint64_t short_bytes, SwapPrice price, std::uint64_t now, std::uint64_t freed,
                                    bool drops) {
  bool started_any = false;
  std::vector<policy::VictimCandidate>& cand = scratch().victims;
  cand.clear();
  // Only blocks on the device can move out: the charged ones, not every live one. The order
  // below does not depend on the candidates' order (VictimOrder's is total).
  std::size_t best = policy::VictimOrder::kNoBest;  // the best candidate so far (the first victim)
  for (Block* const p : ledger.charged_blocks()) {
    Block& b = *p;
    if (!b.live || b.pins != 0 || b.stuck_tick == now) continue;
    if (!mem(b).movable(b)) continue;
    const policy::VictimCandidate c =
        priced_candidate(b, price, now, drops, [&](const Block& x, double swap_s) { return pressure_drop_cost(x, swap_s); });
    cand.push_back(c);
    if (best == policy::VictimOrder::kNoBest || policy::better_victim(c, cand[best])) best = cand.size() - 1;
  }
  for (policy::VictimOrder order(cand, policy::VictimOrder::KeysSet{}, best); !order.done() && freed < short_bytes;) {
    if (moves_out_barred()) break;  // begun while an eviction or a drop waited
    const policy::VictimCandidate& v = order.next();
    Block* b = blocks.by_id(v.handle);  // evict() and try_drop() may wait: look each one up again
    if (b == nullptr || b->pins != 0) continue;
    if (!mem(*b).movable(*b)) continue;
    if (v.drop) {  // refused: not evicted in its place either (its place in the order was the drop's price)
      // (the chains checked again: this round's drops so far may have deepened them)
      const char* why = chains::input_dropped(blocks, *b) ? "pressure-chain" : "pressure";
      if (chains::replays_fit(blocks, *b, ledger.budget) && try_drop(*b, why, v.restore_s)) {
        freed += v.bytes;  // (not b->span: try_drop waited for a managed discard, unpinned)
        started_any = true;
      }
      continue;
    }
    started_any = move_out_victim(*b, now, freed) || started_any;
  }
  return started_any;
}

void Executor::reuse_after_move_out(Block& b, Ev& moved) {
  b.free_stream_valid = false;  // the free's stream order does not cover the out stream's work
  if (!moved) await_stream(moves.out);  // no event marks it: it has happened now
  add_free_event(events, b, moved);
}

void Executor::evict_cached(Block& c) {
  mem(c).evict_dead(c);
  blocks.cool(c);
  if (c.kind != Kind::Managed) return;  // Vmm: unmapped on the host's clock, its work quiet first
  Ev moved = events.ref(c.ready);  // its discard (or copy) on the out stream
  reuse_after_move_out(c, moved);
}

void Executor::cool_warm(std::uint64_t bytes) {
  // Only when they make the room: moved out for nothing, they would have to be filled again.
  // (Their total first: most planned swap-ins find none, or too few, and walk nothing.)
  const std::uint64_t all_warm = blocks.warm_bytes();
  if (ledger.fits(bytes) || ledger.resident() - std::min(ledger.resident(), all_warm) + bytes > ledger.budget) return;
  std::vector<Block*>& warm = scratch().blocks;
  warm.clear();
  std::uint64_t warm_bytes = 0;
  blocks.for_each_cached_on_device([&](Block& c) {
    if (c.warm && c.pins == 0 && c.where == Where::Device && mem(c).movable(c)) warm.push_back(&c), warm_bytes += c.span;
  });
  if (ledger.resident() - std::min(ledger.resident(), warm_bytes) + bytes > ledger.budget) return;  // some pinned
  for (Block* c : warm) {
    if (ledger.fits(bytes)) return;
    evict_cached(*c);
  }
}

// Waits (outside the lock) for the eviction started first of those still in flight.
bool Executor::await_eviction_in_flight() {
  Block* oldest = nullptr;
  auto pick = [&](Block& b) {
    if (b.where == Where::Evicting && (oldest == nullptr || b.move_seq < oldest->move_seq)) oldest = &b;
  };
  for (const auto& [b, seq] : evict_queue) pick(*b);
  if (oldest == nullptr) return false;
  ++oldest->pins;
  await(oldest->ready);
  --oldest->pins;
  if (oldest->where == Where::Evicting && events.done(oldest->ready)) mem(*oldest).complete_evict(*oldest);
  return true;
}

// A freed Vmm block still on the device whose last work is still running: once it is done
// its memory goes (the unmap must wait for that work).
bool Executor::await_dead_block() {
  Block* found = nullptr;
  blocks.for_each_cached_on_device([&](Block& c) {
    if (found == nullptr && !mem(c).dead_goes_in_stream_order() && mem(c).movable(c) && c.pins == 0) found = &c;
  });
  if (found == nullptr) return false;
  await_quiet(*found);
  if (found->where == Where::Device && found->pins == 0 && found->id == kNoBlockId && quiet_now(events, *found)) {
    mem(*found).evict_dead(*found);
    if (found->cached) blocks.cool(*found);
  }
  return true;
}

// A prefetch in flight that nothing uses yet lands, so it can be a victim (pinned: its device
// chunk is held while the copy runs).
bool Executor::land_idle_prefetch() {
  Block* found = nullptr;
  blocks.for_each_live([&](Block& b) {
    if (found == nullptr && b.where == Where::Incoming && b.staging_mapped && b.pins == 0 && b.last_tick != tick()) found = &b;
  });
  if (found == nullptr) return false;
  ++found->pins;
  await(found->ready);
  --found->pins;
  if (found->where == Where::Incoming && found->staging_mapped) mem(*found).complete_prefetch(*found, moves.in);
  return true;
}

// Victims moved here are logged as `pressure`, whoever asked.
bool Executor::make_room(std::uint64_t bytes, bool may_wait) {
  if (bytes > ledger.budget) return false;  // cannot fit at all: the caller uses host memory
  for (int round = 0; round < 100000; ++round) {
    reclaim_finished_evictions();
    if (ledger.fits(bytes)) return true;
    // Standing by: woken first (what the unwatched calls used is ordered before anything moves
    // out; a wake in progress on another thread is waited for). That leaves the lock, which a
    // caller that may not wait must keep: it gets what fits now.
    if (standing_by()) [[unlikely]] {
      if (!may_wait) return false;
      wake("memory runs short");
      continue;
    }
    std::uint64_t in_flight = 0;
    for (const auto& [b, seq] : evict_queue) in_flight += b->where == Where::Evicting && b->move_seq == seq ? b->span : 0;
    const std::uint64_t short_bytes = ledger.resident() + bytes - ledger.budget;
    if (in_flight < short_bytes && start_victims(short_bytes - in_flight, may_wait)) continue;
    if (ledger.fits(bytes) || !may_wait) return ledger.fits(bytes);
    if (await_eviction_in_flight()) continue;
    if (await_dead_block()) continue;
    if (land_idle_prefetch()) continue;
    return false;
  }
  return false;
}

bool Executor::evict(Block& b, const char* reason, double expected) {
  if (standby.on()) [[unlikely]]
    return false;  // what unwatched calls used is not ordered yet (make_room wakes first)
  if (b.many_streams) {  // its uses cannot be waited for in stream order: the host waits
    await_quiet(b);
    // Looked at again: another call may have used it (pinned), freed it or added streams
    // meanwhile, or the executor began standing by.
    if (moves_out_barred() || b.pins != 0 || b.id == kNoBlockId || b.many_streams || !mem(b).movable(b)) return false;
  }
  // Work forwarded on any stream may reach it unseen: the copy out waits for every stream's
  // latest work too, so the tensor is not copied while such work may still write it nor unmapped
  // under it.
  if (b.kind == Kind::Vmm) activity.order_after(events, moves.out);
  if (!mem(b).evict(b)) {
    if (mem(b).pool_exhausted()) {
      warn_pool_full();
      char note[160];
      std::snprintf(note, sizeof note, "the host pool (CAPUCHIN_PINNED_POOL, %" PRIu64 " bytes) is full: the tensor stays resident",
                    pool.limit());
      decisions.record(Action::Fallback, b.id, b.span, "host-pool-exhausted", -1, note);
    }
    return false;
  }
  if (b.where == Where::Evicting) {
    if (!b.ready) await_stream(moves.out);  // no event marks the copy's end: it has ended now
    b.move_seq = ++evictions_started;
    evict_queue.emplace_back(&b, b.move_seq);
  }
  decisions.record(Action::Evict, b.id, b.span, reason, expected);
  return true;
}

bool Executor::prefetch(Block& b, const char* reason, bool on_demand, double expected, const CUstream* user,
                        bool may_wait) {
  const bool keep = b.where == Where::Host;
  const bool host_clock = mem(b).host_clock_memory();
  if (host_clock && !may_wait && !events.done(room_after_managed_outs(moves, b.span))) return false;
  if (host_clock) {
    ++b.pins;
    settle_managed_out(b.span);
    --b.pins;
    if (b.where != Where::Host && b.where != Where::Dropped) return b.where != Where::Fresh;  // changed meanwhile
  }
  if (!mem(b).prefetch(b, keep, user)) return false;
  if (mem(b).host_completes(b) && !b.ready) await_stream(moves.in);  // no event marks the copy's end
  if (reason == nullptr || !keep) return true;  // a first touch: no decision to record
  if (on_demand) {
    ++ondemand_per_iteration.back();
    decisions.record(Action::SwapinOnDemand, b.id, b.span, reason, expected);
  } else {
    decisions.record(Action::Prefetch, b.id, b.span, reason, expected);
  }
  return true;
}

// b is pinned by the caller; its state is looked at again after every wait.
CUresult Executor::ensure_resident_slow(Block& b, CUstream s) {
  for (int step = 0; step < 64; ++step) {
    order_after_replay(events, b, s);
    // Host-clock memory another thread's forwarded work is using is not remapped under it: the
    // work here uses it where it is (host pieces at its address), and a copy staged meanwhile is
    // not used, as this work may write the host copy.
    if (b.forwarded > 0 && mem(b).host_clock_memory() && (b.where == Where::Host || mem(b).host_completes(b))) {
      if (b.where == Where::Incoming) b.staging_stale = true;
      return CUDA_SUCCESS;
    }
    switch (b.where) {
      case Where::Device:
        return CUDA_SUCCESS;
      case Where::Incoming: {
        if (mem(b).host_completes(b)) {
          await(b.ready);
          if (mem(b).host_completes(b) && events.done(b.ready)) mem(b).complete_prefetch(b, s);
          continue;
        }
        mem(b).complete_prefetch(b, s);  // in stream order
        return CUDA_SUCCESS;
      }
      case Where::Evicting:
        mem(b).cancel_evict(b);
        return CUDA_SUCCESS;
      case Where::Fresh:
      case Where::Host: {
        const bool fresh = b.where == Where::Fresh;
        if (!make_room(b.span)) {
          decisions.record(Action::Fallback, b.id, b.span, "no-room", -1, "no evictable tensor: used from host memory");
          return CUDA_SUCCESS;
        }
        if (b.where != Where::Fresh && b.where != Where::Host) continue;  // changed while room was made
        if (!prefetch(b, fresh ? nullptr : "on-demand", true, -1, &s)) {
          decisions.record(Action::Fallback, b.id, b.span, "no-device-memory", -1, "used from host memory");
          return CUDA_SUCCESS;
        }
        if (mem(b).host_completes(b)) {
          await(b.ready);
          if (mem(b).host_completes(b) && events.done(b.ready)) mem(b).complete_prefetch(b, s);
          continue;
        }
        if (b.where == Where::Incoming) mem(b).complete_prefetch(b, s);
        continue;
      }
      case Where::Dropped:
        if (!recompute(b, "on-demand", -1)) {
          decisions.record(Action::Oom, b.id, b.span, "recompute-failed", -1, "a dropped tensor could not be recomputed");
          log(LogLevel::Error, "executor: tensor %" PRIu64 " was dropped and cannot be recomputed", b.id);
          return CUDA_ERROR_ILLEGAL_STATE;
        }
        continue;
    }
  }
  return CUDA_SUCCESS;
}

void Executor::apply(const policy::Command& c) {
  if (moves_out_barred()) return;  // work that may touch any block is running unrecorded
  Block* b = blocks.by_id(c.id);
  if (b == nullptr || b->pins != 0) return;  // gone, or in use by a call in flight
  // pinned: Managed blocks under 1 MiB move only under pressure (passive): planned swaps of
  // them measured worse (the pinned recompute test: twice the on-demand swap-ins, of 64 KiB
  // weights); the planner does not model them well yet.
  if (opt.backend == Backend::Pinned && b->kind == Kind::Managed && b->bytes < (1u << 20)) return;
  const char* reason = plan::to_string(c.reason).data();
  switch (c.act) {
    case plan::Act::Drop:
      if (try_drop(*b, reason, c.cost_s)) return;
      if (moves_out_barred() || b->pins != 0 || b->id != c.id) return;  // changed while try_drop waited
      [[fallthrough]];
    case plan::Act::Evict:
      // false: it cannot move now (host pool full, said and logged there); the plan is advice
      if (mem(*b).movable(*b)) (void)evict(*b, reason, c.cost_s);
      return;
    case plan::Act::Recompute:
      if (b->where == Where::Dropped) {
        (void)recompute(*b, reason, c.cost_s);  // on failure it stays dropped: its access recomputes or reports
        return;
      }
      [[fallthrough]];
    case plan::Act::Prefetch:
      if (b->where == Where::Evicting) {
        mem(*b).cancel_evict(*b);  // still on the device: the copy out is wasted, the data stays
      } else if (b->where == Where::Host) {
        // A swap-in the budget has no room for now is skipped (it comes on demand), as the
        // simulator skips one: evicting other tensors for it would undo the plan's own moves
        // (a tensor swapped in early looks idle), and VMM room would make the host wait.
        reclaim_finished_evictions();
        cool_warm(b->span);  // blocks kept at their free for a reuse: the plan did not count them
        if (ledger.fits(b->span) && prefetch(*b, reason, false, c.cost_s, nullptr, false) && b->where == Where::Incoming)
          planning.arm_probe(b->id, c.place, moves.in);
      }
      return;
  }
}

// Before work whose accesses are unknown: nothing may be missing from its address or moving
// (dropped blocks recomputed, evictions cancelled, prefetches landed, replays waited for).
CUresult Executor::settle_for_unknown_access(CUstream s) {
  std::vector<std::uint64_t>& ids = scratch().ids;
  ids.clear();
  blocks.for_each_live([&](Block& b) { ids.push_back(b.id); });
  for (std::uint64_t id : ids) {
    Block* b = blocks.by_id(id);
    if (b == nullptr || b->where != Where::Dropped) continue;
    ++b->pins;
    const bool ok = recompute(*b, "unknown-access", -1);
    --b->pins;
    if (!ok) {
      log(LogLevel::Error, "executor: tensor %" PRIu64 " was dropped and cannot be recomputed before work whose accesses are unknown", id);
      return CUDA_ERROR_ILLEGAL_STATE;
    }
  }
  for (std::uint64_t id : ids) {
    Block* b = blocks.by_id(id);
    if (b == nullptr) continue;
    ++b->pins;
    if (b->where == Where::Evicting) mem(*b).cancel_evict(*b);
    if (b->where == Where::Incoming) (void)ensure_resident(*b, s);  // lands it; cannot fail for Incoming
    order_after_replay(events, *b, s);
    --b->pins;
  }
  return CUDA_SUCCESS;
}

// Work whose accesses are unknown (a graph launch, a launch whose parameters could not be
// scanned) may touch any block: it is a use of every live block.
void Executor::mark_unknown_use(CUstream s) {
  Ev e = events.record(s);
  if (!e) {
    await_stream(s);
    return;
  }
  blocks.for_each_live([&](Block& b) { mark_use(events, b, s, e); });
  activity.note(events, s, e);
  events.unref(e);
}

}  // namespace capuchin::interpose::exec
