// sim_loop_kernels.hpp: sim_loop_train's device code (its kernels' host stubs, bodies and
// registration) and the host code that generates its input batches: the job's arithmetic.
//
// Contract: the stubs are the handles a launch names (simcuda::launch), registered by
// register_loop_kernels() before the first launch; fill_batch writes the same values for the
// same stream seed on every run and build. Under ASan this code is built as the job is
// (uninstrumented, -O2: capuchin_job_code in cmake/Sanitized.cmake): it was most of a
// sanitized test's time in the program.
#pragma once

#include <cstddef>
#include <cstdint>

namespace sim_loop {

void layer_fwd(int n, int m, const float* in, const float* w, float* out);  // out = in/2 + w/4
void grad_accumulate(int n, int m, const float* act, float* grad);         // grad[i % m] += act[i]
void weight_update(int m, float* w, const float* grad, float lr);
void reduce_sum(int n, const float* x, const float* label, float* out);  // a weighted mean difference
void spin(int n, float* x);                                              // x += 1

// Registers the five kernels with simcuda (their names are the stubs' names).
void register_loop_kernels();

// xorshift64*: the loop's deterministic random numbers.
inline std::uint64_t next(std::uint64_t& s) {
  s ^= s >> 12, s ^= s << 25, s ^= s >> 27;
  return s * 2685821657736338717ull;
}

// Fills out[0, n) with values in [-1, 1] drawn from `stream` (a batch's own seed).
void fill_batch(std::uint64_t stream, float* out, std::size_t n);

}  // namespace sim_loop
