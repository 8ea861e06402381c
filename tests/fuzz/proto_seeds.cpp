// Writes the daemon frame fuzzer's seed corpus, encoded by this build's own encoders, into a
// directory (ctest runs it before fuzz.proto.corpus). Seeds checked into the tree went stale at
// each protocol version: the frame reader refused every one of them at its header ("another
// protocol version") and the fuzzer's mutations never reached a payload decoder or a session.
// Generated here, they always carry kProtocolVersion.
//
// Seeds: a whole session (hello, names, 24 iterations of a small training loop, executor stats,
// decisions, a plan request, a set-budget, a plan, a welcome, an error, a bye); a plan request
// with a late arrival and a touch-list kernel; a plan reply; and one hello of the next version.
// Usage: fuzz_proto_seeds OUT_DIR. Exits 1 when a file cannot be written.
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "capuchin/plan.hpp"
#include "capuchin/protocol.hpp"
#include "wire_inputs.hpp"

namespace {

using namespace capuchin;
using Bytes = std::vector<std::uint8_t>;

// A training loop's events: weights set up once; per iteration activations allocated, kernels
// over weights and activations (one with a touch list), an upload copy, a sync, frees.
struct LoopEvents : test::WireEvents {
  void iteration() {
    const std::uint64_t x = next_id++, a = next_id++, b = next_id++;
    alloc(x, 1 << 20);
    upload(x, 1 << 20);
    alloc(a, 4 << 20);
    kernel(0, {x, 1}, {a});
    alloc(b, 8 << 20);
    kernel(1, {a, 2}, {b});
    touch(2, {b, 3});
    kernel(3, {b, a}, {1, 2});
    free_(b);
    free_(a);
    free_(x);
    sync();
  }
};

// The segment an executor would ask the daemon to plan (the daemon tests'), with one kernel's
// writes unknown (a touch list) and a late arrival, so that every part of a request is encoded.
plan::SegmentJob segment_job() {
  plan::SegmentJob j = test::segment_job();
  for (plan::SegmentEvent& e : j.events)
    if (e.op == static_cast<std::uint8_t>(trace::Op::Kernel) && e.name == 1) {
      e.touch = e.unreplayable = true;
      e.nreads += e.nwrites;
      e.nwrites = 0;
    }
  j.late.push_back(plan::LateArrival{true, true, 1, 0, 3, 0.0025});
  j.swap_out_bytes_per_s = 6.25e9;
  j.swap_in_bytes_per_s = 24.5e9;
  return j;
}

Bytes session_seed() {
  Bytes out;
  proto::HelloInfo h;
  h.pid = 4242;
  h.budget_of_peak = 0.6;
  h.cmdline = "python train.py --epochs 1";
  h.run_tag = "seed";
  proto::encode_hello(out, h);
  const std::string names[] = {"fwd1", "fwd2", "opaque", "bwd"};
  proto::encode_names(out, 0, names);
  LoopEvents g;
  g.setup();
  for (int batch = 0; batch < 3; ++batch) {  // several Events frames, as the drain sends them
    for (int i = 0; i < 8; ++i) g.iteration();
    proto::encode_events(out, g.ev, g.ids);
    g.ev.clear();
    g.ids.clear();
  }
  proto::ExecStats st;
  st.evicted_bytes = 1 << 20;
  st.stall_s = 0.001;
  st.budget_bytes = 12 << 20;
  st.iterations = 20;
  proto::encode_exec_stats(out, st);
  proto::encode_decisions(out, "{\"act\":\"evict\",\"tensor\":101}\n");
  (void)proto::encode_plan_request(out, segment_job());
  proto::encode_set_budget(out, 12 << 20);
  proto::PlanMessage p;
  p.plan_seq = 1;
  p.pattern_events = 12;
  p.iteration = 9;
  p.budget_bytes = 12 << 20;
  p.decisions.push_back(proto::WireDecision{2, static_cast<std::uint8_t>(plan::Act::Evict), 1, 0, 0, 1, 0, 1, 4 << 20});
  p.json = "{}";
  proto::encode_plan(out, p);
  proto::encode_welcome(out, proto::Welcome{7});
  proto::encode_error(out, 3, "seed error");
  proto::encode_bye(out);
  return out;
}

Bytes plan_reply_seed() {
  Bytes out;
  proto::encode_hello(out, proto::HelloInfo{});
  const plan::SegmentJob job = segment_job();
  (void)proto::encode_plan_request(out, job);
  proto::PlanReply rep;
  rep.segment = job.segment;
  if (auto planned = plan::plan_segment(job)) {
    rep.ok = true;
    rep.plan = std::move(*planned);
  } else {
    rep.why = planned.error();
  }
  proto::encode_plan_reply(out, rep);
  return out;
}

Bytes next_version_seed() {
  Bytes out;
  proto::HelloInfo h;
  h.client_version = proto::kProtocolVersion + 1;
  proto::encode_hello(out, h);
  if (out.size() >= sizeof(proto::FrameHeader)) {  // the header's version too
    proto::FrameHeader fh;
    std::memcpy(&fh, out.data(), sizeof fh);
    fh.version = proto::kProtocolVersion + 1;
    std::memcpy(out.data(), &fh, sizeof fh);
  }
  return out;
}

bool write(const std::filesystem::path& path, const Bytes& b) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f.write(reinterpret_cast<const char*>(b.data()), static_cast<std::streamsize>(b.size()));
  f.close();
  if (!f) std::fprintf(stderr, "fuzz_proto_seeds: cannot write %s\n", path.c_str());
  return static_cast<bool>(f);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s OUT_DIR\n", argv[0]);
    return 2;
  }
  const std::filesystem::path dir = argv[1];
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) {
    std::fprintf(stderr, "fuzz_proto_seeds: cannot create %s: %s\n", dir.c_str(), ec.message().c_str());
    return 1;
  }
  const bool ok = write(dir / "session.bin", session_seed()) && write(dir / "plan_reply.bin", plan_reply_seed()) &&
                  write(dir / "next_version.bin", next_version_seed());
  if (ok) std::printf("fuzz_proto_seeds: 3 seeds (protocol version %u) in %s\n", unsigned{proto::kProtocolVersion}, dir.c_str());
  return ok ? 0 : 1;
}
