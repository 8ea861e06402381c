// modules_test.cpp: cuModuleLoadData / cuModuleGetFunction / cuModuleUnload on PTX text
// (src/modules.cpp): the entries run their registered equivalents (libcapuchin.so's checksum
// kernels are built in, and agree with capuchin/checksum.hpp on the host), and images or names
// simcuda cannot serve fail with the codes the CUDA reference gives.
#include <cstring>
#include <vector>

#include "capuchin/checksum.hpp"
#include "support.hpp"

using namespace simtest;

namespace {

// What nvcc -ptx writes for checksum_kernels.cu's two entries (their signatures; bodies elided).
constexpr char kPtx[] = R"(
.version 9.0
.target sm_75
.address_size 64

.visible .entry capuchin_checksum(
	.param .u64 capuchin_checksum_param_0,
	.param .u64 capuchin_checksum_param_1,
	.param .u64 capuchin_checksum_param_2
)
{
	ret;
}

.visible .entry capuchin_complement(
	.param .u64 .ptr .global .align 1 capuchin_complement_param_0,
	.param .u64 capuchin_complement_param_1
)
{
	ret;
}

.visible .entry mystery_kernel(
	.param .align 8 .b8 mystery_kernel_param_0[16]
)
{
	ret;
}
)";

// capuchin_checksum with two parameters: no equivalent has that layout.
constexpr char kWrongLayoutPtx[] = R"(
.version 9.0
.target sm_75
.address_size 64
.visible .entry capuchin_checksum(
	.param .u64 capuchin_checksum_param_0,
	.param .u32 capuchin_checksum_param_1
)
{
	ret;
}
)";

class Modules : public Simcuda {
 protected:
  void SetUp() override {
    Simcuda::SetUp();
    ASSERT_EQ(cuModuleLoadData(&mod_, kPtx), CUDA_SUCCESS);
    ASSERT_EQ(cuModuleGetFunction(&sum_, mod_, "capuchin_checksum"), CUDA_SUCCESS);
    ASSERT_EQ(cuModuleGetFunction(&complement_, mod_, "capuchin_complement"), CUDA_SUCCESS);
  }
  // The device checksum of [p, p + n), as DeviceChecksum computes it: 3 blocks' sums in pinned
  // host memory (no device memory), added on the host.
  std::uint64_t device_checksum(CUdeviceptr p, unsigned long long n) {
    void* host = nullptr;
    EXPECT_EQ(cuMemHostAlloc(&host, 3 * 8, CU_MEMHOSTALLOC_DEVICEMAP), CUDA_SUCCESS);
    auto* partials = static_cast<unsigned long long*>(host);
    for (int b = 0; b < 3; ++b) partials[b] = 0xdeadbeefull;  // every block's entry is written
    CUdeviceptr at = reinterpret_cast<CUdeviceptr>(host);
    void* argv[] = {&p, &n, &at};
    EXPECT_EQ(cuLaunchKernel(sum_, 3, 1, 1, 64, 1, 1, 0, nullptr, argv, nullptr), CUDA_SUCCESS);
    EXPECT_EQ(cuCtxSynchronize(), CUDA_SUCCESS);
    const std::uint64_t raw = partials[0] + partials[1] + partials[2];
    EXPECT_EQ(cuMemFreeHost(host), CUDA_SUCCESS);
    return capuchin::checksum::finish(raw, n);
  }
  CUmodule mod_ = nullptr;
  CUfunction sum_ = nullptr, complement_ = nullptr;
};

TEST_F(Modules, ChecksumEquivalentAgreesWithTheHostAtAnyAlignmentAndLength) {
  std::vector<unsigned char> host(4200);  // room for the longest range at the largest start
  for (std::size_t i = 0; i < host.size(); ++i) host[i] = static_cast<unsigned char>(i * 131 + 7);
  CUdeviceptr buf = 0;
  ASSERT_EQ(cuMemAlloc(&buf, host.size()), CUDA_SUCCESS);
  ASSERT_EQ(cuMemcpyHtoD(buf, host.data(), host.size()), CUDA_SUCCESS);
  for (std::size_t start : {0u, 3u, 8u})
    for (std::size_t n : {0u, 1u, 7u, 8u, 9u, 4096u})
      EXPECT_EQ(device_checksum(buf + start, n), capuchin::checksum::of_host(host.data() + start, n))
          << "start " << start << " length " << n;
  // One changed byte changes it.
  const std::uint64_t before = device_checksum(buf, 4096);
  const unsigned char flipped = static_cast<unsigned char>(host[100] ^ 1);
  ASSERT_EQ(cuMemcpyHtoD(buf + 100, &flipped, 1), CUDA_SUCCESS);
  EXPECT_NE(device_checksum(buf, 4096), before);
  ASSERT_EQ(cuMemFree(buf), CUDA_SUCCESS);
}

