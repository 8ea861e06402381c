// sim_loop_train: a training loop with PyTorch's habits, for simcuda: each iteration uploads a
// fresh input batch with a copy (cudaMemcpy, or cudaMemcpyAsync into cudaMallocAsync memory),
// clears a gradient buffer with a memset, runs a chain of layers (each output a new allocation,
// written by its kernel), updates persistent weights in place, frees everything but the
// weights, and reads a loss back with a synchronising copy; optionally the batch size changes
// every iteration (--dynamic) or grows 4x from an iteration on (--grow-at), the loop syncs several times per iteration (--syncs), every N-th
// iteration logs a metric (--log-every: a logging step's extra allocation, kernel, read-back
// and free, as `print(metric.item())` every N steps makes them), and a
// second thread launches kernels while the main thread forks children that exit at once
// (--fork), as data-loader workers and launcher probes do.
//
// Contract (tests rely on it): prints `iter N loss <hex float>` per iteration (and `iter N
// metric <hex float>` on the iterations that log one) and
// `weights <16 hex digits>` (FNV-1a of the final weights); the same options give bit-identical
// output on every run, with or without capuchin. Every byte of every input reaches the loss, so
// a lost or stale upload changes the output. Exit 0 on success; 2 with "out of memory" on a
// failed allocation; 3 when a forked child did not exit within 20 s (a hang). `--print-peak`
// prints the natural peak device bytes (simcuda's accounting) and exits.
#include "capuchin/args.hpp"
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <thread>
#include <vector>

#include <cuda_runtime_api.h>

#include "simcuda/kernel.hpp"

namespace {

// ---- kernels ---------------------------------------------------------------------------------
void layer_fwd(int, int, const float*, const float*, float*) {}
void grad_accumulate(int, int, const float*, float*) {}
void weight_update(int, float*, const float*, float) {}
void reduce_sum(int, const float*, const float*, float*) {}
void spin(int, float*) {}

void layer_fwd_body(void** args, const simcuda_launch_info*) {
  auto [n, m, in, w, out] = simcuda::unpack(layer_fwd, args);
  in = simcuda::access(in, static_cast<size_t>(n), SIMCUDA_READ);
  w = simcuda::access(w, static_cast<size_t>(m), SIMCUDA_READ);
  out = simcuda::access(out, static_cast<size_t>(n), SIMCUDA_WRITE);
  for (std::size_t base = 0, count = static_cast<size_t>(n), mm = static_cast<size_t>(m); base < count; base += mm) {
    const std::size_t len = std::min(mm, count - base);  // i % m without a division per element
    for (std::size_t j = 0; j < len; ++j) out[base + j] = in[base + j] * 0.5f + w[j] * 0.25f;
  }
}

// grad[j] += sum over i = j (mod m) of act[i], in a fixed order.
void grad_accumulate_body(void** args, const simcuda_launch_info*) {
  auto [n, m, act, grad] = simcuda::unpack(grad_accumulate, args);
  act = simcuda::access(act, static_cast<size_t>(n), SIMCUDA_READ);
  grad = simcuda::access(grad, static_cast<size_t>(m), SIMCUDA_READ_WRITE);
  for (std::size_t base = 0, count = static_cast<size_t>(n), mm = static_cast<size_t>(m); base < count; base += mm) {
    const std::size_t len = std::min(mm, count - base);  // each grad[j] summed in increasing i, as i % m would
    for (std::size_t j = 0; j < len; ++j) grad[j] += act[base + j];
  }
}

void weight_update_body(void** args, const simcuda_launch_info*) {
  auto [m, w, grad, lr] = simcuda::unpack(weight_update, args);
  w = simcuda::access(w, static_cast<size_t>(m), SIMCUDA_READ_WRITE);
  grad = simcuda::access(grad, static_cast<size_t>(m), SIMCUDA_READ);
  for (int i = 0; i < m; ++i) w[i] = w[i] * 0.999f - lr * grad[i];
}

void reduce_sum_body(void** args, const simcuda_launch_info*) {
  auto [n, x, label, out] = simcuda::unpack(reduce_sum, args);
  x = simcuda::access(x, static_cast<size_t>(n), SIMCUDA_READ);
  label = simcuda::access(label, static_cast<size_t>(n), SIMCUDA_READ);
  out = simcuda::access(out, 1, SIMCUDA_WRITE);
  double s = 0;
  for (int i = 0, weight = 1; i < n; ++i, weight = weight == 7 ? 1 : weight + 1)  // (i % 7) + 1
    s += static_cast<double>(x[i] - label[i]) * static_cast<double>(weight);
  *out = static_cast<float>(s / n);
}

void spin_body(void** args, const simcuda_launch_info*) {
  auto [n, x] = simcuda::unpack(spin, args);
  x = simcuda::access(x, static_cast<size_t>(n), SIMCUDA_READ_WRITE);
  for (int i = 0; i < n; ++i) x[i] += 1.0f;
}

// ---- the loop --------------------------------------------------------------------------------
volatile int g_forked_child = 0;
struct Config {
  int iters = 6, layers = 3, syncs = 1, log_every = 0;
  int grow_at = 0;  // from this iteration on, batches 4x larger (0: never)
  std::size_t input_bytes = 4u << 20, weight_bytes = 256u << 10;
  std::uint64_t seed = 1;
  bool async = false, dynamic = false, fork_children = false;
};

void check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) {
    std::fprintf(stderr, "sim_loop_train: %s failed: %s (%s)\n", what, cudaGetErrorString(e), cudaGetErrorName(e));
    std::exit(e == cudaErrorMemoryAllocation ? 2 : 1);
  }
}

