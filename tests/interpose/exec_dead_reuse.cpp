// exec_dead_reuse: a freed tensor cached on the device, moved out by a shortage, then handed to
// a new tensor of its size on the same stream and written by an upload. Under the uvm backend
// the executor moves a freed block out by discarding its pages on its own out stream
// (cuMemDiscardBatchAsync), in no order with the job's stream: the new owner's upload must
// wait for that discard, or the discard, running after it, drops what was uploaded (cuda.h: a
// discarded range reads as "an indeterminate value"; simcuda fills it with 0xFF). The free's
// stream order covers the work before the free, not capuchin's discard after it.
//
// Usage: exec_dead_reuse [ROUNDS]. Each round: a tensor kept from start to end used on stream a;
// X (kSmall bytes) allocated, filled and freed on
// stream a, then a synchronised; a large allocation filled on stream b (no room for it beside a
// tensor kept from start to end and what is cached, and of another size than the last round's:
// the shortage);
// X' of X's size allocated on a, an upload of the round's pattern into it (the next thing a
// runs, racing the discard), the large one freed;
// then the device synchronised and X' read back. Prints `round N ok` per round, or `round N
// lost K of M floats` when X' does not hold the pattern, then `reused R of N` (the rounds whose
// X' got X's address back: with capuchin, X's block from its cache), and exits 1 on a CUDA
// error, 2 when a round lost data. Run with SIMCUDA_JITTER_US (random worker delays) so that the out stream's
// discard can run after the upload when nothing orders them.
#include <cuda_runtime_api.h>

#include <cstdio>
#include <cstdlib>
#include <vector>

#include "exec_prog.hpp"
#include "simcuda/kernel.hpp"

namespace {

using exec_prog::check;
using exec_prog::fill;

constexpr size_t kSmall = 3 * 65536;     // three UVM blocks: a size no other tensor here has
constexpr size_t kLarge = (4u << 20) + (1u << 19);  // with the budget (6 MiB) and kKept: no room beside the cache
constexpr size_t kKept = (1u << 20) + (1u << 19);  // a tensor live from start to end
// The large allocation's size changes from round to round (kLarge plus 0 to 3 UVM blocks), so
// that it never takes the previous round's large block from the cache: each round is short.
size_t large_bytes(int round) { return kLarge + static_cast<size_t>(round % 4) * 65536; }

}  // namespace

int main(int argc, char** argv) {
  const int rounds = argc > 1 ? std::atoi(argv[1]) : 40;
  exec_prog::register_kernels(20000, 20000, 20000);
  cudaStream_t a, b;  // the small tensors' stream, the large one's (nothing queued on a before the upload)
  check(cudaStreamCreateWithFlags(&a, cudaStreamNonBlocking), "stream a");
  check(cudaStreamCreateWithFlags(&b, cudaStreamNonBlocking), "stream b");
  const int n = static_cast<int>(kSmall / sizeof(float));
  std::vector<float> pattern(static_cast<size_t>(n)), back(static_cast<size_t>(n));
  float* kept = nullptr;  // what the large allocation needs room beside
  check(cudaMallocAsync(reinterpret_cast<void**>(&kept), kKept, a), "malloc kept");
  check(simcuda::launch(fill, dim3(1), dim3(256), a, static_cast<int>(kKept / sizeof(float)), kept, 2.0f), "fill kept");
  int lost_rounds = 0, reused = 0;
  for (int r = 0; r < rounds; ++r) {
    // kept used again: back on the device (the last round's shortage may have moved it out)
    check(simcuda::launch(exec_prog::bump, dim3(1), dim3(256), a, static_cast<int>(kKept / sizeof(float)), kept), "bump kept");
    float* x = nullptr;
    check(cudaMallocAsync(reinterpret_cast<void**>(&x), kSmall, a), "malloc x");
    check(simcuda::launch(fill, dim3(1), dim3(256), a, n, x, 1.0f), "fill x");
    check(cudaFreeAsync(x, a), "free x");  // cached; its work done in a's order
    check(cudaStreamSynchronize(a), "sync a");  // a idle: the upload below is the next thing it runs
    float* large = exec_prog::pressure(large_bytes(r), b);  // the shortage: the cached blocks move out
    float* y = nullptr;
    check(cudaMallocAsync(reinterpret_cast<void**>(&y), kSmall, a), "malloc y");  // x's block, on the same stream
    reused += y == x;
    for (int i = 0; i < n; ++i) pattern[static_cast<size_t>(i)] = static_cast<float>(r * 1000 + i % 977);
    check(cudaMemcpyAsync(y, pattern.data(), kSmall, cudaMemcpyHostToDevice, a), "upload y");
    check(cudaFreeAsync(large, b), "free large");
    check(cudaDeviceSynchronize(), "sync");  // every stream's work done, capuchin's out stream too
    check(cudaMemcpy(back.data(), y, kSmall, cudaMemcpyDeviceToHost), "read y");
    int lost = 0;
    for (int i = 0; i < n; ++i) lost += back[static_cast<size_t>(i)] != pattern[static_cast<size_t>(i)];
    if (lost != 0) {
      std::printf("round %d lost %d of %d floats\n", r, lost, n);
      ++lost_rounds;
    } else {
      std::printf("round %d ok\n", r);
    }
    check(cudaFreeAsync(y, a), "free y");
  }
  std::printf("reused %d of %d\n", reused, rounds);
  check(cudaFreeAsync(kept, a), "free kept");
  check(cudaStreamSynchronize(a), "final sync");
  check(cudaStreamDestroy(a), "destroy a");
  check(cudaStreamDestroy(b), "destroy b");
  return lost_rounds == 0 ? 0 : 2;
}
