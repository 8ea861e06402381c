// memory.cpp: simcuda's device memory: one reserved virtual range (PROT_NONE until allocated),
// a first-fit allocator over it, capacity accounting, Unified Memory residency with LRU
// eviction, and the VMM calls (memfd-backed physical handles mapped with MAP_FIXED).
// Several devices (SIMCUDA_DEVICES) share the one range, as unified addressing gives real
// devices one address space; each device has its own capacity, use and peak, and what a
// kernel on one device may touch (its own device memory, managed and pinned memory, VMM
// mappings made accessible to it) is checked per device.
//
// Contract: device pages are readable/writable only while allocated or mapped+accessible;
// freed, unmapped and reserved-but-unmapped pages are PROT_NONE. Freed ranges keep their
// physical pages (up to the devices' capacity in bytes), filled with a poison byte (0xFF: NaN
// as any float), so a new allocation holds neither zeros nor what the range held before
// (cuMemAlloc: "The memory is not cleared"); past that bound they are given back and read as
// zeros; a stream-ordered reuse on the same stream keeps its old contents, as the real pool
// does; reserved ranges hold no pages. Stream-ordered frees
// (cuMemFreeAsync) release capacity at call time (so peaks do not depend on worker timing),
// may be reused at once by an allocation on the same stream of exactly the same span (stream
// order makes that safe, as in the real pool), and return to the shared free list only when
// the host synchronises with the freeing stream (so addresses are deterministic too).
#include "internal.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace simcuda {
namespace {

constexpr size_t kPage = 4096;
constexpr int kFreedPoison = 0xFF;  // each byte of a freed range: NaN in fp16/bf16/fp32/fp64, -1 as an integer

size_t round_up(size_t v, size_t a) { return (v + a - 1) / a * a; }

uint64_t env_bytes(const char* name, uint64_t fallback) {
  const char* s = std::getenv(name);
  if (s == nullptr || *s == '\0') return fallback;
  char* end = nullptr;
  errno = 0;
  unsigned long long v = std::strtoull(s, &end, 10);
  std::string suffix(end == nullptr ? "" : end);
  if (suffix == "K" || suffix == "KiB") v <<= 10;
  else if (suffix == "M" || suffix == "MiB") v <<= 20;
  else if (suffix == "G" || suffix == "GiB") v <<= 30;
  else if (!suffix.empty()) end = const_cast<char*>(s);  // not a size
  if (errno != 0 || end == s || v == 0) {
    std::fprintf(stderr, "simcuda: ignoring %s='%s' (expected a positive byte count, optionally with K, M or G)\n",
                 name, s);
    return fallback;
  }
  return v;
}

// Fills a memfd with kFreedPoison through pwrite(2): its pages are overwritten where they lie,
// without mapping them anywhere.
bool poison_memfd(int fd, size_t bytes) {
  static const std::vector<unsigned char> poison(SIMCUDA_VMM_GRANULARITY, static_cast<unsigned char>(kFreedPoison));
  size_t done = 0;
  while (done < bytes) {
    const ssize_t w = pwrite(fd, poison.data(), std::min(poison.size(), bytes - done), static_cast<off_t>(done));
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return false;
    done += static_cast<size_t>(w);
  }
  return true;
}

// Maps every page of a range that just became accessible, in one call: what is mapped is about
// to be written (a tensor copied in), and a fault per 4 KiB page was most of a pinned-backend
// run's host time. MADV_POPULATE_READ, not _WRITE: a read fault on shmem maps the pages around
// it that the memfd already holds (the kernel's fault-around, 64 KiB by default) where a write
// fault maps one page, and a shared shmem mapping's pages are mapped writable either way (no
// dirty tracking), so the writes that follow take no fault. A recycled memfd holds all its pages
// (a fresh one gains nothing: fault-around maps only pages the memfd holds):
// interpose.exec_replay_mobilenet_v2_caching_pinned took 24 s instead of 33-34, with 15 s of
// system time instead of 24-25 and 2.1 M minor faults instead of 11.5 M (2026-12-07). A kernel
// without it (before Linux 5.14) faults the pages in as they are touched instead.
void populate(uintptr_t base, size_t bytes) {
#ifndef MADV_POPULATE_READ
  constexpr int MADV_POPULATE_READ = 22;  // linux/mman.h
#endif
  madvise(reinterpret_cast<void*>(base), bytes, MADV_POPULATE_READ);
}

int read_device_count() {
  const char* s = std::getenv("SIMCUDA_DEVICES");
  if (s == nullptr || *s == '\0') return 1;
  char* end = nullptr;
  const long v = std::strtol(s, &end, 10);
  if (end == s || *end != '\0' || v < 1 || v > kMaxDevices) {
    std::fprintf(stderr, "simcuda: ignoring SIMCUDA_DEVICES='%s' (expected 1 to %d); one device\n", s, kMaxDevices);
    return 1;
  }
  return static_cast<int>(v);
}

}  // namespace

bool host_vmm_supported(CUmemLocationType type) {
  // SIMCUDA_HOST_VMM: which host locations cuMemCreate offers, like drivers of different ages
  // (CU_DEVICE_ATTRIBUTE_HOST_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED, ..._HOST_NUMA_...).
  static const std::string offered = [] {
    const char* v = std::getenv("SIMCUDA_HOST_VMM");
    return std::string(v != nullptr && *v != '\0' ? v : "all");
  }();
  if (offered == "none") return false;
  if (offered == "numa") return type == CU_MEM_LOCATION_TYPE_HOST_NUMA;
  return true;
}