std::uint64_t next(std::uint64_t& s) {  // xorshift64*
  s ^= s >> 12, s ^= s << 25, s ^= s >> 27;
  return s * 2685821657736338717ull;
}

// The input batch of iteration `it`: its float count (changes with --dynamic) and its values.
int batch_floats(const Config& c, int it) {
  std::size_t bytes = c.input_bytes;
  if (c.dynamic) {
    std::uint64_t s = c.seed * 7919 + static_cast<std::uint64_t>(it) + 1;
    next(s);
    const std::size_t lo = c.input_bytes / 4, hi = c.input_bytes * 2;
    bytes = lo + next(s) % (hi - lo);
  }
  if (c.grow_at > 0 && it >= c.grow_at) bytes *= 4;
  return static_cast<int>(std::max<std::size_t>(bytes / sizeof(float), 1));
}

void fill_batch(const Config& c, int it, std::vector<float>& host) {
  std::uint64_t s = c.seed * 104729 + static_cast<std::uint64_t>(it) * 31 + 7;
  for (float& v : host) v = static_cast<float>(next(s) % 2001) * 1e-3f - 1.0f;
}

class Loop {
 public:
  explicit Loop(const Config& c) : c_(c), m_(static_cast<int>(c.weight_bytes / sizeof(float))) {
    c_.weight_bytes = static_cast<std::size_t>(m_) * sizeof(float);  // whole floats
  }

  std::uint64_t natural_peak() const {
    std::uint64_t worst = 0;
    for (int it = 0; it < c_.iters; ++it) {
      const std::uint64_t n = static_cast<std::uint64_t>(batch_floats(c_, it)) * sizeof(float);
      // live at once: input + every layer's output (freed in the backward pass) + the labels
      worst = std::max(worst, (c_.layers + 2) * simcuda_accounted_bytes(n));
    }
    if (c_.fork_children) worst = std::max(worst, simcuda_accounted_bytes(64 << 10));  // the busy thread's scratch
    return worst + static_cast<std::uint64_t>(c_.layers + 1) * simcuda_accounted_bytes(c_.weight_bytes) +
           simcuda_accounted_bytes(sizeof(float));
  }

  void run() {
    if (c_.async) check(cudaStreamCreate(&stream_), "cudaStreamCreate");
    std::vector<float> init(static_cast<std::size_t>(m_));
    weights_.resize(static_cast<std::size_t>(c_.layers));
    for (int k = 0; k < c_.layers; ++k) {
      weights_[k] = alloc(c_.weight_bytes);
      for (int i = 0; i < m_; ++i) init[static_cast<std::size_t>(i)] = static_cast<float>((i * 13 + k * 7) % 17) * 0.01f;
      check(cudaMemcpy(weights_[k], init.data(), c_.weight_bytes, cudaMemcpyHostToDevice), "upload weights");
    }
    grad_ = alloc(c_.weight_bytes);
    loss_ = alloc(sizeof(float));
    for (int it = 0; it < c_.iters; ++it) {
      if (c_.fork_children) fork_child(it);
      step(it);
    }
    std::vector<float> w(static_cast<std::size_t>(m_));
    std::uint64_t h = 1469598103934665603ull;
    for (float* dw : weights_) {
      check(cudaMemcpy(w.data(), dw, c_.weight_bytes, cudaMemcpyDeviceToHost), "download weights");
      const auto* bytes = reinterpret_cast<const unsigned char*>(w.data());
      for (std::size_t i = 0; i < c_.weight_bytes; ++i) h = (h ^ bytes[i]) * 1099511628211ull;
    }
    std::printf("weights %016" PRIx64 "\n", h);
  }

