// equivalents.cpp: simcuda's built-in equivalents of PTX entries (modules.cpp): host kernels
// registered under an entry's name and parameter layout, which cuModuleGetFunction returns for
// that entry. Today: libcapuchin.so's probation kernels (interpose/exec/checksum_kernels.cuh),
// computing the same checksum from the same header (capuchin/checksum.hpp), so a probation on
// simcuda runs the code path it runs on a GPU, with the result the GPU would give.
//
// Contract: each body does what its CUDA kernel's contract says, for any launch geometry (the
// geometry is the device's business; the body covers the whole range once), declaring the
// ranges it touches with simcuda_access (a range the device may not touch faults as on a GPU).
#include <atomic>
#include <cstdint>
#include <initializer_list>
#include <mutex>
#include <vector>

#include "capuchin/checksum.hpp"
#include "internal.hpp"

namespace simcuda {
namespace {

// capuchin_checksum(const unsigned char* data, unsigned long long bytes, unsigned long long* sum):
// *sum += the range's terms (the caller zeroes it and finishes the checksum).
void capuchin_checksum(void** args, const simcuda_launch_info*) {
  const auto* data = *static_cast<const unsigned char**>(args[0]);
  const auto bytes = *static_cast<unsigned long long*>(args[1]);
  auto* sum = *static_cast<unsigned long long**>(args[2]);
  if (bytes == 0) return;  // no word: nothing to add
  const auto* p = static_cast<const unsigned char*>(simcuda_access(data, bytes, SIMCUDA_READ));
  const std::uint64_t terms = capuchin::checksum::add_words(0, p, bytes, 0);
  auto* s = static_cast<unsigned long long*>(simcuda_access(sum, sizeof *sum, SIMCUDA_READ_WRITE));
  std::atomic_ref<unsigned long long>(*s).fetch_add(terms, std::memory_order_relaxed);  // as atomicAdd
}

// capuchin_complement(unsigned char* data, unsigned long long bytes): every byte complemented.
void capuchin_complement(void** args, const simcuda_launch_info*) {
  auto* data = *static_cast<unsigned char**>(args[0]);
  const auto bytes = *static_cast<unsigned long long*>(args[1]);
  if (bytes == 0) return;
  auto* p = static_cast<unsigned char*>(simcuda_access(data, bytes, SIMCUDA_READ_WRITE));
  for (unsigned long long i = 0; i < bytes; ++i) p[i] = static_cast<unsigned char>(~p[i]);
}

void register_one(const char* name, simcuda_kernel_body body, std::initializer_list<size_t> sizes) {
  std::vector<size_t> offsets, sz(sizes);
  size_t at = 0;
  for (size_t s : sz) {
    at = (at + s - 1) / s * s;  // every parameter here is a scalar aligned to its size
    offsets.push_back(at);
    at += s;
  }
  simcuda_kernel_desc desc{};
  desc.name = name;
  desc.num_params = sz.size();
  desc.param_offsets = offsets.data();
  desc.param_sizes = sz.data();
  desc.body = body;
  simcuda_register_kernel(&desc);
}

}  // namespace

void register_builtin_equivalents() {
  static std::once_flag once;
  std::call_once(once, [] {
    register_one("capuchin_checksum", capuchin_checksum, {sizeof(void*), sizeof(unsigned long long), sizeof(void*)});
    register_one("capuchin_complement", capuchin_complement, {sizeof(void*), sizeof(unsigned long long)});
  });
}

}  // namespace simcuda
