// device_chunks.hpp: the pinned backend's device chunks, kept idle between moves.
//
// A Vmm block's device memory is one chunk of its span. An eviction unmaps it once the copy
// out ended, and a prefetch or a new tensor of the same span follows soon after: a training
// iteration moves the same tensors every time. Without this, every move out cost a
// cuMemRelease and every move in a cuMemCreate (host time on the move's path; on simcuda a new
// memfd the kernel zeroes). Chunks whose mappings are gone wait here for the next take of
// their span.
//
// Contract:
//   - A chunk is given only once it is unmapped everywhere; unmapping already needed every
//     work using it complete, so an idle chunk may be mapped anywhere at once.
//   - Idle chunks are device memory the ledger does not charge. The caller keeps charged bytes
//     + managed moves out in flight + idle bytes within the budget: take() releases idle
//     chunks before it creates one (`keep_idle`), and Ledger::move trims on every charge.
//   - Every driver call's result is checked. A chunk whose release fails is logged and
//     forgotten (its bytes no longer counted as idle: nothing of ours maps it again).
//   - Not thread-safe: the executor calls it under its mutex, as it does the host pool.
#pragma once

#include <cuda.h>

#include <cstddef>
#include <cstdint>
#include <vector>

#include "api.hpp"

namespace capuchin::interpose::exec {

class DeviceChunks {
 public:
  void configure(const Api* api, int device) {
    api_ = api;
    device_ = device;
  }
  // A chunk of exactly `span` bytes: the newest idle one of that span, else a new one from the
  // driver, created once idle chunks (oldest first) are released down to `keep_idle` bytes (all
  // of them, and asked again, where the driver has no memory). Returns the driver's result of
  // the creation unchanged.
  CUresult take(std::size_t span, std::uint64_t keep_idle, CUmemGenericAllocationHandle* out);
  // An unmapped chunk no work uses, kept for a later take (past kMaxIdle the oldest goes).
  void give(CUmemGenericAllocationHandle h, std::size_t span);
  // Releases idle chunks, oldest first, until at most `keep_idle` bytes stay idle.
  void trim(std::uint64_t keep_idle);

  std::uint64_t idle_bytes() const { return idle_bytes_; }
  std::uint64_t created() const { return created_; }
  std::uint64_t reused() const { return reused_; }

  // Enough for the spans one iteration moves back and forth; a take scans them all.
  static constexpr std::size_t kMaxIdle = 64;

 private:
  struct Idle {
    CUmemGenericAllocationHandle handle;
    std::size_t span;
  };
  void release_oldest();

  const Api* api_ = nullptr;
  int device_ = 0;
  std::vector<Idle> idle_;  // oldest first
  std::uint64_t idle_bytes_ = 0;
  std::uint64_t created_ = 0, reused_ = 0;
};

}  // namespace capuchin::interpose::exec
