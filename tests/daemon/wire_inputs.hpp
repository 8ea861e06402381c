// wire_inputs.hpp: what a job sends the daemon, made by hand, for the daemon's tests
// (daemon_test.cpp) and the frame fuzzer's seeds (tests/fuzz/proto_seeds.cpp): wire events of a
// synthetic training loop (each user writes its own iteration) and a plan request's segment.
#pragma once

#include <cstdint>
#include <vector>

#include "capuchin/plan.hpp"
#include "capuchin/protocol.hpp"
#include "capuchin/trace.hpp"

namespace capuchin::test {

// Wire events and their ids, appended one call each; weights 1..3 by setup().
struct WireEvents {
  std::vector<proto::WireEvent> ev;
  std::vector<std::uint64_t> ids;
  std::uint64_t next_id = 100;
  void alloc(std::uint64_t id, std::uint64_t bytes) { ev.push_back({0, 0, 0, 0, 0, 0, id, bytes}); }
  void free_(std::uint64_t id) { ev.push_back({1, 0, 0, 0, 0, 0, id, 0}); }
  void kernel(std::uint32_t name, std::vector<std::uint64_t> r, std::vector<std::uint64_t> w) {
    ev.push_back({2, 0, trace::kHasReadsWrites, 0, name, 0, proto::pack_counts(r.size(), w.size(), 0), 0});
    ids.insert(ids.end(), r.begin(), r.end());
    ids.insert(ids.end(), w.begin(), w.end());
  }
  void touch(std::uint32_t name, std::vector<std::uint64_t> t) {  // writes unknown: a touch list
    ev.push_back({2, 0, 0, 0, name, 0, proto::pack_counts(0, 0, t.size()), 0});
    ids.insert(ids.end(), t.begin(), t.end());
  }
  void upload(std::uint64_t dst, std::uint64_t bytes) {
    ev.push_back({3, static_cast<std::uint8_t>(trace::CopyDir::H2D), trace::kHasDst, 0, 0, 0, proto::pack_counts(0, 1, 0),
                  bytes});
    ids.push_back(dst);
  }
  void sync() { ev.push_back({5, 0, 0, 0, 0, 0, 0, 0}); }
  void setup() {
    for (std::uint64_t w = 1; w <= 3; ++w) alloc(w, 1 << 20);
  }
};

// A segment as the executor sends it: 3 weights carried in, one iteration's activations.
inline plan::SegmentJob segment_job() {
  using trace::Op;
  plan::SegmentJob j;
  j.segment = 7;
  j.names = {"fwd", "bwd"};
  j.carried = {{1, 1 << 20}, {2, 1 << 20}};
  j.budget = 10 << 20;
  j.simcuda = true;
  auto ev = [&](Op op, std::uint64_t id, std::uint64_t bytes) {
    plan::SegmentEvent e;
    e.op = static_cast<std::uint8_t>(op);
    e.id = id;
    e.bytes = bytes;
    e.sig = j.events.size() * 31 + 1;
    j.events.push_back(e);
  };
  auto kernel = [&](std::uint32_t name, std::vector<std::uint64_t> r, std::vector<std::uint64_t> w) {
    plan::SegmentEvent e;
    e.op = static_cast<std::uint8_t>(Op::Kernel);
    e.name = name;
    e.ids_off = static_cast<std::uint32_t>(j.ids.size());
    e.nreads = static_cast<std::uint32_t>(r.size());
    e.nwrites = static_cast<std::uint32_t>(w.size());
    e.dur_ns = 50000;
    e.sig = j.events.size() * 31 + 1;
    j.ids.insert(j.ids.end(), r.begin(), r.end());
    j.ids.insert(j.ids.end(), w.begin(), w.end());
    j.events.push_back(e);
  };
  ev(Op::Alloc, 10, 4 << 20);
  kernel(0, {1}, {10});
  ev(Op::Alloc, 11, 4 << 20);
  kernel(0, {10, 2}, {11});
  kernel(1, {11, 10}, {1});
  ev(Op::Free, 11, 0);
  ev(Op::Free, 10, 0);
  ev(Op::Sync, 0, 0);
  return j;
}

}  // namespace capuchin::test
