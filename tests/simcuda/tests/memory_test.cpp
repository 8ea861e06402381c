// memory_test.cpp: simcuda memory semantics: capacity and out-of-memory, stream-ordered
// allocation, Unified Memory faults with LRU eviction and prefetch, cudaMalloc memory never
// evicted, VMM (device- and host-located), and illegal addresses becoming the sticky error.
#include <sys/mman.h>

#include <algorithm>
#include <cstring>
#include <vector>

#include "support.hpp"

using namespace simtest;

TEST_F(Simcuda, OutOfMemoryAtCapacity) {
  size_t free_b = 0, total = 0;
  ASSERT_EQ(cuMemGetInfo(&free_b, &total), CUDA_SUCCESS);
  EXPECT_EQ(total, kCapacity);
  EXPECT_EQ(free_b, kCapacity);
  CUdeviceptr big = 0, more = 0, last = 0;
  ASSERT_EQ(cuMemAlloc(&big, kCapacity - (4 << 20)), CUDA_SUCCESS);
  EXPECT_EQ(cuMemAlloc(&more, 8 << 20), CUDA_ERROR_OUT_OF_MEMORY);
  ASSERT_EQ(cuMemAlloc(&last, 4 << 20), CUDA_SUCCESS);  // exactly full
  EXPECT_EQ(cuMemAlloc(&more, 1), CUDA_ERROR_OUT_OF_MEMORY);
  EXPECT_EQ(cuMemAllocAsync(&more, 1, nullptr), CUDA_ERROR_OUT_OF_MEMORY);
  ASSERT_EQ(cuMemGetInfo(&free_b, &total), CUDA_SUCCESS);
  EXPECT_EQ(free_b, 0u);
  EXPECT_EQ(stats().peak_device_bytes, kCapacity);
  ASSERT_EQ(cuMemFree(last), CUDA_SUCCESS);
  EXPECT_EQ(cuMemAlloc(&more, 4 << 20), CUDA_SUCCESS);
  // Device pointers live in simcuda's reserved range and are 4 KiB-aligned.
  EXPECT_EQ(big % 4096, 0u);
  EXPECT_EQ(cuMemFree(big + 4096), CUDA_ERROR_INVALID_VALUE);
}

TEST_F(Simcuda, StreamOrderedFreeReleasesAtCallAndReusesOnTheSameStream) {
  CUstream s;
  ASSERT_EQ(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING), CUDA_SUCCESS);
  CUdeviceptr a = 0, b = 0;
  ASSERT_EQ(cuMemAllocAsync(&a, 40 << 20, s), CUDA_SUCCESS);
  EXPECT_EQ(cuMemAllocAsync(&b, 40 << 20, s), CUDA_ERROR_OUT_OF_MEMORY);
  ASSERT_EQ(cuMemFreeAsync(a, s), CUDA_SUCCESS);
  ASSERT_EQ(cuMemAllocAsync(&b, 40 << 20, s), CUDA_SUCCESS);
  EXPECT_EQ(b, a);  // stream order makes the same range safe to hand out again
  EXPECT_EQ(stats().peak_device_bytes, 40ull << 20);
  ASSERT_EQ(cuMemFreeAsync(b, s), CUDA_SUCCESS);
  ASSERT_EQ(cuStreamSynchronize(s), CUDA_SUCCESS);
  EXPECT_EQ(stats().device_bytes_in_use, 0u);
}

TEST_F(Simcuda, WorkBeforeAStreamOrderedFreeMayRunAfterTheRangeIsReused) {
  CUstream s;
  ASSERT_EQ(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING), CUDA_SUCCESS);
  CUdeviceptr a = 0, b = 0;
  ASSERT_EQ(cuMemAllocAsync(&a, 4096, s), CUDA_SUCCESS);
  g_gate[3] = false;
  ASSERT_EQ(launch(k.wait_gate, s, 3), CUDA_SUCCESS);  // hold the worker
  ASSERT_EQ(launch(k.fill, s, reinterpret_cast<float*>(a), 1024, 1.0f), CUDA_SUCCESS);
  ASSERT_EQ(cuMemFreeAsync(a, s), CUDA_SUCCESS);
  ASSERT_EQ(cuMemAllocAsync(&b, 4, s), CUDA_SUCCESS);  // same pages, smaller allocation
  ASSERT_EQ(b, a);
  g_gate[3] = true;
  EXPECT_EQ(cuStreamSynchronize(s), CUDA_SUCCESS);  // the fill touched mapped pages: legal
}

