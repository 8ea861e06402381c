// write_sets.cpp: launch shapes, the verdict table and the probation's driver steps (see
// write_sets.hpp).
#include "write_sets.hpp"

#include <algorithm>
#include <atomic>
#include <cstring>
#include <new>
#include <span>

#include "block.hpp"
#include "capuchin/checksum.hpp"
#include "config.hpp"
#include "executor.hpp"
#include "kernels.hpp"

namespace capuchin::interpose::exec {

namespace {

constexpr std::size_t kChunk = std::size_t{8} << 20;  // bytes per host copy (a multiple of 8)
// A launch touching more than this is not probed (its bytes are kept on the host meanwhile).
constexpr std::uint64_t kMaxProbationBytes = std::uint64_t{256} << 20;

std::uint64_t mix(std::uint64_t h, std::uint64_t v) {
  h = (h ^ v) * 0x9e3779b97f4a7c15ull;
  return h ^ (h >> 29);
}

std::uint64_t hash_bytes(const std::uint8_t* p, std::size_t n, std::uint64_t h) {
  std::size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    std::uint64_t w;
    std::memcpy(&w, p + i, 8);
    h = mix(h, w);
  }
  std::uint64_t tail = 0;
  std::memcpy(&tail, p + i, n - i);
  return mix(mix(h, tail), n);
}

// Everything on the launch's stream so far has run (the copies below are queued there too).
bool sync(const Api& api, const Probation& p) { return api.stream_synchronize(p.stream) == CUDA_SUCCESS; }

// [at, at + n) of the range into `out` (resized), through the launch's stream; false on a driver
// error or no host memory.
bool read_chunk(const Api& api, Probation& p, CUdeviceptr at, std::size_t n, std::vector<std::uint8_t>& out) {
  try {
    out.resize(n);
  } catch (const std::bad_alloc&) {
    return false;
  }
  p.bytes_copied += n;
  return n == 0 || (api.memcpy_dtoh_async(out.data(), at, n, p.stream) == CUDA_SUCCESS && sync(api, p));
}

bool write_back(const Api& api, Probation& p, std::size_t i) {
  const Probation::Range& r = p.ranges[i];
  if (r.bytes == 0) return true;
  if (i >= p.kept.size() || p.kept[i].size() != r.bytes) return false;
  p.bytes_copied += r.bytes;
  return api.memcpy_htod_async(r.base, p.kept[i].data(), r.bytes, p.stream) == CUDA_SUCCESS && sync(api, p);
}

// A range's checksum (capuchin/checksum.hpp) read through the host in chunks.
bool host_checksum(const Api& api, Probation& p, const Probation::Range& r, std::vector<std::uint8_t>& buf,
                   std::uint64_t* out) {
  std::uint64_t sum = 0;
  for (std::size_t at = 0; at < r.bytes; at += kChunk) {
    const std::size_t n = std::min(kChunk, r.bytes - at);
    if (!read_chunk(api, p, r.base + at, n, buf)) return false;
    sum = checksum::add_words(sum, buf.data(), n, at / checksum::kWordBytes);
  }
  *out = checksum::finish(sum, r.bytes);
  return true;
}

// Every range's checksum into `field`, behind the work on the launch's stream: by the checksum
// kernel where it runs (nothing crosses the link), else through the host. With `keep` (host
// only), each range's bytes stay in p.kept: probation_keep then has nothing left to copy.
bool checksum_all(const Api& api, Probation& p, std::uint64_t Probation::Range::*field, bool keep = false) {
  for (const Probation::Range& r : p.ranges) p.bytes_hashed += r.bytes;
  if (p.on_device) {
    DeviceChecksum::Range ranges[DeviceChecksum::kMaxRanges];
    std::uint64_t sums[DeviceChecksum::kMaxRanges];
    for (std::size_t i = 0; i < p.ranges.size(); ++i) ranges[i] = {p.ranges[i].base, p.ranges[i].bytes};
    if (p.device->sums(api, p.stream, std::span(ranges, p.ranges.size()), sums)) {
      for (std::size_t i = 0; i < p.ranges.size(); ++i) p.ranges[i].*field = sums[i];
      return true;
    }
    // The kernels failed here (a launch refused, no pinned memory for the sums): the rest of
    // this probation hashes through the host, with the same checksum, rather than spending one
    // of the function's probations on an inconclusive result.
    p.on_device = false;
    static std::atomic<bool> said{false};
    if (!said.exchange(true, std::memory_order_relaxed))
      log(LogLevel::Info, "executor: the checksum kernels failed to run (no page-locked memory for their sums, or a "
                          "launch refused): those probations hash on the host");
  }
  if (keep) {
    try {
      p.kept.resize(p.ranges.size());
    } catch (const std::bad_alloc&) {
      return false;
    }
    for (std::size_t i = 0; i < p.ranges.size(); ++i) {
      Probation::Range& r = p.ranges[i];
      if (!read_chunk(api, p, r.base, r.bytes, p.kept[i])) return false;
      r.*field = checksum::of_host(p.kept[i].data(), r.bytes);
    }
    return true;
  }
  std::vector<std::uint8_t> buf;
  for (Probation::Range& r : p.ranges)
    if (!host_checksum(api, p, r, buf, &(r.*field))) return false;
  return true;
}

}  // namespace

