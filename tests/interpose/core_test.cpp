// core_test.cpp: unit tests of the interposer's hook-free parts: the live-allocation map
// (lookups, eviction, concurrent readers vs writers), the parameter-layout cache (scan
// plans, concurrent inserts), and rings + drain + translation into a valid trace (ordering
// across threads, loss accounting when a ring is full, graph replay).
#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <string>
#include <thread>
#include <vector>

#include "capuchin/trace.hpp"
#include "drain.hpp"
#include "func_cache.hpp"
#include "live_map.hpp"
#include "ring.hpp"

namespace ci = capuchin::interpose;
using ci::Kind;
using ci::Record;

namespace {

std::string temp_path(const char* tag) {
  return std::string(::testing::TempDir()) + "capuchin_core_" + tag + "_" + std::to_string(getpid()) + ".jsonl";
}

TEST(LiveMap, FindsInteriorPointersAndExcludesEnds) {
  ci::RingPool pool;
  ASSERT_TRUE(pool.init(4, 512));
  ci::LiveMap map(pool);
  ci::LiveEntry ev[4];
  EXPECT_EQ(map.insert({0x1000, 0x2000, 7, ci::MemKind::Device}, ev, 4), 0u);
  EXPECT_EQ(map.insert({0x4000, 0x4100, 8, ci::MemKind::Device}, ev, 4), 0u);
  ci::ThreadSlot* slot = pool.acquire();
  {
    ci::LiveMap::Reader r(map, slot);
    ASSERT_NE(r.find(0x1000), nullptr);
    EXPECT_EQ(r.find(0x1000)->id, 7u);
    EXPECT_EQ(r.find(0x1fff)->id, 7u);
    EXPECT_EQ(r.find(0x2000), nullptr);
    EXPECT_EQ(r.find(0xfff), nullptr);
    EXPECT_EQ(r.find(0x40ff)->id, 8u);
    EXPECT_EQ(r.find(0x4100), nullptr);
    EXPECT_TRUE(r.in_span(0x3000));
    EXPECT_FALSE(r.in_span(0x4100));
  }
  ci::LiveEntry out;
  EXPECT_TRUE(map.remove(0x1000, &out));
  EXPECT_EQ(out.id, 7u);
  EXPECT_FALSE(map.remove(0x1000, &out));
  ci::LiveMap::Reader r(map, slot);
  EXPECT_EQ(r.find(0x1800), nullptr);
}

TEST(LiveMap, InsertOverStaleRangeEvictsAndRangeRemoval) {
  ci::RingPool pool;
  ASSERT_TRUE(pool.init(2, 512));
  ci::LiveMap map(pool);
  ci::LiveEntry ev[4];
  map.insert({0x1000, 0x3000, 1, ci::MemKind::Device}, ev, 4);
  ASSERT_EQ(map.insert({0x2000, 0x2800, 2, ci::MemKind::Device}, ev, 4), 1u);
  EXPECT_EQ(ev[0].id, 1u);
  map.insert({0x10000, 0x11000, 3, ci::MemKind::Vmm}, ev, 4);
  map.insert({0x11000, 0x12000, 4, ci::MemKind::Vmm}, ev, 4);
  ci::LiveEntry removed[4];
  ASSERT_EQ(map.remove_range(0x10000, 0x12000, removed, 4), 2u);
  EXPECT_EQ(map.size(), 1u);
}

// The tree against a brute-force oracle: random sizes and gaps, host entries far from the
// device ones, one outlier that stretches the span, interior and edge addresses; thousands
// of entries (three levels), then most removed again (levels collapse), then all.
TEST(LiveMap, AgreesWithBruteForceThroughSplitsAndRemovals) {
  ci::RingPool pool;
  ASSERT_TRUE(pool.init(2, 512));
  ci::LiveMap map(pool);
  ci::ThreadSlot* slot = pool.acquire();
  std::vector<ci::LiveEntry> all;
  std::uint64_t x = 0x9e3779b97f4a7c15ull;
  auto rnd = [&] { return x ^= x << 13, x ^= x >> 7, x ^= x << 17, x; };
  auto check_all = [&] {
    ci::LiveMap::Reader r(map, slot);
    ASSERT_EQ(r.snapshot().n, all.size());
    for (int q = 0; q < 3000; ++q) {
      const ci::LiveEntry pick = all.empty() ? ci::LiveEntry{0x7f0000001000ull, 0x7f0000002000ull, 0, {}}
                                             : all[rnd() % all.size()];
      std::uint64_t addrs[] = {pick.base, pick.end - 1, pick.end, pick.base - 1,
                               pick.base + rnd() % (pick.end - pick.base), rnd(), 0x7f0000000000ull + rnd() % (1ull << 32)};
      for (std::uint64_t a : addrs) {
        const ci::LiveEntry* want = nullptr;
        for (const ci::LiveEntry& e : all)
          if (a >= e.base && a < e.end) want = &e;
        const ci::LiveEntry* got = r.find(a);
        ASSERT_EQ(got == nullptr, want == nullptr) << std::hex << a;
        if (got != nullptr) ASSERT_EQ(got->id, want->id) << std::hex << a;
      }
    }
  };
  ci::LiveEntry ev[4];
  std::uint64_t base = 0x7f0000000000ull;
  for (int i = 0; i < 6000; ++i) {
    const std::uint64_t size = 256 + rnd() % (1u << (8 + rnd() % 14));
    const ci::MemKind kind = i % 50 == 7 ? ci::MemKind::Host : ci::MemKind::Device;
    const std::uint64_t b = kind == ci::MemKind::Host ? 0x560000000000ull + i * 0x100000ull : base;
    if (kind != ci::MemKind::Host) base += size + (rnd() % 4) * 4096;
    all.push_back({b, b + size, static_cast<std::uint64_t>(i), kind});
    ASSERT_EQ(map.insert(all.back(), ev, 4), 0u);
    if (i == 500) {  // an outlier far above the rest
      all.push_back({0x7fff00000000ull, 0x7fff00001000ull, 9999, ci::MemKind::Device});
      map.insert(all.back(), ev, 4);
    }
    if (i % 997 == 0) check_all();
  }
  check_all();
  // Remove in random order down to a few, checking on the way, then everything.
  while (all.size() > 3) {
    const std::size_t k = rnd() % all.size();
    ASSERT_TRUE(map.remove(all[k].base, nullptr));
    all.erase(all.begin() + static_cast<std::ptrdiff_t>(k));
    if (all.size() % 1009 == 0) check_all();
  }
  check_all();
  while (!all.empty()) {
    ASSERT_TRUE(map.remove(all.back().base, nullptr));
    all.pop_back();
  }
  check_all();
  EXPECT_EQ(map.size(), 0u);
}

// A thread that looked up once and then went idle keeps its snapshot (and every node under
// it) valid, yet pins no more than one tree: what a writer retires meanwhile is freed.
TEST(LiveMap, IdleReaderPinsOneTreeNotEverythingRetiredSince) {
  ci::RingPool pool;
  ASSERT_TRUE(pool.init(2, 512));
  ci::LiveMap map(pool);
  ci::LiveEntry ev[4];
  for (std::uint64_t i = 0; i < 2000; ++i) map.insert({0x100000 + i * 0x1000, 0x100800 + i * 0x1000, i, ci::MemKind::Device}, ev, 4);
  ci::ThreadSlot* idle = pool.acquire();
  ci::LiveMap::Reader old(map, idle);  // announced, then never used again until the end
  std::size_t most_retired = 0;
  for (std::uint64_t i = 0; i < 100000; ++i) {  // churn: every entry replaced many times over
    const std::uint64_t k = i % 2000;
    ASSERT_TRUE(map.remove(0x100000 + k * 0x1000, nullptr));
    map.insert({0x100000 + k * 0x1000, 0x100400 + k * 0x1000, 10000 + i, ci::MemKind::Device}, ev, 4);
    most_retired = std::max(most_retired, map.retired());
  }
  EXPECT_LT(most_retired, 20000u) << "retired nodes grew with the churn: the idle reader pins them all";
  // The idle reader's view is still the one it announced (ASan: nothing under it was freed).
  for (std::uint64_t k = 0; k < 2000; ++k) {
    const ci::LiveEntry* e = old.find(0x100000 + k * 0x1000 + 0x7ff);
    ASSERT_NE(e, nullptr);
    EXPECT_EQ(e->id, k);
  }
}

// Readers on several threads while a writer churns: every lookup of a stable allocation
// succeeds (never a torn or freed snapshot). Run under TSan/ASan for the real check.
TEST(LiveMap, ConcurrentReadersSeeConsistentSnapshots) {
  ci::RingPool pool;
  ASSERT_TRUE(pool.init(8, 512));
  ci::LiveMap map(pool);
  ci::LiveEntry ev[4];
  map.insert({0x100000, 0x200000, 1000, ci::MemKind::Device}, ev, 4);
  std::atomic<bool> stop{false};
  std::atomic<std::uint64_t> misses{0}, lookups{0};
  std::vector<std::thread> readers;
  for (int t = 0; t < 3; ++t) {
    readers.emplace_back([&] {
      ci::ThreadSlot* slot = pool.acquire();
      while (!stop.load(std::memory_order_relaxed)) {
        ci::LiveMap::Reader r(map, slot);
        const ci::LiveEntry* e = r.find(0x180000);
        if (e == nullptr || e->id != 1000) misses.fetch_add(1);
        lookups.fetch_add(1, std::memory_order_relaxed);
      }
    });
  }
  while (lookups.load() < 100) std::this_thread::yield();  // readers are running
  for (std::uint64_t i = 0; i < 3000; ++i) {
    const std::uint64_t base = 0x1000000 + i * 0x1000;
    map.insert({base, base + 0x800, i, ci::MemKind::Device}, ev, 4);
    if (i >= 8) map.remove(base - 8 * 0x1000, nullptr);
  }
  stop = true;
  for (auto& t : readers) t.join();
  EXPECT_EQ(misses.load(), 0u);
  EXPECT_GT(lookups.load(), 0u);
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

TEST(Drain, OrdersEventsAcrossThreadsIntoAValidTrace) {
  ci::RingPool pool;
  ASSERT_TRUE(pool.init(8, 1u << 16));  // room for every event: this test expects no loss
  g_pool = &pool;
  ci::FuncCache cache;
  ASSERT_TRUE(cache.init());
  const ci::ParamSpec specs[] = {{0, 8}};
  const ci::FuncLayout* layout = cache.insert(0x77, 0x77, specs, 1, "k");
  const std::string path = temp_path("order");
  capuchin::trace::Header h;
  auto sink = ci::open_file_sink(path, h);
  ASSERT_TRUE(sink);
  ci::Drain drain;
  ASSERT_TRUE(drain.start(pool, cache, std::move(*sink), 50));
  // Producer threads: each allocates ids, hands them to a consumer thread that launches on
  // them (12 ids: two continuation records) and frees them.
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
          l.aux = cache.index_of(layout);
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
          al.h.c = 256;
          put(a, al);
          ids.push_back(al.h.a);
        }
        handoff = ids;
        allocated.store(r + 1, std::memory_order_release);
        while (launched.load(std::memory_order_acquire) <= r) std::this_thread::yield();
        for (std::uint64_t id : ids) {
          Record f = rec(Kind::Free);
          f.h.a = id;
          put(a, f);
        }
      }
      consumer.join();
      pool.abandon(a);
    });
  }
  for (auto& t : threads) t.join();
  const ci::CaptureStats stats = drain.stop();
  EXPECT_EQ(stats.ring_lost_events, 0u);
  EXPECT_EQ(stats.allocs, static_cast<std::uint64_t>(kPairs * kRounds * 12));
  EXPECT_EQ(stats.frees, stats.allocs);
  EXPECT_EQ(stats.kernels, static_cast<std::uint64_t>(kPairs * kRounds));
  EXPECT_EQ(stats.unknown_ids_dropped, 0u);
  // The reader checks every rule: alloc before use, no use after free.
  auto reader = capuchin::trace::TraceReader::open(path);
  ASSERT_TRUE(reader) << reader.error().message();
  capuchin::trace::EventView ev;
  std::uint64_t kernels = 0;
  for (;;) {
    auto more = reader->next(ev);
    ASSERT_TRUE(more) << more.error().message();
    if (!*more) break;
    if (ev.op == capuchin::trace::Op::Kernel) {
      ++kernels;
      EXPECT_EQ(ev.touch.size(), 12u);
      EXPECT_EQ(ev.name, "k");
    }
  }
  EXPECT_EQ(kernels, static_cast<std::uint64_t>(kPairs * kRounds));
  std::remove(path.c_str());
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
  ci::RingPool pool;
  ASSERT_TRUE(pool.init(2, 1024));
  g_pool = &pool;
  ci::FuncCache cache;
  ASSERT_TRUE(cache.init());
  const ci::ParamSpec specs[] = {{0, 8}};
  const ci::FuncLayout* layout = cache.insert(0x77, 0x77, specs, 1, "k");
  const std::string path = temp_path("timing");
  auto sink = ci::open_file_sink(path, capuchin::trace::Header{});
  ASSERT_TRUE(sink);
  ci::Drain drain;
  ASSERT_TRUE(drain.start(pool, cache, std::move(*sink), 50, &fake_poll));
  ci::ThreadSlot* s = pool.acquire();
  Record al = rec(Kind::Alloc);
  al.h.a = 1;
  al.h.c = 64;
  put(s, al);
  for (std::uint64_t timing : {1u, 0u, 2u}) {  // timed, untimed, timed but failed
    Record l = rec(Kind::Launch);
    l.aux = cache.index_of(layout);
    l.h.b = 1;
    l.h.f = timing;
    put(s, l, {1});
  }
  Record f = rec(Kind::Free);
  f.h.a = 1;
  put(s, f);
  while (g_polls.load() < 6) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  const ci::CaptureStats stats = drain.stop();
  EXPECT_EQ(stats.kernels_timed, 1u);
  EXPECT_EQ(stats.timing_failed, 1u);
  auto reader = capuchin::trace::TraceReader::open(path);
  ASSERT_TRUE(reader) << reader.error().message();
  capuchin::trace::EventView ev;
  std::vector<std::string> seen;
  for (;;) {
    auto more = reader->next(ev);
    ASSERT_TRUE(more) << more.error().message();
    if (!*more) break;
    if (ev.op == capuchin::trace::Op::Kernel)
      seen.push_back((ev.flags & capuchin::trace::kHasDur) != 0 ? "k" + std::to_string(ev.dur_ns) : "k");
    else if (ev.op == capuchin::trace::Op::Free)
      seen.push_back("free");
  }
  EXPECT_EQ(seen, (std::vector<std::string>{"k1234", "k", "k", "free"}));
  std::remove(path.c_str());
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