int device_count() {
  static const int count = read_device_count();
  return count;
}

Memory::Memory() {
  capacity_ = env_bytes("SIMCUDA_DEVICE_BYTES", SIMCUDA_DEFAULT_DEVICE_BYTES);
  pinned_limit_ = env_bytes("SIMCUDA_PINNED_BYTES", ~uint64_t{0});
  // Unified Memory migrating to the host runs slower than a pinned copy on real GPUs: on an
  // H200 (driver 580, CUDA 13.0; README, Results) cuMemPrefetchAsync moved 49.8 GB/s to the
  // device but 16.0 GB/s to the host, against 55.4 GB/s for pinned copies each way. A share
  // below 1 charges managed migrations to the host (prefetches and evictions) at that share of
  // the pinned rate; by default they run at it.
  if (const char* v = std::getenv("SIMCUDA_MANAGED_TO_HOST_SHARE"); v != nullptr && v[0] != '\0') {
    char* end = nullptr;
    const double share = std::strtod(v, &end);
    if (end == v || *end != '\0' || !(share > 0 && share <= 1))
      std::fprintf(stderr, "simcuda: SIMCUDA_MANAGED_TO_HOST_SHARE=%s is not a share in (0, 1]; managed moves to the host run at the pinned rate\n", v);
    else
      to_host_share_ = share;
  }
  // Address space only (MAP_NORESERVE, PROT_NONE): managed memory may oversubscribe capacity.
  const uint64_t all_devices = capacity_ * static_cast<uint64_t>(device_count());
  retain_limit_ = all_devices;
  spare_memfds_.set_limit(std::min<uint64_t>(all_devices, 2ull << 30));
  region_bytes_ = std::max<uint64_t>(64ull << 30, round_up(all_devices * 4 + (16ull << 30), 1ull << 30));
  void* p = mmap(nullptr, region_bytes_ + SIMCUDA_VMM_GRANULARITY, PROT_NONE,
                 MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (p == MAP_FAILED) {
    region_bytes_ = 0;
    return;
  }
  region_ = round_up(reinterpret_cast<uintptr_t>(p), SIMCUDA_VMM_GRANULARITY);
  va_free_[region_] = region_bytes_;
}

uintptr_t Memory::va_alloc(size_t span, size_t alignment) {
  for (auto it = va_free_.begin(); it != va_free_.end(); ++it) {
    uintptr_t base = round_up(it->first, alignment);
    uintptr_t end = it->first + it->second;
    if (base + span > end) continue;
    uintptr_t free_base = it->first;
    va_free_.erase(it);
    if (base > free_base) va_free_[free_base] = base - free_base;
    if (base + span < end) va_free_[base + span] = end - (base + span);
    return base;
  }
  return 0;
}

void Memory::va_release(uintptr_t base, size_t span) {
  auto next = va_free_.lower_bound(base);
  if (next != va_free_.end() && base + span == next->first) {
    span += next->second;
    next = va_free_.erase(next);
  }
  if (next != va_free_.begin()) {
    auto prev = std::prev(next);
    if (prev->first + prev->second == base) {
      prev->second += span;
      return;
    }
  }
  va_free_[base] = span;
}

void Memory::protect(uintptr_t base, size_t span) {
  void* p = reinterpret_cast<void*>(base);
  if (retained_bytes_ + span > retain_limit_) discard_retained();
  if (span > retain_limit_) {  // not kept: its pages go back (zeros when handed out again)
    madvise(p, span, MADV_DONTNEED);
    mprotect(p, span, PROT_NONE);
    return;
  }
  // What a freed range held must not survive into its next allocation: a program (or capuchin's
  // executor) that reads memory it never wrote, such as a recomputation that did not run, would
  // find the old, right values there and pass. Poison is what it finds instead (zeros, which
  // giving the pages back made it, look like real data too often: gradients, ReLU outputs).
  std::memset(p, kFreedPoison, span);
  mprotect(p, span, PROT_NONE);
  retained_[base] = span;  // freed ranges are disjoint from retained ones (unretain at allocation)
  retained_bytes_ += span;
}

void Memory::discard_retained() {
  for (const auto& [base, span] : retained_) madvise(reinterpret_cast<void*>(base), span, MADV_DONTNEED);
  retained_.clear();
  retained_bytes_ = 0;
}

// [base, base + span) is being handed out: it is no longer a retained freed range. discard:
// also give its pages back (a VMM reservation holds none until something is mapped there).
void Memory::unretain(uintptr_t base, size_t span, bool discard) {
  const uintptr_t end = base + span;
  auto it = retained_.upper_bound(base);
  if (it != retained_.begin() && std::prev(it)->first + std::prev(it)->second > base) --it;
  while (it != retained_.end() && it->first < end) {
    const uintptr_t rb = it->first, re = it->first + it->second;
    const uintptr_t ob = std::max(rb, base), oe = std::min(re, end);
    if (discard) madvise(reinterpret_cast<void*>(ob), oe - ob, MADV_DONTNEED);
    retained_bytes_ -= oe - ob;
    it = retained_.erase(it);
    if (rb < base) retained_[rb] = base - rb;
    if (re > end) retained_[end] = re - end;
  }
}

void Memory::unprotect(uintptr_t base, size_t span) {
  mprotect(reinterpret_cast<void*>(base), span, PROT_READ | PROT_WRITE);
}

void Memory::charge(int device, uint64_t bytes) {
  DeviceUse& u = devices_[device];
  u.used += bytes;
  u.peak = std::max(u.peak, u.used);
  used_ += bytes;
  stats_.peak = std::max(stats_.peak, used_);
}

void Memory::uncharge(int device, uint64_t bytes) {
  DeviceUse& u = devices_[device];
  bytes = std::min(u.used, bytes);
  u.used -= bytes;
  used_ -= bytes;
}

// The least recently used managed block resident on `device` goes back to the host.
bool Memory::evict_one_managed(int device, uintptr_t keep_block) {
  for (auto it = lru_.begin(); it != lru_.end(); ++it) {
    if (it->second == keep_block) continue;
    ManagedBlock& b = blocks_[it->second];
    if (b.device != device) continue;
    b.resident = false;
    lru_.erase(it);
    devices_[device].managed_resident -= SIMCUDA_UVM_BLOCK;
    uncharge(device, SIMCUDA_UVM_BLOCK);
    stats_.evictions++;
    stats_.dtoh += SIMCUDA_UVM_BLOCK;
    return true;
  }
  return false;
}

bool Memory::reserve_capacity(int device, uint64_t bytes) {
  // Managed memory is evictable; cudaMalloc memory never is (as on the real driver). Evict
  // only when that makes the request fit.
  const DeviceUse& u = devices_[device];
  if (u.used - u.managed_resident + bytes > capacity_) return false;
  while (u.used + bytes > capacity_) {
    if (!evict_one_managed(device, 0)) return false;
  }
  charge(device, bytes);
  return true;
}

Allocation* Memory::find_allocation(uintptr_t ptr) {
  auto it = allocations_.upper_bound(ptr);
  if (it == allocations_.begin()) return nullptr;
  --it;
  Allocation& a = it->second;
  return ptr < a.base + std::max<size_t>(a.span, 1) ? &a : nullptr;  // mapped pages
}

const VmmMapping* Memory::find_mapping(uintptr_t ptr) {
  auto it = mappings_.upper_bound(ptr);
  if (it == mappings_.begin()) return nullptr;
  --it;
  return ptr < it->second.base + it->second.bytes ? &it->second : nullptr;
}

CUresult Memory::alloc_device(int device, size_t bytes, CUstream_st* stream, bool stream_ordered, CUdeviceptr* out) {
  if (bytes == 0) return CUDA_ERROR_INVALID_VALUE;
  const size_t span = round_up(bytes, kPage);
  std::lock_guard<std::mutex> lock(mu_);
  if (region_ == 0) return CUDA_ERROR_OUT_OF_MEMORY;
  const uint64_t accounted = simcuda_accounted_bytes(bytes);
  if (!reserve_capacity(device, accounted)) return CUDA_ERROR_OUT_OF_MEMORY;
  uintptr_t base = 0;
  if (stream_ordered) {
    // Stream-ordered reuse: a range freed on this same stream, of exactly this span.
    auto& pending = pending_[stream];
    for (auto it = pending.begin(); it != pending.end(); ++it) {
      if (it->span == span) {
        base = it->base;
        pending.erase(it);
        break;
      }
    }
  }
  if (base == 0) {
    base = va_alloc(span, kPage);
    if (base == 0) {
      uncharge(device, accounted);
      return CUDA_ERROR_OUT_OF_MEMORY;
    }
    unretain(base, span, false);
    unprotect(base, span);
  }
  Allocation a;
  a.base = base;
  a.bytes = bytes;
  a.span = span;
  a.accounted = accounted;
  a.kind = AllocKind::Device;
  a.device = device;
  a.stream_ordered = stream_ordered;
  allocations_[base] = a;
  *out = base;
  return CUDA_SUCCESS;
}

CUresult Memory::free_device(CUdeviceptr ptr) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = allocations_.find(ptr);
  if (it == allocations_.end() || it->second.kind != AllocKind::Device) return CUDA_ERROR_INVALID_VALUE;
  if (it->second.freed_by) return CUDA_ERROR_INVALID_VALUE;  // already freed (stream-ordered)
  uncharge(it->second.device, it->second.accounted);
  protect(it->second.base, it->second.span);
  va_release(it->second.base, it->second.span);
  allocations_.erase(it);
  return CUDA_SUCCESS;
}