const char* to_string(Verdict v) {
  switch (v) {
    case Verdict::Unknown: return "unverified";
    case Verdict::Replayable: return "replayable";
    case Verdict::SideEffect: return "side-effect";
    case Verdict::NotDeterministic: return "not-deterministic";
    case Verdict::NoOutput: return "no-output";
    case Verdict::ForeignMemory: return "foreign-memory";
  }
  return "?";
}

Shape shape_of(CUfunction f, const KernelInfo& ki, void** params, const std::vector<Block*>& touched, const Launch& l) {
  Shape s;
  if (params == nullptr || ki.offset.empty() || touched.size() > kMaxShapeBlocks) return s;
  std::uint64_t h = mix(0x13198a2e03707344ull, reinterpret_cast<std::uint64_t>(f));
  for (unsigned d = 0; d < 3; ++d) h = mix(mix(h, l.grid[d]), l.block[d]);  // split-K and atomics may depend on them
  h = mix(h, l.shmem);
  for (std::size_t i = 0; i < touched.size(); ++i)
    if (touched[i]->holds_data == false) s.fresh_mask |= 1u << i;
  // Only shapes with a new block are ever probed, so one without has no verdict: not hashed
  // (in-place launches, optimizer steps: no work on the launch path for them).
  if (s.fresh_mask == 0) return s;
  h = mix(h, s.fresh_mask);
  for (std::size_t i = 0; i < ki.offset.size(); ++i) {
    const auto* p = static_cast<const std::uint8_t*>(params[i]);
    const std::uint32_t size = ki.size[i];
    if (p == nullptr) return s;
    std::uint32_t at = 0;
    // Words at 8-byte aligned offsets of the parameter buffer, as the launch scan reads them.
    for (; at + 8 <= size; at += 8) {
      std::uint64_t w;
      std::memcpy(&w, p + at, 8);
      std::uint64_t named = ~std::uint64_t{0};
      for (std::size_t b = 0; b < touched.size(); ++b)
        if (w >= touched[b]->base && w < touched[b]->base + touched[b]->span) {
          named = (b << 48) | (w - touched[b]->base);
          break;
        }
      h = named != ~std::uint64_t{0} ? mix(mix(h, 0x5851f42d4c957f2dull), named) : mix(h, w);
    }
    if (at < size) h = hash_bytes(p + at, size - at, h);
    h = mix(h, size);
  }
  s.key = h;
  s.usable = true;
  return s;
}

bool WriteSets::worth_a_shape(const KernelInfo& ki, bool may_probe) {
  const FunctionProbations& f = ki.probed;
  if (f.nondeterministic) return false;  // every shape of it refused, none probed again
  return f.replayable > 0 || (may_probe && f.probations < kMaxProbations);
}

WriteSets::Known WriteSets::lookup(const KernelInfo& ki, std::uint64_t shape) const {
  if (ki.probed.nondeterministic) return Known{Verdict::NotDeterministic, 0};
  auto it = shapes_.find(shape);
  return it == shapes_.end() ? Known{} : it->second;
}

bool WriteSets::begin_probation(KernelInfo& ki) {
  FunctionProbations& f = ki.probed;
  if (f.nondeterministic || f.probations >= kMaxProbations) return false;
  ++f.probations;
  ++probations_;
  return true;
}

void WriteSets::learn(KernelInfo& ki, std::uint64_t shape, Known k) {
  if (k.verdict == Verdict::Unknown) return;  // inconclusive: tried again later
  if (k.verdict == Verdict::NotDeterministic) ki.probed.nondeterministic = true;
  auto [it, fresh] = shapes_.try_emplace(shape, k);
  if (!fresh) {
    if (it->second.verdict != Verdict::Replayable) return;  // refused stays refused
    if (k.verdict != Verdict::Replayable) --replayable_, --ki.probed.replayable;
    it->second = k;
  }
  if (k.verdict == Verdict::Replayable && fresh) ++replayable_, ++ki.probed.replayable;
}

