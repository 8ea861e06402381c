// drain.cpp: the drain thread's passes and the raw-record -> trace-event translation
// (see drain.hpp).
#include "drain.hpp"

#include <time.h>

#include <algorithm>
#include <cinttypes>
#include <cstdio>

#include "config.hpp"

namespace capuchin::interpose {

using trace::EventView;
using trace::Op;

namespace {
// CPU time the calling thread has used (0 when the clock cannot be read).
std::uint64_t thread_cpu_ns() {
  timespec ts{};
  if (clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts) != 0) return 0;
  return static_cast<std::uint64_t>(ts.tv_sec) * 1'000'000'000ull + static_cast<std::uint64_t>(ts.tv_nsec);
}
}  // namespace

std::uint32_t Translator::stream_number(std::uint64_t handle, bool per_thread, std::uint32_t slot) {
  // CUDA's NULL stream is the legacy stream unless the call came through a _ptsz entry
  // point; 0x1 / 0x2 are cudaStreamLegacy / cudaStreamPerThread.
  if (handle == 0x2 || (handle == 0 && per_thread)) handle = 0x2ull << 56 | slot;
  else if (handle == 0 || handle == 0x1) return 0;
  return *streams_.try_emplace(handle, static_cast<std::uint32_t>(streams_.size() + 1)).first;
}

void Translator::emit(EventView& ev) {
  if (sink_failed_ || sink_ == nullptr) {
    ++stats_.sink_failed_events;
    return;
  }
  if (auto s = sink_->write(ev); !s) {
    log(LogLevel::Error, "trace sink (%s) failed: %s; capture continues, events are counted, not written",
        sink_->kind(), s.error().message.c_str());
    sink_failed_ = true;
    ++stats_.sink_failed_events;
    return;
  }
  ++stats_.events_written;
}

std::uint64_t Translator::device_id(std::uint64_t addr) const {
  const AddressMap::Entry* e = addr != 0 ? addresses_.find(addr) : nullptr;
  return e == nullptr || e->host ? kNoId : e->id;
}

void Translator::free_stale(std::uint64_t id, std::uint32_t slot) {
  Record f{};
  f.kind = Kind::Free;
  f.h.a = id;
  translate(f, nullptr, 0, slot);
}

void Translator::on(const Record& raw, const std::uint64_t* words, std::size_t nwords, std::uint32_t slot) {
  Record head = raw;
  auto stale = [&](std::uint64_t, const AddressMap::Entry& e) {
    if (!e.host) free_stale(e.id, slot);
  };
  switch (raw.kind) {
    case Kind::Alloc:
      addresses_.insert(raw.h.b, raw.h.c, raw.h.a, false, stale);
      break;
    case Kind::Free: {
      AddressMap::Entry e;
      if (!addresses_.erase(raw.h.b, false, &e)) return;  // not an allocation we saw (or host memory)
      head.h.a = e.id;
      break;
    }
    case Kind::HostAlloc:
      addresses_.insert(raw.h.b, raw.h.c, kNoId, true, stale);
      return;
    case Kind::HostFree:
      addresses_.erase(raw.h.b, true, nullptr);
      return;
    case Kind::Unmap:
      addresses_.erase_range(raw.h.b, raw.h.b + raw.h.c, stale);
      return;
    case Kind::Launch: {
      resolved_.clear();
      std::uint64_t unknown = 0;
      const std::uint64_t stamp = ++launch_stamp_;
      for (std::size_t i = 0; i < nwords; ++i) {
        const AddressMap::Entry* e = addresses_.find(words[i]);
        if (e == nullptr) ++unknown;
        else if (!e->host && e->seen != stamp) {
          e->seen = stamp;
          resolved_.push_back(e->id);
        }
      }
      head.h.b = resolved_.size();
      head.h.c = unknown;
      translate(head, resolved_.data(), resolved_.size(), slot, true);
      return;
    }
    case Kind::Copy: {
      const std::uint64_t dst = device_id(raw.h.b), src = device_id(raw.h.a);
      CopySub sub;
      switch (static_cast<CopyHint>(raw.sub)) {
        case CopyHint::H2D: sub = CopySub::H2D; break;
        case CopyHint::D2H: sub = CopySub::D2H; break;
        case CopyHint::D2D: sub = CopySub::D2D; break;
        default:
          if (dst != kNoId && src != kNoId) sub = CopySub::D2D;
          else if (dst != kNoId) sub = CopySub::H2D;
          else if (src != kNoId) sub = CopySub::D2H;
          else return;  // host to host, or two unknown addresses: nothing on the device we know
      }
      head.sub = static_cast<std::uint8_t>(sub);
      head.h.a = sub == CopySub::H2D ? kNoId : src;
      head.h.b = sub == CopySub::D2H ? kNoId : dst;
      head.h.f = ((sub == CopySub::H2D || sub == CopySub::D2D) && dst == kNoId ? 1 : 0) +
                 ((sub == CopySub::D2H || sub == CopySub::D2D) && src == kNoId ? 1 : 0);
      break;
    }
    case Kind::Memset: {
      head.h.a = device_id(raw.h.a);
      head.h.f = head.h.a == kNoId ? 1 : 0;
      break;
    }
    default:
      break;
  }
  translate(head, nullptr, 0, slot);
}