CUresult Memory::free_async(CUdeviceptr ptr, CUstream_st* stream, const CompletionPtr& done) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = allocations_.find(ptr);
  if (it == allocations_.end() || it->second.kind != AllocKind::Device || it->second.freed_by)
    return CUDA_ERROR_INVALID_VALUE;
  uncharge(it->second.device, it->second.accounted);
  it->second.accounted = 0;
  it->second.freed_by = done;
  it->second.free_stream = stream;
  pending_[stream].push_back(PendingFree{it->second.base, it->second.span, done});
  return CUDA_SUCCESS;
}

void Memory::release_pending(CUstream_st* stream) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = pending_.find(stream);
  if (it == pending_.end()) return;
  std::vector<PendingFree> keep;
  for (const PendingFree& p : it->second) {
    if (!p.done->done) {
      keep.push_back(p);
      continue;
    }
    auto a = allocations_.find(p.base);
    if (a != allocations_.end() && a->second.freed_by == p.done) allocations_.erase(a);
    protect(p.base, p.span);
    va_release(p.base, p.span);
  }
  it->second = std::move(keep);
}

void Memory::release_all_pending() {
  std::vector<CUstream_st*> streams;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (auto& [s, list] : pending_) streams.push_back(s);
  }
  for (CUstream_st* s : streams) release_pending(s);
}

