// exec_capture_threads: a CUDA graph captured in global mode (torch.cuda.graph's default)
// while other threads keep working, the way a PyTorch job does: capuchin's drain thread polls
// the timing events of launches made before the capture, and a second application thread
// allocates, launches and frees on its own streams (calls that are safe during another
// thread's capture). CUDA prohibits "potentially unsafe" calls (event queries, syncs, cuMemAlloc,
// cuMemAllocManaged) from any thread in GLOBAL mode during a GLOBAL capture, and invalidates the
// capture (cuda.h, cuThreadExchangeStreamCaptureMode): capuchin's own calls must never do that.
//
// Usage: exec_capture_threads [--relaxed-malloc] [--to-graph]. Prints the captured graph's result and the
// side thread's checksum; exits 1 on any CUDA error (an invalidated capture ends with
// cudaErrorStreamCaptureInvalidated). --relaxed-malloc: the side thread also switches itself
// to relaxed mode and calls cudaMalloc during the capture (legal then; capuchin must leave such
// an allocation to the driver, not serve it), freed after the capture. --to-graph: the capture
// goes into a graph made beforehand (cudaStreamBeginCaptureToGraph).
#include <cuda_runtime_api.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>
#include <vector>

#include "simcuda/kernel.hpp"

namespace {

std::atomic<bool> g_open{false};
void* g_relaxed = nullptr;  // --relaxed-malloc: allocated during the capture

void gate(int) {}
void bump(int, float*) {}
void fill(int, float*, float) {}
void accum(int, const float*, float*) {}

void gate_body(void**, const simcuda_launch_info*) {  // holds its stream until the host opens it
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (!g_open.load() && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::microseconds(200));
}
void bump_body(void** a, const simcuda_launch_info*) {
  auto [n, x] = simcuda::unpack(bump, a);
  x = simcuda::access(x, static_cast<size_t>(n), SIMCUDA_READ_WRITE);
  for (int i = 0; i < n; ++i) x[i] += 1.0f;
}
void fill_body(void** a, const simcuda_launch_info*) {
  auto [n, p, v] = simcuda::unpack(fill, a);
  p = simcuda::access(p, static_cast<size_t>(n), SIMCUDA_WRITE);
  for (int i = 0; i < n; ++i) p[i] = v + static_cast<float>(i % 5);
}
void accum_body(void** a, const simcuda_launch_info*) {
  auto [n, p, acc] = simcuda::unpack(accum, a);
  p = simcuda::access(p, static_cast<size_t>(n), SIMCUDA_READ);
  acc = simcuda::access(acc, static_cast<size_t>(n), SIMCUDA_READ_WRITE);
  for (int i = 0; i < n; ++i) acc[i] += p[i];
}

void check(cudaError_t e, const char* what) {
  if (e == cudaSuccess) return;
  std::fprintf(stderr, "exec_capture_threads: %s: %s\n", what, cudaGetErrorString(e));
  std::exit(1);
}

// Stream-ordered allocations alternating between two streams (a reuse from the other stream
// is what makes an allocator look at earlier frees), a launch or two on each, a free.
void side_work(int n, float* acc, bool relaxed_malloc) {
  cudaStream_t a, b;
  check(cudaStreamCreateWithFlags(&a, cudaStreamNonBlocking), "side stream a");
  check(cudaStreamCreateWithFlags(&b, cudaStreamNonBlocking), "side stream b");
  const size_t bytes = static_cast<size_t>(n) * sizeof(float);
  for (int r = 0; r < 12; ++r) {
    cudaStream_t s = r % 2 ? a : b;
    float* p = nullptr;
    check(cudaMallocAsync(reinterpret_cast<void**>(&p), bytes, s), "side malloc");
    check(simcuda::launch(fill, dim3(1), dim3(256), s, n, p, static_cast<float>(r)), "side fill");
    check(simcuda::launch(accum, dim3(1), dim3(256), s, n, static_cast<const float*>(p), acc), "side accum");
    check(cudaFreeAsync(p, s), "side free");
    cudaEvent_t done;  // the next round, on the other stream, comes after this one
    check(cudaEventCreateWithFlags(&done, cudaEventDisableTiming), "side event");
    check(cudaEventRecord(done, s), "side record");
    check(cudaStreamWaitEvent(s == a ? b : a, done, 0), "side wait");
    check(cudaEventDestroy(done), "side event destroy");
  }
  if (relaxed_malloc) {
    cudaStreamCaptureMode m = cudaStreamCaptureModeRelaxed;
    check(cudaThreadExchangeStreamCaptureMode(&m), "relaxed mode");
    check(cudaMalloc(&g_relaxed, bytes), "relaxed malloc");  // freed after the capture (cudaFree syncs the device)
    check(cudaThreadExchangeStreamCaptureMode(&m), "mode back");
  }
  // The streams live to the process's end: destroying one synchronises with it (unsafe now).
}

}  // namespace

