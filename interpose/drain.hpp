// drain.hpp: the background thread that empties every ring, orders events across threads
// and turns raw records into trace events for a Sink.
//
// Ordering contract: each pass first reads the global sequence horizon (RingPool), then the
// rings; it emits, sorted by sequence number, only the events numbered below the horizon
// and keeps the rest for the next pass. An event that causally precedes an emitted one (an
// allocation whose pointer another thread then launched with) was committed before that
// event took its number, so it is always emitted first (see RingPool::next_stamp).
//
// Translation (Translator, drain thread only, may allocate): raw addresses become allocation
// ids through the drain's own map of live allocations (AddressMap), updated by the alloc,
// free, unmap and host-memory records in that same order, so a launch's words resolve to the
// allocations live when it was issued; stream handles become small stream numbers, kernel
// names come from the function cache,
// launches and copies made during stream capture are kept per capture and replayed on each
// graph launch, and ids the sink never saw allocated are dropped and counted so the trace
// stays valid even when records were lost.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <thread>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "address_map.hpp"
#include "func_cache.hpp"
#include "kernel_timing.hpp"
#include "record.hpp"
#include "ring.hpp"
#include "sink.hpp"

namespace capuchin::interpose {

struct CaptureStats {
  std::uint64_t events_written = 0;
  std::uint64_t allocs = 0, frees = 0, kernels = 0, copies = 0, syncs = 0;
  std::uint64_t graph_launches = 0, graph_events_replayed = 0;
  std::uint64_t ring_lost_events = 0;     // dropped because a ring was full
  std::uint64_t no_slot_events = 0;       // dropped because every ring slot was taken
  std::uint64_t unknown_ids_dropped = 0;  // touches/frees of ids whose alloc was lost
  std::uint64_t unknown_words = 0;        // launch words inside the device span, in no allocation
  std::uint64_t unknown_copy_sides = 0;   // device sides of copies/memsets in no allocation
  std::uint64_t unscanned_launches = 0;   // no parameter layout (driver refused, cache full)
  std::uint64_t truncated_launches = 0;   // more touched allocations than one event holds
  std::uint64_t kernels_timed = 0;        // kernels written with a measured dur_ns
  std::uint64_t timing_failed = 0;        // sampled launches whose events could not be read
  std::uint64_t sink_failed_events = 0;   // not delivered because the sink failed
  std::uint64_t drain_cpu_ns = 0;         // CPU time of the drain thread and of the last pass at exit
};

class Translator {
 public:
  Translator(const FuncCache& cache, Sink* sink) : cache_(cache), sink_(sink) {}
  // One event as the hook recorded it: its head record, the words of its continuation
  // records, the producing slot.
  void on(const Record& head, const std::uint64_t* words, std::size_t nwords, std::uint32_t slot);
  CaptureStats& stats() { return stats_; }
  bool sink_failed() const { return sink_failed_; }

 private:
  struct Captured {
    Record head;
    std::vector<std::uint64_t> ids;
    std::uint32_t slot;
  };
  // `on` after resolution: addresses are ids (Alloc/Free: a = id; Launch: the ids, b = their
  // count, c = unknown words; Copy: a/b = src/dst id or kNoId, sub = CopySub, f = unknown
  // sides; Memset: a = id or kNoId, f = unknown sides).
  // `known_live`: the ids were resolved through the address map just now, so every one is live
  // (its entries and live_ hold the same allocations); a replayed capture's ids are checked.
  void translate(const Record& head, const std::uint64_t* ids, std::size_t nids, std::uint32_t slot,
                 bool known_live = false);
  void free_stale(std::uint64_t id, std::uint32_t slot);
  std::uint64_t device_id(std::uint64_t addr) const;  // kNoId: host memory or unknown
  std::uint32_t stream_number(std::uint64_t handle, bool per_thread, std::uint32_t slot);
  void emit(trace::EventView& ev);
  bool live(std::uint64_t id) const { return live_.find(id) != nullptr; }

  const FuncCache& cache_;
  Sink* sink_;
  bool sink_failed_ = false;
  CaptureStats stats_;
  FlatMap<std::uint8_t> live_;  // ids allocated and not freed (the value is unused)
  AddressMap addresses_;
  std::vector<std::uint64_t> resolved_;
  std::uint64_t launch_stamp_ = 0;  // launches translated (AddressMap::Entry::seen)
  FlatMap<std::uint32_t> streams_;  // stream handle (per-thread default: see stream_number) -> number
  std::unordered_map<std::uint32_t, std::vector<Captured>> captures_;
  std::unordered_map<std::uint64_t, std::uint32_t> graph_capture_, exec_capture_;
  std::uint64_t iterations_ = 0;
  std::vector<std::uint64_t> scratch_;
  std::string name_;
};

class Drain {
 public:
  // Reads a launch's kernel-timing pair (timing::poll; null: launches carry no timing).
  using TimingPoll = timing::Poll (*)(std::uint32_t pair, std::uint64_t* dur_ns, bool give_up);
  // Starts the drain thread. `sink` may be null (events are then only counted).
  bool start(RingPool& pool, const FuncCache& cache, std::unique_ptr<Sink> sink, std::uint32_t interval_us,
             TimingPoll timing = nullptr);
  // Final pass, closes the sink, joins the thread; returns the totals. Idempotent.
  CaptureStats stop();
  bool running() const { return thread_.joinable(); }

 private:
  struct Pending {
    std::uint64_t ts;
    std::uint32_t slot;
    std::uint64_t seq;
    Record head;
    std::uint32_t ids_off, nids;
  };
  void run();
  // What a pass saw: the fullest ring's backlog at the pass's start, as a share of its
  // records, and whether a timed launch still running holds the events after it back.
  struct Seen {
    double fill = 0;
    bool held = false;
  };
  // One pass over the rings. The thread then passes again at once while a ring is an eighth
  // full or more and nothing is held; else it sleeps its interval, or less where the fullest
  // ring, filling at the rate it filled since the last pass, would reach a quarter before that.
  // (It used to pass again whenever a pass found anything: while a job launched, the drain
  // spun, hundreds of passes per iteration, each reading every slot and the ring heads the
  // job's threads write.)
  Seen pass(bool final);

  RingPool* pool_ = nullptr;
  std::unique_ptr<Sink> sink_;
  std::unique_ptr<Translator> translator_;
  std::thread thread_;
  std::atomic<bool> stop_{false};
  std::uint32_t interval_us_ = 2000;
  TimingPoll timing_ = nullptr;
  // A timed launch whose end event has not completed holds back the events after it (the
  // trace stays in order); after kTimingPatienceNs it is written without a duration.
  static constexpr std::uint64_t kTimingPatienceNs = 2'000'000'000;
  std::uint64_t waiting_ts_ = ~std::uint64_t{0}, waiting_since_ns_ = 0;
  std::vector<Pending> pending_, keep_;
  std::vector<std::uint64_t> ids_, keep_ids_;
  std::vector<std::size_t> run_ends_;  // pending_ run boundaries (see pass)
  std::uint64_t seq_ = 0;
  std::uint64_t lost_from_recycled_ = 0;
  std::uint64_t thread_cpu_ns_ = 0;  // the drain thread's CPU time, as it exits
  CaptureStats final_;
  bool stopped_ = false;
};

// A one-line summary of the totals (for the exit log).
std::string summarize(const CaptureStats& s);

}  // namespace capuchin::interpose
