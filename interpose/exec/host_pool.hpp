// host_pool.hpp: the pinned backend's host memory: host-located VMM chunks that hold evicted
// tensors, reused across evictions of any size.
//
// A tensor's host copy is a list of pieces, each a chunk of a power-of-two multiple of the
// granularity, mapped side by side over the tensor's range (at most log2(span / granularity)
// + 1 pieces). Chunks freed by prefetches stay in the pool and serve later evictions of other
// sizes, so a job whose shapes change every iteration reuses what earlier shapes left instead
// of exhausting the pool with chunks of sizes it never sees again.
//
// Contract: take() returns pieces covering exactly `span` (a multiple of the granularity) or
// nothing, never more than `limit` bytes in chunks at once: when the free chunks are all too
// large to use, it releases some before creating smaller ones. Every driver call's result is
// checked; a failed creation or release leaves the pool consistent. Not thread-safe: the
// executor calls it under its mutex.
#pragma once

#include <cuda.h>

#include <cstddef>
#include <cstdint>
#include <map>
#include <vector>

#include "api.hpp"

namespace capuchin::interpose::exec {

struct HostPiece {
  CUmemGenericAllocationHandle handle = 0;
  std::size_t bytes = 0;
};

class HostPool {
 public:
  // `where`: the host location chunks are created at (HOST, or HOST_NUMA on drivers without it).
  void configure(const Api* api, std::size_t granularity, std::uint64_t limit,
                 CUmemLocation where = {CU_MEM_LOCATION_TYPE_HOST, 0}) {
    api_ = api;
    gran_ = granularity;
    limit_ = limit;
    where_ = where;
  }
  std::uint64_t limit() const { return limit_; }
  std::uint64_t bytes() const { return bytes_; }      // chunks created and not released
  std::uint64_t free_bytes() const { return free_; }  // of which idle in the pool
  std::uint64_t peak_bytes() const { return peak_; }

  // Pieces covering `span` bytes, or an empty list when the limit (or the driver) refuses.
  std::vector<HostPiece> take(std::size_t span);
  // Returns pieces to the pool (they stay created, for later takes).
  void give(std::vector<HostPiece>& pieces);
  // Releases every idle chunk (at exit).
  void release_idle();

 private:
  bool create(std::size_t bytes, HostPiece& out);
  bool release_largest_idle();

  const Api* api_ = nullptr;
  std::size_t gran_ = 2u << 20;
  CUmemLocation where_{CU_MEM_LOCATION_TYPE_HOST, 0};
  std::uint64_t limit_ = 0;
  std::uint64_t bytes_ = 0;
  std::uint64_t free_ = 0;
  std::uint64_t peak_ = 0;
  std::multimap<std::size_t, CUmemGenericAllocationHandle> idle_;  // by chunk size
};

}  // namespace capuchin::interpose::exec
