// device_checksum.hpp: the probation's checksum kernels on the device (issue 15): the checksum
// of a range without copying it to the host, and the complement of a range (the probation's
// scramble, its own inverse). The kernels are checksum_kernels.cuh, embedded as PTX at build
// time and loaded with cuModuleLoadData into each context that probes (on simcuda its
// registered equivalent runs instead; tests/simcuda/README.md).
//
// Contract: callable from any thread, outside the executor's lock (it takes only its own
// mutex, and never across a driver call). Every call works in the calling thread's current
// context, on the stream it is given, behind the work already there. It takes no device memory
// (the budget is the job's): the kernels' per-block sums land in mapped pinned host memory,
// 256 KiB per concurrent caller, kept for reuse. A context where the
// module cannot be loaded (no PTX built in, a driver older than the PTX, a driver refusing JIT)
// is remembered as such, logged once, and available() is false there: the caller hashes on the
// host instead. A context destroyed and another created at the same handle would find the old
// module's entry (the jobs we serve use the primary context, which lives until exit).
#pragma once

#include <cuda.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <span>
#include <vector>

#include "api.hpp"

namespace capuchin::interpose::exec {

class DeviceChecksum {
 public:
  struct Range {
    CUdeviceptr base = 0;
    std::size_t bytes = 0;
  };
  // At most this many ranges per sums() call, and blocks per checksum launch.
  static constexpr std::size_t kMaxRanges = 32;
  static constexpr unsigned kMaxGrid = 1024;

  // Whether the kernels can run in the current context (loading them on first use).
  bool available(const Api& api);
  // out[i] = the checksum (capuchin/checksum.hpp) of ranges[i], computed on `stream` behind its
  // work and waited for. false on any driver error (out is then unspecified).
  bool sums(const Api& api, CUstream stream, std::span<const Range> ranges, std::uint64_t* out);
  // Every byte of the range complemented, queued on `stream` (not waited for).
  bool complement(const Api& api, CUstream stream, Range r);
  // Whether the kernels computed any checksum (the executor summary's checksum=device|host: a
  // probation that fell back to the host after they failed does not count).
  bool used() const { return ran_.load(std::memory_order_relaxed); }

 private:
  struct Loaded {
    CUcontext ctx = nullptr;
    CUmodule module = nullptr;
    CUfunction sum = nullptr, complement = nullptr;
    bool failed = false;
    std::vector<void*> free_partials;  // mapped pinned host buffers of kMaxRanges x kMaxGrid sums, not in use
  };
  Loaded* find(CUcontext ctx);              // requires mu_
  bool load(const Api& api, Loaded& into);  // driver calls only: no lock held
  bool current(const Api& api, Loaded& out);  // the current context's kernels (a copy)
  void* take_partials(const Api& api, CUcontext ctx);
  void give_partials(CUcontext ctx, void* partials);

  mutable std::mutex mu_;
  std::vector<Loaded> loaded_;  // guarded by mu_; a handful of contexts
  std::atomic<bool> ran_{false};  // a sums() call succeeded
};

}  // namespace capuchin::interpose::exec
