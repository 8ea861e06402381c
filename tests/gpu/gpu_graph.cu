// gpu_graph: stream capture into a CUDA graph, instantiation and 5 replays on a real GPU.
// The interposer records captured launches when the graph is launched (one kernel event per
// node per replay), so a trace must show 3 x 5 = 15 graph_step kernels. Results are checked
// against the CPU. Exit 0 / 1, or 77 with no GPU.
#include <vector>

#include "gpu_common.cuh"

namespace {

__global__ void graph_step(const float* in, float* out, float add, int n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = in[i] * 0.5f + add;
}

}  // namespace

int main() {
  gpu_check::require_gpu_or_skip("gpu_graph");
  const int n = 1 << 20;
  std::vector<float> h(n);
  for (int i = 0; i < n; ++i) h[i] = static_cast<float>(i % 251);
  float *a = nullptr, *b = nullptr, *c = nullptr;
  GPU_CK(cudaMalloc(&a, n * 4));
  GPU_CK(cudaMalloc(&b, n * 4));
  GPU_CK(cudaMalloc(&c, n * 4));
  GPU_CK(cudaMemcpy(a, h.data(), n * 4, cudaMemcpyHostToDevice));
  cudaStream_t s = nullptr;
  GPU_CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  GPU_CK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
  graph_step<<<n / 256, 256, 0, s>>>(a, b, 1.0f, n);  // b = a/2 + 1
  graph_step<<<n / 256, 256, 0, s>>>(b, c, 2.0f, n);  // c = b/2 + 2
  graph_step<<<n / 256, 256, 0, s>>>(c, a, 3.0f, n);  // a = c/2 + 3
  cudaGraph_t g = nullptr;
  GPU_CK(cudaStreamEndCapture(s, &g));
  cudaGraphExec_t exec = nullptr;
  GPU_CK(cudaGraphInstantiate(&exec, g, 0));
  for (int r = 0; r < 5; ++r) GPU_CK(cudaGraphLaunch(exec, s));
  GPU_CK(cudaStreamSynchronize(s));
  std::vector<float> out(n);
  GPU_CK(cudaMemcpy(out.data(), a, n * 4, cudaMemcpyDeviceToHost));
  int bad = 0;
  for (int i = 0; i < n; ++i) {
    float x = h[i];
    for (int r = 0; r < 5; ++r) {
      const float bb = x * 0.5f + 1.0f, cc = bb * 0.5f + 2.0f;
      x = cc * 0.5f + 3.0f;
    }
    if (out[i] != x) ++bad;
  }
  gpu_check::check(bad == 0, "graph: 3-node captured graph replayed 5 times matches the CPU (%d mismatches)", bad);
  GPU_CK(cudaGraphExecDestroy(exec));
  GPU_CK(cudaGraphDestroy(g));
  GPU_CK(cudaStreamDestroy(s));
  GPU_CK(cudaFree(a));
  GPU_CK(cudaFree(b));
  GPU_CK(cudaFree(c));
  std::printf("EXPECT kernel graph_step count 15 touch 2\n");
  return gpu_check::finish("gpu_graph");
}