TEST_F(Simcuda, KernelAfterStreamOrderedFreeIsIllegal) {
  CUstream s;
  ASSERT_EQ(cuStreamCreate(&s, 0), CUDA_SUCCESS);
  CUdeviceptr a = 0;
  ASSERT_EQ(cuMemAllocAsync(&a, 4096, s), CUDA_SUCCESS);
  ASSERT_EQ(launch(k.fill, s, reinterpret_cast<float*>(a), 1024, 1.0f), CUDA_SUCCESS);  // before the free: fine
  ASSERT_EQ(cuMemFreeAsync(a, s), CUDA_SUCCESS);
  ASSERT_EQ(launch(k.fill, s, reinterpret_cast<float*>(a), 1024, 2.0f), CUDA_SUCCESS);  // after it: illegal
  EXPECT_EQ(cuStreamSynchronize(s), CUDA_ERROR_ILLEGAL_ADDRESS);
}

TEST_F(Simcuda, IllegalAddressIsStickyAfterFree) {
  CUdeviceptr d = 0;
  ASSERT_EQ(cuMemAlloc(&d, 1 << 20), CUDA_SUCCESS);
  ASSERT_EQ(cuMemFree(d), CUDA_SUCCESS);
  ASSERT_EQ(launch(k.fill, nullptr, reinterpret_cast<float*>(d), 16, 1.0f), CUDA_SUCCESS);  // async: accepted
  EXPECT_EQ(cuCtxSynchronize(), CUDA_ERROR_ILLEGAL_ADDRESS);
  // Sticky: the context stays failed for everything that follows.
  CUdeviceptr e = 0;
  EXPECT_EQ(cuMemAlloc(&e, 4096), CUDA_ERROR_ILLEGAL_ADDRESS);
  EXPECT_EQ(cuCtxSynchronize(), CUDA_ERROR_ILLEGAL_ADDRESS);
  EXPECT_EQ(stats().sticky_error, CUDA_ERROR_ILLEGAL_ADDRESS);
  // Freed device pages are really protected (PROT_NONE), like unmapped GPU memory.
  EXPECT_EQ(mprotect(reinterpret_cast<void*>(d), 4096, PROT_NONE), 0);
}

// Freed pages are kept for reuse (up to the capacity), split where a smaller allocation takes
// part of a freed range, and hold neither zeros nor their old contents when handed out again
// (a read of memory never written must not pass for the right data); a range freed again is
// protected again, and churning more than the capacity through the allocator (the kept pages
// then given back) stays legal.
TEST_F(Simcuda, FreedRangesAreReusedInPartsPoisonedAndProtectedAgain) {
  CUdeviceptr x = 0, y = 0, z = 0;
  ASSERT_EQ(cuMemAlloc(&x, 4 * 4096), CUDA_SUCCESS);
  ASSERT_EQ(launch(k.fill, nullptr, reinterpret_cast<float*>(x), 4 * 1024, 1.0f), CUDA_SUCCESS);
  ASSERT_EQ(cuMemFree(x), CUDA_SUCCESS);
  ASSERT_EQ(cuMemAlloc(&y, 4096), CUDA_SUCCESS);
  ASSERT_EQ(y, x);  // first fit: the freed range's first page
  ASSERT_EQ(cuMemAlloc(&z, 2 * 4096), CUDA_SUCCESS);
  ASSERT_EQ(z, x + 4096);
  std::vector<unsigned char> fresh(4096);
  ASSERT_EQ(cuMemcpyDtoH(fresh.data(), y, 4096), CUDA_SUCCESS);
  EXPECT_EQ(fresh[0], 0xFF);
  EXPECT_EQ(fresh[4095], 0xFF);
  ASSERT_EQ(launch(k.fill, nullptr, reinterpret_cast<float*>(y), 1024, 2.0f), CUDA_SUCCESS);
  ASSERT_EQ(launch(k.fill, nullptr, reinterpret_cast<float*>(z), 2 * 1024, 3.0f), CUDA_SUCCESS);
  std::vector<float> back(3 * 1024);
  ASSERT_EQ(cuMemcpyDtoH(back.data(), y, 4096), CUDA_SUCCESS);
  ASSERT_EQ(cuMemcpyDtoH(back.data() + 1024, z, 2 * 4096), CUDA_SUCCESS);
  EXPECT_EQ(back[0], 2.0f);
  EXPECT_EQ(back[1024], 3.0f);
  EXPECT_EQ(back[3 * 1024 - 1], 3.0f);
  ASSERT_EQ(cuMemFree(y), CUDA_SUCCESS);
  ASSERT_EQ(cuMemFree(z), CUDA_SUCCESS);
  // 80 MiB of managed memory freed in two frees: more than the 64 MiB kept, so the first is given back.
  CUdeviceptr m1 = 0, m2 = 0, big = 0;
  ASSERT_EQ(cuMemAllocManaged(&m1, 40ull << 20, CU_MEM_ATTACH_GLOBAL), CUDA_SUCCESS);
  ASSERT_EQ(cuMemAllocManaged(&m2, 40ull << 20, CU_MEM_ATTACH_GLOBAL), CUDA_SUCCESS);
  std::memset(reinterpret_cast<void*>(m1), 1, 40ull << 20);
  std::memset(reinterpret_cast<void*>(m2), 1, 40ull << 20);
  ASSERT_EQ(cuMemFree(m1), CUDA_SUCCESS);
  ASSERT_EQ(cuMemFree(m2), CUDA_SUCCESS);
  ASSERT_EQ(cuMemAlloc(&big, 48ull << 20), CUDA_SUCCESS);
  ASSERT_EQ(launch(k.fill, nullptr, reinterpret_cast<float*>(big), (48 << 20) / 4, 5.0f), CUDA_SUCCESS);
  ASSERT_EQ(cuCtxSynchronize(), CUDA_SUCCESS);
  ASSERT_EQ(cuMemFree(big), CUDA_SUCCESS);
  ASSERT_EQ(launch(k.fill, nullptr, reinterpret_cast<float*>(z), 1024, 4.0f), CUDA_SUCCESS);
  EXPECT_EQ(cuCtxSynchronize(), CUDA_ERROR_ILLEGAL_ADDRESS);  // freed again: protected again
}

