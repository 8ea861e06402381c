// link_meter.hpp: the host link's speed each way, measured on capuchin's own moves, so that
// plans and the passive victim order time swaps as this machine runs them, not as a GPU
// profile's datasheet says. The two can differ by 4x: Unified Memory migrates to the host at
// 16 GB/s on an H200 where a pinned copy runs at 55 (README, Results), and GPUs that share a
// host link get a share of it.
//
// Contract: every call runs under the executor's lock and never waits. begin() records a timing
// event on the move's stream right before the move is enqueued, after the waits that order it
// (an event recorded after cuStreamWaitEvent completes only once those waits are met and the
// stream's earlier work is done, so it marks when the stream could start the copy); end()
// records a second one right after it. What else uses the link meanwhile (the job's own copies
// on its streams, capuchin's moves the other way) slows the copy and so the rate measured:
// that is the link a move gets. poll() reads the pairs that completed, oldest first, without
// waiting; begin() polls first, so the launch path never does (a timed move in flight would
// otherwise cost every launch an event query). Moves under kMinBytes are not timed: their fixed cost would hide the rate. A sample
// faster than `max_bytes_per_s` (twice the profile's link: a Unified Memory prefetch of pages
// already where they go costs almost nothing) is dropped. A rate is bytes over the copies'
// time less their fixed cost (the latency the planner adds to each copy itself), recent moves
// weighing most. The events are made in the executor's context, whatever is current.
#pragma once

#include <cuda.h>

#include <cstdint>
#include <deque>
#include <vector>

#include "api.hpp"

namespace capuchin::interpose::exec {

class LinkMeter {
 public:
  static constexpr std::uint64_t kMinBytes = 1u << 20;  // 1 MiB: 20 us at 55 GB/s, twice a copy's fixed cost
  static constexpr int kMaxPairs = 64;                  // moves timed at once; more go untimed
  static constexpr std::uint64_t kMinSamples = 3;      // moves each way before a rate is given

  void configure(const Api* api, CUcontext ctx, double max_bytes_per_s) {
    api_ = api, ctx_ = ctx, max_bytes_per_s_ = max_bytes_per_s;
  }
  // A timing pair for a move of `bytes` on `s` (to the host or to the device); -1: not timed.
  int begin(CUstream s, std::uint64_t bytes, bool to_host);
  // After the move was enqueued on `s` (made), or not (the pair is free again).
  void end(int pair, CUstream s, bool made);
  void poll() {
    if (!pending_.empty()) poll_slow();
  }
  // Bytes per second each way, `latency_s` per copy left out; 0 until kMinSamples were measured.
  double bytes_per_s(bool to_host, double latency_s) const;
  std::uint64_t measured(bool to_host) const { return way_[to_host ? 1 : 0].total; }

 private:
  void poll_slow();
  struct Pair {
    CUevent start = nullptr, end = nullptr;
    std::uint64_t bytes = 0;
    bool to_host = false;
  };
  // Sums over measured moves, each older one weighing kDecay as much as the next.
  struct Way {
    double bytes = 0, seconds = 0, count = 0;
    std::uint64_t total = 0;  // moves measured, for the log and tests
  };
  static constexpr double kDecay = 0.95;  // about the last 20 moves

  const Api* api_ = nullptr;
  CUcontext ctx_ = nullptr;
  double max_bytes_per_s_ = 0;  // 0: no limit
  std::vector<Pair> pairs_;
  std::vector<int> free_;
  std::deque<int> pending_;
  Way way_[2];  // [0] to the device, [1] to the host
};

}  // namespace capuchin::interpose::exec
