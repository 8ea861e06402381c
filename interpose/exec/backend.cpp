// backend.cpp: how blocks get memory and move, per backend.
//
// uvm: a block is one managed allocation (cuMemAllocManaged); eviction and prefetch are
// cuMemPrefetchAsync to the host / the device on capuchin's own streams (executor.cpp), so
// a tensor capture missed only page-faults. Frees keep the allocation for reuse (cudaFree
// would synchronise the device); a freed block still on the device is the first victim and
// is discarded where the driver can (cuMemDiscardBatchAsync), else moved to the host.
//
// pinned: a block >= CAPUCHIN_PINNED_MIN is a VMM reservation of twice its span (the tensor's
// range, then a staging range of capuchin's) with one device chunk mapped at its address.
// Evict: a host-located chunk from a bounded pool is mapped at the staging range and the
// evict stream copies into it (after the events of the tensor's last uses); once the copy's
// event completed, the device chunk is unmapped and released and the host chunk is mapped
// at the tensor's own address, so an access capture missed reads over the link. Prefetch
// is the reverse (device chunk at staging, copy, swap the mappings before the first use).
// Smaller blocks are plain cuMemAlloc memory, charged and never moved (2 MiB granules would
// waste more than they save). Contract: every VMM call's failure leaves the block where it
// was, logged; the host pool never exceeds CAPUCHIN_PINNED_POOL.
#include <cinttypes>

#include "capture.hpp"
#include "state.hpp"