// GCC defines __SANITIZE_*__; clang answers __has_feature.
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define SIMCUDA_TEST_SANITIZED 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
#define SIMCUDA_TEST_SANITIZED 1
#endif
#endif

TEST_F(Simcuda, UndeclaredTouchOfProtectedPageIsCaughtBySegvBackstop) {
#ifdef SIMCUDA_TEST_SANITIZED
  GTEST_SKIP() << "sanitizers own SIGSEGV; the backstop is tested in plain builds (the declaration check, "
                  "tested by IllegalAddressIsStickyAfterFree, still applies)";
#endif
  CUdeviceptr d = 0;
  ASSERT_EQ(cuMemAlloc(&d, 4096), CUDA_SUCCESS);
  ASSERT_EQ(cuMemFree(d), CUDA_SUCCESS);
  ASSERT_EQ(launch(k.raw_write, nullptr, reinterpret_cast<char*>(d)), CUDA_SUCCESS);
  EXPECT_EQ(cuStreamSynchronize(nullptr), CUDA_ERROR_ILLEGAL_ADDRESS);
}

TEST_F(Simcuda, ManagedMemoryFaultsInAndEvictsLeastRecentlyUsed) {
  // 64 MiB device; 96 MiB managed = 1536 blocks of 64 KiB.
  const size_t block = SIMCUDA_UVM_BLOCK;
  CUdeviceptr m = 0;
  ASSERT_EQ(cuMemAllocManaged(&m, 96 << 20, CU_MEM_ATTACH_GLOBAL), CUDA_SUCCESS);
  EXPECT_EQ(stats().device_bytes_in_use, 0u);  // nothing resident yet
  const char* base = reinterpret_cast<const char*>(m);
  auto touch = [&](size_t offset, size_t bytes) {
    ASSERT_EQ(launch(k.touch, nullptr, base + offset, bytes), CUDA_SUCCESS);
    ASSERT_EQ(cuCtxSynchronize(), CUDA_SUCCESS);
  };
  touch(0, 32 << 20);  // A
  EXPECT_EQ(stats().uvm_faults, (32u << 20) / block);
  touch(32 << 20, 32 << 20);  // B: device now full
  EXPECT_EQ(stats().managed_resident_bytes, 64ull << 20);
  EXPECT_EQ(stats().uvm_evictions, 0u);
  touch(0, 32 << 20);  // A again: resident, no faults, and now more recent than B
  EXPECT_EQ(stats().uvm_faults, (64u << 20) / block);
  touch(64 << 20, 16 << 20);  // C: evicts the oldest 16 MiB, which is B's first half
  EXPECT_EQ(stats().uvm_evictions, (16u << 20) / block);
  const uint64_t faults = stats().uvm_faults;
  touch(0, 32 << 20);  // A is still resident
  EXPECT_EQ(stats().uvm_faults, faults);
  touch(48 << 20, 16 << 20);  // B's second half too
  EXPECT_EQ(stats().uvm_faults, faults);
  touch(32 << 20, block);  // B's first block was evicted: it faults again
  EXPECT_EQ(stats().uvm_faults, faults + 1);
  EXPECT_LE(stats().device_bytes_in_use, kCapacity);
  EXPECT_GT(stats().bytes_htod, 0u);
  EXPECT_GT(stats().bytes_dtoh, 0u);
  // The host still sees its data wherever it resides.
  std::memset(reinterpret_cast<void*>(m), 7, 16);
  EXPECT_EQ(base[3], 7);
}

