// entry.cpp: the executor's hook entry points (executor.hpp): allocation and free (served
// from the backend, freed blocks cached for reuse in stream order), launches (touched tensors
// made resident or recomputed before forwarding, events recorded after), copies, memsets,
// synchronisations (iteration boundaries) and graph launches.
#include <algorithm>
#include <cinttypes>
#include <cstring>

#include "capture.hpp"
#include "executor.hpp"
#include "state.hpp"

namespace capuchin::interpose::exec {

bool alloc(CUdeviceptr* out, std::size_t bytes, CUstream s, bool per_thread, bool stream_ordered, CUresult* r) {
  if (g_ex == nullptr || out == nullptr || bytes == 0) return false;
  Executor& e = *g_ex;
  std::lock_guard<std::mutex> lock(e.mu);
  CUresult why = CUDA_SUCCESS;
  if (!started(e, &why)) {
    if (why == CUDA_ERROR_INVALID_CONTEXT || why == CUDA_ERROR_NOT_INITIALIZED) {
      *r = why;
      return true;  // the runtime hook initialises the context and retries
    }
    return false;
  }
  const CUstream ds = driver_stream(s, per_thread);
  if (stream_ordered && capture_sequence(reinterpret_cast<std::uint64_t>(s), per_thread) != 0) {
    ++e.n_fallback;
    e.record("fallback", nullptr, bytes, "stream-capture", -1, "allocated by the driver inside a graph capture");
    return false;  // a graph's allocation node: the driver's, outside the budget
  }
  SegEvent ev;
  ev.op = static_cast<std::uint8_t>(trace::Op::Alloc);
  ev.sig = mix(static_cast<std::uint64_t>(trace::Op::Alloc) << 56, bytes);
  ++e.tick;
  const Kind kind = e.kind_for(bytes);
  const std::size_t span = e.span_for(kind, bytes);
  // Reuse a freed block of the same span and kind when stream order (or completion) allows;
  // blocks still on the device first.
  Block* b = nullptr;
  auto range = e.cache.equal_range(span);
  for (int pass = 0; pass < 2 && b == nullptr; ++pass) {
    for (auto it = range.first; it != range.second; ++it) {
      Block* c = it->second;
      if (c->kind != kind || (pass == 0 && c->where != Where::Device)) continue;
      bool ready = stream_ordered && c->free_stream_valid && c->free_stream == ds;
      if (!ready) {
        ready = true;
        for (std::uint8_t i = 0; i < c->nfree && ready; ++i)
          ready = e.api.event_query(e.events[static_cast<std::size_t>(c->free_events[i])]) == CUDA_SUCCESS;
      }
      if (!ready && stream_ordered) {
        for (std::uint8_t i = 0; i < c->nfree; ++i)
          (void)e.api.stream_wait_event(ds, e.events[static_cast<std::size_t>(c->free_events[i])], 0);
        ready = true;
      }
      if (!ready) continue;
      b = c;
      e.cache.erase(it);
      break;
    }
  }
  if (b != nullptr) {
    b->bytes = bytes;
    // Mapped before its address is handed out, never a hole. Its free events stay until the
    // new owner's first use: a move before that still waits for the old owner's work.
    const CUresult refill = e.backend_reuse(b);
    b->free_stream_valid = false;
    if (refill != CUDA_SUCCESS) {
      log(LogLevel::Warn, "executor: a cached block of %zu bytes could not be refilled (CUresult %d); returned to the driver",
          span, static_cast<int>(refill));
      e.backend_release(b);
      e.release_free_events(b);
      delete b;
      b = nullptr;
    }
  }
  if (b == nullptr) {
    b = new Block;
    b->bytes = bytes;
    b->kind = kind;
    if (const CUresult a = e.backend_alloc(b); a != CUDA_SUCCESS) {
      delete b;
      ++e.n_fallback;
      e.record("fallback", nullptr, bytes, "backend-alloc-failed", -1, "served by the real allocator");
      return false;
    }
  }
  b->id = record_alloc(b->base, bytes, MemKind::Device, stream_ordered ? AllocSub::Async : AllocSub::Device,
                       reinterpret_cast<std::uint64_t>(s), per_thread ? kPerThread : 0);
  b->last_tick = e.tick;
  b->local = static_cast<std::uint32_t>(e.seg_locals.size());
  e.by_id[b->id] = b;
  e.by_base[b->base] = b;
  e.live_bytes += b->span;
  e.seg_locals.push_back(b->id);
  ev.id = b->id;
  ev.bytes = b->span;
  e.note_event(ev, nullptr, 0);
  *out = b->base;
  *r = CUDA_SUCCESS;
  return true;
}

bool free(CUdeviceptr p, CUstream s, bool per_thread, bool stream_ordered, CUresult* r) {
  if (g_ex == nullptr || g_start.load(std::memory_order_acquire) != 1) return false;
  Executor& e = *g_ex;
  std::lock_guard<std::mutex> lock(e.mu);
  auto it = e.by_base.find(p);
  if (it == e.by_base.end()) return false;
  Block* b = it->second;
  ++e.tick;
  e.materialize_dependents(b);
  SegEvent ev;
  ev.op = static_cast<std::uint8_t>(trace::Op::Free);
  ev.sig = mix(static_cast<std::uint64_t>(trace::Op::Free) << 56, b->bytes);
  ev.id = b->id;
  e.note_event(ev, nullptr, 0);
  record_free(p, reinterpret_cast<std::uint64_t>(s), per_thread ? kPerThread : 0);
  const CUstream ds = driver_stream(s, per_thread);
  e.by_base.erase(it);
  e.by_id.erase(b->id);
  e.live_bytes -= b->span;
  if (stream_ordered) {
    const int fe = e.event_get();
    if (fe >= 0) e.api.event_record(e.events[static_cast<std::size_t>(fe)], ds);
    else (void)e.api.stream_synchronize(ds);
    e.add_free_event(b, fe);
    b->free_stream = ds;
    b->free_stream_valid = true;
  } else if (b->many_streams) {
    e.api.ctx_synchronize();
  } else {
    for (std::uint8_t i = 0; i < b->nuses; ++i) {
      if (b->uses[i].event < 0) continue;
      e.event_ref(b->uses[i].event);
      e.add_free_event(b, b->uses[i].event);
    }
  }
  // A replay still running, or one that was reading it, is work before the free too.
  if (b->where == Where::Incoming && !b->staging_mapped) {
    e.add_free_event(b, b->ready_event);
    b->ready_event = -1;
    b->where = Where::Device;
  }
  e.add_free_event(b, b->exec_event);
  b->exec_event = -1;
  for (std::uint8_t i = 0; i < b->nuses; ++i) e.event_unref(b->uses[i].event);
  b->nuses = 0;
  b->many_streams = false;
  b->id = kNoBlockId;
  b->producer.reset();
  b->dependents.clear();
  b->version = 0;
  if (b->where == Where::Evicting) e.backend_cancel_evict(b);
  if (b->where == Where::Incoming && b->staging_mapped) e.backend_finish_prefetch(b);
  b->freed_segment = e.segment;
  e.cache.insert({b->span, b});
  *r = CUDA_SUCCESS;
  return true;
}

CUresult before_unknown_work(CUstream s, bool per_thread) {
  if (g_ex == nullptr || g_start.load(std::memory_order_acquire) != 1) return CUDA_SUCCESS;
  Executor& e = *g_ex;
  std::lock_guard<std::mutex> lock(e.mu);
  ++e.tick;
  return e.settle_for_unknown_access(driver_stream(s, per_thread));
}

void after_unknown_work(CUstream s, bool per_thread, bool launched) {
  if (!launched || g_ex == nullptr || g_start.load(std::memory_order_acquire) != 1) return;
  Executor& e = *g_ex;
  std::lock_guard<std::mutex> lock(e.mu);
  e.mark_unknown_use(driver_stream(s, per_thread));
}

CUresult before_launch(const Launch& l, const std::uint64_t* ids, unsigned n) {
  if (g_ex == nullptr || g_start.load(std::memory_order_acquire) != 1) return CUDA_SUCCESS;
  Executor& e = *g_ex;
  if (capture_sequence(reinterpret_cast<std::uint64_t>(l.stream), l.per_thread) != 0) {
    // Being captured into a graph: nothing may be enqueued around it; its accesses are made
    // safe when the graph is launched (before_unknown_work).
    return CUDA_SUCCESS;
  }
  hold(e);  // released in after_launch (or here, on an error)
  ++e.tick;
  e.cur.clear();
  e.cur_output = nullptr;
  e.cur_producer.reset();
  e.cur_unknown = !l.complete_scan;
  std::uint64_t total = 0, total_managed = 0;
  std::vector<std::uint64_t> old_ticks;
  for (unsigned i = 0; i < n; ++i) {
    if (Block* b = e.find_id(ids[i])) {
      e.cur.push_back(b);
      old_ticks.push_back(b->last_tick);
      b->last_tick = e.tick;
      total += b->span;
      total_managed += e.span_for(Kind::Managed, b->bytes);
    }
  }
  const CUstream ds = driver_stream(l.stream, l.per_thread);
  Executor::FuncInfo* fi = l.func != nullptr ? &e.func_info(l.func, l.layout) : nullptr;
  if (fi != nullptr && fi->output >= 0 && l.params != nullptr && static_cast<std::size_t>(fi->output) < fi->offset.size()) {
    std::uint64_t ptr = 0;
    std::memcpy(&ptr, l.params[fi->output], sizeof ptr);
    e.cur_output = e.find_addr(ptr);
    if (e.cur_output != nullptr && std::find(e.cur.begin(), e.cur.end(), e.cur_output) == e.cur.end()) e.cur_output = nullptr;
  }
  const bool known_writes = e.cur_output != nullptr;
  // Kernel event for the learner: reads then writes (declared outputs), else touch.
  SegEvent ev;
  ev.op = static_cast<std::uint8_t>(trace::Op::Kernel);
  ev.sig = kernel_sig(l.func, e.cur);
  if (fi != nullptr) {
    auto [it, fresh] = e.name_index.try_emplace(reinterpret_cast<std::uint64_t>(l.func), static_cast<std::uint32_t>(e.names.size()));
    if (fresh) e.names.push_back(fi->name.empty() ? "kernel" : fi->name);
    ev.name = it->second;
  } else {
    auto [it, fresh] = e.name_index.try_emplace(0, static_cast<std::uint32_t>(e.names.size()));
    if (fresh) e.names.push_back("kernel");
    ev.name = it->second;
  }
  std::vector<std::uint64_t> order;
  order.reserve(e.cur.size());
  for (Block* b : e.cur)
    if (b != e.cur_output) order.push_back(b->id);
  if (known_writes) order.push_back(e.cur_output->id);
  ev.touch = !known_writes;
  ev.nreads = static_cast<std::uint32_t>(known_writes ? order.size() - 1 : order.size());
  ev.nwrites = known_writes ? 1 : 0;
  for (Block* b : e.cur) ev.bytes += b->span;
  e.note_event(ev, order.data(), static_cast<unsigned>(order.size()));

  // Recomputations first, while this launch's tensors are not yet protected (a replay needs
  // room for its own inputs and output, not for this launch's): dropped tensors whose producer
  // reads what this launch may write, then dropped tensors it touches.
  for (std::size_t i = 0; i < e.cur.size(); ++i) e.cur[i]->last_tick = old_ticks[i];
  for (Block* b : e.cur)
    if (!known_writes || b == e.cur_output) e.materialize_dependents(b);
  if (e.cur_unknown) {  // accesses unknown: nothing may be missing from its address or moving
    if (CUresult r = e.settle_for_unknown_access(ds); r != CUDA_SUCCESS) {
      e.seg.pop_back();
      release(e);
      return r;
    }
  }
  for (Block* b : e.cur)
    if (b->where == Where::Dropped) e.recompute(b, "on-demand", -1);
  for (Block* b : e.cur) b->last_tick = e.tick;
  e.note_launch_need(total, total_managed, fi != nullptr && !fi->name.empty() ? fi->name.c_str() : "a kernel");
  for (Block* b : e.cur) {
    if (CUresult r = e.ensure_resident(b, ds, !known_writes || b == e.cur_output); r != CUDA_SUCCESS) {
      e.seg.pop_back();
      release(e);
      return r;
    }
  }
  if (planning_on_kernel_times(e)) {
    const int tp = e.timing_pair();
    if (tp >= 0) {
      e.api.event_record(e.timing[static_cast<std::size_t>(tp)].first, ds);
      e.seg.back().timing = tp;
    }
  }
  if (known_writes && e.recompute_enabled && e.cur_output->kind == Kind::Vmm && fi != nullptr && !fi->offset.empty()) {
    auto p = std::make_shared<Producer>();
    p->func = l.func;
    std::memcpy(p->grid, l.grid, sizeof p->grid);
    std::memcpy(p->block, l.block, sizeof p->block);
    p->shmem = l.shmem;
    p->stream = ds;
    p->name = fi->name;
    p->params.assign(fi->buffer, 0);
    p->param_offset = fi->offset;
    for (std::size_t i = 0; i < fi->offset.size(); ++i)
      if (l.params[i] != nullptr) std::memcpy(p->params.data() + fi->offset[i], l.params[i], fi->size[i]);
    for (Block* b : e.cur) {
      if (b == e.cur_output) continue;
      p->input_ids.push_back(b->id);
      p->input_versions.push_back(b->version);
    }
    e.cur_producer = std::move(p);
  }
  return CUDA_SUCCESS;
}

void after_launch(const Launch& l, bool launched) {
  if (!t_held) return;
  Executor& e = *g_ex;
  const CUstream ds = driver_stream(l.stream, l.per_thread);
  if (launched && !e.seg.empty() && e.seg.back().timing >= 0)
    e.api.event_record(e.timing[static_cast<std::size_t>(e.seg.back().timing)].second, ds);
  if (launched) {
    const int ev = e.event_get();
    if (ev >= 0) e.api.event_record(e.events[static_cast<std::size_t>(ev)], ds);
    for (Block* b : e.cur) {
      if (ev >= 0) e.mark_use(b, ds, ev);
      if (e.cur_output == nullptr || b == e.cur_output) {
        ++b->version;
        b->producer.reset();
      }
    }
    if (e.cur_output != nullptr) e.cur_output->producer = std::move(e.cur_producer);
    e.event_unref(ev);
    if (e.cur_unknown) e.mark_unknown_use(ds);
  } else if (!e.seg.empty()) {
    e.seg.pop_back();
  }
  e.cur.clear();
  e.cur_output = nullptr;
  e.cur_producer.reset();
  release(e);
}

CUresult before_copy(std::uint64_t dst, std::uint64_t src, std::size_t bytes, CUstream s, bool per_thread, bool memset) {
  if (g_ex == nullptr || g_start.load(std::memory_order_acquire) != 1) return CUDA_SUCCESS;
  if (capture_sequence(reinterpret_cast<std::uint64_t>(s), per_thread) != 0) return CUDA_SUCCESS;  // see before_launch
  Executor& e = *g_ex;
  hold(e);  // released in after_copy (or here, on an error)
  ++e.tick;
  e.cur.clear();
  e.cur_output = nullptr;
  Block* d = dst != 0 ? e.find_addr(dst) : nullptr;
  Block* sblk = !memset && src != 0 ? e.find_addr(src) : nullptr;
  SegEvent ev;
  const CUstream ds = driver_stream(s, per_thread);
  std::uint64_t ids[2];
  unsigned nids = 0;
  if (memset) {
    ev.op = static_cast<std::uint8_t>(trace::Op::Kernel);
    auto [it, fresh] = e.name_index.try_emplace(1, static_cast<std::uint32_t>(e.names.size()));
    if (fresh) e.names.push_back("memset");
    ev.name = it->second;
    ev.sig = mix(static_cast<std::uint64_t>(trace::Op::Kernel) << 56, bytes ^ 0x5e75e7);
    ev.bytes = bytes;
    if (d != nullptr) ids[nids++] = d->id, ev.nwrites = 1;
  } else {
    if (d == nullptr && sblk == nullptr) return CUDA_SUCCESS;  // not ours: after_copy releases
    ev.op = static_cast<std::uint8_t>(trace::Op::Copy);
    ev.dir = static_cast<std::uint8_t>(d != nullptr && sblk != nullptr ? trace::CopyDir::D2D
                                       : d != nullptr              ? trace::CopyDir::H2D
                                                                   : trace::CopyDir::D2H);
    ev.sig = mix(static_cast<std::uint64_t>(trace::Op::Copy) << 56 | static_cast<std::uint64_t>(ev.dir) << 48, bytes);
    ev.bytes = bytes;
    ev.id = sblk != nullptr ? sblk->id : kNoBlockId;
    ev.id2 = d != nullptr ? d->id : kNoBlockId;
  }
  e.note_event(ev, ids, nids);
  if (sblk != nullptr) e.cur.push_back(sblk);
  if (d != nullptr && d != sblk) e.cur.push_back(d);
  for (Block* b : e.cur) b->last_tick = e.tick;
  if (d != nullptr) e.materialize_dependents(d);
  e.cur_output = d;
  // uvm: the driver migrates or reads managed pages as the copy needs; pinned: evicted
  // tensors stay addressable (host chunk), but moves in flight and dropped ones are settled.
  for (Block* b : e.cur) {
    e.wait_exec_work(b, ds);
    if (b->kind == Kind::Managed) {
      if (b->where == Where::Incoming && b->ready_event >= 0)
        e.api.stream_wait_event(ds, e.events[static_cast<std::size_t>(b->ready_event)], 0);
      continue;
    }
    if (b->where == Where::Incoming || b->where == Where::Evicting || b->where == Where::Dropped) {
      if (CUresult r = e.ensure_resident(b, ds, b == d); r != CUDA_SUCCESS) {
        e.cur.clear();
        release(e);
        return r;
      }
    }
  }
  e.cur_producer.reset();
  e.cur_unknown = false;
  // remember the stream for after_copy
  e.cur_producer = std::make_shared<Producer>();
  e.cur_producer->stream = ds;
  return CUDA_SUCCESS;
}

void after_copy(bool ok) {
  if (!t_held) return;
  Executor& e = *g_ex;
  if (ok && !e.cur.empty() && e.cur_producer) {
    const CUstream ds = e.cur_producer->stream;
    const int ev = e.event_get();
    if (ev >= 0) e.api.event_record(e.events[static_cast<std::size_t>(ev)], ds);
    for (Block* b : e.cur) {
      if (ev >= 0) e.mark_use(b, ds, ev);
      if (b == e.cur_output) {
        ++b->version;
        b->producer.reset();
      }
    }
    e.event_unref(ev);
  }
  e.cur.clear();
  e.cur_output = nullptr;
  e.cur_producer.reset();
  release(e);
}

void on_sync() {
  if (g_ex == nullptr || g_start.load(std::memory_order_acquire) != 1) return;
  Executor& e = *g_ex;
  std::lock_guard<std::mutex> lock(e.mu);
  ++e.tick;
  SegEvent ev;
  ev.op = static_cast<std::uint8_t>(trace::Op::Sync);
  ev.sig = static_cast<std::uint64_t>(trace::Op::Sync) << 56;
  e.note_event(ev, nullptr, 0);
  if (e.backend == Backend::Pinned) e.reclaim_completed(false);
  e.end_segment();
}

}  // namespace capuchin::interpose::exec
