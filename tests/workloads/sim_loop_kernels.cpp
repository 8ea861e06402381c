// sim_loop_kernels.cpp: sim_loop_train's kernel bodies and batch generator (contract in the header).
#include "sim_loop_kernels.hpp"

#include <algorithm>

#include "simcuda/kernel.hpp"

namespace sim_loop {

void layer_fwd(int, int, const float*, const float*, float*) {}
void grad_accumulate(int, int, const float*, float*) {}
void weight_update(int, float*, const float*, float) {}
void reduce_sum(int, const float*, const float*, float*) {}
void spin(int, float*) {}

namespace {

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

}  // namespace

void register_loop_kernels() {
  simcuda::register_kernel("layer_fwd", layer_fwd, layer_fwd_body);
  simcuda::register_kernel("grad_accumulate", grad_accumulate, grad_accumulate_body);
  simcuda::register_kernel("weight_update", weight_update, weight_update_body);
  simcuda::register_kernel("reduce_sum", reduce_sum, reduce_sum_body);
  simcuda::register_kernel("spin", spin, spin_body);
}

void fill_batch(std::uint64_t stream, float* out, std::size_t n) {
  std::uint64_t s = stream;
  for (std::size_t i = 0; i < n; ++i) out[i] = static_cast<float>(next(s) % 2001) * 1e-3f - 1.0f;
}

}  // namespace sim_loop