CUresult Memory::alloc_managed(size_t bytes, CUdeviceptr* out) {
  if (bytes == 0) return CUDA_ERROR_INVALID_VALUE;
  const size_t span = round_up(bytes, SIMCUDA_UVM_BLOCK);
  std::lock_guard<std::mutex> lock(mu_);
  uintptr_t base = region_ ? va_alloc(span, SIMCUDA_UVM_BLOCK) : 0;
  if (base == 0) return CUDA_ERROR_OUT_OF_MEMORY;
  unretain(base, span, false);
  unprotect(base, span);  // host-accessible wherever it resides
  Allocation a;
  a.base = base;
  a.bytes = bytes;
  a.span = span;
  a.kind = AllocKind::Managed;
  allocations_[base] = a;
  for (uintptr_t b = base; b < base + span; b += SIMCUDA_UVM_BLOCK) blocks_[b] = ManagedBlock{};
  *out = base;
  return CUDA_SUCCESS;
}

CUresult Memory::free_managed(CUdeviceptr ptr) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = allocations_.find(ptr);
  if (it == allocations_.end() || it->second.kind != AllocKind::Managed) return CUDA_ERROR_INVALID_VALUE;
  const Allocation a = it->second;
  for (uintptr_t b = a.base; b < a.base + a.span; b += SIMCUDA_UVM_BLOCK) {
    ManagedBlock& mb = blocks_[b];
    if (mb.resident) {
      lru_.erase({mb.stamp, b});
      devices_[mb.device].managed_resident -= SIMCUDA_UVM_BLOCK;
      uncharge(mb.device, SIMCUDA_UVM_BLOCK);
    }
    blocks_.erase(b);
  }
  protect(a.base, a.span);
  va_release(a.base, a.span);
  allocations_.erase(it);
  return CUDA_SUCCESS;
}

CUresult Memory::alloc_pinned(size_t bytes, void** out) {
  if (bytes == 0) {
    *out = nullptr;
    return CUDA_SUCCESS;
  }
  const size_t span = round_up(bytes, kPage);
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (span > pinned_limit_ - pinned_bytes_) return CUDA_ERROR_OUT_OF_MEMORY;
    pinned_bytes_ += span;
  }
  void* p = mmap(nullptr, span, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  std::lock_guard<std::mutex> lock(mu_);
  if (p == MAP_FAILED) {
    pinned_bytes_ -= span;
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  Allocation a;
  a.base = reinterpret_cast<uintptr_t>(p);
  a.bytes = bytes;
  a.span = span;
  a.kind = AllocKind::Pinned;
  allocations_[a.base] = a;
  *out = p;
  return CUDA_SUCCESS;
}

CUresult Memory::register_host(void* ptr, size_t bytes) {
  if (ptr == nullptr || bytes == 0) return CUDA_ERROR_INVALID_VALUE;
  const uintptr_t base = reinterpret_cast<uintptr_t>(ptr);
  std::lock_guard<std::mutex> lock(mu_);
  if (base + bytes > region_ && base < region_ + region_bytes_) return CUDA_ERROR_INVALID_VALUE;  // device memory
  auto next = allocations_.lower_bound(base);
  if ((next != allocations_.end() && next->first < base + bytes) || find_allocation(base) != nullptr)
    return CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED;
  Allocation a;
  a.base = base;
  a.bytes = bytes;
  a.span = bytes;
  a.kind = AllocKind::Pinned;
  a.registered = true;
  allocations_[base] = a;
  return CUDA_SUCCESS;
}

CUresult Memory::unregister_host(void* ptr) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = allocations_.find(reinterpret_cast<uintptr_t>(ptr));
  if (it == allocations_.end() || !it->second.registered) return CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED;
  allocations_.erase(it);
  return CUDA_SUCCESS;
}

CUresult Memory::free_pinned(void* ptr) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = allocations_.find(reinterpret_cast<uintptr_t>(ptr));
  if (it == allocations_.end() || it->second.kind != AllocKind::Pinned || it->second.registered)
    return CUDA_ERROR_INVALID_VALUE;
  munmap(ptr, it->second.span);
  pinned_bytes_ -= it->second.span;
  allocations_.erase(it);
  return CUDA_SUCCESS;
}

PointerClass Memory::classify(uintptr_t ptr, size_t bytes, Allocation* alloc_out) {
  std::lock_guard<std::mutex> lock(mu_);
  if (const Allocation* a = find_allocation(ptr)) {
    if (ptr + bytes > a->base + a->bytes) return PointerClass::Unknown;
    if (alloc_out) *alloc_out = *a;
    switch (a->kind) {
      case AllocKind::Device: return PointerClass::Device;
      case AllocKind::Managed: return PointerClass::Managed;
      case AllocKind::Pinned: return PointerClass::Pinned;
    }
  }
  if (const VmmMapping* m = find_mapping(ptr)) {
    return handles_[m->handle].on_host ? PointerClass::VmmHost : PointerClass::VmmDevice;
  }
  if (ptr >= region_ && ptr < region_ + region_bytes_) return PointerClass::Device;  // unmapped
  return PointerClass::Unknown;
}

bool Memory::is_managed(uintptr_t ptr) {
  std::lock_guard<std::mutex> lock(mu_);
  const Allocation* a = find_allocation(ptr);
  return a != nullptr && a->kind == AllocKind::Managed;
}