void Translator::translate(const Record& head, const std::uint64_t* ids, std::size_t nids, std::uint32_t slot,
                           bool known_live) {
  if ((head.flags & kCaptured) != 0 && (head.kind == Kind::Launch || head.kind == Kind::Copy ||
                                         head.kind == Kind::Memset)) {
    const std::uint32_t seq = head.kind == Kind::Launch ? static_cast<std::uint32_t>(head.h.e) : head.aux;
    captures_[seq].push_back(Captured{head, std::vector<std::uint64_t>(ids, ids + nids), slot});
    return;
  }
  EventView ev;
  const bool per_thread = (head.flags & kPerThread) != 0;
  auto set_stream = [&](std::uint64_t handle) {
    ev.stream = stream_number(handle, per_thread, slot);
    if (ev.stream != 0) ev.flags |= trace::kHasStream;
  };
  switch (head.kind) {
    case Kind::Alloc:
      if (!live_.try_emplace(head.h.a, 1).second) return;  // cannot happen: ids are unique
      ev.op = Op::Alloc;
      ev.id = head.h.a;
      ev.bytes = head.h.c;
      set_stream(head.h.d);
      ++stats_.allocs;
      emit(ev);
      return;
    case Kind::Free:
      if (!live_.erase(head.h.a)) {
        ++stats_.unknown_ids_dropped;
        return;
      }
      ev.op = Op::Free;
      ev.id = head.h.a;
      ++stats_.frees;
      emit(ev);
      return;
    case Kind::Launch: {
      std::span<const std::uint64_t> touch(ids, nids);
      if (!known_live) {
        scratch_.clear();
        for (std::size_t i = 0; i < nids; ++i) {
          if (live(ids[i])) scratch_.push_back(ids[i]);
          else ++stats_.unknown_ids_dropped;
        }
        touch = scratch_;
      }
      stats_.unknown_words += head.h.c;
      if ((head.flags & kTruncated) != 0) ++stats_.truncated_launches;
      const FuncLayout* layout = head.aux == ~0u ? nullptr : cache_.at(head.aux);
      if (layout != nullptr && layout->name != nullptr && layout->name[0] != '\0') {
        ev.name = layout->name;
      } else {
        if (layout == nullptr) ++stats_.unscanned_launches;
        char buf[40];
        std::snprintf(buf, sizeof buf, "kernel@0x%" PRIx64, head.h.a);
        name_ = buf;
        ev.name = name_;
      }
      ev.op = Op::Kernel;
      ev.flags |= trace::kHasTouch;
      ev.touch = touch;
      if (head.h.f != 0) ev.flags |= trace::kHasDur, ev.dur_ns = head.h.f;  // measured (Drain::pass)
      set_stream(head.h.d);
      ++stats_.kernels;
      emit(ev);
      return;
    }
    case Kind::Copy: {
      stats_.unknown_copy_sides += head.h.f;
      ev.op = Op::Copy;
      ev.bytes = head.h.c;
      const auto sub = static_cast<CopySub>(head.sub);
      ev.dir = sub == CopySub::H2D ? trace::CopyDir::H2D : sub == CopySub::D2H ? trace::CopyDir::D2H
                                                                              : trace::CopyDir::D2D;
      if (head.h.a != kNoId) {
        if (live(head.h.a)) { ev.src = head.h.a; ev.flags |= trace::kHasSrc; }
        else ++stats_.unknown_ids_dropped;
      }
      if (head.h.b != kNoId) {
        if (live(head.h.b)) { ev.dst = head.h.b; ev.flags |= trace::kHasDst; }
        else ++stats_.unknown_ids_dropped;
      }
      set_stream(head.h.d);
      ++stats_.copies;
      emit(ev);
      return;
    }
    case Kind::Memset: {
      // The format has no memset: it is a kernel that writes its destination.
      stats_.unknown_copy_sides += head.h.f;
      scratch_.clear();
      if (head.h.a != kNoId) {
        if (live(head.h.a)) scratch_.push_back(head.h.a);
        else ++stats_.unknown_ids_dropped;
      }
      ev.op = Op::Kernel;
      ev.name = "memset";
      ev.flags |= trace::kHasReadsWrites | trace::kHasBytes;
      ev.writes = scratch_;
      ev.bytes = head.h.c;
      set_stream(head.h.d);
      ++stats_.kernels;
      emit(ev);
      return;
    }
    case Kind::Sync:
      ev.op = Op::Sync;
      ++stats_.syncs;
      emit(ev);
      return;
    case Kind::Iteration:
      ev.op = Op::Iter;
      ev.n = ++iterations_;
      emit(ev);
      return;
    case Kind::CaptureBegin:
      captures_[head.aux].clear();
      return;
    case Kind::CaptureEnd:
      graph_capture_[head.h.a] = head.aux;
      return;
    case Kind::Instantiate: {
      auto it = graph_capture_.find(head.h.a);
      if (it != graph_capture_.end()) exec_capture_[head.h.b] = it->second;
      return;
    }
    case Kind::GraphLaunch: {
      ++stats_.graph_launches;
      auto it = exec_capture_.find(head.h.a);
      if (it == exec_capture_.end()) return;  // a graph built node by node: not captured by us
      auto cap = captures_.find(it->second);
      if (cap == captures_.end()) return;
      for (const Captured& c : cap->second) {
        Record r = c.head;
        r.flags = static_cast<std::uint8_t>((r.flags & ~kCaptured & ~kPerThread) | (head.flags & kPerThread));
        r.h.d = head.h.d;  // the graph runs on the stream it is launched into
        ++stats_.graph_events_replayed;
        translate(r, c.ids.data(), c.ids.size(), slot);
      }
      return;
    }
    case Kind::Ids:
    case Kind::HostAlloc:
    case Kind::HostFree:
    case Kind::Unmap:
      return;  // continuation records, and address-map changes (`on`)
  }
}

