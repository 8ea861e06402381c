// exec_infer: the kernels write-set inference must tell apart (interpose/exec/write_sets.hpp),
// in a training-shaped loop whose activations do not fit the test's budget. Nothing is declared
// to capuchin. Per layer l of a forward pass:
//   a = produce(x)                 pure: writes only its new output          -> replayable
//   b = normalize(a, running[l])   also updates a running statistic in place -> side-effect
//   c = noisy(b, seq)              adds how often this very launch ran before (0 unless replayed),
//                                  as a kernel with atomics gives other bytes when run again
//                                                                             -> not-deterministic
//   scale_(c)                      in place (touches no new tensor: never probed)
//   scatter(table, a)              writes h1, h2 only through pointers stored in device memory
//                                  (table, uploaded by a copy): capture never sees them written
//   clamp_(h1)                     in place on a tensor written unseen, so it looks new to the
//                                  executor, and idempotent: only a replay over other bytes shows
//                                  that it reads what it writes                -> not-deterministic
//   e = combine(h1, h2, c)         pure; h1 and h2 are its inputs, not outputs -> replayable
// and before the backward pass g0 = add_host(e, pinned), which reads mapped host memory the
// program rewrites every iteration (the executor does not serve it)         -> foreign-memory
// then a backward pass reads every layer's tensors in reverse (a and e through device-to-device
// copies, the others by kernels) into a gradient, whose sum is the
// iteration's loss, read back with a synchronising copy; every tensor but the statistics is
// freed. A recomputation of b or c, or one of h1/h2 from `combine`, changes the losses or the
// statistics; so does a probation that is not undone.
//
// Usage: exec_infer LAYERS ELEMENTS ITERS. Prints `iter N loss <hex float>` and
// `running <16 hex>` (FNV-1a of the statistics); the same arguments give bit-identical output
// with or without capuchin. Exit 0; 1 on a CUDA error (exec_prog.hpp's check: the step named).
#include <cuda_runtime_api.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <vector>

#include "exec_prog.hpp"
#include "simcuda/kernel.hpp"

namespace {

void produce(int, const float*, float*) {}
void normalize(int, const float*, float*, float*) {}
void noisy(int, const float*, float*, unsigned long long) {}
void scale_(int, float*) {}
void scatter(int, float* const*, const float*) {}
void clamp_(int, float*) {}
void add_host(int, const float*, const float*, float*) {}
void combine(int, const float*, const float*, const float*, float*) {}
void backward(int, const float*, const float*, const float*, const float*, float*) {}

void produce_body(void** a, const simcuda_launch_info*) {
  auto [n, x, y] = simcuda::unpack(produce, a);
  x = simcuda::access(x, static_cast<size_t>(n), SIMCUDA_READ);
  y = simcuda::access(y, static_cast<size_t>(n), SIMCUDA_WRITE);
  for (int i = 0; i < n; ++i) y[i] = x[i] * 0.75f + static_cast<float>(i % 7) * 0.125f;
}

void normalize_body(void** a, const simcuda_launch_info*) {
  auto [n, x, y, running] = simcuda::unpack(normalize, a);
  x = simcuda::access(x, static_cast<size_t>(n), SIMCUDA_READ);
  y = simcuda::access(y, static_cast<size_t>(n), SIMCUDA_WRITE);
  running = simcuda::access(running, 1, SIMCUDA_READ_WRITE);
  double sum = 0;
  for (int i = 0; i < n; ++i) sum += static_cast<double>(x[i]);
  const float mean = static_cast<float>(sum / n);
  for (int i = 0; i < n; ++i) y[i] = x[i] - mean;
  running[0] = running[0] * 0.9f + mean * 0.1f;  // the side effect a replay would repeat
}

std::mutex g_runs_mu;
std::map<unsigned long long, int> g_runs;  // noisy's launches by sequence number: how often each ran

void noisy_body(void** a, const simcuda_launch_info*) {
  auto [n, x, y, seq] = simcuda::unpack(noisy, a);
  x = simcuda::access(x, static_cast<size_t>(n), SIMCUDA_READ);
  y = simcuda::access(y, static_cast<size_t>(n), SIMCUDA_WRITE);
  int before;
  {
    std::lock_guard<std::mutex> lock(g_runs_mu);
    before = g_runs[seq]++;
  }
  for (int i = 0; i < n; ++i) y[i] = x[i] * 0.5f + static_cast<float>(before);
}

void scale_body(void** a, const simcuda_launch_info*) {
  auto [n, x] = simcuda::unpack(scale_, a);
  x = simcuda::access(x, static_cast<size_t>(n), SIMCUDA_READ_WRITE);
  for (int i = 0; i < n; ++i) x[i] *= 0.5f;
}

void scatter_body(void** a, const simcuda_launch_info*) {
  auto [n, table, x] = simcuda::unpack(scatter, a);
  table = simcuda::access(table, 2, SIMCUDA_READ);
  x = simcuda::access(x, static_cast<size_t>(n), SIMCUDA_READ);
  float* h1 = simcuda::access(table[0], static_cast<size_t>(n), SIMCUDA_WRITE);  // hidden from capture
  float* h2 = simcuda::access(table[1], static_cast<size_t>(n), SIMCUDA_WRITE);
  for (int i = 0; i < n; ++i) h1[i] = x[i] * 2.0f, h2[i] = x[i] * 3.0f + 1.0f;
}

void clamp_body(void** a, const simcuda_launch_info*) {
  auto [n, x] = simcuda::unpack(clamp_, a);
  x = simcuda::access(x, static_cast<size_t>(n), SIMCUDA_READ_WRITE);
  for (int i = 0; i < n; ++i) x[i] = x[i] > 0.5f ? x[i] : 0.5f;  // the same when run twice
}

void add_host_body(void** a, const simcuda_launch_info*) {
  auto [n, x, host, y] = simcuda::unpack(add_host, a);
  x = simcuda::access(x, static_cast<size_t>(n), SIMCUDA_READ);
  host = simcuda::access(host, 1, SIMCUDA_READ);
  y = simcuda::access(y, static_cast<size_t>(n), SIMCUDA_WRITE);
  for (int i = 0; i < n; ++i) y[i] = x[i] + host[0];
}

void combine_body(void** a, const simcuda_launch_info*) {
  auto [n, h1, h2, c, y] = simcuda::unpack(combine, a);
  h1 = simcuda::access(h1, static_cast<size_t>(n), SIMCUDA_READ);
  h2 = simcuda::access(h2, static_cast<size_t>(n), SIMCUDA_READ);
  c = simcuda::access(c, static_cast<size_t>(n), SIMCUDA_READ);
  y = simcuda::access(y, static_cast<size_t>(n), SIMCUDA_WRITE);
  for (int i = 0; i < n; ++i) y[i] = (h1[i] - h2[i]) * 0.25f + c[i];
}

void backward_body(void** a, const simcuda_launch_info*) {
  auto [n, g, p, q, r, out] = simcuda::unpack(backward, a);
  g = simcuda::access(g, static_cast<size_t>(n), SIMCUDA_READ);
  p = simcuda::access(p, static_cast<size_t>(n), SIMCUDA_READ);
  q = simcuda::access(q, static_cast<size_t>(n), SIMCUDA_READ);
  r = simcuda::access(r, static_cast<size_t>(n), SIMCUDA_READ);
  out = simcuda::access(out, static_cast<size_t>(n), SIMCUDA_WRITE);
  for (int i = 0; i < n; ++i) out[i] = g[i] * 0.5f + p[i] * 0.25f - q[i] * 0.125f + r[i] * 0.0625f;
}

using exec_prog::check;

float* alloc(size_t n, cudaStream_t s) {
  float* p = nullptr;
  check(cudaMallocAsync(reinterpret_cast<void**>(&p), n * sizeof(float), s), "malloc");
  return p;
}

struct Layer {
  float *a, *b, *c, *h1, *h2, *e;
  float** table;
};

}  // namespace

