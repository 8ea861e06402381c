// core_test.cpp: unit tests of the interposer's hook-free parts: the parameter-layout cache
// (scan plans, concurrent inserts), and rings + drain + translation into a valid trace
// (addresses resolved in event order, ordering across threads, loss accounting when a ring
// is full, graph replay).
#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "capuchin/trace.hpp"
#include "drain.hpp"
#include "func_cache.hpp"
#include "ring.hpp"

namespace ci = capuchin::interpose;
using ci::Kind;
using ci::Record;

namespace {

std::string temp_path(const char* tag) {
  return std::string(::testing::TempDir()) + "capuchin_core_" + tag + "_" + std::to_string(getpid()) + ".jsonl";
}

TEST(FuncCache, ScanPlanCoversEveryAlignedWordOfWideParameters) {
  ci::FuncCache cache;
  ASSERT_TRUE(cache.init());
  // (int n at 0, ptr at 8, 4-byte float at 16, a 20-byte struct at 20: words 24 and 32)
  const ci::ParamSpec specs[] = {{0, 4}, {8, 8}, {16, 4}, {20, 20}};
  const ci::FuncLayout* l = cache.insert(0xabc, 0xabc, specs, 4, "my_kernel");
  ASSERT_NE(l, nullptr);
  EXPECT_STREQ(l->name, "my_kernel");
  EXPECT_EQ(l->buffer_bytes, 40u);
  ASSERT_EQ(l->nwords, 3u);
  ASSERT_EQ(l->nruns, 2u);
  const ci::ScanRun* r = cache.runs(*l);
  EXPECT_EQ(r[0].param, 1u);  // param 1, offset 0, one word
  EXPECT_EQ(r[0].offset, 0u);
  EXPECT_EQ(r[0].nwords, 1u);
  EXPECT_EQ(r[1].param, 3u);  // param 3: buffer offsets 24 and 32 = param offsets 4 and 12
  EXPECT_EQ(r[1].offset, 4u);
  EXPECT_EQ(r[1].nwords, 2u);
  EXPECT_EQ(cache.lookup(0xabc), l);
  EXPECT_EQ(cache.lookup(0xabd), nullptr);
  EXPECT_TRUE(cache.alias(0x5555, l));
  EXPECT_EQ(cache.lookup(0x5555), l);
  EXPECT_EQ(cache.at(cache.index_of(l)), l);
}

// A handle the driver gave no layout for is remembered, so its launches do not query the
// driver again; it is told apart from one not looked up yet.
TEST(FuncCache, ARefusedKeyIsRememberedApartFromAnUnknownOne) {
  ci::FuncCache cache;
  ASSERT_TRUE(cache.init());
  bool refused = false;
  EXPECT_EQ(cache.lookup(0x77, &refused), nullptr);
  EXPECT_FALSE(refused);
  cache.refuse(0x77);
  EXPECT_EQ(cache.lookup(0x77, &refused), nullptr);
  EXPECT_TRUE(refused);
  const ci::ParamSpec specs[] = {{0, 8}};
  (void)cache.insert(0x77, 0x77, specs, 1, "late");  // published first, the refusal stands
  refused = false;
  EXPECT_EQ(cache.lookup(0x77, &refused), nullptr);
  EXPECT_TRUE(refused);
}

TEST(FuncCache, ConcurrentInsertsOfTheSameKeyAgree) {
  ci::FuncCache cache;
  ASSERT_TRUE(cache.init());
  const ci::ParamSpec specs[] = {{0, 8}, {8, 8}};
  std::vector<std::thread> ts;
  for (int t = 0; t < 4; ++t)
    ts.emplace_back([&, t] {
      for (std::uint64_t k = 1; k <= 500; ++k) {
        if (cache.lookup(k) == nullptr) cache.insert(k, k, specs, 2, t % 2 ? "a" : "b");
      }
    });
  for (auto& t : ts) t.join();
  for (std::uint64_t k = 1; k <= 500; ++k) {
    const ci::FuncLayout* l = cache.lookup(k);
    ASSERT_NE(l, nullptr);
    EXPECT_EQ(l->nwords, 2u);
  }
}

// --- rings + drain ----------------------------------------------------------------------------

Record rec(Kind k) {
  Record r{};
  r.kind = k;
  return r;
}

ci::RingPool* g_pool = nullptr;  // the pool the test's events are numbered in

void put(ci::ThreadSlot* s, Record head, const std::vector<std::uint64_t>& ids = {}) {
  const unsigned conts = static_cast<unsigned>((ids.size() + ci::kIdsPerCont - 1) / ci::kIdsPerCont);
  if (!s->has_room(1 + conts)) {
    s->drop();
    return;
  }
  std::uint64_t pos = s->head.load(std::memory_order_relaxed);
  head.cont = static_cast<std::uint8_t>(conts);
  head.h.ts = g_pool->next_stamp();
  *s->reserve_at(pos) = head;
  for (unsigned c = 0; c < conts; ++c) {
    Record* r = s->reserve_at(pos + 1 + c);
    r->kind = Kind::Ids;
    unsigned n = 0;
    for (; n < ci::kIdsPerCont && c * ci::kIdsPerCont + n < ids.size(); ++n) r->ids[n] = ids[c * ci::kIdsPerCont + n];
    r->cont = static_cast<std::uint8_t>(n);
  }
  s->commit(1 + conts);
}

// A drain writing to a temporary trace file, with a kernel "k" (function 0x77, one 8-byte
// parameter) in the function cache. The test stops the drain; the file goes with the rig.
struct DrainRig {
  ci::RingPool pool;
  ci::FuncCache cache;
  const ci::FuncLayout* layout = nullptr;
  std::string path;
  ci::Drain drain;

