// memviz_snapshot.cpp: Steps to a pickled PyTorch memory snapshot (see memviz.hpp): an
// address for every block, the device_traces entries, the final segments.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <unordered_map>

#include "capuchin/pickle.hpp"
#include "memviz.hpp"

namespace capuchin::cli::memviz {
namespace {

// Device d's addresses start at kBase + d * 2^40 (the viewer lists devices apart anyway;
// distinct ranges keep an address meaning one block across the whole file).
constexpr std::uint64_t kBase = 0x7f0000000000ull;

std::uint64_t round_up(std::uint64_t v, std::uint64_t to) { return (v + to - 1) / to * to; }

// One expandable segment: best-fit placement (the caching allocator's choice: the smallest
// free range that fits), growing at its end when nothing fits.
class Arena {
 public:
  explicit Arena(std::uint64_t base) : base_(base), end_(base) {}
  std::uint64_t base() const { return base_; }
  std::uint64_t end() const { return end_; }

  // The address for `size` bytes; `grown` gets the bytes mapped at the old end first (0: none).
  std::uint64_t take(std::uint64_t size, std::uint64_t& grown) {
    grown = 0;
    auto best = best_fit(size);
    if (best == free_.end()) {
      const auto last = free_.empty() ? free_.end() : std::prev(free_.end());
      const std::uint64_t tail = last != free_.end() && last->first + last->second == end_ ? last->second : 0;
      grown = round_up(size - tail, kMapGranule);
      give(end_, grown);
      end_ += grown;
      best = best_fit(size);
    }
    const std::uint64_t addr = best->first, left = best->second - size;
    free_.erase(best);
    if (left > 0) free_.emplace(addr + size, left);
    return addr;
  }

  void give(std::uint64_t addr, std::uint64_t size) {
    auto it = free_.emplace(addr, size).first;
    if (auto next = std::next(it); next != free_.end() && addr + size == next->first) {
      it->second += next->second;
      free_.erase(next);
    }
    if (it != free_.begin()) {
      if (auto prev = std::prev(it); prev->first + prev->second == addr) {
        prev->second += it->second;
        free_.erase(it);
      }
    }
  }

 private:
  std::map<std::uint64_t, std::uint64_t>::iterator best_fit(std::uint64_t size) {
    auto best = free_.end();
    for (auto it = free_.begin(); it != free_.end(); ++it)
      if (it->second >= size && (best == free_.end() || it->second < best->second)) best = it;
    return best;
  }

