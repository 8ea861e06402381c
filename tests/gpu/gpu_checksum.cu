// gpu_checksum: the probation's checksum kernels (interpose/exec/checksum_kernels.cuh, which
// libcapuchin.so embeds as PTX) on a real GPU, against capuchin/checksum.hpp on the host: the
// same 64-bit checksum for aligned and unaligned ranges, odd lengths, empty ranges, whatever the
// launch geometry (1 to 1024 blocks of 32 to 1024 threads); one flipped bit changes it; the
// complement kernel flips exactly the range's bytes and undoes itself. simcuda runs the built-in
// equivalents of the same kernels (tests/simcuda/src/equivalents.cpp); this is where the device
// code itself is checked. Prints PASS/FAIL lines and CHECKSUM lines (tests/gpu/run_check.sh
// checksum). Exit 0 / 1, or 77 with no GPU, 78 with a driver too old.
#include <cstdint>
#include <vector>

#include "capuchin/checksum.hpp"
#include "checksum_kernels.cuh"
#include "gpu_common.cuh"

namespace {

using capuchin::checksum::finish;
using capuchin::checksum::of_host;

struct Geometry {
  unsigned blocks, threads;
};

// As DeviceChecksum does: every block's sum into mapped pinned host memory, added on the host.
std::uint64_t device_sum(const unsigned char* data, unsigned long long bytes, Geometry g, unsigned long long* partials) {
  for (unsigned b = 0; b < g.blocks; ++b) partials[b] = 0x5eed5eed5eed5eedull;  // every entry must be written
  capuchin_checksum<<<g.blocks, g.threads>>>(data, bytes, partials);
  GPU_CK(cudaGetLastError());
  GPU_CK(cudaDeviceSynchronize());
  unsigned long long raw = 0;
  for (unsigned b = 0; b < g.blocks; ++b) raw += partials[b];
  return finish(raw, bytes);
}

}  // namespace

int main() {
  using gpu_check::check;
  gpu_check::require_gpu_or_skip("gpu_checksum");
  const std::size_t n = (64u << 20) + 13;  // 64 MiB and an odd tail
  std::vector<unsigned char> host(n);
  std::uint64_t x = 0x9e3779b97f4a7c15ull;
  for (auto& b : host) {
    x ^= x << 13, x ^= x >> 7, x ^= x << 17;
    b = static_cast<unsigned char>(x);
  }
  unsigned char* dev = nullptr;
  unsigned long long* slot = nullptr;  // the per-block sums: mapped pinned host memory (1024 blocks at most)
  GPU_CK(cudaMalloc(&dev, n));
  GPU_CK(cudaHostAlloc(&slot, 1024 * sizeof *slot, cudaHostAllocMapped | cudaHostAllocPortable));
  GPU_CK(cudaMemcpy(dev, host.data(), n, cudaMemcpyHostToDevice));

  int mismatches = 0, cases = 0;
  for (std::size_t start : {0u, 1u, 3u, 8u})
    for (std::size_t len : {std::size_t{0}, std::size_t{1}, std::size_t{7}, std::size_t{8}, std::size_t{9},
                            std::size_t{4099}, n - 8})
      for (Geometry g : {Geometry{1, 32}, Geometry{7, 256}, Geometry{1024, 256}, Geometry{3, 1024}}) {
        ++cases;
        const std::uint64_t want = of_host(host.data() + start, len), got = device_sum(dev + start, len, g, slot);
        if (got != want) {
          ++mismatches;
          std::printf("INFO mismatch: start %zu length %zu grid %u x %u: device %016llx host %016llx\n", start, len,
                      g.blocks, g.threads, static_cast<unsigned long long>(got), static_cast<unsigned long long>(want));
        }
      }
  check(mismatches == 0, "checksum: the device agrees with the host in %d cases (alignments 0/1/3/8, lengths 0 to "
                         "64 MiB, 4 launch geometries): %d mismatches", cases, mismatches);
  const std::uint64_t whole = device_sum(dev, n, {1024, 256}, slot);
  std::printf("CHECKSUM whole %016llx\n", static_cast<unsigned long long>(whole));

  const unsigned char flipped = static_cast<unsigned char>(host[n / 2] ^ 0x10);
  GPU_CK(cudaMemcpy(dev + n / 2, &flipped, 1, cudaMemcpyHostToDevice));
  check(device_sum(dev, n, {1024, 256}, slot) != whole, "checksum: one flipped bit changes it");
  GPU_CK(cudaMemcpy(dev + n / 2, &host[n / 2], 1, cudaMemcpyHostToDevice));

  // Complement an unaligned interior range: its bytes flipped, its neighbours untouched; twice: unchanged.
  const std::size_t at = 5, len = n - 11;
  capuchin_complement<<<1024, 256>>>(dev + at, len);
  GPU_CK(cudaGetLastError());
  std::vector<unsigned char> back(n);
  GPU_CK(cudaMemcpy(back.data(), dev, n, cudaMemcpyDeviceToHost));
  std::size_t wrong = 0;
  for (std::size_t i = 0; i < n; ++i) {
    const bool inside = i >= at && i < at + len;
    wrong += back[i] != (inside ? static_cast<unsigned char>(~host[i]) : host[i]);
  }
  check(wrong == 0, "complement: exactly the range's %zu bytes flipped (%zu bytes wrong)", len, wrong);
  capuchin_complement<<<7, 256>>>(dev + at, len);
  GPU_CK(cudaGetLastError());
  check(device_sum(dev, n, {1024, 256}, slot) == whole, "complement twice restores the range");

  GPU_CK(cudaFree(dev));
  GPU_CK(cudaFreeHost(slot));
  return gpu_check::finish("gpu_checksum");
}
