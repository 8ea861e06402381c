// func_cache.hpp: a lock-free, pre-sized cache of kernel parameter layouts, keyed by
// CUfunction (driver launches) or by host stub (runtime launches).
//
// Contract: lookup() is wait-free (a few relaxed/acquire loads); insert() is lock-free
// (bump allocation in arenas mapped at init, one CAS to claim a table slot, one release
// store to publish). Nothing is ever removed or freed, so a published FuncLayout and its
// name stay valid for the life of the process. When the arenas or the table are full,
// insert() returns nullptr and the caller counts the launch as unscanned. A key the driver gave
// no layout for is remembered too (refuse), so its launches do not ask the driver again.
//
// A layout is stored as a scan plan: for each parameter of at least 8 bytes, one run
// (parameter index, byte offset inside that parameter's value of its first word that is
// 8-byte aligned in the parameter buffer, number of such words). The launch path then
// reads each parameter's value pointer once and scans its words contiguously.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>

namespace capuchin::interpose {

struct ParamSpec {
  std::uint32_t offset = 0;  // in the parameter buffer (cuFuncGetParamInfo)
  std::uint32_t size = 0;
};

struct ScanRun {
  std::uint16_t param = 0;
  std::uint16_t offset = 0;  // of the first word, inside the parameter's value
  std::uint32_t nwords = 0;
};
static_assert(sizeof(ScanRun) == 8);

struct FuncLayout {
  std::uint32_t nparams = 0;
  std::uint32_t nwords = 0;       // words scanned per launch (all runs)
  std::uint32_t nruns = 0;
  std::uint32_t runs_first = 0;   // index into the runs arena
  std::uint32_t buffer_bytes = 0; // max(offset + size)
  const char* name = nullptr;     // NUL-terminated, in the names arena
  std::uint64_t func = 0;         // the CUfunction
};

class FuncCache {
 public:
  static constexpr std::uint32_t kTableSize = 1u << 15;   // open addressing, power of two
  static constexpr std::uint32_t kMaxLayouts = 1u << 14;
  static constexpr std::uint32_t kMaxRuns = 1u << 20;
  static constexpr std::uint32_t kMaxNameBytes = 1u << 23;

  bool init();  // maps the arenas (cold path)
  bool ready() const { return table_ != nullptr; }

  // The layout published under `key`; nullptr when there is none yet, or (*refused set) when
  // the key was refused.
  const FuncLayout* lookup(std::uint64_t key, bool* refused = nullptr) const {
    std::uint32_t h = hash(key);
    for (std::uint32_t probe = 0; probe < kMaxProbe; ++probe, h = (h + 1) & (kTableSize - 1)) {
      const std::uint64_t k = table_[h].key.load(std::memory_order_acquire);
      if (k == key) {
        const std::uint32_t v = table_[h].value.load(std::memory_order_acquire);
        if (v == kRefused) [[unlikely]] {
          if (refused != nullptr) *refused = true;
          return nullptr;
        }
        return v == 0 ? nullptr : &layouts_[v - 1];
      }
      if (k == 0) return nullptr;
    }
    return nullptr;
  }
  // Builds a layout (copying the name, truncated to 1 KiB) and publishes it under `key`.
  const FuncLayout* insert(std::uint64_t key, std::uint64_t func, const ParamSpec* params,
                           std::uint32_t nparams, const char* name);
  // Publishes an existing layout under another key (a host stub aliasing its CUfunction).
  bool alias(std::uint64_t key, const FuncLayout* layout);
  // Remembers that `key` has no layout (the driver gave none): lookup says so from now on.
  void refuse(std::uint64_t key) {
    if (table_ != nullptr) (void)publish(key, kRefused);
  }

  const ScanRun* runs(const FuncLayout& l) const { return runs_ + l.runs_first; }
  std::uint32_t index_of(const FuncLayout* l) const { return static_cast<std::uint32_t>(l - layouts_); }
  // A layout named by a launch record: the record's commit (release) happened after the
  // layout was filled, and the drain's acquire of the ring head makes it visible.
  const FuncLayout* at(std::uint32_t index) const { return index < kMaxLayouts ? &layouts_[index] : nullptr; }

 private:
  static constexpr std::uint32_t kMaxProbe = 64;
  static constexpr std::uint32_t kRefused = ~0u;  // a value no layout index + 1 reaches (kMaxLayouts)
  struct Slot {
    std::atomic<std::uint64_t> key{0};
    std::atomic<std::uint32_t> value{0};  // layout index + 1; 0 while unpublished
  };
  static std::uint32_t hash(std::uint64_t key) {
    key ^= key >> 33;
    key *= 0xff51afd7ed558ccdull;
    key ^= key >> 33;
    return static_cast<std::uint32_t>(key) & (kTableSize - 1);
  }
  bool publish(std::uint64_t key, std::uint32_t value);

  Slot* table_ = nullptr;
  FuncLayout* layouts_ = nullptr;
  ScanRun* runs_ = nullptr;
  char* names_ = nullptr;
  std::atomic<std::uint32_t> layout_next_{0};
  std::atomic<std::uint32_t> runs_next_{0};
  std::atomic<std::uint32_t> names_next_{0};
};

}  // namespace capuchin::interpose
