// sim_trace_replay: a real model's trace (docs/TRACE_FORMAT.md) executed as a CUDA program on
// simcuda, with PyTorch's habits, so the executor is tried on the shapes of real models and
// not only on the programs written for it. The set-up events run once, the tensors the
// trace's last iteration inherits from earlier ones (optimizer state) are made next, and then
// that last (steady) iteration runs --iters times:
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
//     (--syncs loss, always on); `sync` is cudaDeviceSynchronize with --syncs ...,device.
//
// Contract (tests rely on it): stdout holds `iter N loss <16 hex>` per iteration and a final
// `weights <16 hex>` line (a hash of every tensor alive at the end), nothing else; the same
// options give bit-identical output on every run, with or without capuchin. A kernel's
// outputs are computed from its inputs' bytes: every tensor is sampled at one 8-byte word
// per 4 KiB page plus its last word (the whole range is declared to simcuda, so a missing page
// still faults), so a missing, stale or misplaced page changes the result. Each launch's
// virtual time is the trace's duration for the event on --gpu (dur_ns, else the simulator's
// roofline; split evenly over a kernel's launches) when its data is on the device; faults and
// host-resident data add to it as simcuda charges them. Exit 0 on success, 1 on a bad trace or
// a CUDA error (named on stderr), 2 on out of memory. `--print-peak` runs the replay and
// prints simcuda's device peak in bytes instead (run it without capuchin).
#include <CLI/CLI.hpp>

#include <algorithm>
#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <map>
#include <string>
#include <vector>

#include <cuda_runtime_api.h>

