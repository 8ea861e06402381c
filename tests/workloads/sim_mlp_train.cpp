// sim_mlp_train: a real training program for simcuda: a ReLU multi-layer perceptron trained with
// SGD on a seeded synthetic regression task (targets from a fixed random "teacher" matrix).
// GEMMs go through simblas (the vendor library, cuLaunchKernel), elementwise kernels through
// cudaLaunchKernel; every activation and gradient is allocated with cudaMallocAsync (or
// cudaMalloc with --alloc sync) and freed right after its last use; weights are persistent; the
// loss is read back each iteration with a synchronising copy.
//
// Contract (tests and later checks rely on it): prints `iter N loss <hex float>` per iteration
// and `weights <16 hex digits>` (FNV-1a of the final weights); the same options give
// bit-identical output on every run. Exit 0 on success; on a failed allocation, exit 2 with a
// message containing "out of memory". `--print-peak` prints only the natural peak device bytes:
// the exact maximum, over the run, of the live allocations charged as simcuda charges them
// (simcuda_accounted_bytes), which equals simcuda's peak_device_bytes for a run of this program.
// `--ground-truth FILE` writes JSON lines: every allocation/free (id, name, ptr, bytes) and every
// launch with the buffers it read and wrote, in program order. It trains on device
// $LOCAL_RANK when set (what torchrun gives each rank, which a PyTorch script passes to
// torch.cuda.set_device), else device 0.
#include "capuchin/args.hpp"
#include <cinttypes>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <map>
#include <thread>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include <cuda_runtime_api.h>

#include "simblas.h"
#include "simcuda/kernel.hpp"

namespace {

// ---- kernels (host stubs + bodies) ----------------------------------------------------------
void relu_forward(int, const float*, float*) {}
void relu_backward(int, const float*, const float*, float*) {}
void mse_loss_grad(int, const float*, const float*, float*, float*) {}
void sgd_update(int, float*, const float*, float) {}

void relu_forward_body(void** args, const simcuda_launch_info*) {
  auto [n, in, out] = simcuda::unpack(relu_forward, args);
  in = simcuda::access(in, n, SIMCUDA_READ);
  out = simcuda::access(out, n, SIMCUDA_WRITE);
  for (int i = 0; i < n; ++i) out[i] = in[i] > 0.0f ? in[i] : 0.0f;
}

void relu_backward_body(void** args, const simcuda_launch_info*) {
  auto [n, grad_out, act, grad_in] = simcuda::unpack(relu_backward, args);
  grad_out = simcuda::access(grad_out, n, SIMCUDA_READ);
  act = simcuda::access(act, n, SIMCUDA_READ);
  grad_in = simcuda::access(grad_in, n, SIMCUDA_WRITE);
  for (int i = 0; i < n; ++i) grad_in[i] = act[i] > 0.0f ? grad_out[i] : 0.0f;
}

void mse_loss_grad_body(void** args, const simcuda_launch_info*) {
  auto [n, out, target, grad, loss] = simcuda::unpack(mse_loss_grad, args);
  out = simcuda::access(out, n, SIMCUDA_READ);
  target = simcuda::access(target, n, SIMCUDA_READ);
  grad = simcuda::access(grad, n, SIMCUDA_WRITE);
  loss = simcuda::access(loss, 1, SIMCUDA_WRITE);
  float sum = 0.0f;  // fixed order: bit-identical on every run
  const float scale = 2.0f / static_cast<float>(n);
  for (int i = 0; i < n; ++i) {
    const float d = out[i] - target[i];
    sum += d * d;
    grad[i] = scale * d;
  }
  *loss = sum / static_cast<float>(n);
}

void sgd_update_body(void** args, const simcuda_launch_info*) {
  auto [n, w, grad, lr] = simcuda::unpack(sgd_update, args);
  w = simcuda::access(w, n, SIMCUDA_READ_WRITE);
  grad = simcuda::access(grad, n, SIMCUDA_READ);
  for (int i = 0; i < n; ++i) w[i] -= lr * grad[i];
}

// ---- device memory with exact accounting and ground truth ----------------------------------
struct Config {
  int depth = 3, width = 128, batch = 64, iters = 10;
  uint64_t seed = 1;
  float lr = 0.05f;
  bool sync_alloc = false;
  bool created_stream = false;
  double kernel_ns = 0;  // extra virtual time of each elementwise kernel (compute-heavier layers)
  bool keep_preact = false;  // keep each pre-activation until its activation is freed (backward)
  int hold_before = -1;       // iteration at which the job waits for hold_file (-1: never)
  std::string hold_file;
};

// Lets a test act on a running job (a daemon command, a signal) without racing the job's end:
// before iteration `c.hold_before` the job waits until `c.hold_file` exists. Bounded, so a test
// that never creates the file fails the job instead of hanging it.
void hold_if_asked(const Config& c, int iteration) {
  if (iteration != c.hold_before) return;
  std::fprintf(stderr, "sim_mlp_train: holding before iteration %d until %s exists\n", iteration, c.hold_file.c_str());
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(300);
  while (!std::filesystem::exists(c.hold_file)) {
    if (std::chrono::steady_clock::now() > deadline) {
      std::fprintf(stderr, "sim_mlp_train: %s did not appear within 300 s\n", c.hold_file.c_str());
      std::exit(1);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
}

std::ofstream* g_truth = nullptr;  // flushed on failure too

[[noreturn]] void fail(const std::string& what, cudaError_t e) {
  if (g_truth != nullptr) g_truth->flush();
  std::fprintf(stderr, "sim_mlp_train: %s failed: %s (%s)\n", what.c_str(), cudaGetErrorString(e), cudaGetErrorName(e));
  std::exit(e == cudaErrorMemoryAllocation ? 2 : 1);
}

void check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) fail(what, e);
}

struct Buffer {
  int id = -1;
  float* ptr = nullptr;
  size_t count = 0;
};

// Runs the training schedule either for real or "dry" (no CUDA calls, fake pointers), so the
// natural peak comes from the very code that allocates.
class Device {
 public:
  Device(bool dry, const Config& cfg, std::ofstream* truth) : dry_(dry), cfg_(cfg), truth_(truth) {}
  cudaStream_t stream = nullptr;
  uint64_t peak() const { return peak_; }