bool Memory::range_valid_for_copy(uintptr_t ptr, size_t bytes, bool mapped_pages) {
  std::lock_guard<std::mutex> lock(mu_);
  if (const Allocation* a = find_allocation(ptr)) {
    if (a->freed_by && a->freed_by->done) return false;
    return ptr + bytes <= a->base + (mapped_pages ? a->span : a->bytes);
  }
  // VMM: every byte must be mapped and accessible.
  uintptr_t p = ptr;
  const uintptr_t end = ptr + bytes;
  while (p < end) {
    const VmmMapping* m = find_mapping(p);
    if (m == nullptr || m->access == 0) return false;  // copies: accessible to some device
    p = m->base + m->bytes;
  }
  return bytes > 0;
}

// Resident on `device`: a block resident on another device migrates (through the host here;
// its data crosses the link either way).
bool Memory::make_resident(uintptr_t block, int device, double* cost_ns) {
  ManagedBlock& b = blocks_[block];
  if (b.resident && b.device == device) return true;
  if (b.resident) make_host_resident(block, cost_ns);
  while (devices_[device].used + SIMCUDA_UVM_BLOCK > capacity_) {
    if (!evict_one_managed(device, block)) return false;
  }
  b.resident = true;
  b.device = device;
  devices_[device].managed_resident += SIMCUDA_UVM_BLOCK;
  charge(device, SIMCUDA_UVM_BLOCK);
  b.stamp = ++stamp_;
  lru_.insert({b.stamp, block});
  if (b.populated) {  // its data comes over the link
    stats_.htod += SIMCUDA_UVM_BLOCK;
    *cost_ns += SIMCUDA_UVM_BLOCK / SIMCUDA_PINNED_BYTES_PER_NS;
  } else {            // nothing to move: populated on the device (a fill at device bandwidth)
    b.populated = true;
    *cost_ns += SIMCUDA_UVM_BLOCK / SIMCUDA_DEVICE_BYTES_PER_NS;
  }
  return true;
}

void Memory::make_host_resident(uintptr_t block, double* cost_ns) {
  ManagedBlock& b = blocks_[block];
  if (!b.resident) return;
  lru_.erase({b.stamp, block});
  b.resident = false;
  devices_[b.device].managed_resident -= SIMCUDA_UVM_BLOCK;
  uncharge(b.device, SIMCUDA_UVM_BLOCK);
  stats_.dtoh += SIMCUDA_UVM_BLOCK;
  *cost_ns += SIMCUDA_UVM_BLOCK / (SIMCUDA_PINNED_BYTES_PER_NS * to_host_share_);
}

bool Memory::declare_access(uintptr_t ptr, size_t bytes, int device, double* cost_ns) {
  if (bytes == 0) return true;
  std::lock_guard<std::mutex> lock(mu_);
  const uintptr_t end = ptr + bytes;
  if (Allocation* a = find_allocation(ptr)) {
    // A GPU faults on unmapped pages, not past an allocation's requested size.
    if (end > a->base + a->span) return false;
    switch (a->kind) {
      case AllocKind::Device:
        if (a->freed_by && a->freed_by->done) return false;  // used after its stream-ordered free
        // Another device's memory: reachable only through peer access, which simcuda does not
        // offer (cuCtxEnablePeerAccess is absent), so the access faults as on a real GPU.
        if (a->device != device) return false;
        *cost_ns += static_cast<double>(bytes) / SIMCUDA_DEVICE_BYTES_PER_NS;
        return true;
      case AllocKind::Pinned:  // zero-copy access over the bus
        *cost_ns += static_cast<double>(bytes) / SIMCUDA_PINNED_BYTES_PER_NS;
        return true;
      case AllocKind::Managed:
        break;
    }
    const uintptr_t first = ptr / SIMCUDA_UVM_BLOCK * SIMCUDA_UVM_BLOCK;
    for (uintptr_t b = first; b < end; b += SIMCUDA_UVM_BLOCK) {
      ManagedBlock& mb = blocks_[b];
      if (mb.resident && mb.device == device) {
        lru_.erase({mb.stamp, b});
        mb.stamp = ++stamp_;
        lru_.insert({mb.stamp, b});
        continue;
      }
      const size_t here = std::min<uintptr_t>(end, b + SIMCUDA_UVM_BLOCK) - std::max(ptr, b);
      if (mb.prefer_host) {  // mapped remotely, not migrated
        *cost_ns += static_cast<double>(here) / SIMCUDA_PINNED_BYTES_PER_NS;
        continue;
      }
      // A fault migrates the block to the faulting device (from the host or another device).
      stats_.faults++;
      *cost_ns += SIMCUDA_FAULT_LATENCY_NS;
      if (!make_resident(b, device, cost_ns)) {
        // Nothing evictable (device full of cudaMalloc memory): served remotely.
        *cost_ns += static_cast<double>(here) / SIMCUDA_PINNED_BYTES_PER_NS;
      }
    }
    *cost_ns += static_cast<double>(bytes) / SIMCUDA_DEVICE_BYTES_PER_NS;
    return true;
  }
  uintptr_t p = ptr;
  while (p < end) {
    const VmmMapping* m = find_mapping(p);
    if (m == nullptr || (m->access & (DeviceMask{1} << device)) == 0) return false;
    const size_t here = std::min<uintptr_t>(end, m->base + m->bytes) - p;
    const bool host = handles_[m->handle].on_host;
    *cost_ns += static_cast<double>(here) /
                (host ? SIMCUDA_PINNED_BYTES_PER_NS : SIMCUDA_DEVICE_BYTES_PER_NS);
    p = m->base + m->bytes;
  }
  return true;
}