#include "capuchin/sim.hpp"
#include "capuchin/trace_model.hpp"
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
  for (std::uint32_t i = l.reads; i < l.reads + l.writes; ++i)
    write_samples(static_cast<unsigned char*>(l.ptr[i]), l.bytes[i], mix(h, i));
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
  std::string trace, alloc = "async", syncs = "loss,batch", gpu = "h100";
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

  void run(int iters, bool quiet) {
    const tr::Iteration& steady = t_.iterations.back();
    for (std::uint32_t e = 0; e < t_.setup_end; ++e) execute(e, 0);
    prepare_steady_state(steady);
    for (int it = 1; it <= iters; ++it) {
      iteration_ = it;
      for (std::uint32_t e = steady.begin; e < steady.end; ++e) execute(e, static_cast<std::uint64_t>(it));
      if (!quiet) std::printf("iter %d loss %016" PRIx64 "\n", it, loss_);
      hand_over_kept();
      if (it < iters) release_made_this_iteration();
    }
    const std::uint64_t w = hash_alive();  // the last iteration's own kept tensors included
    release_made_this_iteration();
    if (!quiet) std::printf("weights %016" PRIx64 "\n", w);
    check(cudaDeviceSynchronize(), "final synchronize");
  }

 private:
  void execute(std::uint32_t e, std::uint64_t iteration) {
    const tr::Event& ev = t_.events[e];
    switch (ev.op) {
      case Op::Alloc:
        allocate(ev.tensor);
        if (iteration != 0) made_this_iteration_.push_back(ev.tensor);
        break;
      case Op::Free:
        release(ev.tensor);
        break;
      case Op::Kernel:
        launch_kernel(e, mix(e, iteration));
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

  // Before the first repetition: set-up tensors an earlier iteration freed are freed; those
  // alive that nothing wrote yet are written once (parameters the trace only reads, such as
  // batch-norm statistics, then count in every hash); tensors alive at the steady iteration's
  // start that set-up did not make (optimizer state made in iteration 1) are made and written
  // once, as their first iteration would have. An inherited tensor the steady iteration frees
  // (gradients freed by the next iteration's zero_grad) is paired with a tensor of the same
  // size the iteration makes and keeps, which takes its place in the next repetition.
  void prepare_steady_state(const tr::Iteration& steady) {
    std::vector<std::uint32_t> freed_inherited, kept;
    for (std::uint32_t x = 0; x < t_.tensors.size(); ++x) {
      const tr::Tensor& ten = t_.tensors[x];
      const bool made_before = ten.alloc_event < steady.begin;
      const bool freed_before = ten.free_event != tr::kNone && ten.free_event < steady.begin;
      const bool freed_within = ten.free_event != tr::kNone && ten.free_event < steady.end;
      if (made_before && freed_before) {
        if (ptr_[x] != nullptr) release(x);
        continue;
      }
      if (made_before) {
        if (ptr_[x] == nullptr) allocate(x);
        if (!written_[x]) write_once(x);
        if (freed_within) freed_inherited.push_back(x);
      } else if (ten.alloc_event < steady.end && !freed_within) {
        kept.push_back(x);
      }
    }
    std::sort(freed_inherited.begin(), freed_inherited.end(),
              [&](std::uint32_t a, std::uint32_t b) { return t_.tensors[a].free_event < t_.tensors[b].free_event; });
    bool paired = freed_inherited.size() <= kept.size();
    for (std::size_t i = 0; paired && i < freed_inherited.size(); ++i)
      paired = t_.tensors[freed_inherited[i]].bytes == t_.tensors[kept[i]].bytes;
    if (!paired) {
      std::fprintf(stderr, "sim_trace_replay: %s: the last iteration frees %zu tensors an earlier iteration made, "
                   "and does not make and keep one of the same size for each (in order): it cannot be repeated\n",
                   t_.name.c_str(), freed_inherited.size());
      std::exit(1);
    }
    for (std::size_t i = 0; i < freed_inherited.size(); ++i) hand_over_.push_back({kept[i], freed_inherited[i]});
  }

  void write_once(std::uint32_t x) {
    std::vector<Access> acc{{x, false, true}};
    launch_accesses(acc, mix(0x1a17, x), SIMCUDA_KERNEL_LAUNCH_NS);
  }

  // After a repetition: each kept tensor paired with an inherited one becomes that one.
  void hand_over_kept() {
    for (const auto& [kept, inherited] : hand_over_) {
      ptr_[inherited] = ptr_[kept];
      written_[inherited] = written_[kept];
      ptr_[kept] = nullptr;
    }
  }

  void release_made_this_iteration() {  // what the iteration made and kept is not the next one's
    for (std::uint32_t x : made_this_iteration_)
      if (ptr_[x] != nullptr) release(x);
    made_this_iteration_.clear();
  }

  void launch_kernel(std::uint32_t e, std::uint64_t seed) {
    const tr::Event& ev = t_.events[e];
    std::vector<Access> acc;
    auto add = [&](std::uint32_t x, bool read, bool write) {
      for (Access& a : acc)
        if (a.tensor == x) { a.read |= read, a.write |= write; return; }
      acc.push_back({x, read, write});
    };
    for (std::uint32_t i = ev.access_begin; i < ev.access_end; ++i) {
      const tr::TensorAccess& a = t_.accesses[i];
      add(a.tensor, a.mode != AccessMode::Write, a.mode != AccessMode::Read);
    }
    launch_accesses(acc, seed, dur_[e] * 1e9);
  }

  // Splits a kernel's tensors into launches of at most kListTensors, each with a share of the
  // writes and of the reads (so every read reaches some output), and launches them.
  void launch_accesses(std::vector<Access> acc, std::uint64_t seed, double target_ns) {
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
    for (std::size_t k = 0; k < launches; ++k) {
      TensorList l{};
      l.seed = mix(seed, k);
      l.target_ns = target_ns / static_cast<double>(launches);
      auto slice = [&](const std::vector<std::uint32_t>& v, std::size_t& from, std::size_t& to) {
        from = v.size() * k / launches, to = v.size() * (k + 1) / launches;
      };
      std::size_t r0, r1, w0, w1;
      slice(reads, r0, r1), slice(writes, w0, w1);
      std::uint32_t slot = 0;
      for (std::size_t i = r0; i < r1; ++i) put(l, slot++, acc[reads[i]]);
      for (std::size_t i = w0; i < w1; ++i) put(l, slot++, acc[writes[i]]);
      l.reads = static_cast<std::uint32_t>(r1 - r0);
      l.writes = static_cast<std::uint32_t>(w1 - w0);
      std::vector<std::uint32_t> wrote;
      for (std::size_t i = w0; i < w1; ++i) wrote.push_back(acc[writes[i]].tensor);
      if (wrote.empty() && !writes.empty()) {  // fewer writes than launches: these reads must reach an output
        const Access& borrowed = acc[writes[std::min(w0, writes.size() - 1)]];
        put(l, slot++, borrowed);
        l.writes = 1;
        wrote.push_back(borrowed.tensor);
      }
      launch_one(l);
      for (std::uint32_t x : wrote) {
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

  void launch_one(const TensorList& l) {
    if (l.reads <= 4 && l.writes <= 2) {
      const void* r[4] = {};
      void* w[2] = {};
      std::uint64_t b[6] = {};
      for (std::uint32_t i = 0; i < l.reads; ++i) r[i] = l.ptr[i], b[i] = l.bytes[i];
      for (std::uint32_t i = 0; i < l.writes; ++i) w[i] = l.ptr[l.reads + i], b[4 + i] = l.bytes[l.reads + i];
      const unsigned packed = l.reads | (l.writes << 3) | (l.in_place_mask << 8) | (l.fresh_mask << 16);
      check(simcuda::launch(replay_small, dim3(1), dim3(128), nullptr, l.seed, l.target_ns, packed, r[0], r[1], r[2],
                            r[3], w[0], w[1], b[0], b[1], b[2], b[3], b[4], b[5]),
            "kernel launch");
    } else {
      check(simcuda::launch(replay_list, dim3(1), dim3(128), nullptr, l), "kernel launch (tensor list)");
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
  std::vector<std::uint32_t> made_this_iteration_;
  std::vector<std::pair<std::uint32_t, std::uint32_t>> hand_over_;  // (kept, inherited)
  std::uint32_t last_written_ = tr::kNone;
  std::uint64_t loss_ = 0;
  std::map<std::uint64_t, HostBuffer> host_buffers_;
  std::vector<std::vector<unsigned char>> pageable_;
  std::vector<unsigned char> download_;  // d2h copies land here
};

}  // namespace

int main(int argc, char** argv) {
  Options o;
  CLI::App app{"sim_trace_replay: a real model's trace executed as a CUDA program on simcuda"};
  app.add_option("--trace", o.trace, "trace file (.jsonl or .jsonl.gz)")->required();
  app.add_option("--iters", o.iters, "repetitions of the trace's last iteration")->check(CLI::Range(1, 1000000));
  app.add_option("--alloc", o.alloc, "async | sync | caching")->check(CLI::IsMember({"async", "sync", "caching"}));
  app.add_option("--syncs", o.syncs, "loss | loss,batch | loss,batch,device")
      ->check(CLI::IsMember({"loss", "loss,batch", "loss,batch,device", "loss,device"}));
  app.add_option("--gpu", o.gpu, "GPU profile for kernel durations (capuchin sim --list-gpus)");
  app.add_option("--perturb-write", o.perturb_write, "tests: change one byte after the first iteration's K-th write");
  app.add_flag("--print-peak", o.print_peak, "print simcuda's device peak of the replay and exit");
  CLI11_PARSE(app, argc, argv);

  auto trace = capuchin::trace::load_trace(o.trace);
  if (!trace) {
    std::fprintf(stderr, "sim_trace_replay: %s\n", trace.error().message().c_str());
    return 1;
  }
  if (trace->iterations.empty()) {
    std::fprintf(stderr, "sim_trace_replay: %s has no `iter` event: nothing to repeat\n", o.trace.c_str());
    return 1;
  }
  auto gpu = capuchin::sim::find_gpu_profile(o.gpu);
  if (!gpu) {
    std::fprintf(stderr, "sim_trace_replay: %s\n", gpu.error().message.c_str());
    return 1;
  }
  simcuda::register_kernel("capuchin_replay_small", replay_small, replay_small_body);
  simcuda::register_kernel("capuchin_replay_list", replay_list, replay_list_body);
  Replay replay(*trace, capuchin::sim::event_durations(*trace, *gpu, capuchin::sim::Efficiency{}), o);
  replay.run(o.iters, o.print_peak);
  if (o.print_peak) {
    simcuda_stats s{};
    void* driver = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
    auto get_stats = driver == nullptr ? nullptr
                                       : reinterpret_cast<void (*)(simcuda_stats*)>(dlsym(driver, "simcuda_get_stats"));
    if (get_stats == nullptr) {
      std::fprintf(stderr, "sim_trace_replay: --print-peak needs simcuda's libcuda.so.1\n");
      return 1;
    }
    get_stats(&s);
    std::printf("%" PRIu64 "\n", s.peak_device_bytes);
  }
  return 0;
}
