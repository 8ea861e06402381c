// The policy controller shared by the executor and the simulator (include/capuchin/controller.hpp):
// iterations learned from the signature period whatever the syncs, plans adopted only at
// boundaries, commands resolved to this iteration's tensors, relearning, feedback; and the
// passive victim order.
#include <gtest/gtest.h>

#include <algorithm>
#include <functional>
#include <memory>
#include <optional>
#include <unordered_map>
#include <utility>

#include "capuchin/controller.hpp"
#include "capuchin/learn.hpp"
#include "capuchin/trace.hpp"
#include "capuchin/victims.hpp"

namespace capuchin::policy {
namespace {

using trace::Op;

// A job's event stream: set-up, then iterations of a small training step. Each iteration:
// upload (alloc + h2d copy), a sync after it (blocking copy), forward kernels making two
// activations, a loss read (sync), backward freeing them, an optimizer kernel on the weights.
class Stream {
 public:
  explicit Stream(Controller& c) : c_(c) {}

  void setup() {
    alloc(kWeights, 1 << 20);
    kernel(0xa0, {kWeights});
  }
  // syncs: 0 none, 1 a sync after the upload (a blocking copy), 2 also the loss read.
  // Feeds at most `limit` events of the iteration (the rest with later calls of resume()).
  // `without`: places of the iteration (0: the input's allocation, ...) that do not come.
  void iteration(int syncs, std::uint64_t act_bytes = 4 << 20, int limit = 1 << 30, std::vector<std::size_t> without = {}) {
    const std::uint64_t in = next_++, a = next_++, b = next_++;
    todo_.clear();
    todo_.push_back([=, this] { alloc(in, 1 << 16); });
    todo_.push_back([=, this] { copy_h2d(in); });
    if (syncs >= 1) todo_.push_back([=, this] { sync(); });
    todo_.push_back([=, this] { alloc(a, act_bytes); });
    todo_.push_back([=, this] { kernel(0xb0, {kWeights, in, a}); });
    todo_.push_back([=, this] { alloc(b, act_bytes); });
    todo_.push_back([=, this] { kernel(0xb1, {a, b}); });
    if (syncs >= 2) todo_.push_back([=, this] { sync(); });
    todo_.push_back([=, this] { kernel(0xc1, {b, a}); });
    todo_.push_back([=, this] { free(b); });
    todo_.push_back([=, this] { kernel(0xc0, {a, in, kWeights}); });
    todo_.push_back([=, this] { free(a); });
    todo_.push_back([=, this] { free(in); });
    todo_.push_back([=, this] { kernel(0xd0, {kWeights}); });
    std::sort(without.rbegin(), without.rend());
    for (std::size_t k : without) todo_.erase(todo_.begin() + static_cast<std::ptrdiff_t>(k));
    done_ = 0;
    resume(limit);
  }
  void resume(int limit = 1 << 30) {
    for (int k = 0; k < limit && done_ < todo_.size(); ++k) todo_[done_++]();
  }
  // Set-up, then iterations until the controller has learned one: its first plan request.
  std::optional<PlanRequest> learn(int syncs) {
    setup();
    while (!c_.locked()) iteration(syncs);
    return c_.take_request();
  }

  // The rest of the iteration in progress: the controller's iteration starts with the
  // upload too (the fewest bytes are live before it), so this ends at its boundary.
  void to_boundary() {
    resume();
    ASSERT_TRUE(c_.at_boundary());
  }

  Step alloc(std::uint64_t id, std::uint64_t bytes) {
    bytes_[id] = bytes;
    Event e;
    e.op = static_cast<std::uint8_t>(Op::Alloc);
    e.sig = std::uint64_t{static_cast<std::uint8_t>(Op::Alloc)} << 56 | bytes;
    e.form = learn::form_signature(Op::Alloc, 0);  // as the executor forms them: no sizes
    e.id = id;
    e.bytes = bytes;
    return feed(e, {});
  }
  Step free(std::uint64_t id) {
    Event e;
    e.op = static_cast<std::uint8_t>(Op::Free);
    e.sig = std::uint64_t{static_cast<std::uint8_t>(Op::Free)} << 56;
    e.form = learn::form_signature(Op::Free, 0);
    e.id = id;
    return feed(e, {});
  }
  Step kernel(std::uint64_t fn, std::vector<std::uint64_t> ids) {
    Event e;
    e.op = static_cast<std::uint8_t>(Op::Kernel);
    e.sig = std::uint64_t{static_cast<std::uint8_t>(Op::Kernel)} << 56 | fn;
    if (sized_kernels)  // as the executor's: the bytes of every tensor touched mixed in
      for (std::uint64_t id : ids) e.sig = learn::mix_signature(e.sig, bytes_[id]);
    e.form = learn::form_signature(Op::Kernel, learn::mix_signature(fn, ids.size()));
    e.touch = true;
    e.nreads = static_cast<std::uint32_t>(ids.size());
    return feed(e, ids);
  }
  Step copy_h2d(std::uint64_t dst) {
    Event e;
    e.op = static_cast<std::uint8_t>(Op::Copy);
    e.dir = static_cast<std::uint8_t>(trace::CopyDir::H2D);
    e.sig = std::uint64_t{static_cast<std::uint8_t>(Op::Copy)} << 56 | 1;
    e.form = learn::form_signature(Op::Copy, e.dir);
    e.id2 = dst;
    return feed(e, {});
  }
  Step sync() {
    Event e;
    e.op = static_cast<std::uint8_t>(Op::Sync);
    e.sig = std::uint64_t{static_cast<std::uint8_t>(Op::Sync)} << 56;
    return feed(e, {});
  }

