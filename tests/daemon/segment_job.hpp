// segment_job.hpp: a plan request's segment as the executor sends it, for the daemon's tests
// (daemon_test.cpp) and the frame fuzzer's seeds (tests/fuzz/proto_seeds.cpp).
#pragma once

#include <vector>

#include "capuchin/plan.hpp"
#include "capuchin/trace.hpp"

namespace capuchin::test {

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
