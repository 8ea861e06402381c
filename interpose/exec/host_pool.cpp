// host_pool.cpp: see host_pool.hpp.
#include "host_pool.hpp"

#include <algorithm>

#include "config.hpp"

namespace capuchin::interpose::exec {

namespace {
// The largest power-of-two multiple of `gran` that is at most `bytes` (bytes >= gran).
std::size_t largest_piece(std::size_t bytes, std::size_t gran) {
  std::size_t p = gran;
  while (p <= bytes / 2) p *= 2;
  return p;
}
}  // namespace

bool HostPool::create(std::size_t bytes, HostPiece& out) {
  CUmemAllocationProp p{};
  p.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  p.location = where_;
  CUmemGenericAllocationHandle h = 0;
  if (CUresult r = api_->mem_create(&h, bytes, &p, 0); r != CUDA_SUCCESS) {
    log(LogLevel::Warn, "executor: cannot create a host chunk of %zu bytes (CUresult %d)", bytes, static_cast<int>(r));
    return false;
  }
  bytes_ += bytes;
  peak_ = std::max(peak_, bytes_);
  out = HostPiece{h, bytes};
  return true;
}

bool HostPool::release_largest_idle() {
  if (idle_.empty()) return false;
  auto it = std::prev(idle_.end());
  const std::size_t size = it->first;
  const CUresult r = api_->mem_release(it->second);
  idle_.erase(it);
  free_ -= size;
  // A failed release (the handle is mapped somewhere: a bug of ours) still leaves the pool
  // without it; its bytes stay counted so the limit holds.
  if (r == CUDA_SUCCESS) bytes_ -= size;
  else log(LogLevel::Error, "executor: releasing an idle host chunk failed (CUresult %d)", static_cast<int>(r));
  return true;
}

std::vector<HostPiece> HostPool::take(std::size_t span) {
  std::vector<HostPiece> out;
  // What is in use plus this span must fit the limit; then it always can (idle chunks too
  // large are released, smaller pieces created), and a refusal creates nothing.
  if (bytes_ - free_ + span > limit_) return out;
  std::size_t left = span;
  while (left >= gran_) {
    const std::size_t ideal = largest_piece(left, gran_);
    // The largest idle chunk that fits what is left. It is used when it is the ideal piece
    // (or larger), or when a new ideal piece would pass the limit: few pieces mean few
    // map calls per move, reuse means a bounded pool.
    auto it = idle_.upper_bound(left);
    const bool fits = it != idle_.begin();
    if (fits) --it;
    if (fits && (it->first >= ideal || bytes_ + ideal > limit_)) {
      out.push_back(HostPiece{it->second, it->first});
      left -= it->first;
      free_ -= it->first;
      idle_.erase(it);
      continue;
    }
    // Create a piece, making room under the limit by releasing idle chunks too large for
    // this tensor, then by creating smaller pieces.
    std::size_t want = ideal;
    while (bytes_ + want > limit_ && !fits && release_largest_idle()) {
    }
    while (bytes_ + want > limit_ && want > gran_) want /= 2;
    HostPiece piece;
    if (bytes_ + want > limit_ || !create(want, piece)) break;
    out.push_back(piece);
    left -= want;
  }
  if (left != 0) {  // refused: nothing is taken
    give(out);
    out.clear();
  }
  return out;
}

void HostPool::give(std::vector<HostPiece>& pieces) {
  for (const HostPiece& p : pieces) {
    if (p.handle == 0) continue;
    idle_.insert({p.bytes, p.handle});
    free_ += p.bytes;
  }
  pieces.clear();
}

void HostPool::release_idle() {
  while (release_largest_idle()) {
  }
}

}  // namespace capuchin::interpose::exec
