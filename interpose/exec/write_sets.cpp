// write_sets.cpp: launch shapes, the verdict table and the probation's driver steps (see
// write_sets.hpp).
#include "write_sets.hpp"

#include <algorithm>
#include <cstring>
#include <new>

#include "block.hpp"
#include "config.hpp"
#include "executor.hpp"
#include "kernels.hpp"

namespace capuchin::interpose::exec {

namespace {

constexpr std::size_t kChunk = std::size_t{8} << 20;  // bytes hashed per copy
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
bool read_chunk(const Api& api, const Probation& p, CUdeviceptr at, std::size_t n, std::vector<std::uint8_t>& out) {
  try {
    out.resize(n);
  } catch (const std::bad_alloc&) {
    return false;
  }
  return n == 0 || (api.memcpy_dtoh_async(out.data(), at, n, p.stream) == CUDA_SUCCESS && sync(api, p));
}

bool write_back(const Api& api, const Probation& p, std::size_t i) {
  const Probation::Range& r = p.ranges[i];
  return r.bytes == 0 || (api.memcpy_htod_async(r.base, p.kept[i].data(), r.bytes, p.stream) == CUDA_SUCCESS && sync(api, p));
}

// A range's hash, the same whether its bytes are read in chunks from the device or hashed from
// a host copy: chunk by chunk, then its length.
constexpr std::uint64_t kSeed = 0x243f6a8885a308d3ull;

std::uint64_t hash_copy(const std::vector<std::uint8_t>& bytes) {
  std::uint64_t h = kSeed;
  for (std::size_t at = 0; at < bytes.size(); at += kChunk) h = hash_bytes(bytes.data() + at, std::min(kChunk, bytes.size() - at), h);
  return mix(h, bytes.size());
}

bool hash_range(const Api& api, const Probation& p, const Probation::Range& r, std::vector<std::uint8_t>& buf,
                std::uint64_t* out) {
  std::uint64_t h = kSeed;
  for (std::size_t at = 0; at < r.bytes; at += kChunk) {
    const std::size_t n = std::min(kChunk, r.bytes - at);
    if (!read_chunk(api, p, r.base + at, n, buf)) return false;
    h = hash_bytes(buf.data(), n, h);
  }
  *out = mix(h, r.bytes);
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

WriteSets::Known WriteSets::lookup(CUfunction f, std::uint64_t shape) const {
  if (auto fn = functions_.find(f); fn != functions_.end() && fn->second.nondeterministic)
    return Known{Verdict::NotDeterministic, 0};
  auto it = shapes_.find(shape);
  return it == shapes_.end() ? Known{} : it->second;
}

bool WriteSets::begin_probation(CUfunction f) {
  PerFunction& pf = functions_[f];
  if (pf.nondeterministic || pf.probations >= kMaxProbations) return false;
  ++pf.probations;
  ++probations_;
  return true;
}

void WriteSets::learn(CUfunction f, std::uint64_t shape, Known k) {
  if (k.verdict == Verdict::Unknown) return;  // inconclusive: tried again later
  if (k.verdict == Verdict::NotDeterministic) functions_[f].nondeterministic = true;
  auto [it, fresh] = shapes_.try_emplace(shape, k);
  if (!fresh) {
    if (it->second.verdict != Verdict::Replayable) return;  // refused stays refused
    if (k.verdict != Verdict::Replayable) --replayable_;
    it->second = k;
  }
  if (k.verdict == Verdict::Replayable && fresh) ++replayable_;
}

void probation_before(const Api& api, Probation& p) {
  std::uint64_t total = 0;
  for (const Probation::Range& r : p.ranges) total += r.bytes;
  if (api.memcpy_dtoh_async == nullptr || api.memcpy_htod_async == nullptr || api.pointer_attribute == nullptr ||
      total > kMaxProbationBytes) {
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
  if (!p.ok || !sync(api, p)) {
    p.ok = false;
    return;
  }
  std::vector<std::uint8_t> buf;
  for (Probation::Range& r : p.ranges) {
    if (!hash_range(api, p, r, buf, &r.before)) {
      p.ok = false;
      return;
    }
    p.bytes_hashed += r.bytes;
  }
}

WriteSets::Known probation_classify(const Api& api, Probation& p) {
  WriteSets::Known k;
  if (!p.ok || !sync(api, p)) return k;
  try {
    p.kept.resize(p.ranges.size());
  } catch (const std::bad_alloc&) {
    return k;
  }
  for (std::size_t i = 0; i < p.ranges.size(); ++i) {
    Probation::Range& r = p.ranges[i];
    if (!read_chunk(api, p, r.base, r.bytes, p.kept[i])) return k;
    r.after = hash_copy(p.kept[i]);
    p.bytes_hashed += r.bytes;
  }
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

bool probation_scramble(const Api& api, Probation& p, WriteSets::Known k) {
  std::vector<std::uint8_t> other;
  for (std::size_t i = 0; i < p.ranges.size(); ++i) {
    if (((k.outputs >> i) & 1u) == 0) continue;
    const Probation::Range& r = p.ranges[i];
    for (std::size_t at = 0; at < r.bytes; at += kChunk) {
      const std::size_t n = std::min(kChunk, r.bytes - at);
      try {
        other.assign(p.kept[i].begin() + static_cast<std::ptrdiff_t>(at), p.kept[i].begin() + static_cast<std::ptrdiff_t>(at + n));
      } catch (const std::bad_alloc&) {
        return false;
      }
      for (std::uint8_t& b : other) b = static_cast<std::uint8_t>(~b);
      if (api.memcpy_htod_async(r.base + at, other.data(), n, p.stream) != CUDA_SUCCESS || !sync(api, p)) return false;
    }
  }
  return true;
}

WriteSets::Known probation_compare(const Api& api, Probation& p, WriteSets::Known k, bool relaunched) {
  bool restore_failed = false;
  if (!relaunched || !sync(api, p)) {
    // The relaunch (or the scramble) may have run partly: every block gets the launch's bytes back.
    for (std::size_t i = 0; i < p.ranges.size(); ++i) restore_failed |= !write_back(api, p, i);
    if (restore_failed) log(LogLevel::Error, "executor: a probation's changes could not all be undone (copy failed)");
    return WriteSets::Known{};
  }
  std::vector<std::uint8_t> now;
  for (std::size_t i = 0; i < p.ranges.size(); ++i) {
    const Probation::Range& r = p.ranges[i];
    bool same = true, read = true;
    for (std::size_t at = 0; at < r.bytes && same; at += kChunk) {
      const std::size_t n = std::min(kChunk, r.bytes - at);
      read = read_chunk(api, p, r.base + at, n, now);
      same = read && std::memcmp(now.data(), p.kept[i].data() + at, n) == 0;
    }
    p.bytes_hashed += r.bytes;
    if (same) continue;
    if (!read) k = WriteSets::Known{};
    else if (k.verdict == Verdict::Replayable)
      k.verdict = ((k.outputs >> i) & 1u) != 0 ? Verdict::NotDeterministic : Verdict::SideEffect;
    restore_failed |= !write_back(api, p, i);
  }
  if (restore_failed)
    log(LogLevel::Error, "executor: a probation replay's changes could not all be undone (copy failed)");
  return k;
}

}  // namespace capuchin::interpose::exec