void Memory::prefetch(uintptr_t ptr, size_t bytes, const CUmemLocation& to, double* cost_ns) {
  std::lock_guard<std::mutex> lock(mu_);
  const uintptr_t end = ptr + bytes;
  const uintptr_t first = ptr / SIMCUDA_UVM_BLOCK * SIMCUDA_UVM_BLOCK;
  const bool to_device = to.type == CU_MEM_LOCATION_TYPE_DEVICE;
  for (uintptr_t b = first; b < end; b += SIMCUDA_UVM_BLOCK) {
    auto it = blocks_.find(b);
    if (it == blocks_.end()) continue;
    if (to_device) {
      if (it->second.resident && it->second.device == to.id) {
        lru_.erase({it->second.stamp, b});
        it->second.stamp = ++stamp_;
        lru_.insert({it->second.stamp, b});
      } else if (!make_resident(b, to.id, cost_ns)) {
        break;  // device full of unevictable memory: the rest stays on the host
      }
    } else {
      make_host_resident(b, cost_ns);
    }
  }
}

void Memory::discard(uintptr_t ptr, size_t bytes) {
  std::lock_guard<std::mutex> lock(mu_);
  const uintptr_t end = ptr + bytes;
  // "Reading from a discarded range, without a subsequent write or prefetch to that part of the
  // range, will return an indeterminate value" (cuda.h, cuMemDiscardBatchAsync), and a prefetch
  // brings no data back either: the range holds the poison of freed memory from the moment the
  // discard runs in its stream's order, so data written before it, or in no order with it, is
  // seen lost (a real driver drops those pages).
  std::memset(reinterpret_cast<void*>(ptr), kFreedPoison, bytes);
  const uintptr_t first = (ptr + SIMCUDA_UVM_BLOCK - 1) / SIMCUDA_UVM_BLOCK * SIMCUDA_UVM_BLOCK;
  for (uintptr_t b = first; b + SIMCUDA_UVM_BLOCK <= end; b += SIMCUDA_UVM_BLOCK) {
    auto it = blocks_.find(b);
    if (it == blocks_.end()) continue;
    ManagedBlock& mb = it->second;
    if (mb.resident) {
      lru_.erase({mb.stamp, b});
      mb.resident = false;
      devices_[mb.device].managed_resident -= SIMCUDA_UVM_BLOCK;
      uncharge(mb.device, SIMCUDA_UVM_BLOCK);
    }
    mb.populated = false;
  }
}

void Memory::note_write(uintptr_t ptr, size_t bytes) {
  if (bytes == 0) return;
  std::lock_guard<std::mutex> lock(mu_);
  const Allocation* a = find_allocation(ptr);
  if (a == nullptr || a->kind != AllocKind::Managed) return;
  const uintptr_t end = std::min<uintptr_t>(ptr + bytes, a->base + a->span);
  for (uintptr_t b = ptr / SIMCUDA_UVM_BLOCK * SIMCUDA_UVM_BLOCK; b < end; b += SIMCUDA_UVM_BLOCK) blocks_[b].populated = true;
}

CUresult Memory::advise(uintptr_t ptr, size_t bytes, CUmem_advise advice, const CUmemLocation& loc) {
  std::lock_guard<std::mutex> lock(mu_);
  const Allocation* a = find_allocation(ptr);
  if (a == nullptr || a->kind != AllocKind::Managed || ptr + bytes > a->base + a->span)
    return CUDA_ERROR_INVALID_VALUE;
  const uintptr_t first = ptr / SIMCUDA_UVM_BLOCK * SIMCUDA_UVM_BLOCK;
  for (uintptr_t b = first; b < ptr + bytes; b += SIMCUDA_UVM_BLOCK) {
    ManagedBlock& mb = blocks_[b];
    switch (advice) {
      case CU_MEM_ADVISE_SET_PREFERRED_LOCATION:
        mb.prefer_host = loc.type == CU_MEM_LOCATION_TYPE_HOST || loc.type == CU_MEM_LOCATION_TYPE_HOST_NUMA;
        break;
      case CU_MEM_ADVISE_UNSET_PREFERRED_LOCATION:
        mb.prefer_host = false;
        break;
      default:  // read-mostly and accessed-by only change performance hints we do not model
        break;
    }
  }
  return CUDA_SUCCESS;
}

// ---- VMM ----------------------------------------------------------------------------------

CUresult Memory::address_reserve(size_t bytes, size_t alignment, CUdeviceptr hint, CUdeviceptr* out) {
  if (bytes == 0 || bytes % SIMCUDA_VMM_GRANULARITY != 0) return CUDA_ERROR_INVALID_VALUE;
  if (alignment == 0) alignment = SIMCUDA_VMM_GRANULARITY;
  if ((alignment & (alignment - 1)) != 0) return CUDA_ERROR_INVALID_VALUE;
  std::lock_guard<std::mutex> lock(mu_);
  uintptr_t base = 0;
  if (hint != 0 && hint % alignment == 0) {  // honour the hint when that range is free
    auto it = va_free_.upper_bound(hint);
    if (it != va_free_.begin()) {
      --it;
      if (hint >= it->first && hint + bytes <= it->first + it->second) {
        const uintptr_t fb = it->first;
        const size_t fs = it->second;
        va_free_.erase(it);
        if (hint > fb) va_free_[fb] = hint - fb;
        if (hint + bytes < fb + fs) va_free_[hint + bytes] = fb + fs - (hint + bytes);
        base = hint;
      }
    }
  }
  if (base == 0) base = va_alloc(bytes, alignment);
  if (base == 0) return CUDA_ERROR_OUT_OF_MEMORY;
  unretain(base, bytes, true);
  reservations_[base] = bytes;
  *out = base;
  return CUDA_SUCCESS;
}