TEST_F(Simcuda, FaultsCostVirtualTime) {
  // Two 1 MiB managed ranges: `fresh` never written (its first touch populates it on the
  // device: a fill, no transfer), `written` filled by a memset while on the host (its first
  // touch moves its data over the link).
  CUdeviceptr fresh = 0, written = 0;
  ASSERT_EQ(cuMemAllocManaged(&fresh, 1 << 20, CU_MEM_ATTACH_GLOBAL), CUDA_SUCCESS);
  ASSERT_EQ(cuMemAllocManaged(&written, 1 << 20, CU_MEM_ATTACH_GLOBAL), CUDA_SUCCESS);
  ASSERT_EQ(cuMemsetD8(written, 3, 1 << 20), CUDA_SUCCESS);
  CUevent a, b, c, d;
  for (CUevent* e : {&a, &b, &c, &d}) ASSERT_EQ(cuEventCreate(e, 0), CUDA_SUCCESS);
  const uint64_t htod0 = stats().bytes_htod;
  ASSERT_EQ(cuEventRecord(a, nullptr), CUDA_SUCCESS);
  ASSERT_EQ(launch(k.touch, nullptr, reinterpret_cast<const char*>(fresh), size_t{1} << 20), CUDA_SUCCESS);
  ASSERT_EQ(cuEventRecord(b, nullptr), CUDA_SUCCESS);
  ASSERT_EQ(launch(k.touch, nullptr, reinterpret_cast<const char*>(fresh), size_t{1} << 20), CUDA_SUCCESS);
  ASSERT_EQ(cuEventRecord(c, nullptr), CUDA_SUCCESS);
  ASSERT_EQ(launch(k.touch, nullptr, reinterpret_cast<const char*>(written), size_t{1} << 20), CUDA_SUCCESS);
  ASSERT_EQ(cuEventRecord(d, nullptr), CUDA_SUCCESS);
  ASSERT_EQ(cuEventSynchronize(d), CUDA_SUCCESS);
  float populating = 0, resident = 0, migrating = 0;
  ASSERT_EQ(cuEventElapsedTime(&populating, a, b), CUDA_SUCCESS);
  ASSERT_EQ(cuEventElapsedTime(&resident, b, c), CUDA_SUCCESS);
  ASSERT_EQ(cuEventElapsedTime(&migrating, c, d), CUDA_SUCCESS);
  const double blocks = (1 << 20) / SIMCUDA_UVM_BLOCK;
  EXPECT_NEAR(populating - resident, blocks * (SIMCUDA_FAULT_LATENCY_NS + SIMCUDA_UVM_BLOCK / SIMCUDA_DEVICE_BYTES_PER_NS) / 1e6, 1e-3);
  EXPECT_NEAR(migrating - resident, blocks * (SIMCUDA_FAULT_LATENCY_NS + SIMCUDA_UVM_BLOCK / SIMCUDA_PINNED_BYTES_PER_NS) / 1e6, 1e-3);
  EXPECT_EQ(stats().bytes_htod - htod0, 1u << 20);  // only `written` crossed the link
}

TEST_F(Simcuda, DiscardedManagedMemoryLeavesTheDeviceAndComesBackWithoutATransfer) {
  CUdeviceptr m = 0;
  ASSERT_EQ(cuMemAllocManaged(&m, 4 << 20, CU_MEM_ATTACH_GLOBAL), CUDA_SUCCESS);
  CUstream s;
  ASSERT_EQ(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING), CUDA_SUCCESS);
  ASSERT_EQ(cuMemsetD8(m, 1, 4 << 20), CUDA_SUCCESS);
  CUmemLocation dev{CU_MEM_LOCATION_TYPE_DEVICE, 0};
  ASSERT_EQ(cuMemPrefetchAsync(m, 4 << 20, dev, 0, s), CUDA_SUCCESS);
  ASSERT_EQ(cuStreamSynchronize(s), CUDA_SUCCESS);
  EXPECT_EQ(stats().managed_resident_bytes, 4ull << 20);
  // Whole blocks of the range are discarded; the partly covered last one keeps its data.
  CUdeviceptr ptrs[1] = {m};
  size_t sizes[1] = {(4 << 20) - 100};
  ASSERT_EQ(cuMemDiscardBatchAsync(ptrs, sizes, 1, 0, s), CUDA_SUCCESS);
  ASSERT_EQ(cuStreamSynchronize(s), CUDA_SUCCESS);
  EXPECT_EQ(stats().managed_resident_bytes, uint64_t{SIMCUDA_UVM_BLOCK});
  const uint64_t htod = stats().bytes_htod, dtoh = stats().bytes_dtoh;
  ASSERT_EQ(cuMemPrefetchAsync(m, 4 << 20, dev, 0, s), CUDA_SUCCESS);
  ASSERT_EQ(cuStreamSynchronize(s), CUDA_SUCCESS);
  EXPECT_EQ(stats().managed_resident_bytes, 4ull << 20);
  EXPECT_EQ(stats().bytes_htod, htod);  // nothing to move: populated on the device
  EXPECT_EQ(stats().bytes_dtoh, dtoh);
  // Bad calls: flags, the legacy stream, memory that is not managed.
  EXPECT_EQ(cuMemDiscardBatchAsync(ptrs, sizes, 1, 1, s), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuMemDiscardBatchAsync(ptrs, sizes, 1, 0, nullptr), CUDA_ERROR_INVALID_VALUE);
  CUdeviceptr d = 0;
  ASSERT_EQ(cuMemAlloc(&d, 4096), CUDA_SUCCESS);
  CUdeviceptr bad[1] = {d};
  size_t bad_size[1] = {4096};
  EXPECT_EQ(cuMemDiscardBatchAsync(bad, bad_size, 1, 0, s), CUDA_ERROR_INVALID_VALUE);
}

