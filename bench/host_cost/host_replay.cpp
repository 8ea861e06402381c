// host_replay: the CUDA call sequence of a real model's trace, or a synthetic allocation /
// launch loop, issued against the null driver (stub_driver.cpp) with every call timed on the
// host, so that the same program run with and without LD_PRELOAD=libcapuchin.so shows what
// capuchin adds per call. bench_host_cost runs it; it is not meant to be typed.
//
//   host_replay trace FILE [--iters N] [--warmup W]
//     Replays capuchin::trace::repeat_last_iteration(FILE, N) as driver calls in trace order:
//     alloc/free = cuMemAllocAsync/cuMemFreeAsync (PyTorch with backend:cudaMallocAsync), a
//     kernel = cuLaunchKernel of a per-name function (up to 4 read and 2 written tensors as
//     separate pointer parameters, more as 288-byte by-value structs of up to 16; an
//     `aten::_foreach_*` op as multi_tensor_apply launches it with 32 KB arguments: one
//     28,032-byte by-value struct per launch of its lists' addresses, element counts and block
//     tables), copies =
//     cuMemcpyHtoDAsync (batch) / cuMemcpyDtoH (the loss read: blocking) / cuMemcpyAsync
//     (d2d), sync = cuCtxSynchronize. Prints, over the iterations after the first W:
//       kind <alloc|free|launch|copy|sync> <calls per iteration> <host ns per iteration>
//            <driver calls per iteration made during those calls (1 per call without capuchin)>
//       iteration_ns <host ns per iteration, all kinds and the replay's own work>
//       thread_cpu_ns <the calling thread's CPU ns per iteration (CLOCK_THREAD_CPUTIME_ID): as
//                      iteration_ns, less any time the thread waited for a core>
//       driver_calls <per iteration, every thread: capuchin's drain and planner threads too>
//   host_replay declared-outputs [--names N]
//     Prints a CAPUCHIN_KERNEL_OUTPUTS value declaring the written pointer of every function the
//     trace replay makes for the first N names (512), for the `replay` mode of bench_host_cost
//     and scripts/host_cost_instructions.sh.
//   host_replay curve --live N [--rounds R] [--per-round P]
//     Keeps N allocations (4 KiB .. 64 KiB) live, then times R rounds of P cuMemAllocAsync +
//     cuMemFreeAsync pairs of 4 KiB and R rounds of P launches (4 pointers into live
//     allocations, layout 1); prints `pair_ns <median>` and `launch_ns <median>`.
// Both end with `capture <summary>` when libcapuchin.so is loaded (its capuchin_finish).
#include <cuda.h>
#include <dlfcn.h>

#include "capuchin/args.hpp"
#include <algorithm>
#include <memory>
#include <array>
#include <chrono>
#include <cstddef>
#include <cstdio>
#include <ctime>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "capuchin/trace_model.hpp"
#include "capuchin/trace_repeat.hpp"

// The null driver's count of calls made to it (stub_driver.cpp).
extern "C" std::uint64_t stubcuda_driver_calls();

