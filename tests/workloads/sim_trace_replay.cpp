// sim_trace_replay: a real model's trace (docs/TRACE_FORMAT.md) executed as a CUDA program on
// simcuda, with PyTorch's habits, so the executor is tried on the shapes of real models and
// not only on the programs written for it. What runs is the trace's steady run,
// capuchin::trace::repeat_last_iteration(trace, --iters) (include/capuchin/trace_repeat.hpp:
// the set-up, a preamble making the state the last iteration inherits, then the last
// iteration --iters times with fresh tensors and the inherited/kept hand-over), the very
// sequence `capuchin sim --iters N` simulates. Event by event:
//   - each `alloc`/`free` is one cudaMallocAsync/cudaFreeAsync (--alloc async, PyTorch's
//     backend:cudaMallocAsync), one cudaMalloc/cudaFree (sync), or a block of a caching
//     allocator shaped like PyTorch's native one (caching: 2 MiB segments for requests up to
//     1 MiB, 20 MiB for those under 10 MiB, larger ones rounded to 2 MiB; best fit, split,
//     merged on free, segments kept for the whole run);
//   - each `kernel` is one or more cudaLaunchKernel calls of a registered host function: up to
//     4 read and 2 written tensors as separate pointer parameters, more as a by-value struct
//     (as TensorIterator and foreach kernels pass them), at most kListTensors per launch;
//   - `copy h2d` of a batch is a blocking cudaMemcpy from pageable memory (--syncs batch), else
//     cudaMemcpyAsync from pinned memory; `copy d2h` (the loss's `.item()`) is a blocking read
//     (--syncs loss, always on); `sync` is cudaDeviceSynchronize with --syncs ...,device;
//   - at the first `iter`, every allocated tensor nothing has written yet (parameters the trace
//     only reads, such as batch-norm statistics, and the preamble's optimizer state) is written
//     once by a kernel of its own, so that it counts in every hash.
//
// Contract (tests rely on it): stdout holds `iter N loss <16 hex>` per iteration and a final
// `weights <16 hex>` line (a hash of every tensor alive at the end), nothing else; the same
// options give bit-identical output on every run, with or without capuchin. A kernel's
// outputs are computed from its inputs' bytes (every byte of an output written: a fill, then
// the sampled words): every tensor is sampled at one 8-byte word
// per 4 KiB page plus its last word (the whole range is declared to simcuda, so a missing page
// still faults), so a missing, stale or misplaced page changes the result. Each launch's
// virtual time is the trace's duration for the event on --gpu (dur_ns, else the simulator's
// roofline) when its data is on the device, but never less than simcuda's own cost (2 us per
// launch plus the declared bytes at 900 GB/s); a kernel split over several launches shares its
// duration as launch_accesses says; faults and host-resident data add to it as simcuda
// charges them. Exit 0 on success, 1 on a bad trace (or one that cannot be repeated) or a
// CUDA error (named on stderr), 2 on out of memory. `--print-peak` runs the replay and prints
// simcuda's device peak in bytes instead (run it without capuchin).
//
// `--timing FILE` writes, per iteration, simcuda's HOST virtual clock (simcuda_host_virtual_ns:
// the virtual finish of the last operation the host waited for) when the iteration ends, i.e.
// when the replay reaches the next `iter` (or the end of the trace, before the final hash),
// as lines `<iteration> <ns>`, line `0 <ns>` being the clock when iteration 1 begins (after
// set-up). In every shipped trace an iteration ends with the loss read (a blocking d2h copy)
// followed only by a `sync` and frees, so the figure is the end of that read: the time the
// training loop's host thread has reached, deterministic run to run (the stream clocks, which
// worker threads advance asynchronously, are not). Steady time per iteration: differences of
// consecutive lines.
#include "capuchin/args.hpp"

#include <algorithm>
#include <array>
#include <utility>
#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include <cuda_runtime_api.h>