bool Drain::start(RingPool& pool, const FuncCache& cache, std::unique_ptr<Sink> sink, std::uint32_t interval_us,
                  TimingPoll timing) {
  pool_ = &pool;
  timing_ = timing;
  sink_ = std::move(sink);
  translator_ = std::make_unique<Translator>(cache, sink_.get());
  interval_us_ = interval_us;
  try {
    thread_ = std::thread([this] { run(); });
  } catch (...) {
    return false;
  }
  return true;
}

void Drain::run() {
  std::uint64_t last = now_ns();
  while (!stop_.load(std::memory_order_acquire)) {
    const std::uint64_t start = now_ns();
    const Seen seen = pass(false);
    if (sink_) (void)sink_->flush();  // the daemon sink sends, reads plans and reconnects here
    const double since_us = static_cast<double>(start - last) / 1e3;
    last = start;
    if (seen.fill >= 0.125 && !seen.held) continue;
    long us = interval_us_;
    if (seen.fill > 0) {  // until a quarter of the ring, at the rate it filled since the last pass
      const double pass_us = static_cast<double>(now_ns() - start) / 1e3;
      us = static_cast<long>(std::clamp(since_us * 0.25 / seen.fill - pass_us, 10.0, static_cast<double>(interval_us_)));
    }
    timespec ts{us / 1'000'000, us % 1'000'000 * 1000};
    nanosleep(&ts, nullptr);
  }
  thread_cpu_ns_ = thread_cpu_ns();  // read by stop() after the join
}

