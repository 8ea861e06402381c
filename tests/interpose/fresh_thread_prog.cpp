// fresh_thread_prog: after the main thread's CUDA work, a second thread whose first CUDA call
// is cudaMallocAsync (as PyTorch's autograd thread allocates before anything else): no driver
// context is current there until the runtime binds one. Under a budget the executor must
// serve that allocation like any other (not pass it through as "no current device"). Writes
// a pattern through the allocation, reads it back and checks it. Exit 0 and "fresh_thread: ok".
#include <cuda_runtime_api.h>

#include <cstdio>
#include <thread>
#include <vector>

namespace {
bool ok(cudaError_t e, const char* what) {
  if (e != cudaSuccess) std::fprintf(stderr, "fresh_thread: %s: %s\n", what, cudaGetErrorString(e));
  return e == cudaSuccess;
}

bool round_trip(std::size_t n) {
  std::vector<unsigned char> in(n), out(n);
  for (std::size_t i = 0; i < n; ++i) in[i] = static_cast<unsigned char>(i * 7 + 3);
  void* p = nullptr;
  return ok(cudaMallocAsync(&p, n, nullptr), "cudaMallocAsync") &&
         ok(cudaMemcpyAsync(p, in.data(), n, cudaMemcpyHostToDevice, nullptr), "upload") &&
         ok(cudaMemcpyAsync(out.data(), p, n, cudaMemcpyDeviceToHost, nullptr), "download") &&
         ok(cudaFreeAsync(p, nullptr), "cudaFreeAsync") && ok(cudaStreamSynchronize(nullptr), "sync") && in == out;
}
}  // namespace

int main() {
  if (!round_trip(1 << 20)) return 1;
  bool thread_ok = false;
  std::thread t([&] { thread_ok = round_trip(8 << 20); });
  t.join();
  if (!thread_ok) return 1;
  std::printf("fresh_thread: ok\n");
  return 0;
}
