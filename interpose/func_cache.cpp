// func_cache.cpp: arena allocation and publication of parameter layouts (see func_cache.hpp).
#include "func_cache.hpp"

#include <sys/mman.h>

#include <cstring>
#include <new>

namespace capuchin::interpose {

bool FuncCache::init() {
  const std::size_t table_bytes = sizeof(Slot) * kTableSize;
  const std::size_t layout_bytes = sizeof(FuncLayout) * kMaxLayouts;
  const std::size_t word_bytes = sizeof(ScanRun) * kMaxRuns;
  const std::size_t total = table_bytes + layout_bytes + word_bytes + kMaxNameBytes;
  void* mem = mmap(nullptr, total, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (mem == MAP_FAILED) return false;
  char* p = static_cast<char*>(mem);
  auto* table = reinterpret_cast<Slot*>(p);
  for (std::uint32_t i = 0; i < kTableSize; ++i) new (&table[i]) Slot();
  layouts_ = reinterpret_cast<FuncLayout*>(p + table_bytes);
  runs_ = reinterpret_cast<ScanRun*>(p + table_bytes + layout_bytes);
  names_ = p + table_bytes + layout_bytes + word_bytes;
  table_ = table;
  return true;
}

const FuncLayout* FuncCache::insert(std::uint64_t key, std::uint64_t func, const ParamSpec* params,
                                    std::uint32_t nparams, const char* name) {
  if (table_ == nullptr) return nullptr;
  // Scan plan: every 8-byte-aligned word of the buffer inside a parameter of >= 8 bytes,
  // one run per such parameter.
  std::uint32_t nwords = 0, nruns = 0, buffer_bytes = 0;
  for (std::uint32_t i = 0; i < nparams; ++i) {
    const std::uint32_t end = params[i].offset + params[i].size;
    if (end > buffer_bytes) buffer_bytes = end;
    const std::uint32_t first = (params[i].offset + 7u) & ~7u;
    if (params[i].size < 8 || first + 8 > end) continue;
    nwords += (end - first) / 8;
    ++nruns;
  }
  if (nparams > 0xffffu || buffer_bytes > 0xffffu) return nullptr;
  const std::uint32_t li = layout_next_.fetch_add(1, std::memory_order_relaxed);
  if (li >= kMaxLayouts) return nullptr;
  const std::uint32_t ri = runs_next_.fetch_add(nruns, std::memory_order_relaxed);
  if (ri > kMaxRuns - nruns || nruns > kMaxRuns) return nullptr;
  std::size_t name_len = name == nullptr ? 0 : strnlen(name, 1024);
  const std::uint32_t ni = names_next_.fetch_add(static_cast<std::uint32_t>(name_len + 1), std::memory_order_relaxed);
  if (ni + name_len + 1 > kMaxNameBytes) return nullptr;

  ScanRun* out = runs_ + ri;
  for (std::uint32_t i = 0; i < nparams; ++i) {
    const std::uint32_t end = params[i].offset + params[i].size;
    const std::uint32_t first = (params[i].offset + 7u) & ~7u;
    if (params[i].size < 8 || first + 8 > end) continue;
    *out++ = ScanRun{static_cast<std::uint16_t>(i), static_cast<std::uint16_t>(first - params[i].offset),
                     (end - first) / 8};
  }
  if (name_len > 0) std::memcpy(names_ + ni, name, name_len);
  names_[ni + name_len] = '\0';

  FuncLayout& l = layouts_[li];
  l.nparams = nparams;
  l.nwords = nwords;
  l.nruns = nruns;
  l.runs_first = ri;
  l.buffer_bytes = buffer_bytes;
  l.name = names_ + ni;
  l.func = func;
  publish(key, li + 1);
  return &l;
}

bool FuncCache::alias(std::uint64_t key, const FuncLayout* layout) {
  if (table_ == nullptr || layout == nullptr) return false;
  return publish(key, index_of(layout) + 1);
}

bool FuncCache::publish(std::uint64_t key, std::uint32_t value) {
  std::uint32_t h = hash(key);
  for (std::uint32_t probe = 0; probe < kMaxProbe; ++probe, h = (h + 1) & (kTableSize - 1)) {
    std::uint64_t k = table_[h].key.load(std::memory_order_acquire);
    if (k == 0) {
      if (table_[h].key.compare_exchange_strong(k, key, std::memory_order_acq_rel)) {
        table_[h].value.store(value, std::memory_order_release);
        return true;
      }
    }
    if (k == key) return false;  // another thread published this key first; theirs wins
  }
  return false;
}

}  // namespace capuchin::interpose
