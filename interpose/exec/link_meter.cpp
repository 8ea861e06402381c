// link_meter.cpp: see link_meter.hpp.
#include "link_meter.hpp"

#include <algorithm>

#include "event_pool.hpp"

namespace capuchin::interpose::exec {

int LinkMeter::begin(CUstream s, std::uint64_t bytes, bool to_host) {
  if (api_ == nullptr || api_->event_elapsed == nullptr || bytes < kMinBytes) return -1;
  poll();  // the moves before it that completed: their pairs are free again (polled per move, not per event)
  if (free_.empty()) {
    if (pairs_.size() >= static_cast<std::size_t>(kMaxPairs)) return -1;
    const InContext own(*api_, ctx_);  // the executor's context: the moves' streams are its
    if (own.failed()) return -1;
    Pair p;
    if (!make_timing_pair(*api_, p.start, p.end)) return -1;
    pairs_.push_back(p);
    free_.push_back(static_cast<int>(pairs_.size() - 1));
  }
  const int k = free_.back();
  free_.pop_back();
  Pair& p = pairs_[static_cast<std::size_t>(k)];
  // A record that failed once would fail on every later move: the pair is not offered again
  // (at most kMaxPairs lost in a run; timing then stops, which costs only the rates).
  if (api_->event_record(p.start, s) != CUDA_SUCCESS) return -1;
  p.bytes = bytes;
  p.to_host = to_host;
  return k;
}

void LinkMeter::end(int pair, CUstream s, bool made) {
  if (pair < 0) return;
  if (!made || api_->event_record(pairs_[static_cast<std::size_t>(pair)].end, s) != CUDA_SUCCESS) {
    free_.push_back(pair);  // no move, or not timed: free again
    return;
  }
  pending_.push_back(pair);
}

void LinkMeter::poll_slow() {
  while (!pending_.empty()) {
    const int k = pending_.front();
    Pair& p = pairs_[static_cast<std::size_t>(k)];
    // Moves on one stream complete in order; the two streams' interleave, so one still running
    // holds back the other's for a poll or two (cost only).
    const CUresult q = api_->event_query(p.end);
    if (q == CUDA_ERROR_NOT_READY) return;
    pending_.pop_front();
    free_.push_back(k);
    float ms = 0;
    if (q != CUDA_SUCCESS || api_->event_elapsed(&ms, p.start, p.end) != CUDA_SUCCESS || !(ms > 0)) continue;
    const double seconds = static_cast<double>(ms) * 1e-3, bytes = static_cast<double>(p.bytes);
    if (max_bytes_per_s_ > 0 && bytes > max_bytes_per_s_ * seconds) continue;  // no link moves that fast: nothing moved
    Way& w = way_[p.to_host ? 1 : 0];
    w.bytes = w.bytes * kDecay + bytes;
    w.seconds = w.seconds * kDecay + seconds;
    w.count = w.count * kDecay + 1;
    ++w.total;
  }
}

double LinkMeter::bytes_per_s(bool to_host, double latency_s) const {
  const Way& w = way_[to_host ? 1 : 0];
  if (w.total < kMinSamples) return 0;
  // The copies' fixed cost comes off, but never more than half their time (a copy measured
  // faster than the model's latency allows would otherwise give an unbounded rate).
  const double moving = std::max(w.seconds - w.count * latency_s, w.seconds / 2);
  return moving > 0 ? w.bytes / moving : 0;
}

}  // namespace capuchin::interpose::exec
