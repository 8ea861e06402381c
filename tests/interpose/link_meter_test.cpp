// The link meter (interpose/exec/link_meter.hpp) against a fake driver table whose events
// complete when told and report programmed elapsed times: a rate is given only after enough
// moves each way, with each copy's fixed cost left out; small moves are not timed; a move not
// made frees its pair; a failed record never hands its pair out again; a sample faster than the
// limit (pages already where a prefetch sends them) is not believed.
#include <gtest/gtest.h>

#include <map>
#include <vector>

#include "exec/link_meter.hpp"

namespace capuchin::interpose::exec {
namespace {

struct FakeDriver {
  int made = 0;
  std::map<CUevent, float> end_ms;  // elapsed time reported for a pair ending at the event
  std::vector<CUevent> recorded;
  bool fail_record = false;
  bool done = true;  // cuEventQuery's answer for every event
} g;

int g_storage[256];

Api fake_api() {
  Api a;
  a.event_create = [](CUevent* e, unsigned) {
    *e = reinterpret_cast<CUevent>(&g_storage[g.made++]);
    return CUDA_SUCCESS;
  };
  a.event_record = [](CUevent e, CUstream) {
    if (g.fail_record) return CUDA_ERROR_INVALID_HANDLE;
    g.recorded.push_back(e);
    return CUDA_SUCCESS;
  };
  a.event_query = [](CUevent) { return g.done ? CUDA_SUCCESS : CUDA_ERROR_NOT_READY; };
  a.event_elapsed = [](float* ms, CUevent, CUevent end) {
    *ms = g.end_ms.count(end) != 0 ? g.end_ms[end] : 0.0f;
    return CUDA_SUCCESS;
  };
  return a;
}

class LinkMeterTest : public ::testing::Test {
 protected:
  void SetUp() override {
    g = FakeDriver{};
    meter.configure(&api, nullptr, 100e9);  // no sample over 100 GB/s
  }
  // One move of `bytes` to the host (or not) that the fake says took `ms`.
  void move(std::uint64_t bytes, bool to_host, float ms) {
    const int pair = meter.begin(s, bytes, to_host);
    ASSERT_GE(pair, 0);
    meter.end(pair, s, true);
    g.end_ms[g.recorded.back()] = ms;
  }
  const CUstream s = reinterpret_cast<CUstream>(0x1000);
  Api api = fake_api();
  LinkMeter meter;
};

TEST_F(LinkMeterTest, GivesEachWaysRateOnceEnoughMovesWereTimed) {
  const std::uint64_t mib16 = 16u << 20;
  move(mib16, true, 2.7f);  // 16 MiB in 2.7 ms, 10 us of it the copy's fixed cost
  move(mib16, true, 2.7f);
  meter.poll();
  EXPECT_EQ(meter.bytes_per_s(true, 10e-6), 0.0) << "two moves are not enough";
  move(mib16, true, 2.7f);
  meter.poll();
  EXPECT_EQ(meter.measured(true), 3u);
  // The decayed sums weigh the three alike here (equal samples): 16 MiB / (2.7 - 0.01) ms.
  EXPECT_NEAR(meter.bytes_per_s(true, 10e-6), static_cast<double>(mib16) / 2.69e-3, 1e6);
  EXPECT_EQ(meter.bytes_per_s(false, 10e-6), 0.0) << "nothing measured to the device";
  // A latency larger than the copies themselves takes off at most half their time.
  EXPECT_NEAR(meter.bytes_per_s(true, 1.0), static_cast<double>(mib16) / 1.35e-3, 1e6);
}

TEST_F(LinkMeterTest, RecentMovesWeighMost) {
  const std::uint64_t mib = 1u << 20;
  for (int i = 0; i < 3; ++i) move(mib, false, 1.0f);  // 1 MiB per ms
  for (int i = 0; i < 60; ++i) move(mib, false, 0.25f);  // then four times as fast
  meter.poll();
  const double rate = meter.bytes_per_s(false, 0);
  EXPECT_GT(rate, 0.9 * static_cast<double>(mib) / 0.25e-3);
  EXPECT_LT(rate, static_cast<double>(mib) / 0.25e-3);
}

TEST_F(LinkMeterTest, SmallOrUnmadeMovesAreNotTimed) {
  EXPECT_EQ(meter.begin(s, (1u << 20) - 1, true), -1);
  const int pair = meter.begin(s, 8u << 20, true);
  ASSERT_GE(pair, 0);
  meter.end(pair, s, false);  // the copy was refused: the pair is free again, nothing pending
  EXPECT_EQ(meter.begin(s, 8u << 20, true), pair);
  meter.poll();
  EXPECT_EQ(meter.measured(true), 0u);
}

TEST_F(LinkMeterTest, AFailedRecordNeverHandsItsPairOutAgain) {
  g.fail_record = true;
  EXPECT_EQ(meter.begin(s, 8u << 20, true), -1);
  g.fail_record = false;
  const int made_before = g.made;
  EXPECT_GE(meter.begin(s, 8u << 20, true), 0);
  EXPECT_EQ(g.made, made_before + 2) << "a new pair, not the one whose record failed";
}

TEST_F(LinkMeterTest, PendingMovesWaitAndImpossibleRatesAreDropped) {
  const std::uint64_t mib64 = 64u << 20;
  g.done = false;
  for (int i = 0; i < 3; ++i) move(mib64, true, 0.01f);  // 64 MiB in 10 us: 6.7 TB/s
  meter.poll();
  EXPECT_EQ(meter.measured(true), 0u) << "not complete yet";
  g.done = true;
  meter.poll();
  EXPECT_EQ(meter.measured(true), 0u) << "faster than the 100 GB/s limit: nothing moved";
  for (int i = 0; i < 3; ++i) move(mib64, true, 10.0f);
  meter.poll();
  EXPECT_EQ(meter.measured(true), 3u);
}

}  // namespace
}  // namespace capuchin::interpose::exec