namespace {

namespace tr = capuchin::trace;
using Clock = std::chrono::steady_clock;

enum CallKind : int { kAlloc, kFree, kLaunch, kCopy, kSync, kKinds };
constexpr const char* kKindNames[kKinds] = {"alloc", "free", "launch", "copy", "sync"};

void check(CUresult r, const char* what) {
  if (r == CUDA_SUCCESS) return;
  std::fprintf(stderr, "host_replay: %s failed (CUresult %d)\n", what, static_cast<int>(r));
  std::exit(1);
}

// Parameter blocks of the two layouts stub_driver.cpp describes.
struct Small {
  std::uint64_t seed;
  double target;
  std::uint32_t packed;
  CUdeviceptr ptr[6];
  std::uint64_t bytes[6];
};
struct List {  // one by-value parameter of 288 bytes
  std::uint64_t seed;
  double target;
  std::uint32_t reads, writes, in_place, fresh;
  CUdeviceptr ptr[16];
  std::uint64_t bytes[16];
};
static_assert(sizeof(List) == 288);
// A foreach op's tensor lists as PyTorch's multi_tensor_apply passes them with 32 KB kernel
// arguments (MultiTensorApply.cuh's TensorListMetadata: `depth` lists of up to 770 / 448 / 336 /
// 252 / 210 tensors for 1 to 5 lists, their element counts, then each of up to 2,240 blocks'
// tensor and chunk; scripts/foreach_launches.py): one by-value parameter of layout 3, laid out
// for the most addresses any depth takes (5 x 210) and the most tensors (770).
struct MultiTensor {
  std::uint64_t seed;
  double target;
  std::uint32_t count, depth;
  CUdeviceptr addresses[1050];
  std::int64_t numel[770];
  std::uint16_t block_to_tensor[2240];
  std::int32_t block_to_chunk[2240];
  std::int32_t start_tensor_this_launch;
};
static_assert(sizeof(MultiTensor) == 28032);
constexpr std::uint32_t kForeachTensors[5] = {770, 448, 336, 252, 210};  // per list, by depth

// cuLaunchKernel's kernelParams for a Small: one pointer per parameter of layout 1.
std::array<void*, 15> params_of(Small& s) {
  return {&s.seed, &s.target, &s.packed, &s.ptr[0], &s.ptr[1], &s.ptr[2], &s.ptr[3], &s.ptr[4],
          &s.ptr[5], &s.bytes[0], &s.bytes[1], &s.bytes[2], &s.bytes[3], &s.bytes[4], &s.bytes[5]};
}

// Layout 1's first written pointer: Small::ptr[4], the 8th of params_of's parameters.
constexpr int kFirstWrittenParam = 7;
static_assert(offsetof(Small, ptr) + 4 * sizeof(CUdeviceptr) == offsetof(Small, ptr[4]));

CUfunction function(std::uint32_t name, int layout) {
  return reinterpret_cast<CUfunction>((static_cast<std::uintptr_t>(name) + 1) << 4 | static_cast<std::uintptr_t>(layout));
}

// The calling thread's CPU time: what our hooks cost it, whether or not a core was free for it
// (the job thread shares this machine's two cores with capuchin's drain and planner threads).
std::uint64_t thread_cpu_ns() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<std::uint64_t>(ts.tv_sec) * 1000000000u + static_cast<std::uint64_t>(ts.tv_nsec);
}

// What a replay counted over its iterations after the warm-up.
struct Counted {
  int iterations = 0;
  double ns = 0, thread_cpu_ns = 0;
  std::uint64_t driver_calls = 0;
};

class Timer {
 public:
  template <class F>
  void time(CallKind k, F&& f) {
    const std::uint64_t d0 = stubcuda_driver_calls();
    const auto t0 = Clock::now();
    f();
    const auto t1 = Clock::now();
    const std::uint64_t d1 = stubcuda_driver_calls();
    if (!counting_) return;
    ns_[k] += std::chrono::duration<double, std::nano>(t1 - t0).count();
    ++calls_[k];
    driver_[k] += d1 - d0;
  }
  void counting(bool on) { counting_ = on; }
  double ns(int k) const { return ns_[k]; }
  std::uint64_t calls(int k) const { return calls_[k]; }
  std::uint64_t driver_calls(int k) const { return driver_[k]; }

 private:
  bool counting_ = false;
  std::array<double, kKinds> ns_{};
  std::array<std::uint64_t, kKinds> calls_{}, driver_{};
};

class TraceReplay {
 public:
  explicit TraceReplay(const tr::Trace& t) : t_(t), ptr_(t.tensors.size(), 0), host_(1 << 20) {}

  void run(Timer& timer, int warmup, Counted* out) {
    Clock::time_point start{};
    std::uint64_t driver_start = 0, cpu_start = 0;
    for (std::uint32_t e = 0; e < t_.events.size(); ++e) {
      const tr::Event& ev = t_.events[e];
      if (ev.op == tr::Op::Iter) {
        const bool count = static_cast<int>(ev.n) > warmup;
        if (count && !timer_on_) start = Clock::now(), driver_start = stubcuda_driver_calls(), cpu_start = thread_cpu_ns();
        timer_on_ = count;
        timer.counting(count);
        if (count) ++out->iterations;
      }
      execute(timer, ev);
    }
    if (timer_on_) {
      out->thread_cpu_ns = static_cast<double>(thread_cpu_ns() - cpu_start);
      out->ns = std::chrono::duration<double, std::nano>(Clock::now() - start).count();
      out->driver_calls = stubcuda_driver_calls() - driver_start;
    }
    timer.counting(false);
    for (std::uint32_t x = 0; x < ptr_.size(); ++x)
      if (ptr_[x] != 0) check(cuMemFreeAsync(ptr_[x], nullptr), "cuMemFreeAsync");
  }

