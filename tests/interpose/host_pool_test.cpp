// The pinned backend's host pool (interpose/exec/host_pool.hpp) against a fake driver that
// tracks live handles: pieces cover a span exactly, are reused across sizes, the limit holds,
// chunks too large to use are released to make room, and a refusal takes nothing.
#include <gtest/gtest.h>

#include <map>
#include <numeric>

#include "exec/host_pool.hpp"

namespace capuchin::interpose::exec {
namespace {

constexpr std::size_t kGran = 2u << 20;
std::map<CUmemGenericAllocationHandle, std::size_t> g_live;  // the fake driver's handles
CUmemGenericAllocationHandle g_next = 1;
int g_creates = 0;

CUresult fake_create(CUmemGenericAllocationHandle* h, size_t bytes, const CUmemAllocationProp* p, unsigned long long) {
  if (p->location.type != CU_MEM_LOCATION_TYPE_HOST || bytes % kGran != 0) return CUDA_ERROR_INVALID_VALUE;
  *h = g_next++;
  g_live[*h] = bytes;
  ++g_creates;
  return CUDA_SUCCESS;
}
CUresult fake_release(CUmemGenericAllocationHandle h) { return g_live.erase(h) == 1 ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE; }

std::size_t total(const std::vector<HostPiece>& v) {
  return std::accumulate(v.begin(), v.end(), std::size_t{0}, [](std::size_t s, const HostPiece& p) { return s + p.bytes; });
}
std::size_t live_bytes() {
  std::size_t s = 0;
  for (auto& [h, b] : g_live) s += b;
  return s;
}

class HostPoolTest : public ::testing::Test {
 protected:
  void SetUp() override {
    g_live.clear();
    g_creates = 0;
    api.mem_create = fake_create;
    api.mem_release = fake_release;
  }
  Api api;
  HostPool pool;
};

TEST_F(HostPoolTest, PiecesCoverTheSpanInFewPowerOfTwoChunks) {
  pool.configure(&api, kGran, 1ull << 30);
  auto p = pool.take(48 * kGran);  // 96 MiB: 64 + 32
  ASSERT_EQ(total(p), 48 * kGran);
  EXPECT_EQ(p.size(), 2u);
  EXPECT_EQ(pool.bytes(), 48 * kGran);
  pool.give(p);
  EXPECT_TRUE(p.empty());
  EXPECT_EQ(pool.free_bytes(), 48 * kGran);
}

TEST_F(HostPoolTest, DynamicShapesReuseChunksWithinTheLimit) {
  const std::uint64_t limit = 64 * kGran;  // 128 MiB
  pool.configure(&api, kGran, limit);
  // One tensor of a new size each "iteration", evicted then brought back: with chunks of
  // exact sizes the pool filled with sizes never seen again.
  for (std::size_t granules : {1, 48, 7, 33, 12, 48, 5, 29, 64, 3, 17, 40}) {
    auto p = pool.take(granules * kGran);
    ASSERT_EQ(total(p), granules * kGran) << granules;
    EXPECT_LE(pool.bytes(), limit);
    EXPECT_EQ(live_bytes(), pool.bytes());
    pool.give(p);
  }
  EXPECT_LE(pool.peak_bytes(), limit);
}

TEST_F(HostPoolTest, ARefusalTakesNothingAndLeavesThePoolWhole) {
  pool.configure(&api, kGran, 8 * kGran);
  auto held = pool.take(6 * kGran);
  ASSERT_EQ(total(held), 6 * kGran);
  auto no = pool.take(4 * kGran);  // 6 + 4 > 8
  EXPECT_TRUE(no.empty());
  EXPECT_EQ(pool.bytes(), 6 * kGran);
  EXPECT_EQ(pool.free_bytes(), 0u);
  pool.give(held);
  auto yes = pool.take(8 * kGran);  // idle 4 + 2 are used, the rest created
  EXPECT_EQ(total(yes), 8 * kGran);
  EXPECT_LE(pool.bytes(), 8 * kGran);
  pool.give(yes);
  pool.release_idle();
  EXPECT_EQ(pool.bytes(), 0u);
  EXPECT_TRUE(g_live.empty());
}

TEST_F(HostPoolTest, IdleChunksTooLargeAreReleasedToMakeRoom) {
  pool.configure(&api, kGran, 16 * kGran);
  auto big = pool.take(16 * kGran);
  ASSERT_EQ(big.size(), 1u);
  pool.give(big);  // one idle 32 MiB chunk: useless for a 6 MiB tensor
  auto small = pool.take(3 * kGran);
  ASSERT_EQ(total(small), 3 * kGran);
  EXPECT_LE(pool.bytes(), 16 * kGran);
  EXPECT_EQ(live_bytes(), pool.bytes());
}

}  // namespace
}  // namespace capuchin::interpose::exec