Drain::Seen Drain::pass(bool final) {
  const std::uint64_t horizon = final ? ~std::uint64_t{0} : pool_->stamp_horizon();
  Seen seen;
  // pending_ is a concatenation of runs already in stamp order (the events kept from the
  // last pass, then each ring's events: a thread takes its stamps in commit order), so the
  // pass merges runs instead of sorting.
  run_ends_.clear();
  run_ends_.push_back(pending_.size());
  for (std::uint32_t i = 0; i < pool_->size(); ++i) {
    ThreadSlot& s = pool_->slot(i);
    const SlotState st = s.state.load(std::memory_order_acquire);
    if (st == SlotState::Free) continue;
    const std::uint64_t h = s.head.load(std::memory_order_acquire);
    std::uint64_t t = s.tail.load(std::memory_order_relaxed);
    seen.fill = std::max(seen.fill, static_cast<double>(h - t) / static_cast<double>(s.mask + 1));
    while (t < h) {
      const Record& r = s.records[t & s.mask];
      const std::uint64_t n = r.cont;
      if (r.kind == Kind::Ids || t + 1 + n > h) {  // cannot happen: events commit whole
        t = h;
        break;
      }
      Pending p{r.h.ts, i, seq_++, r, static_cast<std::uint32_t>(ids_.size()), 0};
      std::uint64_t want = r.kind == Kind::Launch ? r.h.b : 0;
      for (std::uint64_t k = 1; k <= n; ++k) {
        const Record& c = s.records[(t + k) & s.mask];
        for (unsigned j = 0; j < c.cont && j < kIdsPerCont && want > 0; ++j, --want) ids_.push_back(c.ids[j]);
      }
      p.nids = static_cast<std::uint32_t>(ids_.size() - p.ids_off);
      pending_.push_back(p);
      t += 1 + n;
    }
    if (pending_.size() > run_ends_.back()) run_ends_.push_back(pending_.size());
    s.tail.store(t, std::memory_order_release);
    if (st == SlotState::Abandoned && t == h) {
      lost_from_recycled_ += s.lost_events.load(std::memory_order_relaxed);
      pool_->recycle(&s);
    }
  }
  if (pending_.empty()) return seen;
  const auto by_stamp = [](const Pending& a, const Pending& b) {
    if (a.ts != b.ts) return a.ts < b.ts;
    if (a.slot != b.slot) return a.slot < b.slot;
    return a.seq < b.seq;
  };
  for (std::size_t k = 1; k < run_ends_.size(); ++k)
    if (run_ends_[k - 1] > 0)
      std::inplace_merge(pending_.begin(), pending_.begin() + static_cast<std::ptrdiff_t>(run_ends_[k - 1]),
                         pending_.begin() + static_cast<std::ptrdiff_t>(run_ends_[k]), by_stamp);
  keep_.clear();
  keep_ids_.clear();
  bool held = false;  // a timed launch is still running: it and what follows wait
  for (Pending& p : pending_) {
    if (p.ts < horizon && !held && p.head.kind == Kind::Launch && p.head.h.f != 0) {
      std::uint64_t dur = 0;
      timing::Poll r = timing::Poll::Failed;
      if (timing_ != nullptr) {
        const std::uint64_t now = now_ns();
        if (waiting_ts_ != p.ts) waiting_ts_ = p.ts, waiting_since_ns_ = now;
        r = timing_(static_cast<std::uint32_t>(p.head.h.f), &dur, final || now - waiting_since_ns_ > kTimingPatienceNs);
      }
      if (r == timing::Poll::NotReady) {
        held = true;
      } else {
        p.head.h.f = r == timing::Poll::Ready ? dur : 0;  // from here on f is the duration
        if (r == timing::Poll::Ready) ++translator_->stats().kernels_timed;
        else ++translator_->stats().timing_failed;
        waiting_ts_ = ~std::uint64_t{0};
      }
    }
    if (p.ts < horizon && !held) {
      translator_->on(p.head, ids_.data() + p.ids_off, p.nids, p.slot);
    } else {
      Pending k = p;
      k.ids_off = static_cast<std::uint32_t>(keep_ids_.size());
      keep_ids_.insert(keep_ids_.end(), ids_.begin() + p.ids_off, ids_.begin() + p.ids_off + p.nids);
      keep_.push_back(k);
    }
  }
  pending_.swap(keep_);
  ids_.swap(keep_ids_);
  seen.held = held;  // then the thread sleeps before polling the GPU again
  return seen;
}

