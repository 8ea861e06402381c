// backend.cpp: how blocks get memory and move, per Kind (state.hpp).
//
// Managed (every block under uvm; small and sub-granule blocks under pinned): one managed
// allocation; eviction and prefetch are cuMemPrefetchAsync to the host / the device on
// capuchin's own streams, so an access capture missed only page-faults. A freed block still
// on the device is the first victim and is discarded where the driver can
// (cuMemDiscardBatchAsync), else moved to the host.
//
// Vmm (pinned, blocks the granularity wastes little of): a VMM reservation of twice the span
// (the tensor's range, then a staging range of capuchin's) with a device chunk mapped at its
// address. Evict: host pieces from the pool (host_pool.hpp) are mapped at the staging range and
// the evict stream copies into them after the events of the tensor's last uses; once the
// copy completed, the device chunk is unmapped and released and the pieces are mapped at the
// tensor's own address, so an access capture missed reads over the link. Prefetch is the
// reverse (device chunk at staging, copy, swap the mappings before the first use).
//
// Contract: a live Vmm block's range is always mapped and accessible except while Dropped;
// a new or reused block is mapped before its address is handed out (device memory when the
// budget has room, else host pieces: the first access brings it in). Every failed VMM call
// leaves the block where it was, mapped, and is logged; the host pool never exceeds its
// limit. Frees keep blocks for reuse (cudaFree would synchronise the device); trim_cache
// returns the ones no longer reused.
#include <cinttypes>

#include "capture.hpp"
#include "capuchin/units.hpp"
#include "state.hpp"