CUresult Memory::address_free(CUdeviceptr ptr, size_t bytes) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = reservations_.find(ptr);
  if (it == reservations_.end() || it->second != bytes) return CUDA_ERROR_INVALID_VALUE;
  auto m = mappings_.lower_bound(ptr);
  if (m != mappings_.end() && m->first < ptr + bytes) return CUDA_ERROR_INVALID_VALUE;  // still mapped
  reservations_.erase(it);
  va_release(ptr, bytes);
  return CUDA_SUCCESS;
}

// ---- recycled VMM memfds -------------------------------------------------------------------
int SpareMemfds::take(size_t bytes) {
  for (auto it = spares_.rbegin(); it != spares_.rend(); ++it) {  // newest first: its pages are warm
    if (it->bytes != bytes) continue;
    const int fd = it->fd;
    bytes_ -= bytes;
    spares_.erase(std::next(it).base());
    return fd;
  }
  return -1;
}

void SpareMemfds::give(int fd, size_t bytes) {
  if (bytes > limit_ || !poison_memfd(fd, bytes)) {
    close(fd);
    return;
  }
  while ((bytes_ + bytes > limit_ || spares_.size() >= kMaxSpares) && !spares_.empty()) {
    close(spares_.front().fd);
    bytes_ -= spares_.front().bytes;
    spares_.erase(spares_.begin());
  }
  spares_.push_back({fd, bytes});
  bytes_ += bytes;
}

CUresult Memory::create(size_t bytes, const CUmemAllocationProp& prop, CUmemGenericAllocationHandle* out) {
  if (bytes == 0 || bytes % SIMCUDA_VMM_GRANULARITY != 0) return CUDA_ERROR_INVALID_VALUE;
  if (prop.type != CU_MEM_ALLOCATION_TYPE_PINNED) return CUDA_ERROR_INVALID_VALUE;
  // cuda.h, cuMemCreate: HOST_NUMA_CURRENT "will result in CUDA_ERROR_INVALID_VALUE"; a host
  // location this driver does not offer (SIMCUDA_HOST_VMM) is not supported.
  if (prop.location.type == CU_MEM_LOCATION_TYPE_HOST_NUMA_CURRENT) return CUDA_ERROR_INVALID_VALUE;
  if ((prop.location.type == CU_MEM_LOCATION_TYPE_HOST && !host_vmm_supported(CU_MEM_LOCATION_TYPE_HOST)) ||
      (prop.location.type == CU_MEM_LOCATION_TYPE_HOST_NUMA && !host_vmm_supported(CU_MEM_LOCATION_TYPE_HOST_NUMA)))
    return CUDA_ERROR_NOT_SUPPORTED;
  const bool on_host = prop.location.type == CU_MEM_LOCATION_TYPE_HOST ||
                       prop.location.type == CU_MEM_LOCATION_TYPE_HOST_NUMA;
  // cuda.h, CUmemLocation::id: "identifier for a given this location's CUmemLocationType": a
  // device location names a device ordinal, which must exist.
  if (!on_host && (prop.location.type != CU_MEM_LOCATION_TYPE_DEVICE || !valid_device(prop.location.id)))
    return CUDA_ERROR_INVALID_DEVICE;
  const int device = on_host ? 0 : prop.location.id;
  std::lock_guard<std::mutex> lock(mu_);
  if (!on_host && !reserve_capacity(device, bytes)) return CUDA_ERROR_OUT_OF_MEMORY;
  int fd = spare_memfds_.take(bytes);  // a recycled one is this size and poisoned
  if (fd < 0) {
    fd = memfd_create("simcuda-vmm", MFD_CLOEXEC);
    if (fd < 0 || ftruncate(fd, static_cast<off_t>(bytes)) != 0) {
      if (fd >= 0) close(fd);
      if (!on_host) uncharge(device, bytes);
      return CUDA_ERROR_OUT_OF_MEMORY;
    }
  }
  const CUmemGenericAllocationHandle h = next_handle_++;
  handles_[h] = VmmHandle{fd, bytes, on_host, device, false, 0};
  *out = h;
  return CUDA_SUCCESS;
}

CUresult Memory::release(CUmemGenericAllocationHandle handle) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = handles_.find(handle);
  if (it == handles_.end() || it->second.released) return CUDA_ERROR_INVALID_VALUE;
  if (it->second.retained > 0) {  // a reference cuMemRetainAllocationHandle handed out
    --it->second.retained;
    return CUDA_SUCCESS;
  }
  it->second.released = true;
  if (it->second.mappings == 0) retire_handle(it);  // else when the last mapping goes, as on the driver
  return CUDA_SUCCESS;
}

void Memory::retire_handle(std::unordered_map<CUmemGenericAllocationHandle, VmmHandle>::iterator h) {
  spare_memfds_.give(h->second.fd, h->second.bytes);
  if (!h->second.on_host) uncharge(h->second.device, h->second.bytes);
  handles_.erase(h);
}

// cuda.h: "the same handle value used to map the memory"; any address in a mapped range; "If
// the address requested is not mapped, the function will fail"; one more cuMemRelease owed.
CUresult Memory::retain_handle(uintptr_t addr, CUmemGenericAllocationHandle* out) {
  std::lock_guard<std::mutex> lock(mu_);
  const VmmMapping* m = find_mapping(addr);
  if (m == nullptr) return CUDA_ERROR_INVALID_VALUE;
  ++handles_[m->handle].retained;
  *out = m->handle;
  return CUDA_SUCCESS;
}