int main(int argc, char** argv) {
  bool relaxed_malloc = false, to_graph = false;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--relaxed-malloc") == 0) relaxed_malloc = true;
    else if (std::strcmp(argv[i], "--to-graph") == 0) to_graph = true;
    else return std::fprintf(stderr, "exec_capture_threads: unknown argument %s\n", argv[i]), 2;
  }
  constexpr size_t kBytes = 1u << 20;
  const int n = static_cast<int>(kBytes / sizeof(float));
  simcuda::register_kernel("gate", gate, gate_body, 1000);
  simcuda::register_kernel("bump", bump, bump_body, 1000);
  simcuda::register_kernel("fill", fill, fill_body, 1000);
  simcuda::register_kernel("accum", accum, accum_body, 1000);
  cudaStream_t cap, held;
  check(cudaStreamCreateWithFlags(&cap, cudaStreamNonBlocking), "capture stream");
  check(cudaStreamCreateWithFlags(&held, cudaStreamNonBlocking), "held stream");
  float *x = nullptr, *acc = nullptr;
  check(cudaMalloc(reinterpret_cast<void**>(&x), kBytes), "malloc x");
  check(cudaMalloc(reinterpret_cast<void**>(&acc), kBytes), "malloc acc");
  check(cudaMemset(x, 0, kBytes), "memset x");
  check(cudaMemset(acc, 0, kBytes), "memset acc");
  check(cudaDeviceSynchronize(), "sync before");
  // Work the host will not see finish until after the capture: its timing events stay pending.
  for (int i = 0; i < 4; ++i) check(simcuda::launch(gate, dim3(1), dim3(1), held, i), "gate");
  cudaGraph_t g = nullptr;
  if (to_graph) {
    check(cudaGraphCreate(&g, 0), "graph create");
    check(cudaStreamBeginCaptureToGraph(cap, g, nullptr, nullptr, 0, cudaStreamCaptureModeGlobal), "begin capture to graph");
  } else {
    check(cudaStreamBeginCapture(cap, cudaStreamCaptureModeGlobal), "begin capture");
  }
  for (int i = 0; i < 3; ++i) check(simcuda::launch(bump, dim3(1), dim3(256), cap, n, x), "bump (captured)");
  std::thread side(side_work, n, acc, relaxed_malloc);
  side.join();
  std::this_thread::sleep_for(std::chrono::milliseconds(300));  // capuchin's threads poll meanwhile
  check(cudaStreamEndCapture(cap, &g), "end capture");
  g_open.store(true);
  check(cudaDeviceSynchronize(), "sync after capture");
  cudaGraphExec_t ge = nullptr;
  check(cudaGraphInstantiate(&ge, g, 0), "instantiate");
  for (int i = 0; i < 2; ++i) check(cudaGraphLaunch(ge, cap), "graph launch");
  check(cudaStreamSynchronize(cap), "sync graph");
  std::vector<float> hx(static_cast<size_t>(n)), hacc(static_cast<size_t>(n));
  check(cudaMemcpy(hx.data(), x, kBytes, cudaMemcpyDeviceToHost), "read x");
  check(cudaMemcpy(hacc.data(), acc, kBytes, cudaMemcpyDeviceToHost), "read acc");
  double sum = 0;
  for (float v : hacc) sum += static_cast<double>(v);
  std::printf("graph x %a %a side %a\n", static_cast<double>(hx[0]), static_cast<double>(hx[static_cast<size_t>(n) - 1]), sum);
  check(cudaGraphExecDestroy(ge), "graph exec destroy");
  check(cudaGraphDestroy(g), "graph destroy");
  if (g_relaxed != nullptr) check(cudaFree(g_relaxed), "relaxed free");
  check(cudaFree(x), "free x");
  check(cudaFree(acc), "free acc");
  return 0;
}