  Buffer alloc(size_t count, const std::string& name, bool persistent = false) {
    Buffer b;
    b.id = next_id_++;
    b.count = count;
    const size_t bytes = count * sizeof(float);
    if (dry_) {
      b.ptr = reinterpret_cast<float*>(fake_next_ += 1 << 20);
    } else {
      void* p = nullptr;
      cudaError_t e = (cfg_.sync_alloc || persistent) ? cudaMalloc(&p, bytes) : cudaMallocAsync(&p, bytes, stream);
      if (e != cudaSuccess) fail((cfg_.sync_alloc || persistent ? "cudaMalloc of " : "cudaMallocAsync of ") + std::to_string(bytes) + " bytes for " + name, e);
      b.ptr = static_cast<float*>(p);
    }
    live_ += simcuda_accounted_bytes(bytes);
    peak_ = std::max(peak_, live_);
    names_[b.id] = name;
    if (truth_) {
      *truth_ << nlohmann::json{{"event", "alloc"}, {"id", b.id}, {"name", name}, {"ptr", hex(b.ptr)},
                                {"bytes", bytes}, {"persistent", persistent}}.dump() << "\n";
    }
    return b;
  }

  void free(Buffer& b) {
    if (!dry_) {
      cudaError_t e = cfg_.sync_alloc ? cudaFree(b.ptr) : cudaFreeAsync(b.ptr, stream);
      check(e, "free");
    }
    live_ -= simcuda_accounted_bytes(b.count * sizeof(float));
    if (truth_) *truth_ << nlohmann::json{{"event", "free"}, {"id", b.id}, {"ptr", hex(b.ptr)}}.dump() << "\n";
    b = Buffer{};
  }

  void note_launch(const char* kernel, const char* via, std::initializer_list<const Buffer*> reads,
                   std::initializer_list<const Buffer*> writes) {
    if (!truth_) return;
    nlohmann::json r = nlohmann::json::array(), w = nlohmann::json::array();
    for (const Buffer* b : reads) r.push_back({{"id", b->id}, {"ptr", hex(b->ptr)}});
    for (const Buffer* b : writes) w.push_back({{"id", b->id}, {"ptr", hex(b->ptr)}});
    *truth_ << nlohmann::json{{"event", "launch"}, {"kernel", kernel}, {"via", via}, {"reads", r}, {"writes", w}}.dump()
            << "\n";
  }

