// gpu_executor: device memory a budget forces out and back, with every byte verified; run
// plain (it must pass: the ground truth) and under libcapuchin.so with CAPUCHIN_BUDGET below
// its working set and CAPUCHIN_BACKEND=uvm|pinned (tests/gpu/run_check.sh), where the
// executor must evict and bring back (its CAPUCHIN_DECISION_LOG shows it) without changing
// a result.
//
// Usage: gpu_executor evict|missed [MiB per buffer, default 64]
//   evict:  8 buffers, each filled, then bumped in 3 rounds one buffer per launch (each
//           launch touches one buffer, so a budget of ~3 buffers forces evictions every
//           launch), then verified by a kernel and by copying every buffer back.
//   missed: 6 "hidden" buffers reached only through a pointer table in device memory (the
//           interposer's parameter scan cannot see them: a missed access); 6 pressure
//           buffers are touched directly to push the hidden ones out; then kernels read and
//           write the hidden buffers through the table, and everything is verified.
// Prints PASS/FAIL lines and CHECKSUM lines (identical plain and under the executor).
// Exit 0 / 1, or 77 with no GPU.
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "gpu_common.cuh"

namespace {

__device__ float pattern(int buf, long long j) { return static_cast<float>(buf * 1000 + (j % 997)); }

__global__ void fill(float* p, long long n, int buf) {
  for (long long j = blockIdx.x * 1ll * blockDim.x + threadIdx.x; j < n; j += 1ll * gridDim.x * blockDim.x)
    p[j] = pattern(buf, j);
}
__global__ void bump(float* p, long long n, float add) {
  for (long long j = blockIdx.x * 1ll * blockDim.x + threadIdx.x; j < n; j += 1ll * gridDim.x * blockDim.x)
    p[j] += add;
}
__global__ void verify(const float* p, long long n, int buf, float add, unsigned long long* errors) {
  for (long long j = blockIdx.x * 1ll * blockDim.x + threadIdx.x; j < n; j += 1ll * gridDim.x * blockDim.x)
    if (p[j] != pattern(buf, j) + add) atomicAdd(errors, 1ull);
}
// The missed accesses: the buffers are read and written through a table in device memory.
__global__ void table_verify(float* const* table, int k, long long n, int first_buf, float add,
                             unsigned long long* errors) {
  for (int b = 0; b < k; ++b)
    for (long long j = blockIdx.x * 1ll * blockDim.x + threadIdx.x; j < n; j += 1ll * gridDim.x * blockDim.x)
      if (table[b][j] != pattern(first_buf + b, j) + add) atomicAdd(errors, 1ull);
}
__global__ void table_bump(float* const* table, int k, long long n, float add) {
  for (int b = 0; b < k; ++b)
    for (long long j = blockIdx.x * 1ll * blockDim.x + threadIdx.x; j < n; j += 1ll * gridDim.x * blockDim.x)
      table[b][j] += add;
}

constexpr int kGrid = 264, kBlock = 256;  // 2 blocks per H200 SM; loops cover any size

struct Pool {
  long long n = 0;  // floats per buffer
  std::vector<float*> bufs;
  unsigned long long* errors = nullptr;
  explicit Pool(int count, long long floats) : n(floats), bufs(static_cast<std::size_t>(count)) {
    for (auto& b : bufs) GPU_CK(cudaMalloc(&b, static_cast<std::size_t>(n) * sizeof(float)));
    GPU_CK(cudaMalloc(&errors, sizeof(unsigned long long)));
  }
  ~Pool() {
    for (auto b : bufs) (void)cudaFree(b);
    (void)cudaFree(errors);
  }
  unsigned long long take_errors() {
    unsigned long long e = 0;
    GPU_CK(cudaMemcpy(&e, errors, sizeof e, cudaMemcpyDeviceToHost));
    GPU_CK(cudaMemset(errors, 0, sizeof e));
    return e;
  }
};

// Copies every buffer back and compares with the pattern on the host; FNV-1a of all of it.
std::uint64_t host_check(const Pool& p, int first_buf, int count, float add, long long* bad) {
  std::vector<float> h(static_cast<std::size_t>(p.n));
  std::uint64_t sum = 1469598103934665603ull;
  for (int b = 0; b < count; ++b) {
    GPU_CK(cudaMemcpy(h.data(), p.bufs[static_cast<std::size_t>(first_buf + b)], h.size() * 4, cudaMemcpyDeviceToHost));
    for (long long j = 0; j < p.n; ++j) {
      const float want = static_cast<float>((first_buf + b) * 1000 + (j % 997)) + add;
      if (h[static_cast<std::size_t>(j)] != want) ++*bad;
      std::uint32_t bits;
      std::memcpy(&bits, &h[static_cast<std::size_t>(j)], 4);
      sum = (sum ^ bits) * 1099511628211ull;
    }
  }
  return sum;
}

int run_evict(long long n) {
  const int count = 8, rounds = 3;
  Pool p(count, n);
  GPU_CK(cudaMemset(p.errors, 0, sizeof(unsigned long long)));
  for (int b = 0; b < count; ++b) fill<<<kGrid, kBlock>>>(p.bufs[static_cast<std::size_t>(b)], n, b);
  for (int r = 0; r < rounds; ++r)
    for (int b = 0; b < count; ++b) bump<<<kGrid, kBlock>>>(p.bufs[static_cast<std::size_t>(b)], n, 1.0f);
  GPU_CK(cudaGetLastError());
  GPU_CK(cudaDeviceSynchronize());
  for (int b = 0; b < count; ++b) verify<<<kGrid, kBlock>>>(p.bufs[static_cast<std::size_t>(b)], n, b, rounds, p.errors);
  GPU_CK(cudaDeviceSynchronize());
  const unsigned long long dev_bad = p.take_errors();
  gpu_check::check(dev_bad == 0, "evict: %d buffers x %d rounds verified on the device (%llu bad floats)", count,
                   rounds, dev_bad);
  long long host_bad = 0;
  const std::uint64_t sum = host_check(p, 0, count, rounds, &host_bad);
  gpu_check::check(host_bad == 0, "evict: every byte copied back matches (%lld bad floats)", host_bad);
  std::printf("CHECKSUM evict %016llx\n", static_cast<unsigned long long>(sum));
  return gpu_check::finish("gpu_executor evict");
}

int run_missed(long long n) {
  const int hidden = 6, pressure = 6;
  Pool p(hidden + pressure, n);
  GPU_CK(cudaMemset(p.errors, 0, sizeof(unsigned long long)));
  float** table = nullptr;
  GPU_CK(cudaMalloc(&table, hidden * sizeof(float*)));
  GPU_CK(cudaMemcpy(table, p.bufs.data(), hidden * sizeof(float*), cudaMemcpyHostToDevice));
  for (int b = 0; b < hidden + pressure; ++b) fill<<<kGrid, kBlock>>>(p.bufs[static_cast<std::size_t>(b)], n, b);
  // Pressure: the pressure buffers are used (directly) after the hidden ones, twice.
  for (int r = 0; r < 2; ++r)
    for (int b = hidden; b < hidden + pressure; ++b) bump<<<kGrid, kBlock>>>(p.bufs[static_cast<std::size_t>(b)], n, 1.0f);
  // Missed read, then missed write, then missed read again.
  table_verify<<<kGrid, kBlock>>>(table, hidden, n, 0, 0.0f, p.errors);
  GPU_CK(cudaDeviceSynchronize());
  const unsigned long long read_bad = p.take_errors();
  gpu_check::check(read_bad == 0, "missed: hidden buffers read through a device pointer table (%llu bad floats)",
                   read_bad);
  table_bump<<<kGrid, kBlock>>>(table, hidden, n, 5.0f);
  for (int r = 0; r < 2; ++r)  // push them out again after the missed write
    for (int b = hidden; b < hidden + pressure; ++b) bump<<<kGrid, kBlock>>>(p.bufs[static_cast<std::size_t>(b)], n, 1.0f);
  table_verify<<<kGrid, kBlock>>>(table, hidden, n, 0, 5.0f, p.errors);
  GPU_CK(cudaDeviceSynchronize());
  const unsigned long long write_bad = p.take_errors();
  gpu_check::check(write_bad == 0, "missed: writes through the table are seen afterwards (%llu bad floats)", write_bad);
  // Direct (seen) reads of the hidden buffers must see the missed writes too.
  for (int b = 0; b < hidden; ++b) verify<<<kGrid, kBlock>>>(p.bufs[static_cast<std::size_t>(b)], n, b, 5.0f, p.errors);
  GPU_CK(cudaDeviceSynchronize());
  const unsigned long long direct_bad = p.take_errors();
  gpu_check::check(direct_bad == 0, "missed: direct launches see the table writes (%llu bad floats)", direct_bad);
  long long host_bad = 0;
  std::uint64_t sum = host_check(p, 0, hidden, 5.0f, &host_bad);
  sum ^= host_check(p, hidden, pressure, 4.0f, &host_bad);
  gpu_check::check(host_bad == 0, "missed: every byte copied back matches (%lld bad floats)", host_bad);
  std::printf("CHECKSUM missed %016llx\n", static_cast<unsigned long long>(sum));
  GPU_CK(cudaFree(table));
  return gpu_check::finish("gpu_executor missed");
}

}  // namespace

int main(int argc, char** argv) {
  const std::string mode = argc > 1 ? argv[1] : "";
  if (mode != "evict" && mode != "missed") {
    std::fprintf(stderr, "usage: gpu_executor evict|missed [MiB per buffer]\n");
    return 2;
  }
  const long long mib = argc > 2 ? std::atoll(argv[2]) : 64;
  if (mib <= 0 || mib > 65536) {
    std::fprintf(stderr, "gpu_executor: MiB per buffer must be in 1..65536, not %s\n", argv[2]);
    return 2;
  }
  gpu_check::require_gpu_or_skip("gpu_executor");
  const long long n = mib * 1024 * 1024 / 4;
  std::printf("INFO gpu_executor %s: %lld MiB per buffer\n", mode.c_str(), mib);
  return mode == "evict" ? run_evict(n) : run_missed(n);
}