int main(int argc, char** argv) {
  if (argc != 4) {
    std::fprintf(stderr, "usage: exec_infer LAYERS ELEMENTS ITERS\n");
    return 1;
  }
  const int layers = std::atoi(argv[1]), n = std::atoi(argv[2]), iters = std::atoi(argv[3]);
  simcuda::register_kernel("produce", produce, produce_body);
  simcuda::register_kernel("normalize", normalize, normalize_body);
  simcuda::register_kernel("noisy", noisy, noisy_body);
  simcuda::register_kernel("scale_", scale_, scale_body);
  simcuda::register_kernel("scatter", scatter, scatter_body);
  simcuda::register_kernel("clamp_", clamp_, clamp_body);
  simcuda::register_kernel("add_host", add_host, add_host_body);
  simcuda::register_kernel("combine", combine, combine_body);
  simcuda::register_kernel("backward", backward, backward_body);
  check(cudaSetDevice(0), "set device");
  cudaStream_t s = nullptr;
  check(cudaStreamCreate(&s), "stream");
  float* running = nullptr;
  check(cudaMalloc(reinterpret_cast<void**>(&running), static_cast<size_t>(layers) * sizeof(float)), "malloc running");
  check(cudaMemset(running, 0, static_cast<size_t>(layers) * sizeof(float)), "memset running");
  std::vector<float> host(static_cast<size_t>(n));
  // Mapped pinned host memory, which the executor does not serve, read by add_host.
  float* pinned = nullptr;
  check(cudaHostAlloc(reinterpret_cast<void**>(&pinned), sizeof(float), cudaHostAllocMapped), "host alloc");
  const dim3 grid(1), block(256);
  unsigned long long seq = 0;
  for (int it = 1; it <= iters; ++it) {
    for (int i = 0; i < n; ++i) host[static_cast<size_t>(i)] = static_cast<float>((i * 13 + it * 7) % 97) * 0.01f;
    float* x = alloc(static_cast<size_t>(n), s);
    check(cudaMemcpyAsync(x, host.data(), host.size() * sizeof(float), cudaMemcpyHostToDevice, s), "upload");
    std::vector<Layer> net(static_cast<size_t>(layers));
    const float* in = x;
    for (int l = 0; l < layers; ++l) {
      Layer& L = net[static_cast<size_t>(l)];
      L.a = alloc(static_cast<size_t>(n), s), L.b = alloc(static_cast<size_t>(n), s), L.c = alloc(static_cast<size_t>(n), s);
      L.h1 = alloc(static_cast<size_t>(n), s), L.h2 = alloc(static_cast<size_t>(n), s), L.e = alloc(static_cast<size_t>(n), s);
      check(cudaMallocAsync(reinterpret_cast<void**>(&L.table), 2 * sizeof(float*), s), "malloc table");
      float* ptrs[2] = {L.h1, L.h2};
      check(cudaMemcpyAsync(L.table, ptrs, sizeof ptrs, cudaMemcpyHostToDevice, s), "upload table");
      check(cudaStreamSynchronize(s), "sync table");  // `ptrs` is a local
      check(simcuda::launch(produce, grid, block, s, n, in, L.a), "produce");
      check(simcuda::launch(normalize, grid, block, s, n, static_cast<const float*>(L.a), L.b, running + l), "normalize");
      check(simcuda::launch(noisy, grid, block, s, n, static_cast<const float*>(L.b), L.c, ++seq), "noisy");
      check(simcuda::launch(scale_, grid, block, s, n, L.c), "scale_");
      check(simcuda::launch(scatter, grid, block, s, n, static_cast<float* const*>(L.table), static_cast<const float*>(L.a)), "scatter");
      check(simcuda::launch(clamp_, grid, block, s, n, L.h1), "clamp_");
      check(simcuda::launch(combine, grid, block, s, n, static_cast<const float*>(L.h1), static_cast<const float*>(L.h2),
                            static_cast<const float*>(L.c), L.e), "combine");
      in = L.e;
    }
    check(cudaStreamSynchronize(s), "sync before the host write");
    *pinned = static_cast<float>(it) * 0.25f;  // what add_host reads this iteration
    float* g0 = alloc(static_cast<size_t>(n), s);
    check(simcuda::launch(add_host, grid, block, s, n, in, static_cast<const float*>(pinned), g0), "add_host");
    float* g = alloc(static_cast<size_t>(n), s);
    check(simcuda::launch(produce, grid, block, s, n, static_cast<const float*>(g0), g), "loss grad");
    check(cudaFreeAsync(g0, s), "free g0");
    for (int l = layers - 1; l >= 0; --l) {
      Layer& L = net[static_cast<size_t>(l)];
      // a is read by a copy first (as .clone() or .cpu() would): a dropped one is recomputed for it.
      float* ac = alloc(static_cast<size_t>(n), s);
      check(cudaMemcpyAsync(ac, L.a, static_cast<size_t>(n) * sizeof(float), cudaMemcpyDeviceToDevice, s), "copy a");
      float* g2 = alloc(static_cast<size_t>(n), s);
      check(simcuda::launch(backward, grid, block, s, n, static_cast<const float*>(g), static_cast<const float*>(ac),
                            static_cast<const float*>(L.b), static_cast<const float*>(L.h1), g2), "backward a");
      float* ec = alloc(static_cast<size_t>(n), s);
      check(cudaMemcpyAsync(ec, L.e, static_cast<size_t>(n) * sizeof(float), cudaMemcpyDeviceToDevice, s), "copy e");
      float* g3 = alloc(static_cast<size_t>(n), s);
      check(simcuda::launch(backward, grid, block, s, n, static_cast<const float*>(g2), static_cast<const float*>(L.c),
                            static_cast<const float*>(ec), static_cast<const float*>(L.h2), g3), "backward b");
      for (float* p : {g, g2, ac, ec, L.a, L.b, L.c, L.h1, L.h2, L.e}) check(cudaFreeAsync(p, s), "free");
      check(cudaFreeAsync(L.table, s), "free table");
      g = g3;
    }
    std::vector<float> out(static_cast<size_t>(n));
    check(cudaMemcpy(out.data(), g, out.size() * sizeof(float), cudaMemcpyDeviceToHost), "read loss");
    check(cudaFreeAsync(g, s), "free g");
    check(cudaFreeAsync(x, s), "free x");
    double loss = 0;
    for (float v : out) loss += static_cast<double>(v);
    std::printf("iter %d loss %a\n", it, loss);
  }
  check(cudaDeviceSynchronize(), "sync");
  std::vector<float> r(static_cast<size_t>(layers));
  check(cudaMemcpy(r.data(), running, r.size() * sizeof(float), cudaMemcpyDeviceToHost), "read running");
  std::uint64_t h = 1469598103934665603ull;
  for (float v : r) {
    unsigned char bytes[sizeof v];
    std::memcpy(bytes, &v, sizeof v);
    for (unsigned char c : bytes) h = (h ^ c) * 1099511628211ull;
  }
  std::printf("running %016llx\n", static_cast<unsigned long long>(h));
  check(cudaFreeHost(pinned), "free host");
  return 0;
}