CUresult Memory::map(CUdeviceptr ptr, size_t bytes, size_t offset, CUmemGenericAllocationHandle handle) {
  if (bytes == 0 || ptr % SIMCUDA_VMM_GRANULARITY != 0 || bytes % SIMCUDA_VMM_GRANULARITY != 0 ||
      offset % SIMCUDA_VMM_GRANULARITY != 0)
    return CUDA_ERROR_INVALID_VALUE;
  std::lock_guard<std::mutex> lock(mu_);
  auto h = handles_.find(handle);
  if (h == handles_.end() || h->second.released) return CUDA_ERROR_INVALID_HANDLE;
  if (offset + bytes > h->second.bytes) return CUDA_ERROR_INVALID_VALUE;
  auto r = reservations_.upper_bound(ptr);
  if (r == reservations_.begin()) return CUDA_ERROR_INVALID_VALUE;
  --r;
  if (ptr + bytes > r->first + r->second) return CUDA_ERROR_INVALID_VALUE;
  auto m = mappings_.lower_bound(ptr);
  if (m != mappings_.end() && m->first < ptr + bytes) return CUDA_ERROR_INVALID_VALUE;
  if (m != mappings_.begin() && std::prev(m)->second.base + std::prev(m)->second.bytes > ptr)
    return CUDA_ERROR_INVALID_VALUE;
  void* p = mmap(reinterpret_cast<void*>(ptr), bytes, PROT_NONE, MAP_SHARED | MAP_FIXED, h->second.fd,
                 static_cast<off_t>(offset));
  if (p == MAP_FAILED) return CUDA_ERROR_OUT_OF_MEMORY;
  mappings_[ptr] = VmmMapping{ptr, bytes, handle, 0};
  h->second.mappings++;
  return CUDA_SUCCESS;
}

CUresult Memory::unmap(CUdeviceptr ptr, size_t bytes) {
  std::lock_guard<std::mutex> lock(mu_);
  // The range must cover whole mappings.
  std::vector<uintptr_t> covered;
  for (auto m = mappings_.lower_bound(ptr); m != mappings_.end() && m->first < ptr + bytes; ++m) {
    if (m->first + m->second.bytes > ptr + bytes) return CUDA_ERROR_INVALID_VALUE;
    covered.push_back(m->first);
  }
  if (covered.empty()) return CUDA_ERROR_INVALID_VALUE;
  for (uintptr_t base : covered) {
    VmmMapping m = mappings_[base];
    mmap(reinterpret_cast<void*>(base), m.bytes, PROT_NONE,
         MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED, -1, 0);
    mappings_.erase(base);
    auto h = handles_.find(m.handle);
    if (h != handles_.end() && --h->second.mappings == 0 && h->second.released) retire_handle(h);
  }
  return CUDA_SUCCESS;
}

CUresult Memory::set_access(CUdeviceptr ptr, size_t bytes, DeviceMask grant, DeviceMask revoke) {
  std::lock_guard<std::mutex> lock(mu_);
  uintptr_t p = ptr;
  std::vector<VmmMapping*> touched;
  while (p < ptr + bytes) {
    auto it = mappings_.find(p);
    if (it == mappings_.end()) return CUDA_ERROR_INVALID_VALUE;  // must cover mapped ranges
    touched.push_back(&it->second);
    p += it->second.bytes;
  }
  if (touched.empty() || p != ptr + bytes) return CUDA_ERROR_INVALID_VALUE;
  for (VmmMapping* m : touched) {
    const bool was_accessible = m->access != 0;
    m->access = (m->access & ~revoke) | grant;
    mprotect(reinterpret_cast<void*>(m->base), m->bytes, m->access != 0 ? PROT_READ | PROT_WRITE : PROT_NONE);
    if (!was_accessible && m->access != 0) populate(m->base, m->bytes);
  }
  return CUDA_SUCCESS;
}

void Memory::note_copy(CopyRoute route, size_t bytes) {
  std::lock_guard<std::mutex> lock(mu_);
  switch (route) {
    case CopyRoute::HostToDevice: stats_.htod += bytes; break;
    case CopyRoute::DeviceToHost: stats_.dtoh += bytes; break;
    case CopyRoute::DeviceToDevice: stats_.dtod += bytes; break;
    case CopyRoute::HostToHost: break;
  }
}

void Memory::get_stats(simcuda_stats* out) {
  std::lock_guard<std::mutex> lock(mu_);
  out->capacity_bytes = capacity_;
  out->device_bytes_in_use = used_;
  out->peak_device_bytes = stats_.peak;
  uint64_t managed_resident = 0;
  for (const DeviceUse& u : devices_) managed_resident += u.managed_resident;
  out->managed_resident_bytes = managed_resident;
  out->uvm_faults = stats_.faults;
  out->uvm_evictions = stats_.evictions;
  out->bytes_htod = stats_.htod;
  out->bytes_dtoh = stats_.dtoh;
  out->bytes_dtod = stats_.dtod;
}

void Memory::reset_stats() {
  std::lock_guard<std::mutex> lock(mu_);
  stats_ = Stats{};
  stats_.peak = used_;
  for (DeviceUse& u : devices_) u.peak = u.used;
}

DeviceUse Memory::device_use(int device) {
  std::lock_guard<std::mutex> lock(mu_);
  return devices_[device];
}

}  // namespace simcuda
