// equivalents.cpp: simcuda's built-in equivalents of PTX entries (modules.cpp): host kernels
// registered under an entry's name and parameter layout, which cuModuleGetFunction returns for
// that entry. Today: libcapuchin.so's probation kernels (interpose/exec/checksum_kernels.cuh),
// computing the same checksum from the same header (capuchin/checksum.hpp), so a probation on
// simcuda runs the code path it runs on a GPU, with the result the GPU would give.
//
// Contract: each body does what its CUDA kernel's contract says, for any launch geometry (the
// geometry is the device's business; the body covers the whole range once), declaring the
// ranges it touches with simcuda_access (a range the device may not touch faults as on a GPU).
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <mutex>
#include <vector>

#include "capuchin/checksum.hpp"
#include "internal.hpp"

namespace simcuda {
namespace {

// capuchin_checksum(const unsigned char* data, unsigned long long bytes, unsigned long long* partials):
// partials[b] = the terms block b covered, for each block b of the grid (the caller adds them and
// finishes the checksum). The body covers the range at once: block 0's entry has every term,
// the others 0 (the same total, which is all the contract fixes).
void capuchin_checksum(void** args, const simcuda_launch_info* launch) {
  const auto* data = *static_cast<const unsigned char**>(args[0]);
  const auto bytes = *static_cast<unsigned long long*>(args[1]);
  auto* partials = *static_cast<unsigned long long**>(args[2]);
  const std::size_t blocks = std::size_t{launch->grid[0]} * launch->grid[1] * launch->grid[2];
  std::uint64_t terms = 0;
  if (bytes > 0) {
    const auto* p = static_cast<const unsigned char*>(simcuda_access(data, bytes, SIMCUDA_READ));
    terms = capuchin::checksum::add_words(0, p, bytes, 0);
  }
  auto* out = static_cast<unsigned long long*>(simcuda_access(partials, blocks * sizeof *partials, SIMCUDA_WRITE));
  out[0] = terms;
  for (std::size_t b = 1; b < blocks; ++b) out[b] = 0;
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