 private:
  void execute(Timer& timer, const tr::Event& ev) {
    switch (ev.op) {
      case tr::Op::Alloc:
        timer.time(kAlloc, [&] { check(cuMemAllocAsync(&ptr_[ev.tensor], t_.tensors[ev.tensor].bytes, nullptr), "alloc"); });
        break;
      case tr::Op::Free:
        timer.time(kFree, [&] { check(cuMemFreeAsync(ptr_[ev.tensor], nullptr), "free"); });
        ptr_[ev.tensor] = 0;
        break;
      case tr::Op::Kernel:
        launch(timer, ev);
        break;
      case tr::Op::Copy:
        copy(timer, ev);
        break;
      case tr::Op::Sync:
        timer.time(kSync, [&] { check(cuCtxSynchronize(), "cuCtxSynchronize"); });
        break;
      case tr::Op::Iter:
        break;
    }
  }

  void launch(Timer& timer, const tr::Event& ev) {
    std::vector<std::uint32_t>& reads = reads_;
    std::vector<std::uint32_t>& writes = writes_;
    reads.clear();
    writes.clear();
    for (std::uint32_t i = ev.access_begin; i < ev.access_end; ++i) {
      const tr::TensorAccess& a = t_.accesses[i];
      auto& list = a.mode == tr::AccessMode::Read ? reads : writes;
      if (std::find(list.begin(), list.end(), a.tensor) == list.end()) list.push_back(a.tensor);
    }
    const std::uint32_t name = ev.name == tr::kNone ? 0 : ev.name;
    if (ev.name != tr::kNone && t_.names[ev.name].starts_with("aten::_foreach_")) {
      // An optimizer's foreach op: every tensor once (an in-place op's first list is read and
      // written); its lists' count (depth) from how many tensors it writes, each launch taking
      // as many tensors per list as multi_tensor_apply's limit for that depth.
      std::vector<std::uint32_t> lists;
      for (std::uint32_t t : reads)
        if (std::find(lists.begin(), lists.end(), t) == lists.end()) lists.push_back(t);
      for (std::uint32_t t : writes)
        if (std::find(lists.begin(), lists.end(), t) == lists.end()) lists.push_back(t);
      const std::size_t per_list = std::max<std::size_t>(1, writes.size());
      const std::uint32_t depth = static_cast<std::uint32_t>(std::clamp<std::size_t>((lists.size() + per_list / 2) / per_list, 1, 5));
      const std::size_t per_launch = std::size_t{depth} * kForeachTensors[depth - 1];
      for (std::size_t at = 0; at < lists.size(); at += per_launch) {
        auto m = std::make_unique<MultiTensor>();  // 27 KiB: not on the stack; made outside the timed call
        m->seed = ++seed_;
        m->target = static_cast<double>(ev.dur_ns);
        m->depth = depth;
        const std::size_t n = std::min(per_launch, lists.size() - at);
        for (std::size_t i = 0; i < n; ++i) {
          m->addresses[i] = ptr_[lists[at + i]];
          m->numel[i / depth] = static_cast<std::int64_t>(t_.tensors[lists[at + i]].bytes / 4);
        }
        for (std::size_t b = 0; b < 2240; ++b) {  // each tensor's 65,536-element chunks, as many as fit
          m->block_to_tensor[b] = static_cast<std::uint16_t>(b % std::max<std::size_t>(1, n / depth));
          m->block_to_chunk[b] = static_cast<std::int32_t>(b / std::max<std::size_t>(1, n / depth));
        }
        m->count = static_cast<std::uint32_t>(n);
        void* params[1] = {m.get()};
        timer.time(kLaunch, [&] { check(cuLaunchKernel(function(name, 3), 1, 1, 1, 128, 1, 1, 0, nullptr, params, nullptr), "launch"); });
      }
      return;
    }
    if (reads.size() <= 4 && writes.size() <= 2) {
      Small s{};
      s.seed = ++seed_;
      s.target = static_cast<double>(ev.dur_ns);
      s.packed = static_cast<std::uint32_t>(reads.size() | writes.size() << 3);
      for (std::size_t i = 0; i < reads.size(); ++i) s.ptr[i] = ptr_[reads[i]], s.bytes[i] = t_.tensors[reads[i]].bytes;
      for (std::size_t i = 0; i < writes.size(); ++i)
        s.ptr[4 + i] = ptr_[writes[i]], s.bytes[4 + i] = t_.tensors[writes[i]].bytes;
      std::array<void*, 15> params = params_of(s);
      timer.time(kLaunch, [&] {
        check(cuLaunchKernel(function(name, 1), 1, 1, 1, 128, 1, 1, 0, nullptr, params.data(), nullptr), "launch");
      });
      return;
    }
    // Tensor lists of up to 16: reads first, then writes, as TensorIterator packs them.
    std::vector<std::uint32_t> all(reads);
    all.insert(all.end(), writes.begin(), writes.end());
    for (std::size_t at = 0; at < all.size(); at += 16) {
      List l{};
      l.seed = ++seed_;
      l.target = static_cast<double>(ev.dur_ns);
      const std::size_t n = std::min<std::size_t>(16, all.size() - at);
      for (std::size_t i = 0; i < n; ++i) l.ptr[i] = ptr_[all[at + i]], l.bytes[i] = t_.tensors[all[at + i]].bytes;
      l.reads = static_cast<std::uint32_t>(n);
      void* params[1] = {&l};
      timer.time(kLaunch, [&] { check(cuLaunchKernel(function(name, 2), 1, 1, 1, 128, 1, 1, 0, nullptr, params, nullptr), "launch"); });
    }
  }