TEST_F(Simcuda, PrefetchAndAdviceMoveResidency) {
  CUdeviceptr m = 0;
  ASSERT_EQ(cuMemAllocManaged(&m, 8 << 20, CU_MEM_ATTACH_GLOBAL), CUDA_SUCCESS);
  CUmemLocation dev{CU_MEM_LOCATION_TYPE_DEVICE, 0}, host{CU_MEM_LOCATION_TYPE_HOST, 0};
  ASSERT_EQ(cuMemPrefetchAsync(m, 8 << 20, dev, 0, nullptr), CUDA_SUCCESS);
  ASSERT_EQ(cuCtxSynchronize(), CUDA_SUCCESS);
  EXPECT_EQ(stats().managed_resident_bytes, 8ull << 20);
  ASSERT_EQ(launch(k.touch, nullptr, reinterpret_cast<const char*>(m), size_t{8} << 20), CUDA_SUCCESS);
  ASSERT_EQ(cuCtxSynchronize(), CUDA_SUCCESS);
  EXPECT_EQ(stats().uvm_faults, 0u);  // prefetched: no faults
  ASSERT_EQ(cuMemPrefetchAsync(m, 4 << 20, host, 0, nullptr), CUDA_SUCCESS);
  ASSERT_EQ(cuCtxSynchronize(), CUDA_SUCCESS);
  EXPECT_EQ(stats().managed_resident_bytes, 4ull << 20);
  EXPECT_EQ(stats().bytes_dtoh, 4ull << 20);
  // Preferred location host: device accesses map remotely instead of migrating.
  ASSERT_EQ(cuMemAdvise(m, 4 << 20, CU_MEM_ADVISE_SET_PREFERRED_LOCATION, host), CUDA_SUCCESS);
  ASSERT_EQ(launch(k.touch, nullptr, reinterpret_cast<const char*>(m), size_t{4} << 20), CUDA_SUCCESS);
  ASSERT_EQ(cuCtxSynchronize(), CUDA_SUCCESS);
  EXPECT_EQ(stats().uvm_faults, 0u);
  EXPECT_EQ(stats().managed_resident_bytes, 4ull << 20);
  // Prefetching non-managed memory is invalid.
  CUdeviceptr d = 0;
  ASSERT_EQ(cuMemAlloc(&d, 4096), CUDA_SUCCESS);
  EXPECT_EQ(cuMemPrefetchAsync(d, 4096, dev, 0, nullptr), CUDA_ERROR_INVALID_VALUE);
}

TEST_F(Simcuda, CudaMallocMemoryIsNeverEvicted) {
  CUdeviceptr m = 0, d = 0, more = 0;
  ASSERT_EQ(cuMemAllocManaged(&m, 64 << 20, CU_MEM_ATTACH_GLOBAL), CUDA_SUCCESS);
  ASSERT_EQ(launch(k.touch, nullptr, reinterpret_cast<const char*>(m), size_t{64} << 20), CUDA_SUCCESS);
  ASSERT_EQ(cuCtxSynchronize(), CUDA_SUCCESS);
  EXPECT_EQ(stats().device_bytes_in_use, kCapacity);
  // The driver makes room by evicting managed memory...
  ASSERT_EQ(cuMemAlloc(&d, 48 << 20), CUDA_SUCCESS);
  EXPECT_EQ(stats().managed_resident_bytes, 16ull << 20);
  // ...but never cudaMalloc memory.
  EXPECT_EQ(cuMemAlloc(&more, 32 << 20), CUDA_ERROR_OUT_OF_MEMORY);
  // A kernel touching all managed memory now thrashes through the 16 MiB left.
  ASSERT_EQ(launch(k.touch, nullptr, reinterpret_cast<const char*>(m), size_t{64} << 20), CUDA_SUCCESS);
  ASSERT_EQ(cuCtxSynchronize(), CUDA_SUCCESS);
  EXPECT_EQ(stats().device_bytes_in_use, kCapacity);
  EXPECT_EQ(cuMemAlloc(&more, 16 << 20), CUDA_SUCCESS);
}

