// recompute.cpp: dropping tensors and recomputing them by replaying the launch that produced
// them: the same function, parameter bytes, grid, block, shared memory and stream, into the
// same address.
//
// Contract (never a wrong value): a block is dropped only when its producer is recorded, the
// producer's write set is known (CAPUCHIN_KERNEL_OUTPUTS declares the kernel deterministic and
// writing exactly that one parameter, or a probation inferred it: write_sets.hpp), and every
// input is alive and at the version it had when the producer ran. An input may itself be
// dropped (a chain, as the planner plans them: an activation recomputed from another dropped
// one): it is recomputed first, so it must be recomputable in turn, chains::kMaxChain dropped
// blocks deep at most (chains.hpp). While a block is dropped, anything that may write one of
// its inputs, or free it, first recomputes it (materialize_dependents), so the replay always
// reads what the original launch read; a dropped input keeps its version, so recomputing it
// keeps its dependents valid. Another output of the producer's launch counts as an input (at
// its version then, so the replay rewrites what it holds); when it is dropped as well, the one
// replay writes both. Vmm blocks are dropped by unmapping them, managed ones by discarding
// their pages (drivers with cuMemDiscardBatchAsync, CUDA 12.8+).
#include <algorithm>
#include <cinttypes>
#include <cstring>

#include "capture.hpp"
#include "chains.hpp"
#include "executor_impl.hpp"
#include "ordering.hpp"

