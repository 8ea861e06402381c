// call_site.hpp: whose call an entry point is serving (entry.cpp): a CUDA library's own
// allocation, or work issued while another device is current. The executor serves its own
// device and the application's memory; the rest is passed through to the driver.
// Contract: run under the executor's lock (in_cuda_library and on_executor_device update the
// executor's caches and decision log), except current_device / other_device_current, which only
// ask the driver (and are called before the lock).
#pragma once

#include <cuda.h>

#include <cstddef>

namespace capuchin::interpose::exec {

class Executor;

// Whether `caller` (an allocation's return address) lies in a CUDA library that allocates for
// itself (NCCL, cuDNN, cuBLAS, ...); null: not known, the application's.
bool in_cuda_library(Executor& e, const void* caller);
// The calling thread's current device; false when the driver cannot say (*why: its CUresult).
bool current_device(const Executor& e, int* dev, CUresult* why = nullptr);
// Work issued while another device is current (cudaSetDevice): that device's, not the executor's.
bool other_device_current(const Executor& e);
// Whether an allocation of `bytes` with `dev` current is the executor's to serve (said once
// and recorded as a fallback when not); dev null: the driver cannot say which is current.
bool on_executor_device(Executor& e, std::size_t bytes, const int* dev);

}  // namespace capuchin::interpose::exec