  void copy(Timer& timer, const tr::Event& ev) {
    const bool has_src = (ev.flags & tr::kHasSrc) != 0, has_dst = (ev.flags & tr::kHasDst) != 0;
    const std::size_t bytes = std::min<std::size_t>(ev.bytes, host_.size());
    if (ev.dir == tr::CopyDir::H2D && has_dst)
      timer.time(kCopy, [&] { check(cuMemcpyHtoDAsync(ptr_[ev.tensor2], host_.data(), bytes, nullptr), "h2d copy"); });
    else if (ev.dir == tr::CopyDir::D2H && has_src)
      timer.time(kCopy, [&] { check(cuMemcpyDtoH(host_.data(), ptr_[ev.tensor], bytes), "d2h copy"); });
    else if (ev.dir == tr::CopyDir::D2D && has_src && has_dst)
      timer.time(kCopy, [&] { check(cuMemcpyAsync(ptr_[ev.tensor2], ptr_[ev.tensor], ev.bytes, nullptr), "d2d copy"); });
  }

  const tr::Trace& t_;
  std::vector<CUdeviceptr> ptr_;
  std::vector<unsigned char> host_;
  std::vector<std::uint32_t> reads_, writes_;
  std::uint64_t seed_ = 0;
  bool timer_on_ = false;
};

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

void print_capture_summary() {
  auto finish = reinterpret_cast<int (*)(char*, size_t)>(dlsym(RTLD_DEFAULT, "capuchin_finish"));
  if (finish == nullptr) return;
  char summary[1024];
  finish(summary, sizeof summary);
  std::printf("capture %s\n", summary);
}

int run_trace(const std::string& file, int iters, int warmup) {
  auto loaded = tr::load_trace(file);
  if (!loaded) {
    std::fprintf(stderr, "host_replay: %s\n", loaded.error().message().c_str());
    return 1;
  }
  auto repeated = tr::repeat_last_iteration(*loaded, static_cast<unsigned>(iters));
  if (!repeated) {
    std::fprintf(stderr, "host_replay: %s\n", repeated.error().message.c_str());
    return 1;
  }
  check(cuInit(0), "cuInit");
  Timer timer;
  TraceReplay replay(*repeated);
  Counted c;
  replay.run(timer, warmup, &c);
  const int counted = c.iterations;
  if (counted == 0) {
    std::fprintf(stderr, "host_replay: --warmup %d leaves no iteration of %d to count\n", warmup, iters);
    return 1;
  }
  for (int k = 0; k < kKinds; ++k)
    std::printf("kind %s %.1f %.1f %.2f\n", kKindNames[k], static_cast<double>(timer.calls(k)) / counted, timer.ns(k) / counted,
                static_cast<double>(timer.driver_calls(k)) / counted);
  std::printf("iteration_ns %.1f\n", c.ns / counted);
  std::printf("thread_cpu_ns %.1f\n", c.thread_cpu_ns / counted);
  std::printf("driver_calls %.2f\n", static_cast<double>(c.driver_calls) / counted);
  print_capture_summary();
  return 0;
}