namespace capuchin::interpose::exec {

namespace {

CUmemAllocationProp device_prop() {
  CUmemAllocationProp p{};
  p.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  p.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  p.location.id = 0;
  return p;
}

CUresult map_one(const Api& api, CUdeviceptr at, std::size_t bytes, CUmemGenericAllocationHandle h) {
  if (CUresult r = api.mem_map(at, bytes, 0, h, 0); r != CUDA_SUCCESS) return r;
  CUmemAccessDesc d{};
  d.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  d.location.id = 0;
  d.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
  if (CUresult r = api.mem_set_access(at, bytes, &d, 1); r != CUDA_SUCCESS) {
    (void)api.mem_unmap(at, bytes);  // undo; the set_access error is the one reported
    return r;
  }
  return CUDA_SUCCESS;
}

void unmap_logged(const Api& api, CUdeviceptr at, std::size_t bytes, std::uint64_t id) {
  if (CUresult r = api.mem_unmap(at, bytes); r != CUDA_SUCCESS)
    log(LogLevel::Error, "executor: unmapping %zu bytes of tensor %" PRIu64 " failed (CUresult %d)", bytes, id,
        static_cast<int>(r));
}

// Maps pieces side by side from `at`; on failure none stays mapped.
CUresult map_pieces(const Api& api, CUdeviceptr at, const std::vector<HostPiece>& pieces) {
  std::size_t off = 0;
  for (std::size_t i = 0; i < pieces.size(); ++i) {
    if (CUresult r = map_one(api, at + off, pieces[i].bytes, pieces[i].handle); r != CUDA_SUCCESS) {
      std::size_t undo = 0;
      for (std::size_t j = 0; j < i; ++j) (void)api.mem_unmap(at + undo, pieces[j].bytes), undo += pieces[j].bytes;
      return r;
    }
    off += pieces[i].bytes;
  }
  return CUDA_SUCCESS;
}

// false: some piece is still mapped (logged).
bool unmap_pieces(const Api& api, CUdeviceptr at, const std::vector<HostPiece>& pieces, std::uint64_t id) {
  std::size_t off = 0;
  bool all = true;
  for (const HostPiece& p : pieces) {
    if (CUresult r = api.mem_unmap(at + off, p.bytes); r != CUDA_SUCCESS) {
      log(LogLevel::Error, "executor: unmapping a host piece of tensor %" PRIu64 " failed (CUresult %d)", id, static_cast<int>(r));
      all = false;
    }
    off += p.bytes;
  }
  return all;
}

}  // namespace

// Unmaps pieces mapped at `at` and gives them back to the pool; a piece that may still be
// mapped is never given (the next take would map it under another tensor too): it is leaked.
void Executor::return_pieces(CUdeviceptr at, std::vector<HostPiece>& pieces, std::uint64_t id) {
  if (pieces.empty()) return;
  if (unmap_pieces(api, at, pieces, id)) {
    pool.give(pieces);
    return;
  }
  log(LogLevel::Error, "executor: the host copy of tensor %" PRIu64 " is not returned to the pool (still mapped)", id);
  pieces.clear();
}

// Vmm when rounding to the granularity wastes at most 1/16 of the span (and the tensor is not
// under CAPUCHIN_PINNED_MIN): a 1 MiB tensor is Managed (charged 1 MiB, not a 2 MiB granule),
// a 2 MiB or 31 MiB one is Vmm.
Kind Executor::kind_for(std::size_t bytes) const {
  if (backend != Backend::Pinned || bytes < pinned_min) return Kind::Managed;
  const std::size_t span = (bytes + vmm_gran - 1) / vmm_gran * vmm_gran;
  return (span - bytes) * 16 <= span ? Kind::Vmm : Kind::Managed;
}

std::size_t Executor::span_for(Kind k, std::size_t bytes) const {
  const std::size_t g = k == Kind::Vmm ? vmm_gran : uvm_page;
  return (bytes + g - 1) / g * g;
}

// A Vmm block with nothing mapped at base (new, or dropped) gets device memory if the budget
// has room, else host pieces. Contents are undefined either way; a block on the host is copied
// in at its first access like an evicted one (an unhooked writer, e.g. a batch copy, may have
// filled it: skipping that copy could lose data).
// Device memory for a Vmm chunk is taken at cuMemCreate, on the host's clock, while managed
// blocks this executor moved out leave the device only when the evict stream gets there: wait
// for those moves first, or the device would be over the budget (and evict on its own).
void Executor::settle_managed_evictions() {
  if (!managed_out_unsettled || last_evict_event < 0) return;
  (void)api.event_synchronize(events[static_cast<std::size_t>(last_evict_event)]);
  managed_out_unsettled = false;
}

CUresult Executor::vmm_fill(Block* b, const char* reason) {
  if (make_room(b->span, reason)) {
    settle_managed_evictions();
    CUmemGenericAllocationHandle h = 0;
    const CUmemAllocationProp p = device_prop();
    CUresult r = api.mem_create(&h, b->span, &p, 0);
    if (r == CUDA_SUCCESS && (r = map_one(api, b->base, b->span, h)) != CUDA_SUCCESS) (void)api.mem_release(h);
    if (r == CUDA_SUCCESS) {
      b->dev = h;
      b->where = Where::Device;
      resident += b->span;
      peak_resident = std::max(peak_resident, resident);
      return CUDA_SUCCESS;
    }
    if (r != CUDA_ERROR_OUT_OF_MEMORY) return r;
  }
  b->host = take_host(b->span);
  if (b->host.empty()) return CUDA_ERROR_OUT_OF_MEMORY;
  if (CUresult r = map_pieces(api, b->base, b->host); r != CUDA_SUCCESS) {
    pool.give(b->host);
    return r;
  }
  b->where = Where::Host;
  return CUDA_SUCCESS;
}

CUresult Executor::backend_alloc(Block* b) {
  b->span = span_for(b->kind, b->bytes);
  if (b->kind == Kind::Managed) {
    // The whole span: a later reuse may ask for more bytes than this request (same span).
    CUdeviceptr p = 0;
    if (CUresult r = api.mem_alloc_managed(&p, b->span, CU_MEM_ATTACH_GLOBAL); r != CUDA_SUCCESS) return r;
    b->base = p;
    b->where = Where::Fresh;
    return CUDA_SUCCESS;
  }
  CUdeviceptr base = 0;
  if (CUresult r = api.address_reserve(&base, 2 * b->span, vmm_gran, 0, 0); r != CUDA_SUCCESS) return r;
  b->base = base;
  b->reserved = 2 * b->span;
  if (CUresult r = vmm_fill(b, "pressure"); r != CUDA_SUCCESS) {
    (void)api.address_free(base, b->reserved);
    b->base = 0;
    return r;
  }
  return CUDA_SUCCESS;
}

// A cached block handed out again: its data is dead. Managed memory is addressable wherever
// it is; a Vmm block on the host or dropped is refilled as a new one (its host copy, which
// work before the free may still read, is unmapped once that work is done).
CUresult Executor::backend_reuse(Block* b) {
  if (b->kind == Kind::Managed) {
    if (b->where == Where::Host) b->where = Where::Fresh;
    return CUDA_SUCCESS;
  }
  if (b->where != Where::Host && b->where != Where::Dropped) return CUDA_SUCCESS;
  wait_quiet(b);
  if (!b->host.empty()) {
    return_pieces(b->base, b->host, b->id);
  }
  b->where = Where::Dropped;
  return vmm_fill(b, "pressure");
}

// Back to Dropped from Device or Host (a recomputation that could not be issued).
void Executor::vmm_empty(Block* b) {
  if (b->where == Where::Device) {
    backend_drop(b);
    return;
  }
  return_pieces(b->base, b->host, b->id);
  b->where = Where::Dropped;
}

void Executor::backend_release(Block* b) {
  wait_quiet(b);
  if (b->kind == Kind::Managed) {
    if (CUresult r = api.mem_free(b->base); r != CUDA_SUCCESS)
      log(LogLevel::Warn, "executor: freeing a cached managed block failed (CUresult %d)", static_cast<int>(r));
    return;
  }
  if (b->dev != 0) {
    unmap_logged(api, b->base, b->span, b->id);
    (void)api.mem_release(b->dev);
    b->dev = 0;
  }
  return_pieces(b->base, b->host, b->id);
  (void)api.address_free(b->base, b->reserved);
}

// Host copies of freed blocks hold dead data: their pieces go back to the pool (once the work
// before each free is done) when the pool has none left.
bool Executor::reclaim_cached_host() {
  bool any = false;
  for (auto& [span, c] : cache) {
    if (c->kind != Kind::Vmm || c->where != Where::Host || c->host.empty()) continue;
    wait_quiet(c);
    return_pieces(c->base, c->host, c->id);
    c->where = Where::Dropped;
    any = true;
  }
  return any;
}

std::vector<HostPiece> Executor::take_host(std::size_t span) {
  std::vector<HostPiece> pieces = pool.take(span);
  if (pieces.empty() && reclaim_cached_host()) pieces = pool.take(span);
  if (pieces.empty() && !pool_full_warned) {
    pool_full_warned = true;
    log(LogLevel::Warn,
        "capuchin: the pinned backend's host pool is full (CAPUCHIN_PINNED_POOL=%s, %s in use): tensors cannot be evicted "
        "and stay resident; raise CAPUCHIN_PINNED_POOL or use CAPUCHIN_BACKEND=uvm",
        format_bytes(pool.limit()).c_str(), format_bytes(pool.bytes() - pool.free_bytes()).c_str());
  }
  return pieces;
}

bool Executor::backend_evict(Block* b) {
  b->host = take_host(b->span);
  if (b->host.empty()) {
    char note[160];
    std::snprintf(note, sizeof note, "the host pool (CAPUCHIN_PINNED_POOL, %" PRIu64 " bytes) is full: the tensor stays resident",
                  pool.limit());
    record("fallback", b, b->span, "host-pool-exhausted", -1, note);
    ++n_fallback;
    return false;
  }
  const CUdeviceptr staging = b->base + b->span;
  if (CUresult r = map_pieces(api, staging, b->host); r != CUDA_SUCCESS) {
    log(LogLevel::Warn, "executor: mapping the host copy of tensor %" PRIu64 " failed (CUresult %d)", b->id, static_cast<int>(r));
    pool.give(b->host);
    return false;
  }
  b->staging_mapped = true;
  wait_uses(b, evict_stream);
  (void)api.memcpy_async(staging, b->base, b->bytes, evict_stream);
  b->ready_event = event_get();
  if (b->ready_event >= 0) (void)api.event_record(events[static_cast<std::size_t>(b->ready_event)], evict_stream);
  else (void)api.stream_synchronize(evict_stream);  // no event to wait by: the copy is done now
  b->where = Where::Evicting;
  return true;
}

bool Executor::backend_finish_evict(Block* b, bool wait) {
  if (b->where != Where::Evicting) return true;
  if (b->ready_event >= 0) {
    CUevent ev = events[static_cast<std::size_t>(b->ready_event)];
    if (!wait && api.event_query(ev) != CUDA_SUCCESS) return false;
    (void)api.event_synchronize(ev);
    event_unref(b->ready_event);
    b->ready_event = -1;
  }
  const CUdeviceptr staging = b->base + b->span;
  const bool staging_clear = unmap_pieces(api, staging, b->host, b->id);
  b->staging_mapped = false;
  if (!staging_clear) {  // the copy may stay mapped there: never reused; the tensor stays resident
    log(LogLevel::Error, "executor: tensor %" PRIu64 " stays resident; its host copy is not returned to the pool", b->id);
    b->host.clear();
    b->where = Where::Device;
    return true;
  }
  unmap_logged(api, b->base, b->span, b->id);
  if (CUresult r = map_pieces(api, b->base, b->host); r != CUDA_SUCCESS) {
    // The device chunk still holds the data: put it back and stay resident.
    log(LogLevel::Error, "executor: cannot map the host copy of tensor %" PRIu64 " at its address (CUresult %d); it stays resident",
        b->id, static_cast<int>(r));
    if (map_one(api, b->base, b->span, b->dev) != CUDA_SUCCESS)
      log(LogLevel::Error, "executor: tensor %" PRIu64 " could not be mapped back: its address is invalid", b->id);
    pool.give(b->host);
    b->where = Where::Device;
    return true;
  }
  (void)api.mem_release(b->dev);
  b->dev = 0;
  b->where = Where::Host;
  resident -= b->span;
  return true;
}

void Executor::backend_cancel_evict(Block* b) {
  if (b->ready_event >= 0) {
    (void)api.event_synchronize(events[static_cast<std::size_t>(b->ready_event)]);
    event_unref(b->ready_event);
    b->ready_event = -1;
  }
  return_pieces(b->base + b->span, b->host, b->id);
  b->staging_mapped = false;
  b->where = Where::Device;
}

// keep_data: copy the host copy back (an evicted tensor); else fresh device memory at the
// tensor's address (a dropped tensor about to be recomputed, or a host block whose contents
// are undefined). false: no device memory could be had (b unchanged).
bool Executor::backend_prefetch(Block* b, bool keep_data) {
  settle_managed_evictions();
  const CUmemAllocationProp p = device_prop();
  CUmemGenericAllocationHandle d = 0;
  if (CUresult r = api.mem_create(&d, b->span, &p, 0); r != CUDA_SUCCESS) {
    log(LogLevel::Error, "executor: cannot create device memory for tensor %" PRIu64 " (CUresult %d)", b->id, static_cast<int>(r));
    return false;
  }
  if (keep_data && b->where == Where::Host && !b->host.empty()) {
    const CUdeviceptr staging = b->base + b->span;
    if (CUresult r = map_one(api, staging, b->span, d); r != CUDA_SUCCESS) {
      log(LogLevel::Error, "executor: cannot map device memory for tensor %" PRIu64 " (CUresult %d)", b->id, static_cast<int>(r));
      (void)api.mem_release(d);
      return false;
    }
    b->dev = d;
    b->staging_mapped = true;
    wait_uses(b, prefetch_stream);  // work still writing the host copy (an upload into it, a replay)
    (void)api.memcpy_async(staging, b->base, b->bytes, prefetch_stream);
    b->ready_event = event_get();
    if (b->ready_event >= 0) (void)api.event_record(events[static_cast<std::size_t>(b->ready_event)], prefetch_stream);
    else (void)api.stream_synchronize(prefetch_stream);
    b->where = Where::Incoming;
    resident += b->span;
    return true;
  }
  if (!b->host.empty() && !unmap_pieces(api, b->base, b->host, b->id)) {  // stays on the host, mapped
    (void)api.mem_release(d);
    return false;
  }
  if (CUresult r = map_one(api, b->base, b->span, d); r != CUDA_SUCCESS) {
    log(LogLevel::Error, "executor: cannot map device memory for tensor %" PRIu64 " (CUresult %d)", b->id, static_cast<int>(r));
    (void)api.mem_release(d);
    if (!b->host.empty() && map_pieces(api, b->base, b->host) != CUDA_SUCCESS)
      log(LogLevel::Error, "executor: tensor %" PRIu64 " could not be mapped back: its address is invalid", b->id);
    return false;
  }
  pool.give(b->host);
  b->dev = d;
  b->where = Where::Device;
  resident += b->span;
  return true;
}

void Executor::backend_finish_prefetch(Block* b) {
  if (b->ready_event >= 0) {
    (void)api.event_synchronize(events[static_cast<std::size_t>(b->ready_event)]);
    event_unref(b->ready_event);
    b->ready_event = -1;
  }
  const bool host_unmapped = unmap_pieces(api, b->base, b->host, b->id);
  unmap_logged(api, b->base + b->span, b->span, b->id);
  b->staging_mapped = false;
  if (!host_unmapped) {  // the host copy is still at the address, and whole: it stays there
    (void)api.mem_release(b->dev);
    b->dev = 0;
    b->where = Where::Host;
    resident -= b->span;
    return;
  }
  if (CUresult r = map_one(api, b->base, b->span, b->dev); r != CUDA_SUCCESS) {
    // The host copy is still whole: it goes back at the address and the device copy is dropped.
    log(LogLevel::Error, "executor: cannot map tensor %" PRIu64 " back at its address (CUresult %d); it stays on the host",
        b->id, static_cast<int>(r));
    if (map_pieces(api, b->base, b->host) != CUDA_SUCCESS)
      log(LogLevel::Error, "executor: tensor %" PRIu64 " could not be mapped back: its address is invalid", b->id);
    (void)api.mem_release(b->dev);
    b->dev = 0;
    b->where = Where::Host;
    resident -= b->span;
    return;
  }
  pool.give(b->host);
  b->where = Where::Device;
}

// Releases the device memory without a copy (a dropped tensor, or a freed one).
void Executor::backend_drop(Block* b) {
  wait_quiet(b);
  unmap_logged(api, b->base, b->span, b->id);
  (void)api.mem_release(b->dev);
  b->dev = 0;
  b->where = Where::Dropped;
  resident -= b->span;
}

void Executor::reclaim_completed(bool wait_all) {
  for (auto& [id, b] : by_id)
    if (b->where == Where::Evicting) backend_finish_evict(b, wait_all);
}

// ---- Managed blocks ----------------------------------------------------------------------

void Executor::managed_move_out(Block* b, bool dead) {
  if (b->where == Where::Incoming && b->ready_event >= 0) {
    (void)api.stream_wait_event(evict_stream, events[static_cast<std::size_t>(b->ready_event)], 0);
    event_unref(b->ready_event);
    b->ready_event = -1;
  }
  CUdeviceptr p = b->base;
  size_t n = b->bytes;
  if (!dead || api.mem_discard == nullptr || api.mem_discard(&p, &n, 1, 0, evict_stream) != CUDA_SUCCESS) {
    CUmemLocation host{CU_MEM_LOCATION_TYPE_HOST, 0};
    if (CUresult r = api.mem_prefetch(b->base, b->bytes, host, 0, evict_stream); r != CUDA_SUCCESS)
      log(LogLevel::Warn, "executor: prefetching tensor %" PRIu64 " to the host failed (CUresult %d)", b->id, static_cast<int>(r));
  }
  const int ev = event_get();
  if (ev >= 0) {
    (void)api.event_record(events[static_cast<std::size_t>(ev)], evict_stream);
    event_unref(last_evict_event);
    last_evict_event = ev;
    evict_pending = true;
    managed_out_unsettled = true;
  } else {
    (void)api.stream_synchronize(evict_stream);  // no event to order the prefetches by
  }
  b->where = Where::Host;
  resident -= b->span;
}

void Executor::managed_move_in(Block* b) {
  if (evict_pending && last_evict_event >= 0) {
    (void)api.stream_wait_event(prefetch_stream, events[static_cast<std::size_t>(last_evict_event)], 0);
    evict_pending = false;
  }
  CUmemLocation dev{CU_MEM_LOCATION_TYPE_DEVICE, 0};
  if (CUresult r = api.mem_prefetch(b->base, b->bytes, dev, 0, prefetch_stream); r != CUDA_SUCCESS)
    log(LogLevel::Warn, "executor: prefetching tensor %" PRIu64 " to the device failed (CUresult %d)", b->id, static_cast<int>(r));
  const int ev = event_get();
  if (ev >= 0) (void)api.event_record(events[static_cast<std::size_t>(ev)], prefetch_stream);
  else (void)api.stream_synchronize(prefetch_stream);
  b->ready_event = ev;
  b->where = Where::Incoming;
  resident += b->span;
}

// ---- the cache of freed blocks ------------------------------------------------------------

// Blocks freed more than two iterations ago and not reused since go back to the driver: a
// job whose shapes change leaves blocks of sizes it never asks for again (host memory for
// Managed ones, host pieces or reservations for Vmm ones).
void Executor::trim_cache() {
  for (auto it = cache.begin(); it != cache.end();) {
    Block* b = it->second;
    if (b->freed_segment + 2 > segment) {
      ++it;
      continue;
    }
    if (b->where == Where::Device || b->where == Where::Incoming) resident -= b->span;
    if (b->ready_event >= 0) (void)api.event_synchronize(events[static_cast<std::size_t>(b->ready_event)]);
    backend_release(b);
    event_unref(b->ready_event);
    event_unref(b->exec_event);
    release_free_events(b);
    it = cache.erase(it);
    delete b;
  }
}

}  // namespace capuchin::interpose::exec