CaptureStats Drain::stop() {
  if (stopped_) return final_;
  stopped_ = true;
  stop_.store(true, std::memory_order_release);
  if (thread_.joinable()) thread_.join();
  if (pool_ == nullptr) return final_;
  const std::uint64_t before = thread_cpu_ns();
  pass(true);
  const std::uint64_t last_pass = thread_cpu_ns() - before;
  if (sink_) {
    if (auto s = sink_->close(); !s)
      log(LogLevel::Error, "closing the trace sink (%s) failed: %s", sink_->kind(), s.error().message.c_str());
  }
  final_ = translator_->stats();
  final_.drain_cpu_ns = thread_cpu_ns_ + last_pass;
  final_.ring_lost_events = lost_from_recycled_;
  for (std::uint32_t i = 0; i < pool_->size(); ++i)
    final_.ring_lost_events += pool_->slot(i).lost_events.load(std::memory_order_relaxed);
  final_.no_slot_events = pool_->no_slot_events.load(std::memory_order_relaxed);
  return final_;
}

std::string summarize(const CaptureStats& s) {
  char buf[768];
  std::snprintf(buf, sizeof buf,
                "events_written=%" PRIu64 " allocs=%" PRIu64 " frees=%" PRIu64 " kernels=%" PRIu64
                " copies=%" PRIu64 " syncs=%" PRIu64 " graph_launches=%" PRIu64 " graph_events_replayed=%" PRIu64
                " ring_lost_events=%" PRIu64 " no_slot_events=%" PRIu64 " unknown_ids_dropped=%" PRIu64
                " unknown_words=%" PRIu64 " unknown_copy_sides=%" PRIu64 " unscanned_launches=%" PRIu64
                " truncated_launches=%" PRIu64 " kernels_timed=%" PRIu64 " timing_failed=%" PRIu64
                " sink_failed_events=%" PRIu64 " drain_cpu_ms=%.1f",
                s.events_written, s.allocs, s.frees, s.kernels, s.copies, s.syncs, s.graph_launches,
                s.graph_events_replayed, s.ring_lost_events, s.no_slot_events, s.unknown_ids_dropped,
                s.unknown_words, s.unknown_copy_sides, s.unscanned_launches, s.truncated_launches,
                s.kernels_timed, s.timing_failed, s.sink_failed_events, static_cast<double>(s.drain_cpu_ns) / 1e6);
  return buf;
}

}  // namespace capuchin::interpose