namespace capuchin::interpose::exec {

bool Executor::recompute_valid(const Block& b) const { return chains::dropped_under(blocks, b, chains::kMaxChain - 1) >= 0; }

// An input pinned by a call in flight may be about to be written (its version bumped after
// the wait that call is in): b's replay would then read the new value.
bool Executor::inputs_in_use(const Block& b) const {
  for (const ProducerInput& x : b.producer->inputs)
    if (const Block* in = blocks.by_id(x.id); in != nullptr && in->pins != 0) return true;
  return false;
}

// The simulator's pressure rule (plan::pressure_victims, src/plan/sim_actions.cpp), which the
// planner's replays assume: a victim is dropped rather than swapped where recomputation is
// allowed (and the plan followed was not made without it), its producer's inputs are on the
// device as they were or dropped at that version (a chain, recomputed first, as DTR does), its
// own replay costs less than a swap round trip, the chains through it stay within kMaxChain,
// and every replay that would recompute it fits the budget (chains::allows_drop and
// replays_fit; plan::chains::allows_drop in the simulator). The price is the last measured time
// of a kernel of the producer's signature (function and tensor sizes, not the grid); a producer
// never timed has no price: it is swapped.
bool Executor::pressure_drops_allowed() const {
  if (!opt.recompute || !planning.allow_recompute()) return false;
  const policy::Controller& c = planning.controller();
  return !(c.following() && c.plan()->no_drops);
}

// Cheapest tests first: start_victims prices every live block on the device.
double Executor::pressure_drop_cost(const Block& b, double swap_s) const {
  if (!b.producer || b.where != Where::Device || !mem(b).droppable()) return -1;
  const Producer& p = *b.producer;
  const double cost = planning.duration_s(p.sig);
  if (!(cost > 0 && cost < swap_s)) return -1;
  for (const ProducerInput& x : p.inputs) {
    const Block* in = blocks.by_id(x.id);
    if (in == nullptr || in->version != x.version || (in->where != Where::Device && in->where != Where::Dropped))
      return -1;
  }
  if (!chains::allows_drop(blocks, b) || !chains::replays_fit(blocks, b, ledger.budget)) return -1;
  return cost;
}

bool Executor::try_drop(Block& b, const char* reason, double expected) {
  // drops_barred(): work that may touch any block is running unrecorded or being settled for,
  // or the executor stands by (what unwatched calls used is not ordered yet: make_room wakes first)
  if (!mem(b).droppable() || !opt.recompute || b.where != Where::Device || b.pins != 0 || drops_barred()) return false;
  if (!chains::allows_drop(blocks, b) || inputs_in_use(b)) return false;
  // The replay must fit on its own: the tensor and its inputs at once, a chain's included.
  if (chains::replay_bytes(blocks, b) > ledger.budget) return false;
  // Its last uses must be done before its memory is unmapped, and so must every stream's latest
  // work (it may reach the tensor unseen). The lock is left meanwhile: a use marked then (a read
  // leaves the version as it was) means work that may still be running, so it is not dropped.
  const std::uint64_t gen = b.use_gen;
  await_quiet(b);
  ++b.pins;
  await_streams();
  --b.pins;
  // (another thread's drops meanwhile may have deepened the chains through it)
  if (b.use_gen != gen || b.where != Where::Device || b.pins != 0 || drops_barred() || !chains::allows_drop(blocks, b) ||
      chains::replay_bytes(blocks, b) > ledger.budget || inputs_in_use(b) || !quiet_now(events, b))
    return false;
  mem(b).drop(b);
  if (b.where != Where::Dropped) return false;  // the unmap failed: it stays resident (logged)
  for (const ProducerInput& x : b.producer->inputs)
    if (Block* in = blocks.by_id(x.id); in != nullptr && std::find(in->dependents.begin(), in->dependents.end(), b.id) == in->dependents.end())
      in->dependents.push_back(b.id);
  decisions.record(Action::Drop, b.id, b.span, reason, expected);
  if (b.kind == Kind::Managed) {  // its discard: on a stream of its own, so at once (memory.hpp)
    if (b.ready) {
      Ev done = events.ref(b.ready);
      await(done);
      events.unref(done);
    } else {
      await_stream(moves.drop);
    }
  }
  return true;
}

bool Executor::recompute(Block& b, const char* reason, double expected) {
  if (b.where != Where::Dropped) return false;
  if (!recompute_valid(b)) {
    log(LogLevel::Debug, "executor: tensor %" PRIu64 " cannot be recomputed (producer gone or inputs changed)", b.id);
    return false;
  }
  const std::shared_ptr<Producer> prod = b.producer;  // kept alive across waits
  const Producer& p = *prod;
  // Inputs first (on the device, pinned against the room we make), then the block itself.
  std::vector<Block*> inputs;
  for (const ProducerInput& x : p.inputs) inputs.push_back(blocks.by_id(x.id));
  ++b.pins;
  for (Block* in : inputs) ++in->pins;
  struct Unpin {
    Block& b;
    std::vector<Block*>& in;
    ~Unpin() {
      --b.pins;
      for (Block* x : in) --x->pins;
    }
  } unpin{b, inputs};
  // A dropped input first, in turn (recompute_valid bounds the depth); a dropped output of the
  // same launch is written by this replay instead (one of `outs`, with b).
  auto written_here = [&](const Block& in) { return in.where == Where::Dropped && chains::co_output(in, p); };
  auto replay_outputs = [&] {
    std::vector<Block*> outs{&b};
    for (Block* in : inputs)
      if (written_here(*in)) outs.push_back(in);
    return outs;
  };
  for (Block* in : inputs)
    if (in->where == Where::Dropped && !written_here(*in) && !recompute(*in, "chain", -1)) return false;
  for (Block* in : inputs)
    if (!written_here(*in) && ensure_resident(*in, p.stream) != CUDA_SUCCESS) return false;
  if (b.where != Where::Dropped) return true;  // recomputed by another call meanwhile
  if (!recompute_valid(b)) return false;
  std::vector<Block*> outs = replay_outputs();
  std::uint64_t bytes = 0;
  bool host_clock = false;
  for (const Block* o : outs) bytes += o->span, host_clock |= mem(*o).host_clock_memory();
  const bool room = make_room(bytes);
  // Vmm memory is taken on the host's clock: the moves out making room must have ended. A
  // managed fill waits for them in the replay's stream order instead (managed_memory.cpp).
  if (room && host_clock) settle_managed_out(bytes);
  if (b.where != Where::Dropped) return true;
  if (!recompute_valid(b)) return false;
  outs = replay_outputs();  // as they are after the waits (another call may have recomputed one)
  if (!fill_for_replay(outs, room, p.stream)) return false;
  std::vector<void*> args(p.kernel->offset.size());
  std::vector<std::uint8_t> params = p.params;  // the driver reads them at the call
  for (std::size_t i = 0; i < args.size(); ++i) args[i] = params.data() + p.kernel->offset[i];
  const CUresult r = api.launch_kernel(p.func, p.grid[0], p.grid[1], p.grid[2], p.block[0], p.block[1], p.block[2],
                                       p.shmem, p.stream, args.data(), nullptr);
  if (r != CUDA_SUCCESS) {
    log(LogLevel::Error, "executor: replaying %s failed (%d)", p.kernel->name.c_str(), static_cast<int>(r));
    drop_unused_fills(outs, outs.size(), p.stream);  // their memory holds no valid data (nothing used it)
    return false;
  }
  mark_replay(p.stream, inputs, outs);
  decisions.record(Action::Recompute, b.id, b.span, reason, expected);
  for (std::size_t k = 1; k < outs.size(); ++k) decisions.record(Action::Recompute, outs[k]->id, outs[k]->span, "co-output", -1);
  return true;
}

bool Executor::fill_for_replay(const std::vector<Block*>& outs, bool room, CUstream s) {
  // Device memory when the budget has room, else host pieces: the replay writes it there.
  for (std::size_t k = 0; k < outs.size(); ++k) {
    if (CUresult r = mem(*outs[k]).fill(*outs[k], room, s); r != CUDA_SUCCESS) {
      log(LogLevel::Debug, "executor: recompute of %" PRIu64 ": no memory (CUresult %d)", outs[k]->id, static_cast<int>(r));
      drop_unused_fills(outs, k, s);  // filled for nothing
      return false;
    }
  }
  return true;
}

void Executor::drop_unused_fills(const std::vector<Block*>& outs, std::size_t n, CUstream s) {
  if (n == 0) return;
  await_stream(s);  // a managed fill populates on s: a drop's discard must come after it (pre: quiet)
  for (std::size_t j = 0; j < n; ++j)
    if (outs[j]->where != Where::Dropped) mem(*outs[j]).drop(*outs[j]);
}

void Executor::mark_replay(CUstream s, const std::vector<Block*>& inputs, const std::vector<Block*>& outs) {
  // The replay is a use of its inputs and its outputs, and work on any stream that writes an
  // input or touches an output waits for it (its exec event), not only the first consumer.
  Ev ev = events.record(s);
  if (!ev) {
    await_stream(s);  // no event to order by: wait for it here
    return;
  }
  for (Block* in : inputs)
    if (std::find(outs.begin(), outs.end(), in) == outs.end()) mark_use(events, *in, s, ev), set_exec_event(events, *in, ev);
  for (Block* o : outs) {
    mark_use(events, *o, s, ev);
    set_exec_event(events, *o, ev);
    if (o->where == Where::Device) {
      events.unref(o->ready);
      o->ready = events.ref(ev);
      ledger.move(*o, Where::Incoming);
    }
  }
  events.unref(ev);
}

void Executor::materialize_dependents_slow(Block& b) {
  std::vector<std::uint64_t> deps;
  deps.swap(b.dependents);
  for (std::uint64_t id : deps) {
    Block* d = blocks.by_id(id);
    if (d != nullptr && d->where == Where::Dropped && !recompute(*d, "input-changes", -1) && recompute_valid(*d)) {
      // Still valid but not recomputed (no memory for it or for a chain below it): once its
      // input changes it never can be; said now, since its access fails later.
      decisions.record(Action::Oom, d->id, d->span, "recompute-failed", -1, "an input changes and it could not be recomputed first");
      log(LogLevel::Error, "executor: tensor %" PRIu64 " could not be recomputed before its input changes", d->id);
    }
  }
}

}  // namespace capuchin::interpose::exec