  void note_iteration(int i) {
    if (truth_) *truth_ << nlohmann::json{{"event", "iteration"}, {"n", i}}.dump() << "\n";
  }

  bool dry() const { return dry_; }

 private:
  static std::string hex(const void* p) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "0x%" PRIxPTR, reinterpret_cast<uintptr_t>(p));
    return buf;
  }
  bool dry_;
  const Config& cfg_;
  std::ofstream* truth_;
  int next_id_ = 0;
  uintptr_t fake_next_ = 0x100000000ull;
  uint64_t live_ = 0, peak_ = 0;
  std::map<int, std::string> names_;
};

std::vector<float> uniform(std::mt19937_64& rng, size_t n, float scale) {
  std::vector<float> v(n);
  for (float& x : v) x = (static_cast<float>(rng() >> 40) * (1.0f / 16777216.0f) * 2.0f - 1.0f) * scale;
  return v;
}

struct Model {
  std::vector<Buffer> weights;
  Buffer x, y;
};

// One training iteration; returns the loss (0 when dry).
float step(Device& dev, simblas_handle blas, Model& m, const Config& c) {
  const int B = c.batch, W = c.width, L = c.depth, n = B * W;
  const dim3 grid(static_cast<unsigned>((n + 255) / 256)), block(256);
  auto gemm = [&](char ta, char tb, int M, int N, int K, const Buffer& a, const Buffer& b, const Buffer& out) {
    const char* name = ta == 'N' && tb == 'N' ? "simblas_sgemm_nn" : ta == 'T' ? "simblas_sgemm_tn" : "simblas_sgemm_nt";
    dev.note_launch(name, "simblas", {&a, &b}, {&out});
    if (dev.dry()) return;
    const int lda = ta == 'N' ? K : M, ldb = tb == 'N' ? N : K;
    int r = simblas_sgemm(blas, ta, tb, M, N, K, 1.0f, a.ptr, lda, b.ptr, ldb, 0.0f, out.ptr, N, dev.stream);
    if (r != 0) fail(std::string("simblas_sgemm ") + name, static_cast<cudaError_t>(r));
  };
  std::vector<Buffer> act(static_cast<size_t>(L) + 1), pre(static_cast<size_t>(L));
  act[0] = m.x;
  Buffer out;
  for (int l = 0; l < L; ++l) {
    Buffer z = dev.alloc(static_cast<size_t>(n), "z" + std::to_string(l));
    gemm('N', 'N', B, W, W, act[l], m.weights[l], z);
    if (l + 1 < L) {
      act[l + 1] = dev.alloc(static_cast<size_t>(n), "a" + std::to_string(l + 1));
      dev.note_launch("relu_forward", "cudaLaunchKernel", {&z}, {&act[l + 1]});
      if (!dev.dry()) check(simcuda::launch(relu_forward, grid, block, dev.stream, n, z.ptr, act[l + 1].ptr), "relu_forward");
      if (c.keep_preact) pre[l] = z;  // act[l + 1] = relu(z) stays recomputable while z lives
      else dev.free(z);
    } else {
      out = z;
    }
  }
  Buffer g = dev.alloc(static_cast<size_t>(n), "grad_out");
  Buffer loss = dev.alloc(1, "loss");
  dev.note_launch("mse_loss_grad", "cudaLaunchKernel", {&out, &m.y}, {&g, &loss});
  float host_loss = 0.0f;
  if (!dev.dry()) {
    check(simcuda::launch(mse_loss_grad, grid, block, dev.stream, n, out.ptr, m.y.ptr, g.ptr, loss.ptr), "mse_loss_grad");
    check(cudaMemcpyAsync(&host_loss, loss.ptr, sizeof(float), cudaMemcpyDeviceToHost, dev.stream), "loss copy");
    check(cudaStreamSynchronize(dev.stream), "loss synchronise");
  }
  dev.free(out);
  dev.free(loss);
  for (int l = L - 1; l >= 0; --l) {
    Buffer dw = dev.alloc(static_cast<size_t>(W) * W, "dW" + std::to_string(l));
    gemm('T', 'N', W, W, B, act[l], g, dw);  // dW = a_l^T g
    if (l > 0) {
      Buffer ga = dev.alloc(static_cast<size_t>(n), "ga" + std::to_string(l));
      gemm('N', 'T', B, W, W, g, m.weights[l], ga);  // ga = g W_l^T
      dev.free(g);
      Buffer gp = dev.alloc(static_cast<size_t>(n), "g" + std::to_string(l - 1));
      dev.note_launch("relu_backward", "cudaLaunchKernel", {&ga, &act[l]}, {&gp});
      if (!dev.dry())
        check(simcuda::launch(relu_backward, grid, block, dev.stream, n, ga.ptr, act[l].ptr, gp.ptr), "relu_backward");
      dev.free(ga);
      dev.free(act[l]);
      if (c.keep_preact) dev.free(pre[l - 1]);
      g = gp;
    } else {
      dev.free(g);
    }
    dev.note_launch("sgd_update", "cudaLaunchKernel", {&m.weights[l], &dw}, {&m.weights[l]});
    if (!dev.dry()) {
      const int wn = W * W;
      check(simcuda::launch(sgd_update, dim3(static_cast<unsigned>((wn + 255) / 256)), block, dev.stream, wn,
                            m.weights[l].ptr, dw.ptr, c.lr),
            "sgd_update");
    }
    dev.free(dw);
  }
  return host_loss;
}