// CAPUCHIN_KERNEL_OUTPUTS declaring every layout-1 function's first written pointer, for the
// first `names` trace names: the null driver names a function by its handle's bits above the
// layout (stub_kernel_<name + 1>, stub_driver.cpp), as function() makes it. A launch of such a
// function then keeps a producer for that output, as on a GPU where probations find most
// kernels replayable (the null driver's kernels write nothing: no probation says replayable).
int print_declared_outputs(int names) {
  for (int n = 0; n < names; ++n)
    std::printf("%sstub_kernel_%d:%d", n > 0 ? "," : "", static_cast<int>(reinterpret_cast<std::uintptr_t>(function(n, 1)) >> 4),
                kFirstWrittenParam);
  std::printf("\n");
  return 0;
}

int run_curve(int live, int rounds, int per_round) {
  check(cuInit(0), "cuInit");
  std::vector<CUdeviceptr> held(static_cast<std::size_t>(live));
  std::mt19937_64 rng(42);
  for (auto& p : held) check(cuMemAllocAsync(&p, 4096 << (rng() % 5), nullptr), "alloc (live set)");
  std::vector<double> pair_ns, launch_ns;
  std::vector<CUdeviceptr> fresh(static_cast<std::size_t>(per_round));
  for (int r = 0; r < rounds; ++r) {
    auto t0 = Clock::now();
    for (int i = 0; i < per_round; ++i) {
      CUdeviceptr p = 0;
      check(cuMemAllocAsync(&p, 4096, nullptr), "alloc");
      check(cuMemFreeAsync(p, nullptr), "free");
    }
    pair_ns.push_back(std::chrono::duration<double, std::nano>(Clock::now() - t0).count() / per_round);
    // Four live allocations per launch, chosen anew each round (interior pointers, as views are).
    Small s{};
    for (int i = 0; i < 4; ++i) s.ptr[i] = held[rng() % held.size()] + 256;
    std::array<void*, 15> params = params_of(s);
    const CUfunction f = function(0, 1);
    t0 = Clock::now();
    for (int i = 0; i < per_round; ++i)
      check(cuLaunchKernel(f, 1, 1, 1, 128, 1, 1, 0, nullptr, params.data(), nullptr), "launch");
    launch_ns.push_back(std::chrono::duration<double, std::nano>(Clock::now() - t0).count() / per_round);
    // Let capture's drain thread empty the ring: a full ring takes a cheaper drop path.
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  std::printf("pair_ns %.1f\nlaunch_ns %.1f\n", median(pair_ns), median(launch_ns));
  for (CUdeviceptr p : held) check(cuMemFreeAsync(p, nullptr), "free (live set)");
  print_capture_summary();
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  capuchin::args::Parser app{"host_replay: timed CUDA call sequences on the null driver (run by bench_host_cost)"};
  app.require_subcommand();
  std::string file;
  int iters = 8, warmup = 3, live = 1000, rounds = 15, per_round = 5000;
  auto trace = app.subcommand("trace", "replay a trace's calls");
  trace.option("file", file, "trace (.jsonl or .jsonl.gz)").required();
  trace.option("--iters", iters, "repetitions of the last iteration").range(1, 10000);
  trace.option("--warmup", warmup, "iterations not counted").range(0, 10000);
  auto curve = app.subcommand("curve", "alloc/free pairs and launches with N live allocations");
  curve.option("--live", live, "live allocations").range(1, 10000000);
  curve.option("--rounds", rounds, "timed rounds").range(1, 10000);
  curve.option("--per-round", per_round, "pairs and launches per round").range(1, 10000000);
  int names = 512;
  auto declared = app.subcommand("declared-outputs", "print CAPUCHIN_KERNEL_OUTPUTS for every kernel's written pointer");
  declared.option("--names", names, "trace names covered").range(1, 100000);
  if (auto status = app.parse(argc, argv)) return *status;
  if (trace.parsed()) return run_trace(file, iters, warmup);
  if (declared.parsed()) return print_declared_outputs(names);
  return run_curve(live, rounds, per_round);
}