 private:
  float* alloc(std::size_t bytes) {
    void* p = nullptr;
    check(c_.async ? cudaMallocAsync(&p, bytes, stream_) : cudaMalloc(&p, bytes), "allocation");
    return static_cast<float*>(p);
  }
  void release(float* p) { check(c_.async ? cudaFreeAsync(p, stream_) : cudaFree(p), "free"); }

  void step(int it) {
    const int n = batch_floats(c_, it);
    const std::size_t bytes = static_cast<std::size_t>(n) * sizeof(float);
    std::vector<float> host(static_cast<std::size_t>(n));
    fill_batch(c_, it, host);
    float* input = alloc(bytes);
    if (c_.async) check(cudaMemcpyAsync(input, host.data(), bytes, cudaMemcpyHostToDevice, stream_), "upload");
    else check(cudaMemcpy(input, host.data(), bytes, cudaMemcpyHostToDevice), "upload");
    check(c_.async ? cudaMemsetAsync(grad_, 0, c_.weight_bytes, stream_) : cudaMemset(grad_, 0, c_.weight_bytes), "memset");
    std::vector<float*> acts;
    const float* in = input;
    for (int k = 0; k < c_.layers; ++k) {
      float* out = alloc(bytes);
      check(simcuda::launch(layer_fwd, dim3(1), dim3(256), stream_, n, m_, in, static_cast<const float*>(weights_[k]), out), "layer_fwd");
      acts.push_back(out);
      in = out;
      if (c_.syncs > 2 && k == 0) check(cudaStreamSynchronize(stream_), "mid-forward sync");
    }
    // The labels arrive after the forward (a second upload into a reused block), read once.
    std::vector<float> labels(static_cast<std::size_t>(n));
    fill_batch(c_, it + 100000, labels);
    float* label = alloc(bytes);
    if (c_.async) check(cudaMemcpyAsync(label, labels.data(), bytes, cudaMemcpyHostToDevice, stream_), "upload labels");
    else check(cudaMemcpy(label, labels.data(), bytes, cudaMemcpyHostToDevice), "upload labels");
    check(simcuda::launch(reduce_sum, dim3(1), dim3(256), stream_, n, in, static_cast<const float*>(label), loss_), "reduce_sum");
    release(label);
    if (c_.log_every > 0 && it % c_.log_every == c_.log_every - 1) log_metric(it, n, in);
    if (c_.syncs > 1) check(cudaStreamSynchronize(stream_), "forward sync");
    for (int k = c_.layers - 1; k >= 0; --k) {
      check(simcuda::launch(grad_accumulate, dim3(1), dim3(256), stream_, n, m_, static_cast<const float*>(acts[k]), grad_), "grad");
      check(simcuda::launch(weight_update, dim3(1), dim3(256), stream_, m_, weights_[k], static_cast<const float*>(grad_), 1e-4f), "update");
      release(acts[k]);
    }
    // The input was last read by the first layer: under pressure it is evicted by now and freed
    // where it lies, and the next iteration's upload reuses its block.
    release(input);
    float loss = 0;  // read as PyTorch's .item() does: an async copy, then a stream sync
    check(cudaMemcpyAsync(&loss, loss_, sizeof loss, cudaMemcpyDeviceToHost, stream_), "loss read");
    check(cudaStreamSynchronize(stream_), "loss sync");
    std::printf("iter %d loss %a\n", it, static_cast<double>(loss));
  }

  // A logging step: a metric of the last activation made in a scalar of its own, read back
  // with a sync, freed (extra events in this iteration only).
  void log_metric(int it, int n, const float* act) {
    float* metric = alloc(sizeof(float));
    check(simcuda::launch(reduce_sum, dim3(1), dim3(256), stream_, n, act, act, metric), "metric");
    float v = 0;
    check(cudaMemcpyAsync(&v, metric, sizeof v, cudaMemcpyDeviceToHost, stream_), "metric read");
    check(cudaStreamSynchronize(stream_), "metric sync");
    release(metric);
    std::printf("iter %d metric %a\n", it, static_cast<double>(v));
  }

