// gpu_executor: device memory a budget forces out and back, with every byte verified; run
// plain (it must pass: the ground truth) and under libcapuchin.so with CAPUCHIN_BUDGET below
// its working set and CAPUCHIN_BACKEND=uvm|pinned (tests/gpu/run_check.sh), where the
// executor must evict and bring back (its CAPUCHIN_DECISION_LOG shows it) without changing
// a result.
//
// Usage: gpu_executor evict|missed|ipc [MiB per buffer, default 64]
//   evict:  8 buffers, each filled, then bumped in 3 rounds one buffer per launch (each
//           launch touches one buffer, so a budget of ~3 buffers forces evictions every
//           launch), then verified by a kernel and by copying every buffer back.
//   missed: 6 "hidden" buffers reached only through a pointer table in device memory (the
//           interposer's parameter scan cannot see them: a missed access); 6 pressure
//           buffers are touched directly to push the hidden ones out; then kernels read and
//           write the hidden buffers through the table, and everything is verified.
//   ipc:    one buffer exported with cudaIpcGetMemHandle, 6 pressure buffers; after rounds of
//           pressure a second process (this program again, `ipc-child`, without LD_PRELOAD)
//           opens the handle, must see the buffer's current content and adds to it; after
//           more pressure this process must see that write. An exported allocation may never
//           be moved (issue 16): the other process's mapping would go stale.
// Prints PASS/FAIL lines and CHECKSUM lines (identical plain and under the executor).
// Exit 0 / 1, or 77 with no GPU.
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
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

// The exported buffer is Pool::bufs[0] (pattern 0): +3 here, +10 by the other process (13);
// the pressure buffers get +1 a round, 5 rounds.
int run_ipc(long long n) {
  const int pressure = 6;
  Pool p(1 + pressure, n);
  GPU_CK(cudaMemset(p.errors, 0, sizeof(unsigned long long)));
  for (int b = 0; b <= pressure; ++b) fill<<<kGrid, kBlock>>>(p.bufs[static_cast<std::size_t>(b)], n, b);
  GPU_CK(cudaDeviceSynchronize());
  cudaIpcMemHandle_t handle{};
  const cudaError_t he = cudaIpcGetMemHandle(&handle, p.bufs[0]);
  if (he != cudaSuccess && std::getenv("CAPUCHIN_BUDGET") != nullptr) {
    // Under a budget capuchin serves the buffer from managed or VMM memory, for which the driver
    // has no IPC handle: the driver's own error must come back (run_check.sh checks that
    // capuchin said why), not a crash or a handle to memory that later moves.
    std::printf("REFUSED ipc: %s\n", cudaGetErrorName(he));
    return 0;
  }
  gpu_check::check(he == cudaSuccess, "ipc: cudaIpcGetMemHandle on a cudaMalloc allocation (%s)", cudaGetErrorString(he));
  if (he != cudaSuccess) return gpu_check::finish("gpu_executor ipc");
  auto pressure_round = [&] {
    for (int b = 1; b <= pressure; ++b) bump<<<kGrid, kBlock>>>(p.bufs[static_cast<std::size_t>(b)], n, 1.0f);
  };
  for (int r = 0; r < 3; ++r) {  // the exported buffer is used between rounds of pressure
    bump<<<kGrid, kBlock>>>(p.bufs[0], n, 1.0f);
    pressure_round();
  }
  GPU_CK(cudaDeviceSynchronize());
  // The other process: the handle as hex on its command line, LD_PRELOAD removed.
  char hex[2 * sizeof handle + 1];
  for (std::size_t i = 0; i < sizeof handle; ++i)
    std::snprintf(hex + 2 * i, 3, "%02x", static_cast<unsigned char>(handle.reserved[i]));
  // Everything the child needs is made before fork (only execve between fork and exec).
  std::vector<char*> envp;
  for (char** e = environ; *e != nullptr; ++e)
    if (std::strncmp(*e, "LD_PRELOAD=", 11) != 0) envp.push_back(*e);
  envp.push_back(nullptr);
  std::string floats = std::to_string(n);
  char arg0[] = "gpu_executor", arg1[] = "ipc-child";
  char* argv[] = {arg0, arg1, hex, floats.data(), nullptr};
  std::fflush(stdout);
  const pid_t child = fork();
  if (child == 0) {
    execve("/proc/self/exe", argv, envp.data());
    _exit(127);
  }
  int st = 0;
  while (child > 0 && waitpid(child, &st, 0) < 0 && errno == EINTR) {
  }
  const bool child_ok = child > 0 && WIFEXITED(st) && WEXITSTATUS(st) == 0;
  gpu_check::check(child_ok, "ipc: another process opened the handle, saw the buffer's content after 3 rounds of "
                   "pressure and added 10 (child status %d)", child > 0 && WIFEXITED(st) ? WEXITSTATUS(st) : -1);
  for (int r = 0; r < 2; ++r) pressure_round();
  verify<<<kGrid, kBlock>>>(p.bufs[0], n, 0, 13.0f, p.errors);
  GPU_CK(cudaDeviceSynchronize());
  const unsigned long long bad = p.take_errors();
  gpu_check::check(bad == 0, "ipc: this process sees the other's write after more pressure (%llu bad floats)", bad);
  cudaPointerAttributes a{};
  GPU_CK(cudaPointerGetAttributes(&a, p.bufs[0]));
  gpu_check::check(a.type == cudaMemoryTypeDevice, "ipc: the exported buffer is still device memory (type %d)",
                   static_cast<int>(a.type));
  long long host_bad = 0;
  std::uint64_t sum = host_check(p, 0, 1, 13.0f, &host_bad);
  sum ^= host_check(p, 1, pressure, 5.0f, &host_bad);
  gpu_check::check(host_bad == 0, "ipc: every byte copied back matches (%lld bad floats)", host_bad);
  std::printf("CHECKSUM ipc %016llx\n", static_cast<unsigned long long>(sum));
  return gpu_check::finish("gpu_executor ipc");
}

