// Building the in-memory Trace event by event, writing it back, and the liveness and
// statistics passes. See include/capuchin/trace_model.hpp. (Reading one: trace/load.cpp.)
#include <algorithm>
#include <unordered_map>

#include "capuchin/trace_model.hpp"

namespace capuchin::trace {

TraceAppender::TraceAppender(std::string name, Header header) {
  t_.name = std::move(name);
  t_.header = std::move(header);
}

void TraceAppender::touch(std::uint32_t ev, std::uint32_t tensor, AccessMode mode) {
  t_.accesses.push_back({ev, tensor, mode});
  Tensor& ts = t_.tensors[tensor];
  if (ts.first_access == kNone) ts.first_access = ev;
  ts.last_access = ev;
  if (last_access_event_[tensor] != ev) {
    last_access_event_[tensor] = ev;
    ++ts.access_count;
  }
}

std::uint32_t TraceAppender::append(const EventView& v) {
  const auto ei = static_cast<std::uint32_t>(t_.events.size());
  Event e;
  e.op = v.op;
  e.flags = v.flags;
  e.stream = v.stream;
  e.bytes = v.bytes;
  e.access_begin = e.reads_end = e.writes_end = e.access_end = static_cast<std::uint32_t>(t_.accesses.size());
  switch (v.op) {
    case Op::Alloc: {
      Tensor ts;
      ts.id = v.id;
      ts.bytes = v.bytes;
      ts.role = v.role;
      ts.alloc_event = ei;
      e.tensor = tensors();
      t_.tensors.push_back(ts);
      last_access_event_.push_back(kNone);
      break;
    }
    case Op::Free:
      e.tensor = v.index;
      t_.tensors[v.index].free_event = ei;
      break;
    case Op::Kernel: {
      auto [it, inserted] = name_index_.try_emplace(std::string(v.name), static_cast<std::uint32_t>(t_.names.size()));
      if (inserted) t_.names.emplace_back(v.name);
      e.name = it->second;
      e.flops = v.flops;
      e.dur_ns = v.dur_ns;
      for (auto i : v.read_index) touch(ei, i, AccessMode::Read);
      e.reads_end = static_cast<std::uint32_t>(t_.accesses.size());
      for (auto i : v.write_index) touch(ei, i, AccessMode::Write);
      e.writes_end = static_cast<std::uint32_t>(t_.accesses.size());
      for (auto i : v.touch_index) touch(ei, i, AccessMode::Touch);
      break;
    }
    case Op::Copy:
      e.dir = v.dir;
      if (v.flags & kHasSrc) {
        e.tensor = v.src_index;
        touch(ei, v.src_index, AccessMode::Read);
      }
      e.reads_end = static_cast<std::uint32_t>(t_.accesses.size());
      if (v.flags & kHasDst) {
        e.tensor2 = v.dst_index;
        touch(ei, v.dst_index, AccessMode::Write);
      }
      e.writes_end = static_cast<std::uint32_t>(t_.accesses.size());
      break;
    case Op::Iter:
      e.n = v.n;
      if (!t_.iterations.empty()) t_.iterations.back().end = ei;
      t_.iterations.push_back({v.n, ei, ei});
      break;
    case Op::Sync:
      break;
  }
  e.access_end = static_cast<std::uint32_t>(t_.accesses.size());
  t_.events.push_back(e);
  return ei;
}

Trace TraceAppender::finish() {
  const auto n = static_cast<std::uint32_t>(t_.events.size());
  if (!t_.iterations.empty()) t_.iterations.back().end = n;
  t_.setup_end = t_.iterations.empty() ? n : t_.iterations.front().begin;
  return std::move(t_);
}

EventView Trace::view(std::uint32_t event, ViewScratch& s) const {
  const Event& e = events[event];
  EventView v;
  v.op = e.op;
  v.flags = e.flags;
  v.stream = e.stream;
  v.bytes = e.bytes;
  switch (e.op) {
    case Op::Alloc:
      v.id = tensors[e.tensor].id;
      v.index = e.tensor;
      v.role = tensors[e.tensor].role;
      break;
    case Op::Free:
      v.id = tensors[e.tensor].id;
      v.index = e.tensor;
      break;
    case Op::Kernel: {
      v.name = names[e.name];
      v.flops = e.flops;
      v.dur_ns = e.dur_ns;
      auto fill = [&](std::vector<std::uint64_t>& ids, std::uint32_t b, std::uint32_t end) {
        ids.clear();
        for (std::uint32_t i = b; i < end; ++i) ids.push_back(tensors[accesses[i].tensor].id);
      };
      fill(s.reads, e.access_begin, e.reads_end);
      fill(s.writes, e.reads_end, e.writes_end);
      fill(s.touch, e.writes_end, e.access_end);
      v.reads = s.reads;
      v.writes = s.writes;
      v.touch = s.touch;
      break;
    }
    case Op::Copy:
      v.dir = e.dir;
      if (e.flags & kHasSrc) v.src = tensors[e.tensor].id, v.src_index = e.tensor;
      if (e.flags & kHasDst) v.dst = tensors[e.tensor2].id, v.dst_index = e.tensor2;
      break;
    case Op::Iter:
      v.n = e.n;
      break;
    case Op::Sync:
      break;
  }
  return v;
}

Status write_trace(const Trace& trace, const std::string& path) {
  auto w = TraceWriter::open(path, trace.header);
  if (!w) return Unexpected{w.error()};
  Trace::ViewScratch scratch;
  for (std::uint32_t i = 0; i < trace.events.size(); ++i)
    if (auto s = w->write(trace.view(i, scratch)); !s) return s;
  return w->close();
}

Liveness compute_liveness(const Trace& t) {
  Liveness l;
  l.live_after.resize(t.events.size());
  std::uint64_t live = 0;
  for (std::uint32_t i = 0; i < t.events.size(); ++i) {
    const Event& e = t.events[i];
    if (e.op == Op::Alloc) live += t.tensors[e.tensor].bytes;
    else if (e.op == Op::Free) live -= t.tensors[e.tensor].bytes;
    l.live_after[i] = live;
    if (l.peak_event == kNone || live > l.peak_bytes) {
      l.peak_bytes = live;
      l.peak_event = i;
    }
  }
  l.persistent_bytes = live;
  for (std::uint32_t i = 0; i < t.setup_end; ++i) l.setup_peak_bytes = std::max(l.setup_peak_bytes, l.live_after[i]);
  for (const Iteration& it : t.iterations) {
    std::uint64_t peak = 0;
    std::uint32_t at = it.begin;
    for (std::uint32_t i = it.begin; i < it.end; ++i)
      if (l.live_after[i] > peak) peak = l.live_after[i], at = i;
    l.iteration_peak_bytes.push_back(peak);
    l.iteration_peak_event.push_back(at);
  }
  return l;
}

TraceStats compute_stats(const Trace& t, const Liveness& l) {
  TraceStats s;
  s.events = t.events.size();
  s.distinct_kernel_names = t.names.size();
  s.iterations = t.iterations.size();
  s.iteration_flops.assign(t.iterations.size(), 0.0);
  s.iteration_kernels.assign(t.iterations.size(), 0);
  std::size_t iter = 0;
  for (std::uint32_t i = 0; i < t.events.size(); ++i) {
    while (iter < t.iterations.size() && i >= t.iterations[iter].end) ++iter;
    const bool in_iter = iter < t.iterations.size() && i >= t.iterations[iter].begin;
    const Event& e = t.events[i];
    switch (e.op) {
      case Op::Alloc: ++s.allocs; s.alloc_bytes_total += e.bytes; break;
      case Op::Free: ++s.frees; break;
      case Op::Kernel:
        ++s.kernels;
        if (in_iter) {
          s.iteration_flops[iter] += e.flops;
          ++s.iteration_kernels[iter];
        }
        break;
      case Op::Copy: ++s.copies; s.copy_bytes[static_cast<int>(e.dir)] += e.bytes; break;
      case Op::Sync: ++s.syncs; break;
      case Op::Iter: break;
    }
  }
  s.peak_bytes = l.peak_bytes;
  s.peak_event = l.peak_event;
  s.iteration_peak_bytes = l.iteration_peak_bytes;
  s.persistent_bytes = l.persistent_bytes;
  return s;
}

}  // namespace capuchin::trace