TEST_F(Simcuda, VmmMapAccessUnmapAndHostLocatedMemory) {
  CUmemAllocationProp prop{};
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location = {CU_MEM_LOCATION_TYPE_DEVICE, 0};
  size_t gran = 0;
  ASSERT_EQ(cuMemGetAllocationGranularity(&gran, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM), CUDA_SUCCESS);
  ASSERT_EQ(gran, 2u << 20);
  CUdeviceptr va = 0;
  ASSERT_EQ(cuMemAddressReserve(&va, 2 * gran, 0, 0, 0), CUDA_SUCCESS);
  CUmemGenericAllocationHandle dev_h = 0, host_h = 0;
  ASSERT_EQ(cuMemCreate(&dev_h, gran, &prop, 0), CUDA_SUCCESS);
  EXPECT_EQ(stats().device_bytes_in_use, gran);
  EXPECT_EQ(cuMemCreate(&host_h, gran + 1, &prop, 0), CUDA_ERROR_INVALID_VALUE);
  ASSERT_EQ(cuMemMap(va, gran, 0, dev_h, 0), CUDA_SUCCESS);
  CUmemAccessDesc access{{CU_MEM_LOCATION_TYPE_DEVICE, 0}, CU_MEM_ACCESS_FLAGS_PROT_READWRITE};
  ASSERT_EQ(cuMemSetAccess(va, gran, &access, 1), CUDA_SUCCESS);
  ASSERT_EQ(launch(k.fill, nullptr, reinterpret_cast<float*>(va), 256, 5.0f), CUDA_SUCCESS);
  ASSERT_EQ(cuCtxSynchronize(), CUDA_SUCCESS);
  // Host-located physical memory mapped at the second half; copy the data across.
  CUmemAllocationProp host_prop = prop;
  host_prop.location = {CU_MEM_LOCATION_TYPE_HOST, 0};
  ASSERT_EQ(cuMemCreate(&host_h, gran, &host_prop, 0), CUDA_SUCCESS);
  EXPECT_EQ(stats().device_bytes_in_use, gran);  // host memory is not device capacity
  ASSERT_EQ(cuMemMap(va + gran, gran, 0, host_h, 0), CUDA_SUCCESS);
  ASSERT_EQ(cuMemSetAccess(va + gran, gran, &access, 1), CUDA_SUCCESS);
  ASSERT_EQ(cuMemcpyDtoD(va + gran, va, 1024), CUDA_SUCCESS);
  // Swap: unmap the device memory and map the host-located handle at the same address.
  ASSERT_EQ(cuMemUnmap(va, gran), CUDA_SUCCESS);
  ASSERT_EQ(cuMemRelease(dev_h), CUDA_SUCCESS);
  EXPECT_EQ(stats().device_bytes_in_use, 0u);
  ASSERT_EQ(cuMemUnmap(va + gran, gran), CUDA_SUCCESS);
  ASSERT_EQ(cuMemMap(va, gran, 0, host_h, 0), CUDA_SUCCESS);
  ASSERT_EQ(cuMemSetAccess(va, gran, &access, 1), CUDA_SUCCESS);
  float h = 0;
  ASSERT_EQ(cuMemcpyDtoH(&h, va + 1020, sizeof h), CUDA_SUCCESS);
  EXPECT_EQ(h, 5.0f);  // the handle kept its data across unmap/remap
  ASSERT_EQ(launch(k.add_one, nullptr, reinterpret_cast<float*>(va), 256), CUDA_SUCCESS);
  ASSERT_EQ(cuCtxSynchronize(), CUDA_SUCCESS);
  // Touching the unmapped second half stops the kernel: sticky illegal address.
  ASSERT_EQ(launch(k.fill, nullptr, reinterpret_cast<float*>(va + gran), 16, 1.0f), CUDA_SUCCESS);
  EXPECT_EQ(cuCtxSynchronize(), CUDA_ERROR_ILLEGAL_ADDRESS);
}