Model setup(Device& dev, const Config& c, std::vector<std::vector<float>>* host_init) {
  Model m;
  for (int l = 0; l < c.depth; ++l)
    m.weights.push_back(dev.alloc(static_cast<size_t>(c.width) * c.width, "W" + std::to_string(l), true));
  m.x = dev.alloc(static_cast<size_t>(c.batch) * c.width, "x", true);
  m.y = dev.alloc(static_cast<size_t>(c.batch) * c.width, "y", true);
  if (host_init == nullptr) return m;
  std::mt19937_64 rng(c.seed);
  const int W = c.width, B = c.batch;
  const float he = std::sqrt(6.0f / static_cast<float>(W));
  for (int l = 0; l < c.depth; ++l) host_init->push_back(uniform(rng, static_cast<size_t>(W) * W, l + 1 < c.depth ? he : he * 0.5f));
  std::vector<float> x = uniform(rng, static_cast<size_t>(B) * W, 1.0f);
  std::vector<float> teacher = uniform(rng, static_cast<size_t>(W) * W, 1.0f / std::sqrt(static_cast<float>(W)));
  std::vector<float> y(static_cast<size_t>(B) * W);
  for (int i = 0; i < B; ++i)
    for (int j = 0; j < W; ++j) {
      double acc = 0;
      for (int p = 0; p < W; ++p) acc += static_cast<double>(x[static_cast<size_t>(i) * W + p]) * static_cast<double>(teacher[static_cast<size_t>(p) * W + j]);
      y[static_cast<size_t>(i) * W + j] = static_cast<float>(std::tanh(acc));
    }
  host_init->push_back(std::move(x));
  host_init->push_back(std::move(y));
  return m;
}

}  // namespace

