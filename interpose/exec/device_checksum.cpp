// device_checksum.cpp: loading the checksum kernels per context and launching them (see
// device_checksum.hpp).
#include "device_checksum.hpp"

#include <algorithm>

#include "capuchin/checksum.hpp"
#include "config.hpp"

#if defined(CAPUCHIN_CHECKSUM_PTX)
#include "checksum_ptx.inc"  // kChecksumPtx, generated from checksum_kernels.cu
#endif

namespace capuchin::interpose::exec {

namespace {

constexpr unsigned kThreads = 256;
constexpr unsigned kMaxGrid = DeviceChecksum::kMaxGrid;
constexpr std::size_t kPartialsBytes = DeviceChecksum::kMaxRanges * kMaxGrid * sizeof(std::uint64_t);

// Enough threads for about 8 words each, at most kMaxGrid blocks (the loop strides the rest).
unsigned grid_for(std::size_t bytes) {
  const std::uint64_t words = (bytes + 7) / 8;
  const std::uint64_t blocks = (words + kThreads * 8 - 1) / (kThreads * 8);
  return static_cast<unsigned>(std::clamp<std::uint64_t>(blocks, 1, kMaxGrid));
}

CUcontext current_context(const Api& api) {
  CUcontext ctx = nullptr;
  if (api.ctx_get_current != nullptr && api.ctx_get_current(&ctx) != CUDA_SUCCESS) ctx = nullptr;
  return ctx;
}

}  // namespace

DeviceChecksum::Loaded* DeviceChecksum::find(CUcontext ctx) {
  for (Loaded& l : loaded_)
    if (l.ctx == ctx) return &l;
  return nullptr;
}

bool DeviceChecksum::load(const Api& api, Loaded& into) {
#if defined(CAPUCHIN_CHECKSUM_PTX)
  if (api.module_load_data == nullptr || api.module_get_function == nullptr || api.host_alloc == nullptr ||
      api.host_free == nullptr) {
    log(LogLevel::Info, "executor: the driver lacks cuModuleLoadData, cuModuleGetFunction or cuMemHostAlloc: "
                        "probations hash on the host");
    return false;
  }
  CUresult r = api.module_load_data(&into.module, kChecksumPtx);
  if (r == CUDA_SUCCESS) r = api.module_get_function(&into.sum, into.module, "capuchin_checksum");
  if (r == CUDA_SUCCESS) r = api.module_get_function(&into.complement, into.module, "capuchin_complement");
  if (r == CUDA_SUCCESS) return true;
  log(LogLevel::Info, "executor: the checksum kernels could not be loaded (CUresult %d; a driver older than the PTX "
                      "needs, or JIT disabled): probations hash on the host", static_cast<int>(r));
  if (into.module != nullptr && api.module_unload != nullptr) (void)api.module_unload(into.module);
  into.module = nullptr;
  return false;
#else
  (void)api;
  (void)into;
  log(LogLevel::Info, "executor: built without nvcc, so without the checksum kernels: probations hash on the host");
  return false;
#endif
}

bool DeviceChecksum::current(const Api& api, Loaded& out) {
  const CUcontext ctx = current_context(api);
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (const Loaded* l = find(ctx)) {
      out = Loaded{l->ctx, l->module, l->sum, l->complement, l->failed, {}};
      return !l->failed;
    }
  }
  Loaded fresh;
  fresh.ctx = ctx;
  fresh.failed = !load(api, fresh);
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (const Loaded* l = find(ctx)) {
      out = Loaded{l->ctx, l->module, l->sum, l->complement, l->failed, {}};
    } else {
      loaded_.push_back(fresh);
      out = fresh;
      return !fresh.failed;
    }
  }
  // Another thread loaded it meanwhile: theirs is kept, ours unloaded (outside the lock).
  if (fresh.module != nullptr && api.module_unload != nullptr) (void)api.module_unload(fresh.module);
  return !out.failed;
}

bool DeviceChecksum::available(const Api& api) {
  Loaded l;
  return current(api, l);
}

void* DeviceChecksum::take_partials(const Api& api, CUcontext ctx) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (Loaded* l = find(ctx); l != nullptr && !l->free_partials.empty()) {
      void* p = l->free_partials.back();
      l->free_partials.pop_back();
      return p;
    }
  }
  // Mapped (and, with unified addressing, at the same address on the device): the kernel's
  // stores reach the host, and no device byte is taken from the job's budget.
  void* p = nullptr;
  const unsigned flags = CU_MEMHOSTALLOC_DEVICEMAP | CU_MEMHOSTALLOC_PORTABLE;
  return api.host_alloc(&p, kPartialsBytes, flags) == CUDA_SUCCESS ? p : nullptr;
}

void DeviceChecksum::give_partials(CUcontext ctx, void* partials) {
  std::lock_guard<std::mutex> lock(mu_);
  if (Loaded* l = find(ctx)) l->free_partials.push_back(partials);
}

bool DeviceChecksum::sums(const Api& api, CUstream stream, std::span<const Range> ranges, std::uint64_t* out) {
  Loaded k;
  if (ranges.size() > kMaxRanges || !current(api, k)) return false;
  auto* partials = static_cast<std::uint64_t*>(take_partials(api, k.ctx));
  if (partials == nullptr) return false;
  unsigned grids[kMaxRanges] = {};
  bool ok = true;
  for (std::size_t i = 0; ok && i < ranges.size(); ++i) {
    if (ranges[i].bytes == 0) continue;
    grids[i] = grid_for(ranges[i].bytes);
    CUdeviceptr data = ranges[i].base;
    unsigned long long bytes = ranges[i].bytes;
    auto sums_at = reinterpret_cast<CUdeviceptr>(partials + i * kMaxGrid);
    void* params[] = {&data, &bytes, &sums_at};
    ok = api.launch_kernel(k.sum, grids[i], 1, 1, kThreads, 1, 1, 0, stream, params, nullptr) == CUDA_SUCCESS;
  }
  ok = ok && api.stream_synchronize(stream) == CUDA_SUCCESS;
  for (std::size_t i = 0; ok && i < ranges.size(); ++i) {
    std::uint64_t sum = 0;
    for (unsigned b = 0; b < grids[i]; ++b) sum += partials[i * kMaxGrid + b];
    out[i] = checksum::finish(sum, ranges[i].bytes);
  }
  // A failed call may leave a kernel still writing the buffer: it is not reused then (nor freed).
  if (ok) {
    give_partials(k.ctx, partials);
    ran_.store(true, std::memory_order_relaxed);
  }
  return ok;
}

bool DeviceChecksum::complement(const Api& api, CUstream stream, Range r) {
  Loaded k;
  if (!current(api, k)) return false;
  if (r.bytes == 0) return true;
  CUdeviceptr data = r.base;
  unsigned long long bytes = r.bytes;
  void* params[] = {&data, &bytes};
  return api.launch_kernel(k.complement, grid_for(r.bytes), 1, 1, kThreads, 1, 1, 0, stream, params, nullptr) ==
         CUDA_SUCCESS;
}

}  // namespace capuchin::interpose::exec