  // A second thread keeps launching while the main thread forks: the child must exit cleanly.
  void fork_child(int it) {
    std::atomic<bool> stop{false};
    float* scratch = alloc(64 << 10);
    check(cudaDeviceSynchronize(), "sync before fork");
    std::thread busy([&] {
      cudaStream_t s = nullptr;
      check(cudaStreamCreate(&s), "busy stream");
      while (!stop.load()) check(simcuda::launch(spin, dim3(1), dim3(32), s, 16, scratch), "spin");
      check(cudaStreamSynchronize(s), "busy sync");
      check(cudaStreamDestroy(s), "busy stream destroy");
    });
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
    for (int k = 0; k < 4; ++k) {
      const pid_t pid = ::fork();
      if (pid == 0) {
        g_forked_child = 1;
        std::exit(0);  // runs the exit handlers, as a data-loader worker does
      }
      if (pid < 0) break;
      int status = 0;
      const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
      while (::waitpid(pid, &status, WNOHANG) == 0) {
        if (std::chrono::steady_clock::now() > deadline) {
          ::kill(pid, SIGKILL);
          std::fprintf(stderr, "sim_loop_train: forked child %d (iteration %d) hung at exit\n", static_cast<int>(pid), it);
          std::exit(3);
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
      }
    }
    stop.store(true);
    busy.join();
    release(scratch);
  }

  Config c_;
  int m_;
  cudaStream_t stream_ = nullptr;
  std::vector<float*> weights_;
  float* grad_ = nullptr;
  float* loss_ = nullptr;
};

}  // namespace

// LeakSanitizer's hook (ASan builds): a forked child holds the parent's memory, whose owners
// (threads) it does not have; its exit is not a leak report.
extern "C" __attribute__((visibility("default"), used)) int __lsan_is_turned_off() { return g_forked_child; }

int main(int argc, char** argv) {
  Config c;
  std::string alloc_mode = "sync";
  bool print_peak = false;
  capuchin::args::Parser app{"sim_loop_train: a training loop with PyTorch's habits, on simcuda (deterministic)"};
  app.option("--iters", c.iters, "iterations").range(0, 100000);
  app.option("--layers", c.layers, "layers (each output a new allocation)").range(1, 64);
  app.option("--input-bytes", c.input_bytes, "bytes of each input batch (the mean size with --dynamic)")
      .range(std::size_t{4}, std::size_t{1} << 32);
  app.option("--weight-bytes", c.weight_bytes, "bytes of each layer's weights").range(std::size_t{4}, std::size_t{1} << 30);
  app.option("--seed", c.seed, "seed of the inputs");
  app.option("--alloc", alloc_mode, "sync: cudaMalloc + cudaMemcpy; async: cudaMallocAsync + cudaMemcpyAsync on a created stream")
      .one_of({"sync", "async"});
  app.option("--syncs", c.syncs, "host syncs per iteration (1: the loss read; 2: + after the forward; 3: + mid-forward)")
      .range(1, 3);
  app.option("--log-every", c.log_every, "every N-th iteration logs a metric (0: never)").range(0, 100000);
  app.flag("--dynamic", c.dynamic, "a different batch size every iteration (1/4 to 2x --input-bytes)");
  app.option("--grow-at", c.grow_at, "from iteration N on, every batch is 4x larger (a job whose memory grows; 0: never)")
      .range(0, 100000);
  app.flag("--fork", c.fork_children, "fork children that exit at once while another thread launches");
  app.flag("--print-peak", print_peak, "print only the natural peak device bytes and exit");
  if (auto status = app.parse(argc, argv)) return *status;
  c.async = alloc_mode == "async";
  Loop loop(c);
  if (print_peak) {
    std::printf("%" PRIu64 "\n", loop.natural_peak());
    return 0;
  }
  simcuda::register_kernel("layer_fwd", layer_fwd, layer_fwd_body);
  simcuda::register_kernel("grad_accumulate", grad_accumulate, grad_accumulate_body);
  simcuda::register_kernel("weight_update", weight_update, weight_update_body);
  simcuda::register_kernel("reduce_sum", reduce_sum, reduce_sum_body);
  simcuda::register_kernel("spin", spin, spin_body);
  check(cudaSetDevice(0), "cudaSetDevice");
  loop.run();
  return 0;
}