  ::testing::AssertionResult start(const char* tag, std::uint32_t slots, std::uint32_t records,
                                   ci::Drain::TimingPoll poll = nullptr) {
    if (!pool.init(slots, records) || !cache.init()) return ::testing::AssertionFailure() << "rings or cache";
    g_pool = &pool;
    const ci::ParamSpec specs[] = {{0, 8}};
    layout = cache.insert(0x77, 0x77, specs, 1, "k");
    path = temp_path(tag);
    auto sink = ci::open_file_sink(path, capuchin::trace::Header{});
    if (!sink) return ::testing::AssertionFailure() << sink.error().message;
    if (!drain.start(pool, cache, std::move(*sink), 50, poll)) return ::testing::AssertionFailure() << "drain";
    return ::testing::AssertionSuccess();
  }
  ~DrainRig() { std::remove(path.c_str()); }
};

// Every event of the trace at `path`, through the reader (which checks every rule: alloc
// before use, no use after free), to `f`.
template <class F>
void read_trace(const std::string& path, F&& f) {
  auto reader = capuchin::trace::TraceReader::open(path);
  ASSERT_TRUE(reader) << reader.error().message();
  capuchin::trace::EventView ev;
  for (;;) {
    auto more = reader->next(ev);
    ASSERT_TRUE(more) << more.error().message();
    if (!*more) return;
    f(ev);
  }
}

TEST(Drain, OrdersEventsAcrossThreadsIntoAValidTrace) {
  DrainRig rig;
  ASSERT_TRUE(rig.start("order", 8, 1u << 16));  // room for every event: this test expects no loss
  ci::RingPool& pool = rig.pool;
  // Producer threads: each allocates, hands pointers to a consumer thread that launches on
  // them (12 words: two continuation records) and frees them.
  constexpr int kPairs = 3, kRounds = 300;
  std::atomic<std::uint64_t> next_id{0};
  std::vector<std::thread> threads;
  for (int p = 0; p < kPairs; ++p) {
    threads.emplace_back([&] {
      ci::ThreadSlot* a = pool.acquire();
      std::vector<std::uint64_t> handoff;
      std::atomic<int> allocated{0}, launched{0};
      std::thread consumer([&] {
        ci::ThreadSlot* b = pool.acquire();
        for (int r = 0; r < kRounds; ++r) {
          while (allocated.load(std::memory_order_acquire) <= r) std::this_thread::yield();
          Record l = rec(Kind::Launch);
          l.aux = rig.cache.index_of(rig.layout);
          l.h.b = handoff.size();
          put(b, l, handoff);
          launched.store(r + 1, std::memory_order_release);
        }
        pool.abandon(b);
      });
      for (int r = 0; r < kRounds; ++r) {
        std::vector<std::uint64_t> ids;
        for (int i = 0; i < 12; ++i) {
          Record al = rec(Kind::Alloc);
          al.h.a = next_id.fetch_add(1);
          al.h.b = 0x7f0000000000ull + al.h.a * 0x1000;
          al.h.c = 256;
          put(a, al);
          ids.push_back(al.h.b + 8 * static_cast<std::uint64_t>(i));  // a parameter word: an interior pointer
        }
        handoff = ids;
        allocated.store(r + 1, std::memory_order_release);
        while (launched.load(std::memory_order_acquire) <= r) std::this_thread::yield();
        for (std::uint64_t word : ids) {
          Record f = rec(Kind::Free);
          f.h.b = word & ~std::uint64_t{0xfff};
          put(a, f);
        }
      }
      consumer.join();
      pool.abandon(a);
    });
  }
  for (auto& t : threads) t.join();
  const ci::CaptureStats stats = rig.drain.stop();
  EXPECT_EQ(stats.ring_lost_events, 0u);
  EXPECT_EQ(stats.allocs, static_cast<std::uint64_t>(kPairs * kRounds * 12));
  EXPECT_EQ(stats.frees, stats.allocs);
  EXPECT_EQ(stats.kernels, static_cast<std::uint64_t>(kPairs * kRounds));
  EXPECT_EQ(stats.unknown_ids_dropped, 0u);
  std::uint64_t kernels = 0;
  read_trace(rig.path, [&](const capuchin::trace::EventView& ev) {
    if (ev.op != capuchin::trace::Op::Kernel) return;
    ++kernels;
    EXPECT_EQ(ev.touch.size(), 12u);
    EXPECT_EQ(ev.name, "k");
  });
  EXPECT_EQ(kernels, static_cast<std::uint64_t>(kPairs * kRounds));
}

// A timed launch whose end event is not ready holds back itself and what follows (the trace
// stays in order); once ready its duration is written as dur_ns. A failed pair is written
// without one.
std::atomic<int> g_polls{0};
ci::timing::Poll fake_poll(std::uint32_t pair, std::uint64_t* dur, bool give_up) {
  if (pair == 2) return ci::timing::Poll::Failed;
  if (g_polls.fetch_add(1) < 5 && !give_up) return ci::timing::Poll::NotReady;
  *dur = 1234;
  return ci::timing::Poll::Ready;
}

TEST(Drain, TimedLaunchWaitsForItsEventsAndCarriesTheDuration) {
  DrainRig rig;
  ASSERT_TRUE(rig.start("timing", 2, 1024, &fake_poll));
  ci::ThreadSlot* s = rig.pool.acquire();
  Record al = rec(Kind::Alloc);
  al.h.a = 1;
  al.h.b = 0x10000;
  al.h.c = 64;
  put(s, al);
  for (std::uint64_t timing : {1u, 0u, 2u}) {  // timed, untimed, timed but failed
    Record l = rec(Kind::Launch);
    l.aux = rig.cache.index_of(rig.layout);
    l.h.b = 1;
    l.h.f = timing;
    put(s, l, {0x10000});
  }
  Record f = rec(Kind::Free);
  f.h.b = 0x10000;
  put(s, f);
  while (g_polls.load() < 6) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  const ci::CaptureStats stats = rig.drain.stop();
  EXPECT_EQ(stats.kernels_timed, 1u);
  EXPECT_EQ(stats.timing_failed, 1u);
  std::vector<std::string> seen;
  read_trace(rig.path, [&](const capuchin::trace::EventView& ev) {
    if (ev.op == capuchin::trace::Op::Kernel)
      seen.push_back((ev.flags & capuchin::trace::kHasDur) != 0 ? "k" + std::to_string(ev.dur_ns) : "k");
    else if (ev.op == capuchin::trace::Op::Free)
      seen.push_back("free");
  });
  EXPECT_EQ(seen, (std::vector<std::string>{"k1234", "k", "k", "free"}));
}

TEST(Drain, FullRingDropsAndCountsWithoutBlocking) {
  ci::RingPool pool;
  ASSERT_TRUE(pool.init(2, 512));
  g_pool = &pool;
  ci::FuncCache cache;
  ASSERT_TRUE(cache.init());
  ci::ThreadSlot* s = pool.acquire();
  for (int i = 0; i < 600; ++i) {  // no drain running: the ring fills at 512 records
    Record al = rec(Kind::Alloc);
    al.h.a = static_cast<std::uint64_t>(i);
    al.h.b = 0x10000 * (al.h.a + 1);
    al.h.c = 8;
    put(s, al);
  }
  EXPECT_EQ(s->lost_events.load(), 88u);
  ci::Drain drain;
  ASSERT_TRUE(drain.start(pool, cache, ci::make_null_sink(), 50));
  const ci::CaptureStats stats = drain.stop();
  EXPECT_EQ(stats.allocs, 512u);
  EXPECT_EQ(stats.ring_lost_events, 88u);
}

TEST(Drain, GraphLaunchReplaysCapturedEventsAndCountsUnknownWords) {
  DrainRig rig;
  ASSERT_TRUE(rig.start("graph", 2, 1024));
  ci::ThreadSlot* s = rig.pool.acquire();
  Record al = rec(Kind::Alloc);
  al.h.a = 0;
  al.h.b = 0x10000;
  al.h.c = 64;
  put(s, al);
  Record begin = rec(Kind::CaptureBegin);
  begin.aux = 1;
  put(s, begin);
  Record l = rec(Kind::Launch);
  l.flags = ci::kCaptured;
  l.aux = ~0u;
  l.h.a = 0x1234;
  l.h.b = 2;
  l.h.e = 1;
  put(s, l, {0x10008, 0x990000});  // 0x990000 is in no allocation (say, its alloc record was lost)
  Record end = rec(Kind::CaptureEnd);
  end.aux = 1;
  end.h.a = 0xbeef;
  put(s, end);
  Record inst = rec(Kind::Instantiate);
  inst.h.a = 0xbeef;
  inst.h.b = 0xcafe;
  put(s, inst);
  for (int i = 0; i < 3; ++i) {
    Record g = rec(Kind::GraphLaunch);
    g.h.a = 0xcafe;
    put(s, g);
  }
  const ci::CaptureStats stats = rig.drain.stop();
  EXPECT_EQ(stats.graph_launches, 3u);
  EXPECT_EQ(stats.graph_events_replayed, 3u);
  EXPECT_EQ(stats.kernels, 3u);  // the captured launch itself is not a kernel run
  EXPECT_EQ(stats.unknown_words, 3u);  // resolved once, at capture; counted at each replay
  EXPECT_EQ(stats.unscanned_launches, 3u);
  int kernels = 0;
  read_trace(rig.path, [&](const capuchin::trace::EventView& ev) {
    if (ev.op != capuchin::trace::Op::Kernel) return;
    ++kernels;
    ASSERT_EQ(ev.touch.size(), 1u);
    EXPECT_EQ(ev.touch[0], 0u);
    EXPECT_EQ(ev.name, "kernel@0x1234");
  });
  EXPECT_EQ(kernels, 3);
}

// The drain resolves the raw addresses hooks record, in event order: interior pointers,
// host memory (neither an allocation nor unknown), an address reused after a free, a stale
// entry replaced by a new allocation over it (its free is written first), a VMM unmap, the
// direction of a copy given as "infer", and a free of an address it never saw (ignored).
TEST(Drain, ResolvesAddressesToTheAllocationsLiveAtEachEvent) {
  DrainRig rig;
  ASSERT_TRUE(rig.start("resolve", 2, 1024));
  ci::ThreadSlot* s = rig.pool.acquire();
  auto alloc = [&](std::uint64_t id, std::uint64_t base, std::uint64_t bytes) {
    Record r = rec(Kind::Alloc);
    r.h.a = id, r.h.b = base, r.h.c = bytes;
    put(s, r);
  };
  auto launch = [&](std::vector<std::uint64_t> words) {
    Record r = rec(Kind::Launch);
    r.aux = rig.cache.index_of(rig.layout);
    r.h.b = words.size();
    put(s, r, words);
  };
  auto free_at = [&](std::uint64_t base) {
    Record r = rec(Kind::Free);
    r.h.b = base;
    put(s, r);
  };
  Record host = rec(Kind::HostAlloc);
  host.h.b = 0x500000, host.h.c = 0x10000;
  put(s, host);
  alloc(1, 0x100000, 0x1000);
  alloc(2, 0x200000, 0x1000);
  launch({0x100800, 0x200000, 0x500010, 0x300000});  // interior, base, host, nowhere
  free_at(0x100000);
  free_at(0x180000);  // never allocated: ignored
  alloc(3, 0x100000, 0x2000);  // the same address, a new allocation
  launch({0x101800, 0x100000, 0x101810});  // one allocation named three times: touched once
  launch({0x100000});                      // and once again by the next launch
  alloc(4, 0x200800, 0x100);  // over id 2, whose free was missed: 2 is freed first
  Record copy = rec(Kind::Copy);
  copy.sub = static_cast<std::uint8_t>(ci::CopyHint::Infer);
  copy.h.a = 0x500000, copy.h.b = 0x100010, copy.h.c = 16;  // host -> device: h2d
  put(s, copy);
  Record unmap = rec(Kind::Unmap);
  unmap.h.b = 0x100000, unmap.h.c = 0x100000;  // frees 3 (starts inside), not 4 (above)
  put(s, unmap);
  launch({0x100010, 0x200810});
  const ci::CaptureStats stats = rig.drain.stop();
  EXPECT_EQ(stats.unknown_words, 2u);  // 0x300000, then 0x100010 after the unmap
  std::vector<std::string> seen;
  auto ids = [](std::span<const std::uint64_t> v) {
    std::string out;
    for (std::uint64_t id : v) out += (out.empty() ? "" : ",") + std::to_string(id);
    return out;
  };
  read_trace(rig.path, [&](const capuchin::trace::EventView& ev) {
    switch (ev.op) {
      case capuchin::trace::Op::Alloc: seen.push_back("alloc " + std::to_string(ev.id)); break;
      case capuchin::trace::Op::Free: seen.push_back("free " + std::to_string(ev.id)); break;
      case capuchin::trace::Op::Kernel: seen.push_back("k " + ids(ev.touch)); break;
      case capuchin::trace::Op::Copy:
        seen.push_back(std::string("copy ") + (ev.dir == capuchin::trace::CopyDir::H2D ? "h2d " : "other ") +
                       std::to_string(ev.dst));
        break;
      default: break;
    }
  });
  EXPECT_EQ(seen, (std::vector<std::string>{"alloc 1", "alloc 2", "k 1,2", "free 1", "alloc 3", "k 3", "k 3", "free 2",
                                            "alloc 4", "copy h2d 3", "free 3", "k 4"}));
}

}  // namespace