// A released handle's pages serve a later cuMemCreate of the same size (host time: a fresh memfd
// is zeroed page by page), filled with poison first: the new handle holds neither the old
// contents nor zeros, as a freed cuMemAlloc range does not. A handle of another size is new.
TEST_F(Simcuda, VmmHandleOfAReleasedOnesSizeHoldsPoisonNotItsContents) {
  CUmemAllocationProp prop{};
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location = {CU_MEM_LOCATION_TYPE_DEVICE, 0};
  const size_t gran = SIMCUDA_VMM_GRANULARITY;
  CUdeviceptr va = 0;
  ASSERT_EQ(cuMemAddressReserve(&va, 2 * gran, 0, 0, 0), CUDA_SUCCESS);
  const CUmemAccessDesc access{{CU_MEM_LOCATION_TYPE_DEVICE, 0}, CU_MEM_ACCESS_FLAGS_PROT_READWRITE};
  auto map_new = [&](size_t bytes, CUmemGenericAllocationHandle* h) {
    ASSERT_EQ(cuMemCreate(h, bytes, &prop, 0), CUDA_SUCCESS);
    ASSERT_EQ(cuMemMap(va, bytes, 0, *h, 0), CUDA_SUCCESS);
    ASSERT_EQ(cuMemSetAccess(va, bytes, &access, 1), CUDA_SUCCESS);
  };
  auto unmap_release = [&](size_t bytes, CUmemGenericAllocationHandle h) {
    ASSERT_EQ(cuMemUnmap(va, bytes), CUDA_SUCCESS);
    ASSERT_EQ(cuMemRelease(h), CUDA_SUCCESS);
  };
  CUmemGenericAllocationHandle h = 0;
  map_new(gran, &h);
  std::vector<unsigned char> bytes(gran, 0x5A);
  ASSERT_EQ(cuMemcpyHtoD(va, bytes.data(), gran), CUDA_SUCCESS);
  unmap_release(gran, h);
  EXPECT_EQ(stats().device_bytes_in_use, 0u);  // released: no longer device memory in use
  map_new(gran, &h);
  EXPECT_EQ(stats().device_bytes_in_use, gran);
  ASSERT_EQ(cuMemcpyDtoH(bytes.data(), va, gran), CUDA_SUCCESS);
  EXPECT_EQ(std::count(bytes.begin(), bytes.end(), 0xFF), static_cast<std::ptrdiff_t>(gran));
  unmap_release(gran, h);
  map_new(2 * gran, &h);  // no released handle of this size: a new one (zeros)
  std::vector<unsigned char> big(2 * gran, 0x5A);
  ASSERT_EQ(cuMemcpyDtoH(big.data(), va, 2 * gran), CUDA_SUCCESS);
  EXPECT_EQ(std::count(big.begin(), big.end(), 0), static_cast<std::ptrdiff_t>(2 * gran));
  unmap_release(2 * gran, h);
  ASSERT_EQ(cuMemAddressFree(va, 2 * gran), CUDA_SUCCESS);
}

// Host-located VMM memory is host memory the device can address: a copy between it and device
// memory crosses the link (pinned rate), not device memory bandwidth.
TEST_F(Simcuda, CopiesBetweenDeviceAndHostLocatedVmmCrossTheLink) {
  CUmemAllocationProp dev_prop{};
  dev_prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  dev_prop.location = {CU_MEM_LOCATION_TYPE_DEVICE, 0};
  CUmemAllocationProp host_prop = dev_prop;
  host_prop.location = {CU_MEM_LOCATION_TYPE_HOST, 0};
  const size_t gran = SIMCUDA_VMM_GRANULARITY;
  CUdeviceptr va = 0;
  ASSERT_EQ(cuMemAddressReserve(&va, 3 * gran, 0, 0, 0), CUDA_SUCCESS);
  CUmemGenericAllocationHandle dev_a = 0, dev_b = 0, host_h = 0;
  ASSERT_EQ(cuMemCreate(&dev_a, gran, &dev_prop, 0), CUDA_SUCCESS);
  ASSERT_EQ(cuMemCreate(&dev_b, gran, &dev_prop, 0), CUDA_SUCCESS);
  ASSERT_EQ(cuMemCreate(&host_h, gran, &host_prop, 0), CUDA_SUCCESS);
  CUmemAccessDesc access{{CU_MEM_LOCATION_TYPE_DEVICE, 0}, CU_MEM_ACCESS_FLAGS_PROT_READWRITE};
  const CUmemGenericAllocationHandle hs[3] = {dev_a, dev_b, host_h};
  for (int i = 0; i < 3; ++i) {
    ASSERT_EQ(cuMemMap(va + i * gran, gran, 0, hs[i], 0), CUDA_SUCCESS);
    ASSERT_EQ(cuMemSetAccess(va + i * gran, gran, &access, 1), CUDA_SUCCESS);
  }
  CUevent e[4];
  for (CUevent& x : e) ASSERT_EQ(cuEventCreate(&x, 0), CUDA_SUCCESS);
  const uint64_t dtoh = stats().bytes_dtoh, htod = stats().bytes_htod;
  ASSERT_EQ(cuEventRecord(e[0], nullptr), CUDA_SUCCESS);
  ASSERT_EQ(cuMemcpyDtoDAsync(va + gran, va, gran, nullptr), CUDA_SUCCESS);      // device -> device
  ASSERT_EQ(cuEventRecord(e[1], nullptr), CUDA_SUCCESS);
  ASSERT_EQ(cuMemcpyDtoDAsync(va + 2 * gran, va, gran, nullptr), CUDA_SUCCESS);  // device -> host-located
  ASSERT_EQ(cuEventRecord(e[2], nullptr), CUDA_SUCCESS);
  ASSERT_EQ(cuMemcpyDtoDAsync(va, va + 2 * gran, gran, nullptr), CUDA_SUCCESS);  // host-located -> device
  ASSERT_EQ(cuEventRecord(e[3], nullptr), CUDA_SUCCESS);
  ASSERT_EQ(cuEventSynchronize(e[3]), CUDA_SUCCESS);
  float ms[3] = {};
  for (int i = 0; i < 3; ++i) ASSERT_EQ(cuEventElapsedTime(&ms[i], e[i], e[i + 1]), CUDA_SUCCESS);
  const double link_ms = (SIMCUDA_COPY_LATENCY_NS + gran / SIMCUDA_PINNED_BYTES_PER_NS) / 1e6;
  EXPECT_NEAR(ms[0], (SIMCUDA_COPY_LATENCY_NS + 2.0 * gran / SIMCUDA_DEVICE_BYTES_PER_NS) / 1e6, 1e-3);
  EXPECT_NEAR(ms[1], link_ms, 1e-3);
  EXPECT_NEAR(ms[2], link_ms, 1e-3);
  EXPECT_EQ(stats().bytes_dtoh - dtoh, gran);
  EXPECT_EQ(stats().bytes_htod - htod, gran);
}