void probation_before(const Api& api, Probation& p) {
  std::uint64_t total = 0;
  for (const Probation::Range& r : p.ranges) total += r.bytes;
  if (api.memcpy_dtoh_async == nullptr || api.memcpy_htod_async == nullptr || api.pointer_attribute == nullptr ||
      total > kMaxProbationBytes || p.ranges.size() > DeviceChecksum::kMaxRanges) {
    p.ok = false;
    return;
  }
  for (std::uint64_t w : p.other_words) {
    unsigned type = 0;
    if (api.pointer_attribute(&type, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, w) == CUDA_SUCCESS) {
      p.verdict = WriteSets::Known{Verdict::ForeignMemory, 0};
      p.ok = false;
      return;
    }
  }
  for (CUevent e : p.waits)
    if (api.event_synchronize(e) != CUDA_SUCCESS) p.ok = false;
  p.on_device = p.device != nullptr && p.device->available(api);
  if (!p.ok || !sync(api, p) || !checksum_all(api, p, &Probation::Range::before)) p.ok = false;
}

WriteSets::Known probation_classify(const Api& api, Probation& p) {
  WriteSets::Known k;
  if (!p.ok || !checksum_all(api, p, &Probation::Range::after, /*keep=*/true)) return k;
  // Outputs: the fresh blocks the launch changed. A fresh block it left as it was is read (its
  // bytes written where the scan cannot see, through a pointer in device memory) or not used:
  // not an output, since replaying this launch would not bring it back. A block that held data
  // and changed is a side effect.
  for (std::size_t i = 0; i < p.ranges.size(); ++i) {
    const Probation::Range& r = p.ranges[i];
    if (r.before == r.after) continue;
    if (!r.fresh) {
      k.verdict = Verdict::SideEffect;
      return k;
    }
    k.outputs |= 1u << i;
  }
  k.verdict = k.outputs != 0 ? Verdict::Replayable : Verdict::NoOutput;
  return k;
}

// What the launch left in every range, so that whatever its replay changes can be undone.
bool probation_keep(const Api& api, Probation& p) {
  if (!p.on_device) return p.kept.size() == p.ranges.size();  // classify kept them while checksumming
  try {
    p.kept.resize(p.ranges.size());
  } catch (const std::bad_alloc&) {
    return false;
  }
  for (std::size_t i = 0; i < p.ranges.size(); ++i)
    if (!read_chunk(api, p, p.ranges[i].base, p.ranges[i].bytes, p.kept[i])) return false;
  return true;
}

bool probation_scramble(const Api& api, Probation& p, WriteSets::Known k) {
  std::vector<std::uint8_t> other;
  for (std::size_t i = 0; i < p.ranges.size(); ++i) {
    if (((k.outputs >> i) & 1u) == 0) continue;
    const Probation::Range& r = p.ranges[i];
    if (p.on_device) {
      if (!p.device->complement(api, p.stream, {r.base, r.bytes})) return false;
      continue;
    }
    for (std::size_t at = 0; at < r.bytes; at += kChunk) {
      const std::size_t n = std::min(kChunk, r.bytes - at);
      try {
        const auto from = p.kept[i].begin() + static_cast<std::ptrdiff_t>(at);
        other.assign(from, from + static_cast<std::ptrdiff_t>(n));
      } catch (const std::bad_alloc&) {
        return false;
      }
      for (std::uint8_t& b : other) b = static_cast<std::uint8_t>(~b);
      p.bytes_copied += n;
      if (api.memcpy_htod_async(r.base + at, other.data(), n, p.stream) != CUDA_SUCCESS || !sync(api, p)) return false;
    }
  }
  return true;
}

WriteSets::Known probation_compare(const Api& api, Probation& p, WriteSets::Known k, bool relaunched) {
  bool restore_failed = false;
  if (!relaunched || !checksum_all(api, p, &Probation::Range::replayed)) {
    // The relaunch (or the scramble) may have run partly: every block gets the launch's bytes back.
    for (std::size_t i = 0; i < p.ranges.size(); ++i) restore_failed |= !write_back(api, p, i);
    if (restore_failed) log(LogLevel::Error, "executor: a probation's changes could not all be undone (copy failed)");
    return WriteSets::Known{};
  }
  for (std::size_t i = 0; i < p.ranges.size(); ++i) {
    const Probation::Range& r = p.ranges[i];
    if (r.replayed == r.after) continue;
    if (k.verdict == Verdict::Replayable)
      k.verdict = ((k.outputs >> i) & 1u) != 0 ? Verdict::NotDeterministic : Verdict::SideEffect;
    restore_failed |= !write_back(api, p, i);
  }
  if (restore_failed)
    log(LogLevel::Error, "executor: a probation replay's changes could not all be undone (copy failed)");
  return k;
}

}  // namespace capuchin::interpose::exec
