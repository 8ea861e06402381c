// The executor's deferred events (interpose/exec/event_pool.hpp) and the streams' latest work
// (StreamActivity, ordering.hpp) against a fake driver table: a deferred event whose stream is
// idle is done without being recorded (cuStreamQuery), one whose stream is busy is recorded and
// queried, and one that StreamActivity forgets while it is still deferred is recorded first, so
// nothing asks its stream again once the stream may be destroyed or captured. A recorded event
// seen complete, and a wait one of the executor's own streams made already, cost no second
// driver call (each is a microsecond of host time on a real driver, per eviction and reuse).
#include <gtest/gtest.h>

#include <vector>

#include "exec/block.hpp"
#include "exec/event_pool.hpp"
#include "exec/ordering.hpp"

namespace capuchin::interpose::exec {
namespace {

struct FakeDriver {
  int events_made = 0;
  std::vector<CUstream> recorded_on, queried, waited_on;
  int event_queries = 0;
  CUresult stream_state = CUDA_SUCCESS;  // cuStreamQuery's answer: SUCCESS idle, NOT_READY busy
  CUresult event_state = CUDA_SUCCESS;   // cuEventQuery's
  int context_syncs = 0;
} g;

int g_event_storage[64];

Api fake_api() {
  Api a;
  a.event_create = [](CUevent* e, unsigned) {
    *e = reinterpret_cast<CUevent>(&g_event_storage[g.events_made++]);
    return CUDA_SUCCESS;
  };
  a.event_record = [](CUevent, CUstream s) {
    g.recorded_on.push_back(s);
    return CUDA_SUCCESS;
  };
  a.event_query = [](CUevent) {
    ++g.event_queries;
    return g.event_state;
  };
  a.stream_query = [](CUstream s) {
    g.queried.push_back(s);
    return g.stream_state;
  };
  a.stream_wait_event = [](CUstream s, CUevent, unsigned) {
    g.waited_on.push_back(s);
    return CUDA_SUCCESS;
  };
  a.ctx_synchronize = []() {
    ++g.context_syncs;
    return CUDA_SUCCESS;
  };
  return a;
}

class EventPoolTest : public ::testing::Test {
 protected:
  void SetUp() override {
    g = FakeDriver{};
    events.init(&api, nullptr);
  }
  const CUstream s1 = reinterpret_cast<CUstream>(0x1000), s2 = reinterpret_cast<CUstream>(0x2000);
  const CUstream out = reinterpret_cast<CUstream>(0x3000), in = reinterpret_cast<CUstream>(0x4000),
                 drop = reinterpret_cast<CUstream>(0x5000);
  Api api = fake_api();
  EventPool events;
  StreamActivity activity;
};

TEST_F(EventPoolTest, ADeferredEventOnAnIdleStreamIsDoneWithoutARecord) {
  Ev e = events.defer(s1);
  EXPECT_TRUE(events.done(e));
  EXPECT_TRUE(events.deferred(e)) << "asked, not recorded";
  EXPECT_TRUE(g.recorded_on.empty());
  ASSERT_EQ(g.queried.size(), 1u);
  EXPECT_EQ(g.queried[0], s1);
  // Busy: recorded (it then covers the stream's work so far) and the event itself queried.
  g.stream_state = CUDA_ERROR_NOT_READY;
  g.event_state = CUDA_ERROR_NOT_READY;
  EXPECT_FALSE(events.done(e));
  EXPECT_FALSE(events.deferred(e));
  EXPECT_EQ(g.recorded_on, std::vector<CUstream>{s1});
  events.unref(e);
}

TEST_F(EventPoolTest, AStreamForgottenWhileItsEventIsDeferredHasItRecordedFirst) {
  // A use of block x on s1, marked with s1's deferred event; s1 goes idle; then a new stream
  // shows, and the entries whose work is done are forgotten.
  Block x;
  Ev e = activity.use_event(events, s1);
  mark_use(events, x, s1, e);
  events.unref(e);
  Ev e2 = activity.use_event(events, s2);
  events.unref(e2);
  ASSERT_GE(x.nuses, 1);
  EXPECT_FALSE(events.deferred(x.uses[0].ev)) << "forgotten while deferred: no settle could find it later";
  EXPECT_EQ(g.recorded_on, std::vector<CUstream>{s1});
  // s1 destroyed (its handle invalid): x's use is asked about without touching s1 again.
  g.stream_state = CUDA_ERROR_INVALID_HANDLE;
  const std::size_t queries = g.queried.size();
  EXPECT_TRUE(quiet_now(events, x));
  EXPECT_EQ(g.queried.size(), queries);
  EXPECT_EQ(g.recorded_on.size(), 1u);
  EXPECT_EQ(g.context_syncs, 0);
  release_uses(events, x);
}

TEST_F(EventPoolTest, ARecordedEventSeenCompleteIsNotQueriedAgainUntilItsSlotIsRecordedAgain) {
  g.event_state = CUDA_ERROR_NOT_READY;
  Ev e = events.record(s1);
  EXPECT_FALSE(events.done(e));
  EXPECT_FALSE(events.done(e)) << "in flight: asked again";
  EXPECT_EQ(g.event_queries, 2);
  g.event_state = CUDA_SUCCESS;
  EXPECT_TRUE(events.done(e));
  g.event_state = CUDA_ERROR_NOT_READY;  // the driver would not say so of this recording again
  EXPECT_TRUE(events.done(e));
  EXPECT_EQ(g.event_queries, 3);
  EXPECT_EQ(events.order(s2, e), CUDA_SUCCESS);
  EXPECT_TRUE(g.waited_on.empty()) << "a wait for finished work orders nothing";
  EXPECT_EQ(events.calls_saved(), 2u);
  // The slot's next recording is a new one: asked about again.
  events.unref(e);
  Ev f = events.record(s1);
  ASSERT_EQ(f, Ev{0}) << "the same slot, reused";
  EXPECT_FALSE(events.done(f));
  EXPECT_EQ(g.event_queries, 4);
  events.unref(f);
}

TEST_F(EventPoolTest, ASlotDeferredAgainForgetsItsLastRecording) {
  // Seen complete and waited for by an own stream, then given back: the slot's next use, a
  // deferred event, is neither complete nor waited for.
  events.set_own_streams(out, in, drop);
  Ev e = events.record(s1);
  EXPECT_TRUE(events.done(e));
  EXPECT_EQ(events.order(drop, e), CUDA_SUCCESS);
  EXPECT_TRUE(g.waited_on.empty()) << "complete: no wait";
  events.unref(e);
  Ev d = events.defer(s1);
  ASSERT_EQ(d, Ev{0}) << "the same slot, reused";
  g.stream_state = CUDA_ERROR_NOT_READY;
  g.event_state = CUDA_ERROR_NOT_READY;
  EXPECT_FALSE(events.done(d));
  EXPECT_EQ(events.order(drop, d), CUDA_SUCCESS);
  EXPECT_EQ(events.order(drop, d), CUDA_SUCCESS);
  EXPECT_EQ(g.waited_on, std::vector<CUstream>{drop}) << "waited for once, as a new recording";
  events.unref(d);
}

TEST_F(EventPoolTest, AFreedBlockKeepsItsUnfinishedFreeEventsAndFewFinishedOnes) {
  // Freed again and again with no use in between: free events pile up until its next first use.
  Block x;
  g.event_state = CUDA_ERROR_NOT_READY;
  for (int i = 0; i < 12; ++i) {
    Ev e = events.record(s1);
    add_free_event(events, x, e);
    EXPECT_FALSE(e) << "the reference moved into the block";
  }
  EXPECT_EQ(x.free_events.size(), 12u) << "work still running: every one kept";
  g.event_state = CUDA_SUCCESS;  // all of it done
  for (int i = 0; i < 20; ++i) {
    Ev e = events.record(s1);
    add_free_event(events, x, e);
  }
  EXPECT_LE(x.free_events.size(), 8u) << "finished ones dropped";
  EXPECT_GE(x.free_events.size(), 1u);
  EXPECT_LE(g.events_made, 13) << "the dropped ones went back to the pool and were used again";
  release_free_events(events, x);
  EXPECT_TRUE(x.free_events.empty());
  // Below 8, nothing is asked of the driver; the same (deferred) event added twice is held once.
  const int queries = g.event_queries;
  Ev d = events.defer(s1);
  for (int i = 0; i < 5; ++i) {
    Ev again = events.ref(d);
    add_free_event(events, x, again);
  }
  EXPECT_EQ(x.free_events.size(), 1u);
  EXPECT_EQ(g.event_queries, queries);
  EXPECT_TRUE(g.queried.empty()) << "no stream asked";
  release_free_events(events, x);
  events.unref(d);
}

TEST_F(EventPoolTest, ADeferredEventSeenDoneThroughItsIdleStreamIsAskedAgain) {
  // Later uses may be marked with the same deferred event: its stream is asked every time.
  Ev e = events.defer(s1);
  EXPECT_TRUE(events.done(e));
  g.stream_state = CUDA_ERROR_NOT_READY;
  g.event_state = CUDA_ERROR_NOT_READY;
  EXPECT_FALSE(events.done(e));
  EXPECT_EQ(g.queried.size(), 2u);
  events.unref(e);
}

TEST_F(EventPoolTest, OnlyTheExecutorsOwnStreamsSkipARepeatedWait) {
  events.set_own_streams(out, in, drop);
  g.event_state = CUDA_ERROR_NOT_READY;
  Ev e = events.record(s1);
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(events.order(out, e), CUDA_SUCCESS);
    EXPECT_EQ(events.order(in, e), CUDA_SUCCESS);
    EXPECT_EQ(events.order(s2, e), CUDA_SUCCESS);  // a job's stream: its handle may be a new stream's by now
  }
  EXPECT_EQ(g.waited_on, (std::vector<CUstream>{out, in, s2, s2, s2}));
  // Recorded again (the slot reused): every stream waits again.
  events.unref(e);
  Ev f = events.record(s1);
  ASSERT_EQ(f, Ev{0});
  EXPECT_EQ(events.order(out, f), CUDA_SUCCESS);
  EXPECT_EQ(g.waited_on.size(), 6u);
  // A deferred event is recorded by its first wait; that recording is what the stream waits for.
  Ev d = events.defer(s1);
  EXPECT_EQ(events.order(out, d), CUDA_SUCCESS);
  EXPECT_EQ(events.order(out, d), CUDA_SUCCESS);
  EXPECT_EQ(g.waited_on.size(), 7u);
  EXPECT_EQ(g.recorded_on.size(), 3u);
  events.unref(f);
  events.unref(d);
}

}  // namespace
}  // namespace capuchin::interpose::exec