TEST_F(Modules, ComplementEquivalentIsItsOwnInverse) {
  std::vector<unsigned char> host(1001), back(1001);
  for (std::size_t i = 0; i < host.size(); ++i) host[i] = static_cast<unsigned char>(i);
  CUdeviceptr buf = 0;
  ASSERT_EQ(cuMemAlloc(&buf, host.size()), CUDA_SUCCESS);
  ASSERT_EQ(cuMemcpyHtoD(buf, host.data(), host.size()), CUDA_SUCCESS);
  ASSERT_EQ(launch(complement_, nullptr, buf + 1, 1000ull), CUDA_SUCCESS);
  ASSERT_EQ(cuMemcpyDtoH(back.data(), buf, back.size()), CUDA_SUCCESS);
  EXPECT_EQ(back[0], host[0]);  // outside the range: untouched
  for (std::size_t i = 1; i < host.size(); ++i) ASSERT_EQ(back[i], static_cast<unsigned char>(~host[i])) << i;
  ASSERT_EQ(launch(complement_, nullptr, buf + 1, 1000ull), CUDA_SUCCESS);
  ASSERT_EQ(cuMemcpyDtoH(back.data(), buf, back.size()), CUDA_SUCCESS);
  EXPECT_EQ(back, host);
  ASSERT_EQ(cuMemFree(buf), CUDA_SUCCESS);
}

TEST_F(Modules, AFreedRangeFaultsAsOnAGpu) {
  CUdeviceptr buf = 0;
  ASSERT_EQ(cuMemAlloc(&buf, 4096), CUDA_SUCCESS);
  ASSERT_EQ(cuMemFree(buf), CUDA_SUCCESS);
  ASSERT_EQ(launch(complement_, nullptr, buf, 4096ull), CUDA_SUCCESS);
  EXPECT_EQ(cuCtxSynchronize(), CUDA_ERROR_ILLEGAL_ADDRESS);
}

TEST_F(Modules, ImagesAndNamesSimcudaCannotServe) {
  CUmodule m = nullptr;
  EXPECT_EQ(cuModuleLoadData(&m, nullptr), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuModuleLoadData(nullptr, kPtx), CUDA_ERROR_INVALID_VALUE);
  const unsigned char elf[] = {0x7f, 'E', 'L', 'F', 2, 1, 1, 0};
  EXPECT_EQ(cuModuleLoadData(&m, elf), CUDA_ERROR_NO_BINARY_FOR_GPU);
  const std::uint32_t fatbin[] = {0xBA55ED50u, 0};
  EXPECT_EQ(cuModuleLoadData(&m, fatbin), CUDA_ERROR_NO_BINARY_FOR_GPU);
  EXPECT_EQ(cuModuleLoadData(&m, "not ptx at all"), CUDA_ERROR_INVALID_PTX);
  EXPECT_EQ(cuModuleLoadData(&m, ""), CUDA_ERROR_INVALID_PTX);
  EXPECT_EQ(cuModuleLoadData(&m, ".version 9.0\n.target sm_75\n"), CUDA_ERROR_INVALID_PTX);  // no entry

  CUfunction f = nullptr;
  EXPECT_EQ(cuModuleGetFunction(&f, mod_, "not_in_the_module"), CUDA_ERROR_NOT_FOUND);
  EXPECT_EQ(cuModuleGetFunction(&f, mod_, "mystery_kernel"), CUDA_ERROR_NOT_SUPPORTED);  // no equivalent
  EXPECT_EQ(cuModuleGetFunction(&f, mod_, nullptr), CUDA_ERROR_INVALID_VALUE);
  CUmodule wrong = nullptr;
  ASSERT_EQ(cuModuleLoadData(&wrong, kWrongLayoutPtx), CUDA_SUCCESS);
  EXPECT_EQ(cuModuleGetFunction(&f, wrong, "capuchin_checksum"), CUDA_ERROR_NOT_SUPPORTED);
  EXPECT_EQ(cuModuleUnload(wrong), CUDA_SUCCESS);
  EXPECT_EQ(cuModuleGetFunction(&f, wrong, "capuchin_checksum"), CUDA_ERROR_INVALID_HANDLE);
  EXPECT_EQ(cuModuleUnload(wrong), CUDA_ERROR_INVALID_HANDLE);
}

TEST_F(Modules, LoadNeedsACurrentContext) {
  ASSERT_EQ(cuCtxSetCurrent(nullptr), CUDA_SUCCESS);
  CUmodule m = nullptr;
  EXPECT_EQ(cuModuleLoadData(&m, kPtx), CUDA_ERROR_INVALID_CONTEXT);
}

TEST_F(Modules, ReachableThroughGetProcAddress) {
  for (const char* name : {"cuModuleLoadData", "cuModuleGetFunction", "cuModuleUnload"}) {
    void* p = nullptr;
    CUdriverProcAddressQueryResult s{};
    EXPECT_EQ(cuGetProcAddress(name, &p, 12000, CU_GET_PROC_ADDRESS_DEFAULT, &s), CUDA_SUCCESS) << name;
    EXPECT_NE(p, nullptr) << name;
  }
}

}  // namespace