// The other process: opens the handle, checks pattern 0 + 3, adds 10. Exit 0 when all held.
int run_ipc_child(const char* hex, long long n) {
  cudaIpcMemHandle_t handle{};
  if (std::strlen(hex) != 2 * sizeof handle) return 2;
  for (std::size_t i = 0; i < sizeof handle; ++i)
    handle.reserved[i] = static_cast<char>(std::strtoul(std::string(hex + 2 * i, 2).c_str(), nullptr, 16));
  void* ptr = nullptr;
  const cudaError_t e = cudaIpcOpenMemHandle(&ptr, handle, cudaIpcMemLazyEnablePeerAccess);
  if (e != cudaSuccess) {
    std::printf("FAIL ipc-child: cudaIpcOpenMemHandle: %s\n", cudaGetErrorString(e));
    return 1;
  }
  unsigned long long* errors = nullptr;
  GPU_CK(cudaMalloc(&errors, sizeof *errors));
  GPU_CK(cudaMemset(errors, 0, sizeof *errors));
  float* buf = static_cast<float*>(ptr);
  verify<<<kGrid, kBlock>>>(buf, n, 0, 3.0f, errors);
  bump<<<kGrid, kBlock>>>(buf, n, 10.0f);
  GPU_CK(cudaDeviceSynchronize());
  unsigned long long bad = 0;
  GPU_CK(cudaMemcpy(&bad, errors, sizeof bad, cudaMemcpyDeviceToHost));
  std::printf("%s ipc-child: the exported buffer read through the handle (%llu bad floats)\n", bad == 0 ? "PASS" : "FAIL",
              bad);
  GPU_CK(cudaIpcCloseMemHandle(ptr));
  GPU_CK(cudaFree(errors));
  return bad == 0 ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  const std::string mode = argc > 1 ? argv[1] : "";
  if (mode == "ipc-child" && argc == 4) return run_ipc_child(argv[2], std::atoll(argv[3]));
  if (mode != "evict" && mode != "missed" && mode != "ipc") {
    std::fprintf(stderr, "usage: gpu_executor evict|missed|ipc [MiB per buffer]\n");
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
  if (mode == "ipc") return run_ipc(n);
  return mode == "evict" ? run_evict(n) : run_missed(n);
}