TEST_F(Simcuda, VmmErrors) {
  CUdeviceptr va = 0;
  EXPECT_EQ(cuMemAddressReserve(&va, 4096, 0, 0, 0), CUDA_ERROR_INVALID_VALUE);
  ASSERT_EQ(cuMemAddressReserve(&va, 4 << 20, 0, 0, 0), CUDA_SUCCESS);
  CUmemAllocationProp prop{};
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location = {CU_MEM_LOCATION_TYPE_DEVICE, 0};
  CUmemGenericAllocationHandle h = 0;
  ASSERT_EQ(cuMemCreate(&h, 2 << 20, &prop, 0), CUDA_SUCCESS);
  EXPECT_EQ(cuMemMap(va, 4 << 20, 0, h, 0), CUDA_ERROR_INVALID_VALUE);  // larger than the handle
  ASSERT_EQ(cuMemMap(va, 2 << 20, 0, h, 0), CUDA_SUCCESS);
  EXPECT_EQ(cuMemMap(va, 2 << 20, 0, h, 0), CUDA_ERROR_INVALID_VALUE);  // already mapped
  EXPECT_EQ(cuMemAddressFree(va, 4 << 20), CUDA_ERROR_INVALID_VALUE);   // still mapped
  CUmemAccessDesc access{{CU_MEM_LOCATION_TYPE_DEVICE, 0}, CU_MEM_ACCESS_FLAGS_PROT_READWRITE};
  EXPECT_EQ(cuMemSetAccess(va + (2 << 20), 2 << 20, &access, 1), CUDA_ERROR_INVALID_VALUE);  // not mapped
  ASSERT_EQ(cuMemRelease(h), CUDA_SUCCESS);  // deferred while mapped
  EXPECT_EQ(stats().device_bytes_in_use, 2u << 20);
  ASSERT_EQ(cuMemUnmap(va, 2 << 20), CUDA_SUCCESS);
  EXPECT_EQ(stats().device_bytes_in_use, 0u);
  EXPECT_EQ(cuMemAddressFree(va, 4 << 20), CUDA_SUCCESS);
}

TEST_F(Simcuda, PointerAttributes) {
  CUdeviceptr d = 0, m = 0;
  void* pinned = nullptr;
  ASSERT_EQ(cuMemAlloc(&d, 4096), CUDA_SUCCESS);
  ASSERT_EQ(cuMemAllocManaged(&m, 4096, CU_MEM_ATTACH_GLOBAL), CUDA_SUCCESS);
  ASSERT_EQ(cuMemHostAlloc(&pinned, 4096, 0), CUDA_SUCCESS);
  unsigned type = 0;
  bool managed = true;
  ASSERT_EQ(cuPointerGetAttribute(&type, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, d + 100), CUDA_SUCCESS);
  EXPECT_EQ(type, CU_MEMORYTYPE_DEVICE);
  ASSERT_EQ(cuPointerGetAttribute(&managed, CU_POINTER_ATTRIBUTE_IS_MANAGED, d), CUDA_SUCCESS);
  EXPECT_FALSE(managed);
  ASSERT_EQ(cuPointerGetAttribute(&managed, CU_POINTER_ATTRIBUTE_IS_MANAGED, m), CUDA_SUCCESS);
  EXPECT_TRUE(managed);
  ASSERT_EQ(cuPointerGetAttribute(&type, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, dptr(pinned)), CUDA_SUCCESS);
  EXPECT_EQ(type, CU_MEMORYTYPE_HOST);
  int local = 0;
  EXPECT_EQ(cuPointerGetAttribute(&type, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, dptr(&local)), CUDA_ERROR_INVALID_VALUE);
  CUdeviceptr base = 0;
  size_t size = 0;
  ASSERT_EQ(cuMemGetAddressRange(&base, &size, d + 100), CUDA_SUCCESS);
  EXPECT_EQ(base, d);
  EXPECT_EQ(size, 4096u);
}
