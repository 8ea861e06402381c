// Planning's lateness probes (interpose/exec/planning.hpp) against a fake driver table: the
// filter before_launch asks first (may_be_armed) passes every armed block however many armed ids
// share its bit, and lets a block through only while an armed id shares its bit; stamped and
// dropped probes leave it; a stamped probe whose launch waited for its data is measured late.
#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <set>
#include <vector>

#include "exec/planning.hpp"
#include "real_api.hpp"

namespace capuchin::interpose {
// Planning links the daemon sink, which asks the hooks' table for driver entry points: this
// test has no driver (the libcapuchin.so hooks define it).
void* driver_symbol(const char*) { return nullptr; }
}  // namespace capuchin::interpose

namespace capuchin::interpose::exec {
namespace {

struct FakeDriver {
  int made = 0;
  std::vector<CUevent> recorded;
} g;

int g_storage[4096];

Api fake_api() {
  Api a;
  a.event_create = [](CUevent* e, unsigned) {
    *e = reinterpret_cast<CUevent>(&g_storage[g.made++]);
    return CUDA_SUCCESS;
  };
  a.event_record = [](CUevent e, CUstream) {
    g.recorded.push_back(e);
    return CUDA_SUCCESS;
  };
  a.event_query = [](CUevent) { return CUDA_SUCCESS; };
  a.event_elapsed = [](float* ms, CUevent, CUevent) {
    *ms = 0.5f;  // every launch waited half a millisecond for its data
    return CUDA_SUCCESS;
  };
  return a;
}

const CUstream kIn = reinterpret_cast<CUstream>(0xb2), kJob = reinterpret_cast<CUstream>(0xc3);
constexpr std::uint64_t kBits = 256;  // the filter's width (planning.hpp)

bool shares_bit_with(std::uint64_t id, const std::set<std::uint64_t>& armed) {
  return std::any_of(armed.begin(), armed.end(), [&](std::uint64_t a) { return a % kBits == id % kBits; });
}

TEST(PlanningProbes, EveryArmedBlockPassesTheFilterWhateverSharesItsBit) {
  g = FakeDriver{};
  const Api api = fake_api();
  Planning p;
  p.configure(&api, nullptr, PlanningOptions{});
  // Block ids are sequential: 900 of them put three or four on each of the filter's bits.
  std::vector<std::uint64_t> ids;
  for (std::uint64_t id = 1; id <= 900; ++id) ids.push_back(id);
  std::set<std::uint64_t> armed;
  for (std::uint64_t id : ids) {
    p.arm_probe(id, plan::LateArrival{}, kIn);
    armed.insert(id);
  }
  ASSERT_TRUE(p.probes_armed());
  for (std::uint64_t id : ids) ASSERT_TRUE(p.may_be_armed(id)) << id;
  p.arm_probe(1, plan::LateArrival{}, kIn);  // arming an armed id again changes nothing
  // Stamped in random order: an armed id always passes; a stamped one passes only while an
  // armed id shares its bit.
  std::mt19937_64 rng(7);
  std::shuffle(ids.begin(), ids.end(), rng);
  const std::size_t records_before = g.recorded.size();
  for (std::size_t i = 0; i < ids.size() / 2; ++i) {
    p.stamp_probe(ids[i], kJob);
    armed.erase(ids[i]);
    ASSERT_EQ(p.may_be_armed(ids[i]), shares_bit_with(ids[i], armed)) << "stamped " << ids[i];
    for (std::uint64_t a : armed) ASSERT_TRUE(p.may_be_armed(a)) << "armed " << a << " after stamping " << ids[i];
  }
  EXPECT_EQ(g.recorded.size() - records_before, ids.size() / 2);  // one `ready` event per stamp
  p.stamp_probe(ids[0], kJob);  // stamped already: nothing recorded, nothing counted twice
  EXPECT_EQ(g.recorded.size() - records_before, ids.size() / 2);
  // The iteration ends: what no launch touched is dropped, and nothing passes any more.
  p.drop_unstamped_probes();
  EXPECT_FALSE(p.probes_armed());
  for (std::uint64_t id = 1; id <= 900; ++id) ASSERT_FALSE(p.may_be_armed(id)) << id;
  // The stamped probes are measured: each launch waited 0.5 ms for its data.
  std::vector<std::pair<std::uint64_t, double>> late;
  p.poll_probes(late);
  ASSERT_EQ(late.size(), ids.size() / 2);
  for (const auto& [id, s] : late) EXPECT_DOUBLE_EQ(s, 0.5e-3) << id;
}

}  // namespace
}  // namespace capuchin::interpose::exec
