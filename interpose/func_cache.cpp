// func_cache.cpp: arena allocation and publication of parameter layouts (see func_cache.hpp).
#include "func_cache.hpp"

#include <sys/mman.h>

#include <cstring>
#include <new>

namespace capuchin::interpose {

bool FuncCache::init() {
  const std::size_t table_bytes = sizeof(Slot) * kTableSize;
  const std::size_t layout_bytes = sizeof(FuncLayout) * kMaxLayouts;
  const std::size_t word_bytes = sizeof(std::uint32_t) * kMaxWords;
  const std::size_t total = table_bytes + layout_bytes + word_bytes + kMaxNameBytes;
  void* mem = mmap(nullptr, total, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (mem == MAP_FAILED) return false;
  char* p = static_cast<char*>(mem);
  auto* table = reinterpret_cast<Slot*>(p);
  for (std::uint32_t i = 0; i < kTableSize; ++i) new (&table[i]) Slot();
  layouts_ = reinterpret_cast<FuncLayout*>(p + table_bytes);
  words_ = reinterpret_cast<std::uint32_t*>(p + table_bytes + layout_bytes);
  names_ = p + table_bytes + layout_bytes + word_bytes;
  table_ = table;
  return true;
}

const FuncLayout* FuncCache::insert(std::uint64_t key, std::uint64_t func, const ParamSpec* params,
                                    std::uint32_t nparams, const char* name) {
  if (table_ == nullptr) return nullptr;
  // Scan plan: every 8-byte-aligned word of the buffer inside a parameter of >= 8 bytes.
  std::uint32_t nwords = 0, buffer_bytes = 0;
  for (std::uint32_t i = 0; i < nparams; ++i) {
    const std::uint32_t end = params[i].offset + params[i].size;
    if (end > buffer_bytes) buffer_bytes = end;
    if (params[i].size < 8) continue;
    const std::uint32_t first = (params[i].offset + 7u) & ~7u;
    for (std::uint32_t w = first; w + 8 <= end; w += 8) ++nwords;
  }
  if (nparams > 0xffffu || buffer_bytes > 0xffffu) return nullptr;
  const std::uint32_t li = layout_next_.fetch_add(1, std::memory_order_relaxed);
  if (li >= kMaxLayouts) return nullptr;
  const std::uint32_t wi = words_next_.fetch_add(nwords, std::memory_order_relaxed);
  if (wi > kMaxWords - nwords || nwords > kMaxWords) return nullptr;
  std::size_t name_len = name == nullptr ? 0 : strnlen(name, 1024);
  const std::uint32_t ni = names_next_.fetch_add(static_cast<std::uint32_t>(name_len + 1), std::memory_order_relaxed);
  if (ni + name_len + 1 > kMaxNameBytes) return nullptr;

  std::uint32_t* out = words_ + wi;
  for (std::uint32_t i = 0; i < nparams; ++i) {
    if (params[i].size < 8) continue;
    const std::uint32_t end = params[i].offset + params[i].size;
    const std::uint32_t first = (params[i].offset + 7u) & ~7u;
    for (std::uint32_t w = first; w + 8 <= end; w += 8) *out++ = i << 16 | (w - params[i].offset);
  }
  if (name_len > 0) std::memcpy(names_ + ni, name, name_len);
  names_[ni + name_len] = '\0';

  FuncLayout& l = layouts_[li];
  l.nparams = nparams;
  l.nwords = nwords;
  l.words_first = wi;
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