  std::uint64_t base_, end_;
  std::map<std::uint64_t, std::uint64_t> free_;  // address -> size, coalesced
};

struct Live {
  std::uint64_t addr, size, requested;
  const Step* alloc;
};

// A device's state after its last step.
struct DeviceEnd {
  std::uint64_t base, end;
  std::vector<Live> blocks;  // by address
};

void frames(PickleWriter& w, const std::vector<Frame>& fs) {
  w.begin_list();
  for (const auto& f : fs) {
    w.begin_dict();
    w.str("filename"), w.str(f.filename);
    w.str("line"), w.unsigned_integer(f.line);
    w.str("name"), w.str(f.name);
    w.end_dict();
  }
  w.end_list();
}

std::int64_t time_us(double t_s) { return std::llround(t_s * 1e6); }

// One device_traces entry, keys in memory_snapshot.cpp's order. An 'oom' has device_free
// where the others have addr.
void entry(PickleWriter& w, std::string_view action, std::uint64_t addr_or_free, const Step& s,
           const std::vector<Frame>& fs) {
  w.begin_dict();
  w.str("action"), w.str(action);
  w.str(action == "oom" ? "device_free" : "addr"), w.unsigned_integer(addr_or_free);
  w.str("size"), w.unsigned_integer(s.bytes);
  w.str("stream"), w.unsigned_integer(s.stream);
  w.str("frames"), frames(w, fs);
  w.str("time_us"), w.integer(time_us(s.t_s));
  w.end_dict();
}

void segment_map(PickleWriter& w, std::uint64_t addr, std::uint64_t size, double t_s) {
  Step s;
  s.bytes = size;
  s.t_s = t_s;
  entry(w, "segment_map", addr, s, {});
}

// Writes one device's trace; its end state goes to `end`.
Status device_trace(PickleWriter& w, const Device& d, std::size_t index, DeviceEnd& end) {
  Arena arena(kBase + (static_cast<std::uint64_t>(index) << 40));
  std::unordered_map<std::uint64_t, Live> live;
  w.begin_list();
  for (std::size_t i = 0; i < d.steps.size(); ++i) {
    const Step& s = d.steps[i];
    if (i > 0 && s.t_s < d.steps[i - 1].t_s)
      return make_error(fmt::format("device {} ({}): step {} goes back in time", index, d.label, i));
    if (s.kind == Step::Kind::Oom) {
      entry(w, "oom", s.device_free, s, s.frames);
      continue;
    }
    if (s.kind == Step::Kind::Alloc) {
      if (live.count(s.key)) return make_error(fmt::format("device {} ({}): step {} allocates block {} twice", index, d.label, i, s.key));
      const std::uint64_t size = round_up(std::max<std::uint64_t>(s.bytes, 1), kBlockRound);
      std::uint64_t grown = 0;
      const std::uint64_t old_end = arena.end();
      const std::uint64_t addr = arena.take(size, grown);
      if (grown) segment_map(w, old_end, grown, s.t_s);
      live.emplace(s.key, Live{addr, size, s.bytes, &s});
      entry(w, "alloc", addr, s, s.frames);
      continue;
    }
    auto it = live.find(s.key);
    if (it == live.end()) return make_error(fmt::format("device {} ({}): step {} frees block {}, not allocated", index, d.label, i, s.key));
    Step freed = s;
    freed.bytes = it->second.requested;  // PyTorch's frees carry the requested size
    entry(w, "free_requested", it->second.addr, freed, s.frames);
    entry(w, "free_completed", it->second.addr, freed, s.frames);
    arena.give(it->second.addr, it->second.size);
    live.erase(it);
  }
  w.end_list();
  end.base = arena.base();
  end.end = arena.end();
  for (const auto& [key, b] : live) end.blocks.push_back(b);
  std::sort(end.blocks.begin(), end.blocks.end(), [](const Live& a, const Live& b) { return a.addr < b.addr; });
  return {};
}

void block(PickleWriter& w, std::uint64_t addr, std::uint64_t size, const Live* b) {
  w.begin_dict();
  w.str("address"), w.unsigned_integer(addr);
  w.str("size"), w.unsigned_integer(size);
  w.str("requested_size"), w.unsigned_integer(b ? b->requested : 0);
  w.str("state"), w.str(b ? "active_allocated" : "inactive");
  w.str("frames"), frames(w, b ? b->alloc->frames : std::vector<Frame>{});
  w.end_dict();
}

// The device's one segment (none when it never allocated): its blocks tile it, the gaps
// between live blocks as inactive ones.
void segment(PickleWriter& w, std::size_t index, const DeviceEnd& e) {
  if (e.end == e.base) return;
  std::uint64_t allocated = 0, requested = 0;
  for (const auto& b : e.blocks) allocated += b.size, requested += b.requested;
  w.begin_dict();
  w.str("device"), w.unsigned_integer(index);
  w.str("address"), w.unsigned_integer(e.base);
  w.str("total_size"), w.unsigned_integer(e.end - e.base);
  w.str("allocated_size"), w.unsigned_integer(allocated);
  w.str("active_size"), w.unsigned_integer(allocated);
  w.str("requested_size"), w.unsigned_integer(requested);
  w.str("stream"), w.integer(0);
  w.str("segment_type"), w.str("large");
  w.str("is_expandable"), w.boolean(true);
  w.str("frames"), frames(w, {});
  w.str("blocks");
  w.begin_list();
  std::uint64_t at = e.base;
  for (const auto& b : e.blocks) {
    if (b.addr > at) block(w, at, b.addr - at, nullptr);
    block(w, b.addr, b.size, &b);
    at = b.addr + b.size;
  }
  if (at < e.end) block(w, at, e.end - at, nullptr);
  w.end_list();
  w.end_dict();
}

}  // namespace

Expected<std::string> snapshot_pickle(const std::vector<Device>& devices) {
  PickleWriter w;
  std::vector<DeviceEnd> ends(devices.size());
  w.begin_dict();
  w.str("device_traces");
  w.begin_list();
  for (std::size_t d = 0; d < devices.size(); ++d)
    if (auto st = device_trace(w, devices[d], d, ends[d]); !st) return Unexpected{st.error()};
  w.end_list();
  w.str("segments");
  w.begin_list();
  for (std::size_t d = 0; d < devices.size(); ++d) segment(w, d, ends[d]);
  w.end_list();
  w.str("capuchin");  // ignored by PyTorch's readers: what each device index shows
  w.begin_dict();
  w.str("generator"), w.str("capuchin export memory-viz");
  w.str("devices");
  w.begin_list();
  for (const auto& d : devices) w.str(d.label);
  w.end_list();
  w.end_dict();
  w.end_dict();
  return w.finish();
}

}  // namespace capuchin::cli::memviz