#include "capuchin/sim.hpp"
#include "capuchin/trace_model.hpp"
#include "capuchin/trace_repeat.hpp"
#include "replay_allocator.hpp"
#include "simcuda/kernel.hpp"

namespace {

using capuchin::trace::AccessMode;
using capuchin::trace::CopyDir;
using capuchin::trace::Op;
namespace tr = capuchin::trace;

constexpr std::size_t kSampleStride = 4096;
constexpr int kListTensors = 24;

// ---- sampling and hashing --------------------------------------------------------------------
std::uint64_t mix(std::uint64_t h, std::uint64_t v) {  // splitmix64 of h ^ v
  std::uint64_t z = h ^ (v + 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

// Calls f(offset, length) for each sampled word of a tensor of `bytes` bytes.
template <class F>
void for_each_sample(std::uint64_t bytes, F&& f) {
  for (std::uint64_t at = 0; at < bytes; at += kSampleStride) f(at, std::min<std::uint64_t>(8, bytes - at));
  if (bytes > 8 && (bytes - 8) % kSampleStride != 0) f(bytes - 8, 8);
}

std::uint64_t hash_samples(const unsigned char* p, std::uint64_t bytes, std::uint64_t h) {
  for_each_sample(bytes, [&](std::uint64_t at, std::uint64_t len) {
    std::uint64_t w = 0;
    std::memcpy(&w, p + at, len);
    h = mix(h, w);
  });
  return h;
}

void write_samples(unsigned char* p, std::uint64_t bytes, std::uint64_t seed) {
  for_each_sample(bytes, [&](std::uint64_t at, std::uint64_t len) {
    const std::uint64_t w = mix(seed, at);
    std::memcpy(p + at, &w, len);
  });
}

// ---- kernels ---------------------------------------------------------------------------------
// One launch's tensors: reads first, then writes; a tensor both read and written (in place)
// appears once, among the writes, with its `read` bit set. `fresh` marks tensors nothing has
// written yet (their bytes are undefined, so they are not sampled).
struct TensorList {
  std::uint64_t seed;
  double target_ns;  // virtual time when every byte is on the device
  std::uint32_t reads, writes;
  std::uint32_t in_place_mask, fresh_mask;
  void* ptr[kListTensors];
  std::uint64_t bytes[kListTensors];
};

void replay_small(std::uint64_t, double, unsigned, const void*, const void*, const void*, const void*,
                  void*, void*, std::uint64_t, std::uint64_t, std::uint64_t, std::uint64_t, std::uint64_t,
                  std::uint64_t) {}
void replay_list(TensorList) {}

// One kernel function per trace kernel name (names beyond kFunctions - 1 share them; the last
// one writes what the set-up left unwritten, once per tensor), as PyTorch
// launches a function of its own per operator: the executor learns replayability per function
// and launch shape, so one function for every operator would not be what a real job shows it.
// The stubs differ only in identity (simcuda registers a host stub once).
constexpr std::size_t kFunctions = 64;
template <std::size_t K>
void replay_small_k(std::uint64_t, double, unsigned, const void*, const void*, const void*, const void*, void*, void*,
                    std::uint64_t, std::uint64_t, std::uint64_t, std::uint64_t, std::uint64_t, std::uint64_t) {}
template <std::size_t K>
void replay_list_k(TensorList) {}
template <std::size_t... K>
constexpr auto small_stubs(std::index_sequence<K...>) {
  return std::array<decltype(&replay_small), sizeof...(K)>{&replay_small_k<K>...};
}
template <std::size_t... K>
constexpr auto list_stubs(std::index_sequence<K...>) {
  return std::array<decltype(&replay_list), sizeof...(K)>{&replay_list_k<K>...};
}
constexpr auto kSmallStubs = small_stubs(std::make_index_sequence<kFunctions>{});
constexpr auto kListStubs = list_stubs(std::make_index_sequence<kFunctions>{});

// The body both launch shapes share: declare, hash the inputs, write the outputs, top the
// virtual time up to the target.
void run_list(TensorList& l) {
  double declared = 0;
  std::uint64_t h = l.seed;
  for (std::uint32_t i = 0; i < l.reads + l.writes; ++i) {
    const bool write = i >= l.reads, in_place = (l.in_place_mask >> i) & 1u, fresh = (l.fresh_mask >> i) & 1u;
    const int mode = write ? (in_place ? SIMCUDA_READ_WRITE : SIMCUDA_WRITE) : SIMCUDA_READ;
    l.ptr[i] = simcuda::access(static_cast<unsigned char*>(l.ptr[i]), l.bytes[i], mode);
    declared += static_cast<double>(l.bytes[i]) / SIMCUDA_DEVICE_BYTES_PER_NS;
    if ((!write || in_place) && !fresh) h = hash_samples(static_cast<const unsigned char*>(l.ptr[i]), l.bytes[i], h);
    h = mix(h, l.bytes[i]);
  }
  // Every byte of an output is written, as a real kernel writes it (the executor's probation
  // refuses a kernel that leaves part of a new tensor as it found it): a fill derived from the
  // inputs, then the sampled words.
  for (std::uint32_t i = l.reads; i < l.reads + l.writes; ++i) {
    std::memset(l.ptr[i], static_cast<int>(mix(h, i) & 0xffu), l.bytes[i]);
    write_samples(static_cast<unsigned char*>(l.ptr[i]), l.bytes[i], mix(h, i));
  }
  const double extra_ns = l.target_ns - SIMCUDA_KERNEL_LAUNCH_NS - declared;
  if (extra_ns > 0) simcuda::add_flops(extra_ns * SIMCUDA_FLOPS_PER_NS);
}

void replay_small_body(void** args, const simcuda_launch_info*) {
  auto [seed, target, packed, r0, r1, r2, r3, w0, w1, b0, b1, b2, b3, b4, b5] = simcuda::unpack(replay_small, args);
  TensorList l{};
  l.seed = seed, l.target_ns = target;
  l.reads = packed & 7u, l.writes = (packed >> 3) & 3u;
  l.in_place_mask = (packed >> 8) & 0xffu, l.fresh_mask = (packed >> 16) & 0xffu;
  const void* rs[4] = {r0, r1, r2, r3};
  void* ws[2] = {w0, w1};
  const std::uint64_t bs[6] = {b0, b1, b2, b3, b4, b5};
  for (std::uint32_t i = 0; i < l.reads; ++i) l.ptr[i] = const_cast<void*>(rs[i]), l.bytes[i] = bs[i];
  for (std::uint32_t i = 0; i < l.writes; ++i) l.ptr[l.reads + i] = ws[i], l.bytes[l.reads + i] = bs[4 + i];
  run_list(l);
}

void replay_list_body(void** args, const simcuda_launch_info*) {
  auto [list] = simcuda::unpack(replay_list, args);
  run_list(list);
}

// ---- the replay ------------------------------------------------------------------------------
struct Options {
  std::string trace, alloc = "async", syncs = "loss,batch", gpu = "h100", timing;
  int iters = 6;
  int perturb_write = 0;  // > 0: change one sampled byte after the steady iteration's K-th write (tests)
  bool print_peak = false;
};

struct Access {
  std::uint32_t tensor;
  bool read, write;
};

class Replay {
 public:
  Replay(const tr::Trace& t, std::vector<double> durations, const Options& o)
      : t_(t), dur_(std::move(durations)), alloc_(parse_alloc_mode(o.alloc)),
        batch_sync_(o.syncs.find("batch") != std::string::npos),
        device_sync_(o.syncs.find("device") != std::string::npos), perturb_write_(o.perturb_write),
        ptr_(t.tensors.size(), nullptr), written_(t.tensors.size(), false) {}

  // Executes every event of the (repeated) trace; `host_ns`, when set, reads simcuda's host
  // clock at each iteration's start and end (see --timing).
  void run(bool quiet, std::uint64_t (*host_ns)()) {
    for (std::uint32_t e = 0; e < t_.events.size(); ++e) {
      const tr::Event& ev = t_.events[e];
      if (ev.op == Op::Iter) {
        if (ev.n == 1) write_unwritten();
        else end_iteration(quiet, host_ns);
        iteration_ = static_cast<int>(ev.n);
        if (ev.n == 1 && host_ns != nullptr) timing_ns_.push_back(host_ns());
      }
      execute(e, static_cast<std::uint64_t>(iteration_));
    }
    end_iteration(quiet, host_ns);
    const std::uint64_t w = hash_alive();  // the last iteration's own kept tensors included
    if (!quiet) std::printf("weights %016" PRIx64 "\n", w);
    check(cudaDeviceSynchronize(), "final synchronize");
  }

  const std::vector<std::uint64_t>& timing_ns() const { return timing_ns_; }

 private:
  void end_iteration(bool quiet, std::uint64_t (*host_ns)()) {
    if (iteration_ == 0) return;
    if (host_ns != nullptr) timing_ns_.push_back(host_ns());
    if (!quiet) std::printf("iter %d loss %016" PRIx64 "\n", iteration_, loss_);
  }

  void execute(std::uint32_t e, std::uint64_t iteration) {
    const tr::Event& ev = t_.events[e];
    switch (ev.op) {
      case Op::Alloc:
        allocate(ev.tensor);
        break;
      case Op::Free:
        release(ev.tensor);
        break;
      case Op::Kernel:
        launch_kernel(e);
        break;
      case Op::Copy:
        copy(e, iteration);
        break;
      case Op::Sync:
        if (device_sync_) check(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
        break;
      case Op::Iter:
        break;
    }
  }

  void allocate(std::uint32_t x) {
    const std::uint64_t bytes = t_.tensors[x].bytes;
    ptr_[x] = allocator_.allocate(alloc_, bytes);
    written_[x] = false;
  }
  void release(std::uint32_t x) {
    allocator_.release(alloc_, ptr_[x]);
    ptr_[x] = nullptr;
  }

  // Before the first iteration: tensors alive that nothing wrote yet (parameters the trace
  // only reads, such as batch-norm statistics; optimizer state the preamble made) are written
  // once, as their first iteration would have, so they count in every hash.
  void write_unwritten() {
    for (std::uint32_t x = 0; x < t_.tensors.size(); ++x)
      if (ptr_[x] != nullptr && !written_[x]) write_once(x);
  }

  void write_once(std::uint32_t x) {
    std::vector<Access> acc{{x, false, true}};
    launch_accesses(acc, mix(0x1a17, x), SIMCUDA_KERNEL_LAUNCH_NS, kFunctions - 1);  // a function of its own
  }

  // A kernel's seed depends on what a real launch's by-value arguments would: its operator and
  // its tensors' sizes (not its place in the trace), so a layer's kernels repeat their launch
  // shapes every iteration, as a training job's do.
  void launch_kernel(std::uint32_t e) {
    const tr::Event& ev = t_.events[e];
    std::uint64_t seed = mix(0x5eed, ev.name);
    std::vector<Access> acc;
    auto add = [&](std::uint32_t x, bool read, bool write) {
      for (Access& a : acc)
        if (a.tensor == x) { a.read |= read, a.write |= write; return; }
      acc.push_back({x, read, write});
    };
    for (std::uint32_t i = ev.access_begin; i < ev.access_end; ++i) {
      const tr::TensorAccess& a = t_.accesses[i];
      add(a.tensor, a.mode != AccessMode::Write, a.mode != AccessMode::Read);
      seed = mix(mix(seed, t_.tensors[a.tensor].bytes), static_cast<std::uint64_t>(a.mode));
    }
    launch_accesses(acc, seed, dur_[e] * 1e9, ev.name % (kFunctions - 1));
  }

  // Splits a kernel's tensors into launches of at most kListTensors, each with a share of the
  // writes and of the reads (so every read reaches some output), and launches them. The
  // kernel's target time is shared so that their total is the target whenever it can be:
  // each launch gets simcuda's floor for it (the launch cost plus its declared bytes) and an
  // equal share of what the target leaves above the floors (an even split would let a launch
  // of large tensors overshoot its share while the others do not make it up).
  void launch_accesses(std::vector<Access> acc, std::uint64_t seed, double target_ns, std::size_t fn) {
    std::vector<std::uint32_t> reads, writes;
    for (std::uint32_t i = 0; i < acc.size(); ++i) (acc[i].write ? writes : reads).push_back(i);
    const std::size_t n = acc.size();
    // n / launches <= kListTensors - 3, so the rounded slices of both lists fit in one, with
    // room for the written tensor a launch with none borrows.
    const std::size_t per = kListTensors - 3;
    const std::size_t launches = std::max<std::size_t>(1, (n + per - 1) / per);
    // Fewer writes than launches: launches borrow written tensors, so every launch updates
    // them in place (else a later launch would overwrite what an earlier one derived).
    if (!writes.empty() && writes.size() < launches)
      for (std::uint32_t w : writes) acc[w].read = true;
    // Launch k's tensors (indices into acc): its `own_reads` reads, then its writes, or a
    // borrowed write when it has none.
    auto members = [&](std::size_t k, std::size_t& own_reads) {
      const std::size_t r0 = reads.size() * k / launches, r1 = reads.size() * (k + 1) / launches;
      const std::size_t w0 = writes.size() * k / launches, w1 = writes.size() * (k + 1) / launches;
      std::vector<std::uint32_t> m;
      for (std::size_t i = r0; i < r1; ++i) m.push_back(reads[i]);
      for (std::size_t i = w0; i < w1; ++i) m.push_back(writes[i]);
      own_reads = r1 - r0;
      if (w1 == w0 && !writes.empty()) m.push_back(writes[std::min(w0, writes.size() - 1)]);
      return m;
    };
    std::vector<double> floor_ns(launches);
    double floors = 0;
    for (std::size_t k = 0; k < launches; ++k) {
      std::size_t nr;
      floor_ns[k] = SIMCUDA_KERNEL_LAUNCH_NS;
      for (std::uint32_t i : members(k, nr))
        floor_ns[k] += static_cast<double>(t_.tensors[acc[i].tensor].bytes) / SIMCUDA_DEVICE_BYTES_PER_NS;
      floors += floor_ns[k];
    }
    const double spare = std::max(0.0, target_ns - floors) / static_cast<double>(launches);
    for (std::size_t k = 0; k < launches; ++k) {
      TensorList l{};
      l.seed = mix(seed, k);
      l.target_ns = floor_ns[k] + spare;
      std::size_t nr;
      const std::vector<std::uint32_t> m = members(k, nr);
      for (std::uint32_t slot = 0; slot < m.size(); ++slot) put(l, slot, acc[m[slot]]);
      l.reads = static_cast<std::uint32_t>(nr);
      l.writes = static_cast<std::uint32_t>(m.size() - nr);  // its own writes, or the borrowed one
      launch_one(l, fn);
      for (std::size_t i = nr; i < m.size(); ++i) {
        const std::uint32_t x = acc[m[i]].tensor;
        written_[x] = true;
        last_written_ = x;
        after_write(x);
      }
    }
  }

  void put(TensorList& l, std::uint32_t slot, const Access& a) {
    l.ptr[slot] = ptr_[a.tensor];
    l.bytes[slot] = t_.tensors[a.tensor].bytes;
    if (a.read && a.write) l.in_place_mask |= 1u << slot;
    if (!written_[a.tensor]) l.fresh_mask |= 1u << slot;
  }

  void launch_one(const TensorList& l, std::size_t fn) {
    if (l.reads <= 4 && l.writes <= 2) {
      const void* r[4] = {};
      void* w[2] = {};
      std::uint64_t b[6] = {};
      for (std::uint32_t i = 0; i < l.reads; ++i) r[i] = l.ptr[i], b[i] = l.bytes[i];
      for (std::uint32_t i = 0; i < l.writes; ++i) w[i] = l.ptr[l.reads + i], b[4 + i] = l.bytes[l.reads + i];
      const unsigned packed = l.reads | (l.writes << 3) | (l.in_place_mask << 8) | (l.fresh_mask << 16);
      check(simcuda::launch(kSmallStubs[fn], dim3(1), dim3(128), nullptr, l.seed, l.target_ns, packed, r[0], r[1], r[2],
                            r[3], w[0], w[1], b[0], b[1], b[2], b[3], b[4], b[5]),
            "kernel launch");
    } else {
      check(simcuda::launch(kListStubs[fn], dim3(1), dim3(128), nullptr, l), "kernel launch (tensor list)");
    }
  }

  void copy(std::uint32_t e, std::uint64_t iteration) {
    const tr::Event& ev = t_.events[e];
    const bool has_src = (ev.flags & tr::kHasSrc) != 0, has_dst = (ev.flags & tr::kHasDst) != 0;
    switch (ev.dir) {
      case CopyDir::H2D: {
        if (!has_dst) return;  // from the host to nowhere we know: nothing on the device changes
        upload(ev.tensor2, mix(mix(0xba7c, e), iteration));
        break;
      }
      case CopyDir::D2H: {
        // The copy moves what the trace says; the loss takes its first word only, the one
        // word every written tensor defines at the start of a range.
        const std::uint32_t src = has_src ? ev.tensor : last_written_;
        if (src == tr::kNone || ptr_[src] == nullptr || !written_[src]) return;
        const std::uint64_t bytes = std::clamp<std::uint64_t>(ev.bytes, 1, t_.tensors[src].bytes);
        download_.resize(std::max<std::uint64_t>(bytes, 8));
        std::fill_n(download_.begin(), 8, 0);
        check(cudaMemcpy(download_.data(), ptr_[src], bytes, cudaMemcpyDeviceToHost), "loss read (d2h)");
        std::uint64_t v = 0;
        std::memcpy(&v, download_.data(), 8);
        loss_ = mix(loss_, v);
        break;
      }
      case CopyDir::D2D: {
        if (!has_src || !has_dst || ptr_[ev.tensor] == nullptr || ptr_[ev.tensor2] == nullptr) return;
        const std::uint64_t bytes = std::min({ev.bytes, t_.tensors[ev.tensor].bytes, t_.tensors[ev.tensor2].bytes});
        // Both sides hold defined bytes first, so a partial copy leaves none undefined.
        if (!written_[ev.tensor]) write_once(ev.tensor);
        if (!written_[ev.tensor2] && bytes < t_.tensors[ev.tensor2].bytes) write_once(ev.tensor2);
        check(cudaMemcpyAsync(ptr_[ev.tensor2], ptr_[ev.tensor], bytes, cudaMemcpyDeviceToDevice, nullptr), "d2d copy");
        written_[ev.tensor2] = true;
        after_write(ev.tensor2);
        break;
      }
    }
  }

  // The batch: pageable memory and a blocking copy (--syncs batch), or pinned memory and an
  // asynchronous one; a pinned buffer is reused once the event recorded after its last copy
  // completed (as PyTorch's pinned-memory allocator does), not after a device-wide sync.
  void upload(std::uint32_t x, std::uint64_t seed) {
    const std::uint64_t bytes = t_.tensors[x].bytes;
    HostBuffer& buf = host_buffer(bytes);
    write_samples(buf.data, bytes, seed);
    if (batch_sync_) {
      check(cudaMemcpy(ptr_[x], buf.data, bytes, cudaMemcpyHostToDevice), "batch upload (blocking)");
    } else {
      check(cudaMemcpyAsync(ptr_[x], buf.data, bytes, cudaMemcpyHostToDevice, nullptr), "batch upload (async)");
      check(cudaEventRecord(buf.copied, nullptr), "cudaEventRecord after the batch upload");
    }
    written_[x] = true;
    after_write(x);
  }

  // --perturb-write K: one sampled byte of the first iteration's K-th write changes, as a lost
  // or stale page would change it (a test shows that the output notices).
  void after_write(std::uint32_t x) {
    if (perturb_write_ <= 0 || iteration_ != 1 || ++writes_seen_ != perturb_write_) return;
    const std::uint64_t bytes = t_.tensors[x].bytes;
    const std::uint64_t at = bytes > kSampleStride ? (bytes / kSampleStride / 2) * kSampleStride : 0;
    check(cudaMemsetAsync(static_cast<unsigned char*>(ptr_[x]) + at, 0x5a, 1, nullptr), "perturbing memset");
    std::fprintf(stderr, "sim_trace_replay: perturbed tensor %" PRIu64 " at byte %" PRIu64 "\n", t_.tensors[x].id, at);
  }

  struct HostBuffer {
    unsigned char* data = nullptr;
    cudaEvent_t copied = nullptr;  // pinned only: recorded after the buffer's last copy
  };

  HostBuffer& host_buffer(std::uint64_t bytes) {
    HostBuffer& buf = host_buffers_[bytes];
    if (buf.data == nullptr) {
      if (batch_sync_) {
        pageable_.emplace_back(bytes, 0);
        buf.data = pageable_.back().data();
      } else {
        void* p = nullptr;
        check(cudaMallocHost(&p, bytes), "cudaMallocHost");
        std::memset(p, 0, bytes);
        buf.data = static_cast<unsigned char*>(p);
        check(cudaEventCreateWithFlags(&buf.copied, cudaEventDisableTiming), "cudaEventCreate");
      }
    } else if (!batch_sync_) {
      check(cudaEventSynchronize(buf.copied), "waiting for a pinned batch buffer's last copy");
    }
    return buf;
  }

  std::uint64_t hash_alive() {
    std::uint64_t h = 0xcbf29ce484222325ull;
    std::vector<unsigned char> host;
    for (std::uint32_t x = 0; x < ptr_.size(); ++x) {
      if (ptr_[x] == nullptr || !written_[x]) continue;
      host.resize(t_.tensors[x].bytes);
      check(cudaMemcpy(host.data(), ptr_[x], host.size(), cudaMemcpyDeviceToHost), "download");
      h = hash_samples(host.data(), host.size(), mix(h, x));
    }
    return h;
  }

  const tr::Trace& t_;
  std::vector<double> dur_;
  AllocMode alloc_;
  bool batch_sync_, device_sync_;
  int perturb_write_, writes_seen_ = 0, iteration_ = 0;
  ReplayAllocator allocator_;
  std::vector<void*> ptr_;
  std::vector<bool> written_;
  std::vector<std::uint64_t> timing_ns_;  // --timing: host clock at iteration 1's start, then each end
  std::uint32_t last_written_ = tr::kNone;
  std::uint64_t loss_ = 0;
  std::map<std::uint64_t, HostBuffer> host_buffers_;
  std::vector<std::vector<unsigned char>> pageable_;
  std::vector<unsigned char> download_;  // d2h copies land here
};

}  // namespace

int main(int argc, char** argv) {
  Options o;
  capuchin::args::Parser app{"sim_trace_replay: a real model's trace executed as a CUDA program on simcuda"};
  app.option("--trace", o.trace, "trace file (.jsonl or .jsonl.gz)").required();
  app.option("--iters", o.iters, "repetitions of the trace's last iteration").range(1, 1000000);
  app.option("--alloc", o.alloc, "async | sync | caching").one_of({"async", "sync", "caching"});
  app.option("--syncs", o.syncs, "loss | loss,batch | loss,batch,device")
      .one_of({"loss", "loss,batch", "loss,batch,device", "loss,device"});
  app.option("--gpu", o.gpu, "GPU profile for kernel durations (capuchin sim --list-gpus)");
  app.option("--perturb-write", o.perturb_write, "tests: change one byte after the first iteration's K-th write");
  app.flag("--print-peak", o.print_peak, "print simcuda's device peak of the replay and exit");
  app.option("--timing", o.timing,
             "write simcuda's host virtual clock (ns) at each iteration's end to this file (`<iter> <ns>` lines)");
  if (auto status = app.parse(argc, argv)) return *status;

  auto loaded = capuchin::trace::load_trace(o.trace);
  if (!loaded) {
    std::fprintf(stderr, "sim_trace_replay: %s\n", loaded.error().message().c_str());
    return 1;
  }
  auto trace = capuchin::trace::repeat_last_iteration(*loaded, static_cast<unsigned>(o.iters));
  if (!trace) {
    std::fprintf(stderr, "sim_trace_replay: %s\n", trace.error().message.c_str());
    return 1;
  }
  auto gpu = capuchin::sim::find_gpu_profile(o.gpu);
  if (!gpu) {
    std::fprintf(stderr, "sim_trace_replay: %s\n", gpu.error().message.c_str());
    return 1;
  }
  for (std::size_t k = 0; k < kFunctions; ++k) {
    simcuda::register_kernel(("capuchin_replay_small_" + std::to_string(k)).c_str(), kSmallStubs[k], replay_small_body);
    simcuda::register_kernel(("capuchin_replay_list_" + std::to_string(k)).c_str(), kListStubs[k], replay_list_body);
  }
  // simcuda's own API (not interposed: only cu* names are), reached as register_kernel does.
  void* driver = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
  auto driver_fn = [&](const char* name, const char* option) -> void* {
    void* f = driver == nullptr ? nullptr : dlsym(driver, name);
    if (f == nullptr) std::fprintf(stderr, "sim_trace_replay: %s needs simcuda's libcuda.so.1 (%s)\n", option, name);
    return f;
  };
  std::uint64_t (*host_ns)() = nullptr;
  if (!o.timing.empty()) {
    host_ns = reinterpret_cast<std::uint64_t (*)()>(driver_fn("simcuda_host_virtual_ns", "--timing"));
    if (host_ns == nullptr) return 1;
  }
  Replay replay(*trace, capuchin::sim::event_durations(*trace, *gpu, capuchin::sim::Efficiency{}), o);
  replay.run(o.print_peak, host_ns);
  if (!o.timing.empty()) {
    std::ofstream f(o.timing);
    f << "# sim_trace_replay --timing: simcuda's host virtual clock (ns) when each iteration ends; line 0: when "
         "iteration 1 begins\n# trace " << o.trace << ", --iters " << o.iters << ", --alloc " << o.alloc << ", --syncs "
      << o.syncs << ", --gpu " << o.gpu << "\n";
    const auto& ns = replay.timing_ns();
    for (std::size_t i = 0; i < ns.size(); ++i) f << i << ' ' << ns[i] << '\n';
    f.close();
    if (!f) {
      std::fprintf(stderr, "sim_trace_replay: cannot write --timing file %s\n", o.timing.c_str());
      return 1;
    }
  }
  if (o.print_peak) {
    auto get_stats = reinterpret_cast<void (*)(simcuda_stats*)>(driver_fn("simcuda_get_stats", "--print-peak"));
    if (get_stats == nullptr) return 1;
    simcuda_stats s{};
    get_stats(&s);
    std::printf("%" PRIu64 "\n", s.peak_device_bytes);
  }
  return 0;
}