TEST(Drain, GraphLaunchReplaysCapturedEventsAndDropsUnknownIds) {
  ci::RingPool pool;
  ASSERT_TRUE(pool.init(2, 1024));
  g_pool = &pool;
  ci::FuncCache cache;
  ASSERT_TRUE(cache.init());
  const std::string path = temp_path("graph");
  auto sink = ci::open_file_sink(path, {});
  ASSERT_TRUE(sink);
  ci::Drain drain;
  ASSERT_TRUE(drain.start(pool, cache, std::move(*sink), 50));
  ci::ThreadSlot* s = pool.acquire();
  Record al = rec(Kind::Alloc);
  al.h.a = 0;
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
  put(s, l, {0, 99});  // 99 was never allocated (its alloc record was lost)
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
  const ci::CaptureStats stats = drain.stop();
  EXPECT_EQ(stats.graph_launches, 3u);
  EXPECT_EQ(stats.graph_events_replayed, 3u);
  EXPECT_EQ(stats.kernels, 3u);  // the captured launch itself is not a kernel run
  EXPECT_EQ(stats.unknown_ids_dropped, 3u);
  EXPECT_EQ(stats.unscanned_launches, 3u);
  auto reader = capuchin::trace::TraceReader::open(path);
  ASSERT_TRUE(reader);
  capuchin::trace::EventView ev;
  int kernels = 0;
  while (true) {
    auto more = reader->next(ev);
    ASSERT_TRUE(more) << more.error().message();
    if (!*more) break;
    if (ev.op == capuchin::trace::Op::Kernel) {
      ++kernels;
      ASSERT_EQ(ev.touch.size(), 1u);
      EXPECT_EQ(ev.touch[0], 0u);
      EXPECT_EQ(ev.name, "kernel@0x1234");
    }
  }
  EXPECT_EQ(kernels, 3);
  std::remove(path.c_str());
}

}  // namespace