  Step feed(const Event& e, const std::vector<std::uint64_t>& ids) {
    const Step s = c_.on_event(e, ids, out);
    if (s.boundary) ++boundaries;
    if (s.adopted) ++adoptions;
    if (s.relearn) {
      ++relearns;
      last_mismatch = std::make_pair(c_.mismatched(), c_.differed());
    }
    return s;
  }

  static constexpr std::uint64_t kWeights = 1;
  std::vector<Command> out;
  int boundaries = 0, adoptions = 0, relearns = 0;
  std::optional<std::pair<Event, Event>> last_mismatch;  // the last relearn: expected, got
  std::uint64_t next_ = 100;
  bool sized_kernels = false;

 private:
  std::unordered_map<std::uint64_t, std::uint64_t> bytes_;  // allocated tensors' sizes
  Controller& c_;
  std::vector<std::function<void()>> todo_;
  std::size_t done_ = 0;
};

constexpr std::uint32_t kEventsPerIteration = 12;  // Stream::iteration(0)

TEST(FindPeriod, NeedsTwoFullRepeatsAndPrefersTheLongestRepeat) {
  std::vector<std::uint64_t> s{9, 9, 9};  // set-up
  const std::vector<std::uint64_t> it{1, 2, 3, 4, 5, 5, 5, 6};
  s.insert(s.end(), it.begin(), it.end());
  s.insert(s.end(), it.begin(), it.begin() + 5);  // one and a half iterations
  // 5 5 5 inside the iteration repeat with period 1, but not for long enough (min_period 2 below).
  EXPECT_FALSE(learn::find_period(s, 2).found);
  s.insert(s.end(), it.begin() + 5, it.end());
  const learn::Period p = learn::find_period(s, 2);
  ASSERT_TRUE(p.found);
  EXPECT_EQ(p.period, 8u);
  EXPECT_GE(p.repeat, 8u);
}

TEST(Controller, LearnsTheIterationWhateverTheSyncs) {
  for (int syncs : {0, 1, 2}) {
    SCOPED_TRACE(syncs);
    Controller c;
    Stream s(c);
    s.setup();
    for (int i = 0; i < 4 && !c.locked(); ++i) s.iteration(syncs);
    ASSERT_TRUE(c.locked());
    EXPECT_EQ(c.period(), kEventsPerIteration + static_cast<std::uint32_t>(syncs));
    auto r = c.take_request();
    ASSERT_TRUE(r.has_value());
    EXPECT_EQ(r->job.events.size(), c.period());
    // The iteration starts where the fewest bytes are live: with only the weights, before the upload.
    EXPECT_EQ(r->job.events.front().op, static_cast<std::uint8_t>(Op::Alloc));
    EXPECT_EQ(r->job.events.front().bytes, 1u << 16);
    ASSERT_EQ(r->job.carried.size(), 1u);
    EXPECT_EQ(r->job.carried[0].first, Stream::kWeights);
    EXPECT_FALSE(c.take_request().has_value());  // taken once
  }
}

// A plan that evicts the iteration's first activation (local place 1) after its forward use
// and brings it back before its backward use.
std::shared_ptr<plan::SegmentPlan> toy_plan(const plan::SegmentJob& job) {
  auto p = std::make_shared<plan::SegmentPlan>();
  for (const Event& e : job.events) p->sigs.push_back(e.sig);
  plan::SegmentDecision ev;
  ev.at = 6;  // before the second activation's alloc
  ev.act = plan::Act::Evict;
  ev.k = 1;
  plan::SegmentDecision in = ev;
  in.at = 8;
  in.act = plan::Act::Prefetch;
  in.access = 9;
  p->decisions = {ev, in};
  return p;
}

// Set-up, iterations until the controller has learned one, the toy plan offered for its
// request, and three iterations that follow it.
void learn_and_follow(Controller& c, Stream& s) {
  auto r = s.learn(1);
  ASSERT_TRUE(r);
  c.offer(r->serial, toy_plan(r->job));
  for (int i = 0; i < 3; ++i) s.iteration(1);
  ASSERT_TRUE(c.following());
}

TEST(Controller, AdoptsAnOfferedPlanOnlyAtTheNextBoundaryAndResolvesThisIterationsTensors) {
  Controller c;
  Stream s(c);
  auto r = s.learn(1);
  ASSERT_TRUE(r);
  s.to_boundary();
  // Offered in the middle of an iteration: followed from the next boundary, not before.
  s.iteration(1, 4 << 20, 5);
  c.offer(r->serial, toy_plan(r->job));
  s.out.clear();
  s.resume();
  EXPECT_TRUE(s.out.empty());
  EXPECT_FALSE(c.following());
  // The next iteration: adopted at its first event; the commands name its own first
  // activation (ids in allocation order: input, a, b; place 1 is a).
  const std::uint64_t in = s.next_;
  s.iteration(1);
  EXPECT_TRUE(c.following());
  EXPECT_EQ(s.adoptions, 1);
  ASSERT_EQ(s.out.size(), 2u);
  EXPECT_EQ(s.out[0].act, plan::Act::Evict);
  EXPECT_EQ(s.out[0].id, in + 1);
  EXPECT_EQ(s.out[0].at, 6u);
  EXPECT_EQ(s.out[1].act, plan::Act::Prefetch);
  EXPECT_EQ(s.out[1].id, in + 1);
  EXPECT_EQ(s.relearns, 0);
  EXPECT_FALSE(c.take_request().has_value());  // followed without lateness: no new request
}

// The executor stood by (fed nothing for a while) and feeds every event again: the controller
// forgets the learned iteration, counts as live what the executor says is (a tensor allocated
// while standing by among it) and learns again. An answer to the request made before the standby
// is not adopted as one; as after any relearn, it is kept for its iteration and followed again
// when that iteration comes back (without a new request).
TEST(Controller, ResumesAfterAStandbyFromTheLiveAllocationsAndLearnsAgain) {
  Controller c;
  Stream s(c);
  auto r = s.learn(1);
  ASSERT_TRUE(r);
  s.to_boundary();
  const std::uint64_t relearns = c.stats().relearns;
  s.next_ += 30;  // iterations went by unfed
  const std::pair<std::uint64_t, std::uint64_t> live[] = {{Stream::kWeights, 1 << 20}, {999, 4096}};
  c.resume(live);
  EXPECT_FALSE(c.locked());
  EXPECT_FALSE(c.following());
  EXPECT_FALSE(c.has_request());
  EXPECT_EQ(c.live_bytes(), (1u << 20) + 4096u);
  EXPECT_EQ(c.stats().relearns, relearns + 1);
  c.offer(r->serial, toy_plan(r->job));  // an answer to the request made before the standby
  s.free(999);  // allocated while standing by: known by its size all the same
  EXPECT_EQ(c.live_bytes(), 1u << 20);
  for (int i = 0; i < 8 && !c.locked(); ++i) s.iteration(1);
  EXPECT_FALSE(c.following());  // not adopted as an answer
  ASSERT_TRUE(c.locked());
  EXPECT_EQ(c.period(), kEventsPerIteration + 1);  // with the sync after the upload
  EXPECT_FALSE(c.has_request());  // the kept plan is this very iteration's
  s.to_boundary();
  s.iteration(1);
  EXPECT_TRUE(c.following());
  EXPECT_EQ(c.plan()->sigs.size(), kEventsPerIteration + 1);
}

// A change larger than the controller tolerates (here 1 place per iteration; the two
// activations change size).
TEST(Controller, AChangedIterationDropsThePlanAndTheSamePlanComesBackWithIt) {
  ControllerOptions o;
  o.min_tolerated = 1;
  Controller c(o);
  Stream s(c);
  auto r = s.learn(2);
  ASSERT_TRUE(r);
  c.offer(r->serial, toy_plan(r->job));
  for (int i = 0; i < 3; ++i) s.iteration(2);
  ASSERT_TRUE(c.following());
  s.out.clear();
  s.iteration(2, 8 << 20);  // larger activations: another iteration
  EXPECT_GE(s.relearns, 1);
  // What differed is told (the executor logs it): the first activation's allocation, 4 MiB in
  // the iteration before, 8 MiB now.
  ASSERT_TRUE(s.last_mismatch);
  EXPECT_EQ(s.last_mismatch->first.op, static_cast<std::uint8_t>(Op::Alloc));
  EXPECT_EQ(s.last_mismatch->first.bytes, 4u << 20);
  EXPECT_EQ(s.last_mismatch->second.bytes, 8u << 20);
  EXPECT_FALSE(c.following());
  EXPECT_TRUE(s.out.empty());  // nothing of the stale plan was issued
  // The old shape comes back: learned again, and the plan made for it is reused without a request.
  for (int i = 0; i < 4; ++i) s.iteration(2);
  EXPECT_TRUE(c.locked());
  EXPECT_TRUE(c.following());
  EXPECT_FALSE(c.take_request().has_value());
}

// A job whose activations have another size every iteration (a batch or sequence length that
// changes each step) repeats in forms only: it is learned by form, follows the plan made for
// it, and asks again only when an iteration is larger than the one its plan was made for.
TEST(Controller, LearnsByFormWhenEveryIterationHasOtherSizes) {
  Controller c;
  Stream s(c);
  s.setup();
  std::uint64_t mib = 4;
  for (int i = 0; i < 8 && !c.locked(); ++i) s.iteration(1, mib++ << 20);
  ASSERT_TRUE(c.locked());
  EXPECT_TRUE(c.by_form());
  EXPECT_EQ(c.stats().form_locks, 1u);
  EXPECT_EQ(c.period(), kEventsPerIteration + 1);
  auto r = c.take_request();
  ASSERT_TRUE(r.has_value());
  c.offer(r->serial, toy_plan(r->job));  // its signatures are that iteration's: accepted by form
  s.to_boundary();
  const std::uint64_t first = s.next_;
  s.out.clear();
  s.iteration(1, 3 << 20, 1);  // the boundary after the iteration the lock came in
  // That one was larger than the one requested (sizes grew): asked again.
  auto bigger = c.take_request();
  ASSERT_TRUE(bigger.has_value());
  c.offer(bigger->serial, toy_plan(bigger->job));
  s.resume();
  EXPECT_TRUE(c.following());
  ASSERT_EQ(s.out.size(), 2u);
  EXPECT_EQ(s.out[0].id, first + 1);
  // Smaller iterations than the one planned: followed, the commands naming each one's own
  // first activation; no relearn, no new request.
  for (std::uint64_t m : {2, 5}) {
    SCOPED_TRACE(m);
    const std::uint64_t in = s.next_;
    s.out.clear();
    s.iteration(1, m << 20);
    EXPECT_TRUE(c.following());
    ASSERT_EQ(s.out.size(), 2u);
    EXPECT_EQ(s.out[0].act, plan::Act::Evict);
    EXPECT_EQ(s.out[0].id, in + 1);
  }
  s.iteration(1, 6 << 20, 1);  // the first event of the next: the boundary after the 5 MiB one
  EXPECT_FALSE(c.take_request().has_value());
  EXPECT_EQ(s.relearns, 0);
  EXPECT_GT(c.stats().resized, 0u);
  // One larger than any so far: the boundary after it asks for a plan made for it.
  s.resume();
  s.iteration(1, 64 << 20);
  s.iteration(1, 2 << 20, 1);
  auto again = c.take_request();
  ASSERT_TRUE(again.has_value());
  std::uint64_t most = 0;
  for (const Event& e : again->job.events) most = std::max(most, e.bytes);
  EXPECT_EQ(most, 64u << 20);
  EXPECT_TRUE(c.by_form());
  EXPECT_EQ(s.relearns, 0);
}

// A job of fixed sizes whose iteration holds a loop of steps alike but for their sizes (a
// model's stages, an optimizer's per-parameter updates): the loop repeats in forms long before
// the iteration repeats at all, and it is not taken for the iteration.
TEST(Controller, ALoopOfStepsAlikeButForSizesIsNotTakenForTheIteration) {
  Controller c;
  Stream s(c);
  s.setup();
  constexpr int kSteps = 6, kStepEvents = 8;
  for (int i = 0; i < 6 && !c.locked(); ++i) {
    s.iteration(1);
    for (int k = 0; k < kSteps; ++k) {
      const std::uint64_t a = s.next_++, b = s.next_++;
      s.alloc(a, static_cast<std::uint64_t>(k + 1) << 16);
      s.alloc(b, static_cast<std::uint64_t>(k + 1) << 17);
      s.kernel(0xe0, {Stream::kWeights, a});
      s.kernel(0xe1, {a, b});
      s.kernel(0xe2, {b, Stream::kWeights});
      s.free(a);
      s.free(b);
      s.kernel(0xe3, {Stream::kWeights});
    }
  }
  ASSERT_TRUE(c.locked());
  EXPECT_FALSE(c.by_form());
  EXPECT_EQ(c.period(), kEventsPerIteration + 1 + kSteps * kStepEvents);
  EXPECT_EQ(c.stats().form_locks, 0u);
  EXPECT_EQ(s.relearns, 0);
}

// Sizes that change once (a new batch size, in more places than tolerated: here more than 1) are
// learned again by signature, as before forms: the form fallback waits for a third iteration
// since learning began.
TEST(Controller, SizesThatChangeOnceAreLearnedAgainBySignature) {
  ControllerOptions o;
  o.min_tolerated = 1;
  Controller c(o);
  Stream s(c);
  auto r = s.learn(1);
  ASSERT_TRUE(r);
  EXPECT_FALSE(c.by_form());
  for (int i = 0; i < 2; ++i) s.iteration(1);
  s.iteration(1, 8 << 20);
  EXPECT_EQ(s.relearns, 1);
  for (int i = 0; i < 4 && !c.locked(); ++i) s.iteration(1, 8 << 20);
  ASSERT_TRUE(c.locked());
  EXPECT_FALSE(c.by_form());
  EXPECT_EQ(c.stats().form_locks, 0u);
}

// A real job's iterations are not all alike: two here log (a scalar tensor made, read back with a
// sync, freed: four extra events after the upload; two different metrics, so no longer iteration
// repeats). They are followed on: the plan stays, its commands still name each iteration's own
// activation (the extra allocation is no place of the plan), and nothing is asked again.
TEST(Controller, ALoggingStepsExtraEventsAreFollowedOnWithThePlan) {
  Controller c;
  Stream s(c);
  ASSERT_NO_FATAL_FAILURE(learn_and_follow(c, s));
  EXPECT_FALSE(c.take_request().has_value());
  for (int i = 0; i < 6; ++i) {
    SCOPED_TRACE(i);
    const std::uint64_t in = s.next_;
    s.out.clear();
    if (i % 3 == 1) {
      s.iteration(1, 4 << 20, 3);  // upload, its copy and sync
      const std::uint64_t x = 9000 + static_cast<std::uint64_t>(i);
      s.alloc(x, 256);
      s.kernel(i == 1 ? 0xf5 : 0xf6, {x});
      s.sync();
      s.free(x);
      s.resume();
    } else {
      s.iteration(1);
    }
    EXPECT_TRUE(c.following());
    ASSERT_EQ(s.out.size(), 2u);
    EXPECT_EQ(s.out[0].act, plan::Act::Evict);
    EXPECT_EQ(s.out[0].id, in + 1);
    EXPECT_EQ(s.out[1].id, in + 1);
  }
  s.iteration(1, 4 << 20, 1);  // the boundary after the last
  EXPECT_EQ(s.relearns, 0);
  EXPECT_EQ(c.stats().tolerated, 8u);  // two logging steps, four extra events each
  EXPECT_EQ(c.stats().rebased, 0u);
  EXPECT_EQ(c.stats().longer_found, 0u);
  EXPECT_FALSE(c.take_request().has_value());
}

// Gradient accumulation: three micro-batches (each uploads its batch), then the optimizer step
// (two kernels on the weights). The micro-batch repeats first and is learned; the optimizer
// step is extra events to it, followed on until the whole iteration has repeated in the
// history, which is then learned instead (the optimizer step is part of every iteration: a
// plan must see it).
TEST(Controller, GradientAccumulationsMicroBatchGivesWayToTheWholeIteration) {
  Controller c;
  Stream s(c);
  s.setup();
  auto iteration = [&] {
    for (int m = 0; m < 3; ++m) s.iteration(1);
    s.kernel(0xe8, {Stream::kWeights});
    s.kernel(0xe9, {Stream::kWeights});
  };
  iteration();
  ASSERT_TRUE(c.locked());
  EXPECT_EQ(c.period(), kEventsPerIteration + 1);  // the micro-batch
  iteration();
  EXPECT_GT(c.stats().tolerated, 0u);  // the optimizer steps were followed on as extra events
  EXPECT_EQ(c.stats().longer_found, 0u);
  EXPECT_EQ(s.relearns, 0);
  for (int i = 0; i < 2; ++i) iteration();
  EXPECT_EQ(c.stats().longer_found, 1u);
  EXPECT_EQ(s.relearns, 1);  // that one
  ASSERT_TRUE(c.locked());
  EXPECT_EQ(c.period(), 3 * (kEventsPerIteration + 1) + 2);
  const std::uint64_t relearns = c.stats().relearns;
  for (int i = 0; i < 3; ++i) iteration();
  EXPECT_EQ(c.stats().relearns, relearns);  // kept once learned
  EXPECT_EQ(c.period(), 3 * (kEventsPerIteration + 1) + 2);
}

// Events that do not come (a sync skipped; the input's allocation skipped when its buffer is
// reused): the places between are skipped, and later places keep their numbers, so the plan's
// commands still name the activation it was made for.
TEST(Controller, SkippedEventsKeepTheOtherPlacesNumbered) {
  Controller c;
  Stream s(c);
  ASSERT_NO_FATAL_FAILURE(learn_and_follow(c, s));
  // Without the sync after the upload.
  std::uint64_t in = s.next_;
  s.out.clear();
  s.iteration(0);
  ASSERT_EQ(s.out.size(), 2u);
  EXPECT_EQ(s.out[0].id, in + 1);
  // Without the input's allocation (the last input's buffer uploaded into again) and its free.
  const std::uint64_t a = s.next_ + 1;
  s.out.clear();
  s.iteration(1, 4 << 20, 1 << 30, {0, 11});
  ASSERT_EQ(s.out.size(), 2u);
  EXPECT_EQ(s.out[0].id, a);
  EXPECT_EQ(s.out[1].id, a);
  in = s.next_;
  s.out.clear();
  s.iteration(1);
  ASSERT_EQ(s.out.size(), 2u);
  EXPECT_EQ(s.out[0].id, in + 1);
  EXPECT_EQ(s.relearns, 0);
  EXPECT_EQ(c.stats().tolerated, 3u);
  EXPECT_TRUE(c.following());
}

// Kernel signatures carry the sizes of what they touch (as the executor's do), so one iteration
// whose activations have another size differs at six places in a row: the allocations and the
// kernels touching them. Each takes its place by form (substituted), so the commands still name
// that iteration's activation, and the next iteration is matched as before. (Six places: more
// than the default tolerance of such a short iteration, 4.)
TEST(Controller, AResizedTensorIsSubstitutedWithTheKernelsThatTouchIt) {
  ControllerOptions o;
  o.min_tolerated = 8;
  Controller c(o);
  Stream s(c);
  s.sized_kernels = true;
  ASSERT_NO_FATAL_FAILURE(learn_and_follow(c, s));
  for (std::uint64_t mib : {8, 4}) {
    SCOPED_TRACE(mib);
    const std::uint64_t in = s.next_;
    s.out.clear();
    s.iteration(1, mib << 20);
    ASSERT_EQ(s.out.size(), 2u);
    EXPECT_EQ(s.out[0].id, in + 1);
    EXPECT_EQ(s.out[1].id, in + 1);
  }
  s.iteration(1, 4 << 20);
  EXPECT_EQ(s.relearns, 0);
  EXPECT_EQ(c.stats().tolerated, 6u);
  EXPECT_TRUE(c.following());
}

// Every iteration differs (an extra event of its own each time, so no longer iteration ever
// repeats): followed on throughout, and the O(history) search for a longer iteration backs off
// (a search at 64 boundaries would cost the event path 64 passes over the history).
TEST(Controller, AnIterationThatAlwaysDiffersSearchesForALongerOneRarely) {
  Controller c;
  Stream s(c);
  ASSERT_NO_FATAL_FAILURE(learn_and_follow(c, s));
  for (int i = 0; i < 64; ++i) {
    s.iteration(1, 4 << 20, 3);
    s.kernel(0x9000 + static_cast<std::uint64_t>(i), {Stream::kWeights});
    s.resume();
  }
  EXPECT_EQ(s.relearns, 0);
  EXPECT_TRUE(c.following());
  EXPECT_EQ(c.stats().longer_found, 0u);
  EXPECT_GE(c.stats().longer_searches, 1u);
  EXPECT_LE(c.stats().longer_searches, 7u);
}

// A decision whose place was skipped names nothing (not the next allocation); past the extra
// events an iteration tolerates, the plan is dropped and the iteration learned again.
TEST(Controller, ASkippedPlaceNamesNothingAndTooManyExtrasLearnAgain) {
  Controller c;
  Stream s(c);
  ASSERT_NO_FATAL_FAILURE(learn_and_follow(c, s));
  // Without the first activation's allocation (place 3; the plan's tensor, local 1).
  s.out.clear();
  s.iteration(1, 4 << 20, 1 << 30, {3});
  EXPECT_TRUE(s.out.empty());  // local 1 was skipped: neither b nor anything else is named
  EXPECT_EQ(s.relearns, 0);
  // 18 extra events (16 are tolerated; an event that differs is counted when the next one
  // comes): learning again, nothing of the plan issued after.
  s.iteration(1, 4 << 20, 3);
  s.out.clear();
  for (int k = 0; k < 18; ++k) s.kernel(0x700 + static_cast<std::uint64_t>(k), {Stream::kWeights});
  EXPECT_EQ(s.relearns, 1);
  EXPECT_FALSE(c.following());
  s.resume();
  EXPECT_TRUE(s.out.empty());
}

// A small change that lasts (one activation size, in two places): the first iteration with it is
// followed on; the second becomes the learned iteration and asks for its plan, which is adopted.
TEST(Controller, ASmallChangeThatLastsBecomesTheLearnedIteration) {
  Controller c;
  Stream s(c);
  ASSERT_NO_FATAL_FAILURE(learn_and_follow(c, s));
  s.iteration(1, 8 << 20);
  s.iteration(1, 8 << 20, 1);  // the boundary after the first changed one: no request
  EXPECT_FALSE(c.take_request().has_value());
  s.resume();
  s.iteration(1, 8 << 20, 1);  // after the second: a request, made from it
  EXPECT_EQ(c.stats().rebased, 1u);
  auto again = c.take_request();
  ASSERT_TRUE(again.has_value());
  std::uint64_t most = 0;
  for (const Event& e : again->job.events) most = std::max(most, e.bytes);
  EXPECT_EQ(most, 8u << 20);
  c.offer(again->serial, toy_plan(again->job));
  s.resume();
  const int adopted = s.adoptions;
  const std::uint64_t tolerated = c.stats().tolerated;
  const std::uint64_t in = s.next_;
  s.out.clear();
  s.iteration(1, 8 << 20);
  EXPECT_EQ(s.adoptions, adopted + 1);
  ASSERT_EQ(s.out.size(), 2u);
  EXPECT_EQ(s.out[0].id, in + 1);
  for (int i = 0; i < 3; ++i) s.iteration(1, 8 << 20);
  EXPECT_EQ(c.stats().tolerated, tolerated);  // the learned iteration now
  EXPECT_EQ(s.relearns, 0);
  EXPECT_TRUE(c.following());
}

// The iteration's last event stops coming: the first iteration without it is followed on (the
// next iteration's first event tells the place was skipped); the second repeats the first, so it
// becomes the learned iteration, and its request holds exactly its own events, from its first.
TEST(Controller, ALastEventThatStopsComingIsSkippedThenLearnedAway) {
  Controller c;
  Stream s(c);
  ASSERT_NO_FATAL_FAILURE(learn_and_follow(c, s));
  const std::uint32_t period = c.period();
  for (int i = 0; i < 2; ++i) {
    s.out.clear();
    const std::uint64_t in = s.next_;
    s.iteration(1, 4 << 20, static_cast<int>(period) - 1);  // all but the optimizer kernel
    ASSERT_EQ(s.out.size(), 2u);
    EXPECT_EQ(s.out[0].id, in + 1);
  }
  EXPECT_FALSE(c.take_request().has_value());
  s.iteration(1, 4 << 20, 2);  // its first two events tell the place before was skipped
  EXPECT_EQ(c.stats().rebased, 1u);
  EXPECT_EQ(c.period(), period - 1);
  auto again = c.take_request();
  ASSERT_TRUE(again.has_value());
  ASSERT_EQ(again->job.events.size(), period - 1);
  EXPECT_EQ(again->job.events.front().op, static_cast<std::uint8_t>(Op::Alloc));
  EXPECT_EQ(again->job.events.front().bytes, 1u << 16);
  EXPECT_EQ(again->job.events.back().op, static_cast<std::uint8_t>(Op::Free));
  c.offer(again->serial, toy_plan(again->job));
  s.resume(static_cast<int>(period) - 3);  // the rest but the optimizer kernel
  const int adopted = s.adoptions;
  s.out.clear();
  const std::uint64_t in = s.next_;
  s.iteration(1, 4 << 20, static_cast<int>(period) - 1);
  EXPECT_EQ(s.adoptions, adopted + 1);
  ASSERT_EQ(s.out.size(), 2u);
  EXPECT_EQ(s.out[0].id, in + 1);
  EXPECT_EQ(s.relearns, 0);
  EXPECT_EQ(c.stats().tolerated, 2u);
}

TEST(Controller, ALateSwapInMakesTheNextBoundaryRequestAPlanCarryingIt) {
  Controller c;
  Stream s(c);
  auto r = s.learn(0);
  ASSERT_TRUE(r);
  c.offer(r->serial, toy_plan(r->job));
  s.to_boundary();
  s.iteration(0);  // adopted here
  ASSERT_TRUE(c.following());
  // Up to the prefetch (issued before position 8), then the access at 9 finds it in flight.
  const std::uint64_t a = s.next_ + 1;
  s.iteration(0, 4 << 20, 9);
  ASSERT_TRUE(c.awaits(a));
  c.note_late(a, 0.002);
  EXPECT_FALSE(c.awaits(a));
  s.resume();
  EXPECT_FALSE(c.take_request().has_value());  // asked at the boundary, not before
  s.iteration(0, 4 << 20, 1);
  auto again = c.take_request();
  ASSERT_TRUE(again.has_value());
  ASSERT_EQ(again->job.late.size(), 1u);
  const plan::LateArrival& l = again->job.late[0];
  EXPECT_TRUE(l.local);
  EXPECT_FALSE(l.prev);
  EXPECT_EQ(l.k, 1u);
  EXPECT_EQ(l.access, 9u);
  EXPECT_DOUBLE_EQ(l.late_s, 0.002);
  EXPECT_TRUE(c.following());  // the old plan is followed until the new one is adopted
}

// The plan is invalidated (a new budget) and the next iteration's first event crosses the
// boundary, where the new request is made.
std::optional<PlanRequest> request_after_invalidation(Controller& c, Stream& s) {
  c.invalidate_plan();
  s.iteration(0, 4 << 20, 1);
  return c.take_request();
}

// A plan asked for because swap-ins were late replaces the followed one only when it replays
// faster; one asked for because the plan was invalidated (a new budget, recomputation switched
// off) replaces it whatever its replay time.
TEST(Controller, ALatePlanMustReplayFasterButAnInvalidatedPlanIsReplacedAnyway) {
  Controller c;
  Stream s(c);
  auto r = s.learn(0);
  ASSERT_TRUE(r);
  auto first = toy_plan(r->job);
  first->replay_s = 0.010;
  c.offer(r->serial, first);
  s.to_boundary();
  s.iteration(0);
  ASSERT_EQ(c.plan(), first);
  auto late_round = [&](double replay_s) {
    const std::uint64_t a = s.next_ + 1;
    s.iteration(0, 4 << 20, 9);
    c.note_late(a, 0.002);
    s.resume();
    s.iteration(0, 4 << 20, 1);  // the boundary asks
    auto q = c.take_request();
    EXPECT_TRUE(q.has_value());
    if (!q) return std::shared_ptr<plan::SegmentPlan>();
    auto p = toy_plan(q->job);
    p->replay_s = replay_s;
    c.offer(q->serial, p);
    s.resume();
    s.iteration(0, 4 << 20, 1);  // adopted at this boundary, if at all
    s.resume();
    return p;
  };
  late_round(0.012);  // slower: refused
  EXPECT_EQ(c.plan(), first);
  auto faster = late_round(0.009);
  EXPECT_EQ(c.plan(), faster);
  auto q = request_after_invalidation(c, s);
  ASSERT_TRUE(q.has_value());
  auto slower = toy_plan(q->job);
  slower->replay_s = 0.020;
  c.offer(q->serial, slower);
  s.resume();
  s.iteration(0);
  EXPECT_EQ(c.plan(), slower);
}

// An anytime planner answers a request twice: the refinement replaces the first answer at the
// next boundary, unless a newer request was made meanwhile (then it comes too late).
TEST(Controller, ARefinementReplacesTheFirstAnswerUnlessANewerRequestWasMade) {
  Controller c;
  Stream s(c);
  auto r = s.learn(0);
  ASSERT_TRUE(r);
  auto quick = toy_plan(r->job);
  c.offer(r->serial, quick);
  auto refined = toy_plan(r->job);
  refined->replay_s = 0.010;
  c.offer(r->serial, refined);
  s.to_boundary();
  s.iteration(0);
  EXPECT_EQ(c.plan(), refined);
  auto q = request_after_invalidation(c, s);
  ASSERT_TRUE(q.has_value());
  c.offer(q->serial, toy_plan(q->job));  // first answer
  s.resume();
  auto newer = request_after_invalidation(c, s);  // a new budget: asked again
  ASSERT_TRUE(newer.has_value());
  auto stale = toy_plan(q->job);
  c.offer(q->serial, stale);  // the first request's refinement, after the newer request
  s.resume();
  s.iteration(0);
  EXPECT_NE(c.plan(), stale);
}

// Without period re-checks while locked: a loop inside the iteration that leaves no bytes
// behind (a temporary per step, as a model's identical layers can) repeats long before the
// iteration does, so the controller locks on it first; the lock ends at the first event after
// the loop, and the whole iteration is learned and then kept, iteration after iteration.
TEST(Controller, ALockOnALoopInsideTheIterationGivesWayToTheIteration) {
  Controller c;
  Stream s(c);
  s.setup();
  constexpr int kSteps = 20;
  std::uint64_t next = 1000;
  auto iteration = [&] {
    const std::uint64_t in = next++;
    s.alloc(in, 1 << 16);
    for (int k = 0; k < kSteps; ++k) {
      const std::uint64_t t = next++;
      s.alloc(t, 1 << 12);
      s.kernel(0xe0, {t, in});
      s.free(t);
    }
    s.kernel(0xf0, {in, Stream::kWeights});
    s.free(in);
    s.sync();
  };
  iteration();
  EXPECT_GE(c.stats().locks, 1u);  // on the loop: the iteration has not repeated yet
  EXPECT_GE(c.stats().relearns, 1u);  // and that lock ended at the first event after the loop
  for (int i = 0; i < 4; ++i) iteration();
  const std::uint32_t iteration_events = 1 + 3 * kSteps + 3;
  ASSERT_TRUE(c.locked());
  EXPECT_EQ(c.period(), iteration_events);
  const int relearns = s.relearns;
  for (int i = 0; i < 4; ++i) iteration();
  EXPECT_EQ(s.relearns, relearns);  // kept once learned
  EXPECT_EQ(c.period(), iteration_events);
}

TEST(Controller, AnAnswerToAnOldRequestIsDropped) {
  Controller c;
  Stream s(c);
  auto r = s.learn(1);
  ASSERT_TRUE(r);
  c.offer(r->serial + 7, toy_plan(r->job));  // not the pending request
  for (int i = 0; i < 3; ++i) s.iteration(1);
  EXPECT_FALSE(c.following());
  c.offer(r->serial, nullptr);  // no plan could be made: not asked again while nothing changes
  for (int i = 0; i < 3; ++i) s.iteration(1);
  EXPECT_FALSE(c.take_request().has_value());
  c.invalidate_plan();  // a new budget
  s.iteration(1);
  EXPECT_TRUE(c.take_request().has_value());
}

TEST(Victims, LeastRestoreCostPerByteAndIdleEventFirst) {
  std::vector<VictimCandidate> v{{1, 100, 1, 1.0}, {2, 100, 10, 1.0}, {3, 1000, 1, 1.0}, {4, 100, 1, 0.01}, {5, 100, 10, 1.0}};
  order_victims(v);
  std::vector<std::uint64_t> order;
  for (const auto& x : v) order.push_back(x.handle);
  EXPECT_EQ(order, (std::vector<std::uint64_t>{4, 2, 3, 5, 1}));  // 2, 3 and 5 tie: smaller handle first
}

// One at a time, the same order as the sort, ties included, on many random candidates.
TEST(Victims, OneAtATimeGivesTheSortedOrder) {
  std::vector<VictimCandidate> v;
  std::uint64_t x = 0x9e3779b97f4a7c15ull;
  auto rnd = [&] { return x ^= x << 13, x ^= x >> 7, x ^= x << 17, x; };
  for (std::uint64_t h = 0; h < 2000; ++h)  // few distinct keys: many ties
    v.push_back({h * 7919 % 2003, 64u << (rnd() % 4), 1 + rnd() % 5, 0.5 * static_cast<double>(1 + rnd() % 3)});
  std::vector<VictimCandidate> sorted = v;
  order_victims(sorted);
  std::vector<std::uint64_t> want, got;
  for (const auto& c : sorted) want.push_back(c.handle);
  for (VictimOrder order(v); !order.done();) got.push_back(order.next().handle);
  EXPECT_EQ(got, want);
  // The executor's way: keys set while the candidates are made, the best kept as it goes.
  std::vector<VictimCandidate> keyed = v;
  std::size_t best = VictimOrder::kNoBest;
  for (std::size_t i = 0; i < keyed.size(); ++i) {
    keyed[i].key = victim_key(keyed[i]);
    if (best == VictimOrder::kNoBest || better_victim(keyed[i], keyed[best])) best = i;
  }
  got.clear();
  for (VictimOrder order(keyed, VictimOrder::KeysSet{}, best); !order.done();) got.push_back(order.next().handle);
  EXPECT_EQ(got, want);
  // Fewer candidates than the scans that precede the heap, and just more.
  for (std::size_t n = 0; n <= 6; ++n) {
    std::vector<VictimCandidate> few(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(n)), few_sorted = few;
    order_victims(few_sorted);
    std::vector<std::uint64_t> w, g;
    for (const auto& c : few_sorted) w.push_back(c.handle);
    for (VictimOrder order(few); !order.done();) g.push_back(order.next().handle);
    EXPECT_EQ(g, w) << n << " candidates";
  }
}

}  // namespace
}  // namespace capuchin::policy
