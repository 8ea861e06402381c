// replay_allocator.hpp: how sim_trace_replay gets device memory for a trace's tensors, in the
// three ways PyTorch jobs do: one cudaMallocAsync/cudaFreeAsync per tensor (PyTorch's
// backend:cudaMallocAsync), one cudaMalloc/cudaFree per tensor, or a caching allocator shaped
// like PyTorch's native CUDACachingAllocator (segments from cudaMalloc kept for the whole run,
// tensors sub-allocated inside them).
//
// Contract: allocate() returns device memory of at least `bytes` bytes or exits the process
// (2 on out of memory, 1 on another CUDA error, the error named on stderr); release() takes a
// pointer allocate() returned (nullptr is ignored). Caching mode, as PyTorch's allocator
// (c10/cuda/CUDACachingAllocator.cpp): sizes round up to 512 bytes; requests up to 1 MiB come
// from 2 MiB segments, those under 10 MiB from 20 MiB segments, larger ones get a segment of
// their own rounded up to 2 MiB; best fit among free blocks of the pool, the rest split off
// (in the large pool only when more than 1 MiB remains) and merged back on free; when cudaMalloc fails, every wholly free segment is released and the
// request retried once. Not thread-safe: the replay is single-threaded. Header-only.
#pragma once

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <iterator>
#include <map>
#include <set>
#include <string>
#include <utility>

#include <cuda_runtime_api.h>

// Exits on a CUDA error, naming it: 2 for out of memory (what the tests look for), else 1.
inline void check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) {
    std::fprintf(stderr, "sim_trace_replay: %s failed: %s (%s)\n", what, cudaGetErrorString(e), cudaGetErrorName(e));
    std::exit(e == cudaErrorMemoryAllocation ? 2 : 1);
  }
}

enum class AllocMode { Async, Sync, Caching };

inline AllocMode parse_alloc_mode(const std::string& s) {
  return s == "sync" ? AllocMode::Sync : s == "caching" ? AllocMode::Caching : AllocMode::Async;
}

class ReplayAllocator {
 public:
  void* allocate(AllocMode mode, std::uint64_t bytes) {
    void* p = nullptr;
    switch (mode) {
      case AllocMode::Async: check(cudaMallocAsync(&p, bytes, nullptr), "cudaMallocAsync"); return p;
      case AllocMode::Sync: check(cudaMalloc(&p, bytes), "cudaMalloc"); return p;
      case AllocMode::Caching: return cached(bytes);
    }
    return nullptr;
  }

  void release(AllocMode mode, void* p) {
    if (p == nullptr) return;
    switch (mode) {
      case AllocMode::Async: check(cudaFreeAsync(p, nullptr), "cudaFreeAsync"); return;
      case AllocMode::Sync: check(cudaFree(p), "cudaFree"); return;
      case AllocMode::Caching: uncache(reinterpret_cast<std::uintptr_t>(p)); return;
    }
  }

 private:
  static constexpr std::uint64_t kSmallRequest = 1u << 20, kSmallSegment = 2u << 20;
  static constexpr std::uint64_t kLargeRequest = 10u << 20, kLargeSegment = 20u << 20;
  static constexpr std::uint64_t kRound = 512;

  struct Block {
    std::uint64_t bytes;
    std::uintptr_t segment;  // the segment's base
    bool free, small;
  };

  void* cached(std::uint64_t bytes) {
    const std::uint64_t size = (bytes + kRound - 1) / kRound * kRound;
    const bool small = size <= kSmallRequest;
    auto& pool = small ? small_free_ : large_free_;
    auto it = pool.lower_bound({size, 0});
    if (it == pool.end()) {
      new_segment(size, small);
      it = pool.lower_bound({size, 0});
    }
    const std::uintptr_t at = it->second;
    pool.erase(it);
    Block& b = blocks_.at(at);
    const std::uint64_t rest = b.bytes - size;
    if (small ? rest >= kRound : rest > kSmallRequest) {  // split the rest off as a free block
      blocks_[at + size] = Block{b.bytes - size, b.segment, true, b.small};
      pool.insert({b.bytes - size, at + size});
      b.bytes = size;
    }
    b.free = false;
    return reinterpret_cast<void*>(at);
  }

  void new_segment(std::uint64_t size, bool small) {
    const std::uint64_t seg = small ? kSmallSegment : size < kLargeRequest ? kLargeSegment : (size + kSmallSegment - 1) / kSmallSegment * kSmallSegment;
    void* p = nullptr;
    cudaError_t e = cudaMalloc(&p, seg);
    if (e == cudaErrorMemoryAllocation) {
      (void)cudaGetLastError();  // the failure is handled here: release what is cached, retry once
      release_free_segments();
      e = cudaMalloc(&p, seg);
    }
    check(e, "cudaMalloc (caching allocator segment)");
    const auto at = reinterpret_cast<std::uintptr_t>(p);
    blocks_[at] = Block{seg, at, true, small};
    segments_[at] = seg;
    (small ? small_free_ : large_free_).insert({seg, at});
  }

  void uncache(std::uintptr_t at) {
    auto it = blocks_.find(at);
    if (it == blocks_.end() || it->second.free) {
      std::fprintf(stderr, "sim_trace_replay: caching allocator: free of %#lx, not an allocated block\n",
                   static_cast<unsigned long>(at));
      std::exit(1);
    }
    it->second.free = true;
    auto& pool = it->second.small ? small_free_ : large_free_;
    auto next = std::next(it);  // merge with the free neighbours of the same segment
    if (next != blocks_.end() && next->second.free && next->second.segment == it->second.segment) {
      pool.erase({next->second.bytes, next->first});
      it->second.bytes += next->second.bytes;
      blocks_.erase(next);
    }
    if (it != blocks_.begin()) {
      auto prev = std::prev(it);
      if (prev->second.free && prev->second.segment == it->second.segment) {
        pool.erase({prev->second.bytes, prev->first});
        prev->second.bytes += it->second.bytes;
        blocks_.erase(it);
        it = prev;
      }
    }
    pool.insert({it->second.bytes, it->first});
  }

  void release_free_segments() {
    for (auto s = segments_.begin(); s != segments_.end();) {
      auto b = blocks_.find(s->first);
      if (b != blocks_.end() && b->second.free && b->second.bytes == s->second) {
        (b->second.small ? small_free_ : large_free_).erase({b->second.bytes, b->first});
        blocks_.erase(b);
        check(cudaFree(reinterpret_cast<void*>(s->first)), "cudaFree (caching allocator segment)");
        s = segments_.erase(s);
      } else {
        ++s;
      }
    }
  }

  std::map<std::uintptr_t, Block> blocks_;                        // by address, every block of every segment
  std::map<std::uintptr_t, std::uint64_t> segments_;              // base -> bytes
  std::set<std::pair<std::uint64_t, std::uintptr_t>> small_free_;  // (bytes, address) of free blocks
  std::set<std::pair<std::uint64_t, std::uintptr_t>> large_free_;
};