namespace capuchin::interpose::exec {

namespace {

CUmemAllocationProp prop_on(bool host) {
  CUmemAllocationProp p{};
  p.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  p.location.type = host ? CU_MEM_LOCATION_TYPE_HOST : CU_MEM_LOCATION_TYPE_DEVICE;
  p.location.id = 0;
  return p;
}

CUmemAccessDesc rw() {
  CUmemAccessDesc d{};
  d.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  d.location.id = 0;
  d.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
  return d;
}

// Host chunks by span, reused (never one host allocation per eviction).
std::multimap<std::size_t, CUmemGenericAllocationHandle> g_pool;

CUresult map_at(Executor& e, CUdeviceptr at, std::size_t span, CUmemGenericAllocationHandle h) {
  if (CUresult r = e.api.mem_map(at, span, 0, h, 0); r != CUDA_SUCCESS) return r;
  const CUmemAccessDesc d = rw();
  return e.api.mem_set_access(at, span, &d, 1);
}

CUmemGenericAllocationHandle pool_get(Executor& e, std::size_t span) {
  auto it = g_pool.find(span);
  if (it != g_pool.end()) {
    const CUmemGenericAllocationHandle h = it->second;
    g_pool.erase(it);
    return h;
  }
  if (e.pool_bytes + span > e.pool_limit) return 0;
  const CUmemAllocationProp p = prop_on(true);
  CUmemGenericAllocationHandle h = 0;
  if (e.api.mem_create(&h, span, &p, 0) != CUDA_SUCCESS) return 0;
  e.pool_bytes += span;
  return h;
}

void pool_put(std::size_t span, CUmemGenericAllocationHandle h) {
  if (h != 0) g_pool.insert({span, h});
}

}  // namespace

CUresult Executor::backend_alloc(Block* b) {
  if (backend == Backend::Uvm) {
    CUdeviceptr p = 0;
    if (CUresult r = api.mem_alloc_managed(&p, b->bytes, CU_MEM_ATTACH_GLOBAL); r != CUDA_SUCCESS) return r;
    b->base = p;
    b->span = (b->bytes + uvm_page - 1) / uvm_page * uvm_page;
    b->where = Where::Fresh;
    return CUDA_SUCCESS;
  }
  if (b->bytes < pinned_min) {
    CUdeviceptr p = 0;
    if (CUresult r = api.mem_alloc(&p, b->bytes); r != CUDA_SUCCESS) return r;
    b->base = p;
    b->span = (b->bytes + 4095) / 4096 * 4096;
    b->plain = true;
    b->where = Where::Device;
    resident += b->span;
    plain_bytes += b->span;
    peak_resident = std::max(peak_resident, resident);
    return CUDA_SUCCESS;
  }
  const std::size_t span = (b->bytes + vmm_gran - 1) / vmm_gran * vmm_gran;
  CUdeviceptr base = 0;
  if (CUresult r = api.address_reserve(&base, 2 * span, vmm_gran, 0, 0); r != CUDA_SUCCESS) return r;
  const CUmemAllocationProp p = prop_on(false);
  CUmemGenericAllocationHandle h = 0;
  if (CUresult r = api.mem_create(&h, span, &p, 0); r != CUDA_SUCCESS) {
    api.address_free(base, 2 * span);
    return r;
  }
  if (CUresult r = map_at(*this, base, span, h); r != CUDA_SUCCESS) {
    api.mem_release(h);
    api.address_free(base, 2 * span);
    return r;
  }
  b->base = base;
  b->span = span;
  b->reserved = 2 * span;
  b->dev = h;
  b->where = Where::Device;
  resident += span;
  peak_resident = std::max(peak_resident, resident);
  return CUDA_SUCCESS;
}

void Executor::backend_release(Block* b) {
  if (backend == Backend::Uvm) {
    api.mem_free(b->base);
    return;
  }
  if (b->plain) {
    api.mem_free(b->base);
    return;
  }
  api.ctx_synchronize();
  api.mem_unmap(b->base, b->span);  // whatever is mapped there
  if (b->staging_mapped) api.mem_unmap(b->base + b->span, b->span);
  if (b->dev != 0) api.mem_release(b->dev);
  pool_put(b->span, b->host);
  api.address_free(b->base, b->reserved);
}

void Executor::backend_evict(Block* b) {
  const CUmemGenericAllocationHandle h = pool_get(*this, b->span);
  if (h == 0) {
    record("fallback", b, b->span, "host-pool-exhausted", -1, "CAPUCHIN_PINNED_POOL reached: the tensor stays resident");
    ++n_fallback;
    return;
  }
  const CUdeviceptr staging = b->base + b->span;
  if (map_at(*this, staging, b->span, h) != CUDA_SUCCESS) {
    pool_put(b->span, h);
    return;
  }
  b->host = h;
  b->staging_mapped = true;
  wait_uses(b, evict_stream);
  api.memcpy_async(staging, b->base, b->bytes, evict_stream);
  b->ready_event = event_get();
  if (b->ready_event >= 0) api.event_record(events[static_cast<std::size_t>(b->ready_event)], evict_stream);
  b->where = Where::Evicting;
}

bool Executor::backend_finish_evict(Block* b, bool wait) {
  if (b->where != Where::Evicting) return true;
  if (b->ready_event >= 0) {
    CUevent ev = events[static_cast<std::size_t>(b->ready_event)];
    if (!wait && api.event_query(ev) != CUDA_SUCCESS) return false;
    api.event_synchronize(ev);
    event_unref(b->ready_event);
    b->ready_event = -1;
  }
  const CUdeviceptr staging = b->base + b->span;
  api.mem_unmap(b->base, b->span);
  api.mem_release(b->dev);
  b->dev = 0;
  api.mem_unmap(staging, b->span);
  b->staging_mapped = false;
  if (map_at(*this, b->base, b->span, b->host) != CUDA_SUCCESS)
    log(LogLevel::Error, "executor: cannot map the host copy of tensor %" PRIu64 " at its address", b->id);
  b->where = Where::Host;
  resident -= b->span;
  return true;
}

void Executor::backend_cancel_evict(Block* b) {
  if (b->ready_event >= 0) {
    api.event_synchronize(events[static_cast<std::size_t>(b->ready_event)]);
    event_unref(b->ready_event);
    b->ready_event = -1;
  }
  api.mem_unmap(b->base + b->span, b->span);
  b->staging_mapped = false;
  pool_put(b->span, b->host);
  b->host = 0;
  b->where = Where::Device;
}

// keep_data: copy the host copy back (an evicted tensor); else fresh device memory at the
// tensor's address (a dropped tensor about to be recomputed, or a reused block).
void Executor::backend_prefetch(Block* b, bool keep_data) {
  const CUmemAllocationProp p = prop_on(false);
  CUmemGenericAllocationHandle d = 0;
  if (api.mem_create(&d, b->span, &p, 0) != CUDA_SUCCESS) {
    log(LogLevel::Error, "executor: cannot create device memory for tensor %" PRIu64, b->id);
    return;
  }
  resident += b->span;
  b->dev = d;
  if (keep_data && b->where == Where::Host && b->host != 0) {
    const CUdeviceptr staging = b->base + b->span;
    if (map_at(*this, staging, b->span, d) != CUDA_SUCCESS) return;
    b->staging_mapped = true;
    api.memcpy_async(staging, b->base, b->bytes, prefetch_stream);
    b->ready_event = event_get();
    if (b->ready_event >= 0) api.event_record(events[static_cast<std::size_t>(b->ready_event)], prefetch_stream);
    b->where = Where::Incoming;
    return;
  }
  if (b->host != 0) {  // a dead host copy mapped there
    api.mem_unmap(b->base, b->span);
    pool_put(b->span, b->host);
    b->host = 0;
  }
  if (map_at(*this, b->base, b->span, d) != CUDA_SUCCESS)
    log(LogLevel::Error, "executor: cannot map device memory for tensor %" PRIu64, b->id);
  b->where = Where::Device;
}

void Executor::backend_finish_prefetch(Block* b) {
  if (b->ready_event >= 0) {
    api.event_synchronize(events[static_cast<std::size_t>(b->ready_event)]);
    event_unref(b->ready_event);
    b->ready_event = -1;
  }
  api.mem_unmap(b->base, b->span);  // the host chunk
  pool_put(b->span, b->host);
  b->host = 0;
  api.mem_unmap(b->base + b->span, b->span);
  b->staging_mapped = false;
  if (map_at(*this, b->base, b->span, b->dev) != CUDA_SUCCESS)
    log(LogLevel::Error, "executor: cannot map tensor %" PRIu64 " back at its address", b->id);
  b->where = Where::Device;
}

// Releases the device memory without a copy (a dropped tensor, or a freed one).
void Executor::backend_drop(Block* b) {
  if (b->many_streams) api.ctx_synchronize();
  for (std::uint8_t i = 0; i < b->nuses; ++i)
    if (b->uses[i].event >= 0) api.event_synchronize(events[static_cast<std::size_t>(b->uses[i].event)]);
  for (std::uint8_t i = 0; i < b->nfree; ++i)
    if (b->free_events[i] >= 0) api.event_synchronize(events[static_cast<std::size_t>(b->free_events[i])]);
  api.mem_unmap(b->base, b->span);
  api.mem_release(b->dev);
  b->dev = 0;
  b->where = Where::Dropped;
  resident -= b->span;
}

void Executor::reclaim_completed(bool wait_all) {
  for (auto& [id, b] : by_id)
    if (b->where == Where::Evicting) backend_finish_evict(b, wait_all);
}

}  // namespace capuchin::interpose::exec