int main(int argc, char** argv) {
  Config c;
  bool print_peak = false;
  std::string truth_path, alloc_mode = "async", stream_mode = "default";
  capuchin::args::Parser app{"sim_mlp_train: trains a ReLU MLP with SGD on simcuda (deterministic)"};
  app.option("--depth", c.depth, "number of linear layers").range(1, 64);
  app.option("--width", c.width, "features per layer").range(1, 8192);
  app.option("--batch", c.batch, "samples per batch").range(1, 65536);
  app.option("--iters", c.iters, "training iterations").range(0, 1000000);
  app.option("--seed", c.seed, "seed of the synthetic task and the initial weights");
  app.option("--lr", c.lr, "SGD learning rate");
  app.option("--alloc", alloc_mode, "async: cudaMallocAsync/cudaFreeAsync; sync: cudaMalloc/cudaFree")
      .one_of({"async", "sync"});
  app.option("--stream", stream_mode, "default: the legacy default stream; created: a cudaStreamCreate'd stream")
      .one_of({"default", "created"});
  app.option("--kernel-ns", c.kernel_ns,
             "extra virtual ns of every elementwise kernel (relu, loss, sgd): models compute-heavier layers, "
             "results unchanged")
      .range(0.0, 1e9);
  app.flag("--keep-preact", c.keep_preact,
           "keep each layer's pre-activation until backward frees its activation (more memory, results unchanged)");
  app.flag("--print-peak", print_peak, "print only the natural peak device bytes and exit");
  app.option("--ground-truth", truth_path, "write allocations and per-launch buffers as JSON lines");
  auto hold_file = app.option("--hold-file", c.hold_file, "with --hold-before: the file whose creation releases the job");
  app.option("--hold-before", c.hold_before, "wait before this iteration until --hold-file exists (at most 300 s)")
      .range(0, 1000000)
      .needs(hold_file);
  if (auto status = app.parse(argc, argv)) return *status;
  c.sync_alloc = alloc_mode == "sync";
  c.created_stream = stream_mode == "created";
  if (static_cast<int64_t>(c.batch) * c.width > INT32_MAX || static_cast<int64_t>(c.width) * c.width > INT32_MAX) {
    std::fprintf(stderr, "sim_mlp_train: --batch x --width and --width^2 must fit in 32 bits\n");
    return 1;
  }

  {  // The natural peak: the same schedule, dry.
    Device dry(true, c, nullptr);
    Model m = setup(dry, c, nullptr);
    for (int i = 0; i < std::min(c.iters, 2); ++i) step(dry, nullptr, m, c);
    if (print_peak) {
      std::printf("%" PRIu64 "\n", dry.peak());
      return 0;
    }
  }

  std::ofstream truth;
  if (!truth_path.empty()) {
    truth.open(truth_path);
    if (!truth) {
      std::fprintf(stderr, "sim_mlp_train: cannot write %s\n", truth_path.c_str());
      return 1;
    }
  }
  simcuda::register_kernel("relu_forward", relu_forward, relu_forward_body, c.kernel_ns);
  simcuda::register_kernel("relu_backward", relu_backward, relu_backward_body, c.kernel_ns);
  simcuda::register_kernel("mse_loss_grad", mse_loss_grad, mse_loss_grad_body, c.kernel_ns);
  simcuda::register_kernel("sgd_update", sgd_update, sgd_update_body, c.kernel_ns);
  const char* local_rank = std::getenv("LOCAL_RANK");
  check(cudaSetDevice(local_rank != nullptr && *local_rank != '\0' ? std::atoi(local_rank) : 0), "cudaSetDevice");
  simblas_handle blas = nullptr;
  if (int r = simblas_create(&blas); r != 0) fail("simblas_create", static_cast<cudaError_t>(r));

  if (!truth_path.empty()) g_truth = &truth;
  Device dev(false, c, g_truth);
  if (c.created_stream) check(cudaStreamCreate(&dev.stream), "cudaStreamCreate");
  std::vector<std::vector<float>> init;
  Model m = setup(dev, c, &init);
  for (int l = 0; l < c.depth; ++l)
    check(cudaMemcpy(m.weights[l].ptr, init[l].data(), init[l].size() * sizeof(float), cudaMemcpyHostToDevice), "weights upload");
  check(cudaMemcpy(m.x.ptr, init[c.depth].data(), init[c.depth].size() * sizeof(float), cudaMemcpyHostToDevice), "x upload");
  check(cudaMemcpy(m.y.ptr, init[c.depth + 1].data(), init[c.depth + 1].size() * sizeof(float), cudaMemcpyHostToDevice), "y upload");

  for (int i = 0; i < c.iters; ++i) {
    hold_if_asked(c, i);
    dev.note_iteration(i);
    const float loss = step(dev, blas, m, c);
    std::printf("iter %d loss %a\n", i, static_cast<double>(loss));
  }
  uint64_t h = 1469598103934665603ull;  // FNV-1a over the final weights
  for (int l = 0; l < c.depth; ++l) {
    std::vector<float> w(m.weights[l].count);
    check(cudaMemcpy(w.data(), m.weights[l].ptr, w.size() * sizeof(float), cudaMemcpyDeviceToHost), "weights download");
    const auto* bytes = reinterpret_cast<const unsigned char*>(w.data());
    for (size_t k = 0; k < w.size() * sizeof(float); ++k) h = (h ^ bytes[k]) * 1099511628211ull;
  }
  std::printf("weights %016" PRIx64 "\n", h);
  check(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
  for (Buffer& b : m.weights) dev.free(b);
  dev.free(m.x);
  dev.free(m.y);
  if (c.created_stream) check(cudaStreamDestroy(dev.stream), "cudaStreamDestroy");
  simblas_destroy(blas);
  return 0;
}
