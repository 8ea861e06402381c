// recompute.cpp: dropping tensors and recomputing them by replaying the launch that produced
// them: the same function, parameter bytes, grid, block, shared memory and stream, into the
// same address.
//
// Contract (never a wrong value): a block is dropped only when its producer is recorded, the
// producer's write set is known (CAPUCHIN_KERNEL_OUTPUTS declares the kernel deterministic and
// writing exactly that one parameter), and every input is alive, not dropped and at the
// version it had when the producer ran. While it is dropped, anything that may write one of
// those inputs, or free it, first recomputes it (Executor::materialize_dependents), so the
// replay always reads what the original launch read. Only the pinned backend drops (uvm has
// no discard on simcuda, so a drop there is an eviction); only Vmm blocks are dropped.
#include <algorithm>
#include <cinttypes>
#include <cstring>

#include "capture.hpp"
#include "func_cache.hpp"
#include "state.hpp"

namespace capuchin::interpose::exec {

Executor::FuncInfo& Executor::func_info(CUfunction f, const FuncLayout* layout) {
  auto [it, fresh] = funcs.try_emplace(f);
  FuncInfo& fi = it->second;
  if (!fresh) return fi;
  fi.known = true;
  if (layout != nullptr && layout->name != nullptr) fi.name = layout->name;
  else if (api.func_get_name != nullptr) {
    const char* n = nullptr;
    if (api.func_get_name(&n, f) == CUDA_SUCCESS && n != nullptr) fi.name = n;
  }
  auto out = outputs_by_name.find(fi.name);
  if (out == outputs_by_name.end() || api.func_get_param_info == nullptr) return fi;
  for (std::size_t i = 0; i < 1024; ++i) {
    size_t off = 0, size = 0;
    if (api.func_get_param_info(f, i, &off, &size) != CUDA_SUCCESS) break;
    fi.offset.push_back(static_cast<std::uint32_t>(off));
    fi.size.push_back(static_cast<std::uint32_t>(size));
    fi.buffer = std::max<std::uint32_t>(fi.buffer, static_cast<std::uint32_t>(off + size));
  }
  if (out->second < fi.offset.size() && fi.size[out->second] == sizeof(void*)) fi.output = static_cast<int>(out->second);
  else log(LogLevel::Warn, "CAPUCHIN_KERNEL_OUTPUTS: %s has no pointer parameter %u; its write set stays unknown",
           fi.name.c_str(), out->second);
  return fi;
}

bool Executor::recompute_valid(const Block* b) const {
  const Producer* p = b->producer.get();
  if (p == nullptr || p->func == nullptr) return false;
  for (std::size_t i = 0; i < p->input_ids.size(); ++i) {
    auto it = by_id.find(p->input_ids[i]);
    if (it == by_id.end()) return false;
    const Block* in = it->second;
    if (in->version != p->input_versions[i] || in->where == Where::Dropped) return false;
  }
  return true;
}

bool Executor::try_drop(Block* b, const char* reason, double expected) {
  if (b->kind != Kind::Vmm || !recompute_enabled || b->where != Where::Device) return false;
  if (!recompute_valid(b)) return false;
  // The replay must fit on its own: its inputs and the tensor at once.
  std::uint64_t need = b->span;
  for (std::uint64_t id : b->producer->input_ids)
    if (const Block* in = find_id(id)) need += in->span;
  if (need > budget) return false;
  for (std::uint64_t id : b->producer->input_ids)
    if (Block* in = find_id(id)) in->dependents.push_back(b->id);
  backend_drop(b);
  ++n_drop;
  record("drop", b, b->span, reason, expected);
  return true;
}

bool Executor::recompute(Block* b, const char* reason, double expected) {
  if (b->where != Where::Dropped) return false;
  if (!recompute_valid(b)) {
    if (b->producer)
      for (std::size_t i = 0; i < b->producer->input_ids.size(); ++i) {
        const Block* in = find_id(b->producer->input_ids[i]);
        log(LogLevel::Debug, "executor: recompute of %" PRIu64 ": input %" PRIu64 " %s version %u (then %u) where %d",
            b->id, b->producer->input_ids[i], in ? "alive" : "freed", in ? in->version : 0, b->producer->input_versions[i],
            in ? static_cast<int>(in->where) : -1);
      }
    return false;
  }
  const Producer& p = *b->producer;
  // Inputs first (on the device, protected from the room we make), then the block itself.
  // Protected while the replay is set up; their ticks come back afterwards (the replay's use
  // events keep later evictions ordered), so the launch being served can still evict them.
  std::vector<Block*> inputs;
  std::vector<std::uint64_t> ticks;
  for (std::uint64_t id : p.input_ids) {
    Block* in = find_id(id);
    inputs.push_back(in);
    ticks.push_back(in->last_tick);
    in->last_tick = tick;
  }
  const std::uint64_t own_tick = b->last_tick;
  b->last_tick = tick;
  struct Restore {
    std::vector<Block*>& in;
    std::vector<std::uint64_t>& t;
    Block* b;
    std::uint64_t bt;
    const std::vector<Block*>& cur;
    ~Restore() {
      auto touched = [&](Block* x) { return std::find(cur.begin(), cur.end(), x) != cur.end(); };
      for (std::size_t i = 0; i < in.size(); ++i)
        if (!touched(in[i])) in[i]->last_tick = t[i];
      if (!touched(b)) b->last_tick = bt;
    }
  } restore{inputs, ticks, b, own_tick, cur};
  for (Block* in : inputs)
    if (ensure_resident(in, p.stream, false) != CUDA_SUCCESS) {
      log(LogLevel::Debug, "executor: recompute of %" PRIu64 ": input %" PRIu64 " not resident", b->id, in->id);
      return false;
    }
  // Device memory when the budget has room, else host pieces: the replay writes it there.
  if (CUresult r = vmm_fill(b, "recompute"); r != CUDA_SUCCESS) {
    log(LogLevel::Debug, "executor: recompute of %" PRIu64 ": no memory (CUresult %d)", b->id, static_cast<int>(r));
    return false;
  }
  std::vector<void*> args(p.param_offset.size());
  std::vector<std::uint8_t> params = p.params;  // the driver reads them at the call
  for (std::size_t i = 0; i < args.size(); ++i) args[i] = params.data() + p.param_offset[i];
  const CUresult r = api.launch_kernel(p.func, p.grid[0], p.grid[1], p.grid[2], p.block[0], p.block[1], p.block[2],
                                       p.shmem, p.stream, args.data(), nullptr);
  if (r != CUDA_SUCCESS) {
    log(LogLevel::Error, "executor: replaying %s failed (%d)", p.name.c_str(), static_cast<int>(r));
    vmm_empty(b);  // its memory holds no valid data: dropped again
    return false;
  }
  // The replay is a use of its inputs and its output, and work on any stream that writes an
  // input or touches the output waits for it (exec_event), not only the first consumer.
  const int ev = event_get();
  if (ev < 0) {
    (void)api.stream_synchronize(p.stream);  // no event to order by: wait for it here
  } else {
    (void)api.event_record(events[static_cast<std::size_t>(ev)], p.stream);
    for (Block* in : inputs) mark_use(in, p.stream, ev), set_exec_event(in, ev);
    mark_use(b, p.stream, ev);
    set_exec_event(b, ev);
    if (b->where == Where::Device) {
      event_ref(ev);
      b->ready_event = ev;
      b->where = Where::Incoming;
    }
    event_unref(ev);
  }
  peak_resident = std::max(peak_resident, resident);
  ++n_recompute;
  record("recompute", b, b->span, reason, expected, nullptr);
  return true;
}

}  // namespace capuchin::interpose::exec
