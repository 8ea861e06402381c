// Fuzz target: the daemon's binary input path. The input is a byte stream fed in pieces to
// a FrameReader; every frame is decoded as the daemon does (hello, names, events, exec
// stats, decisions, plans, plan requests) and valid ones drive a real Session (ingestion,
// learning, segment planning).
// Nothing may crash, read out of bounds or grow without bound.
// fuzz_target_report (the corpus driver calls it at the end) says how far the inputs got, and
// fails when no input made a session, fed it events or had a plan request planned: a corpus that
// never gets past the frame header (seeds of an older protocol version) tests nothing.
#include <cstdint>
#include <cstdio>
#include <memory>

#include "capuchin/protocol.hpp"
#include "session.hpp"

namespace {
// How far the inputs got (single-threaded: the corpus driver and libFuzzer call one at a time).
struct Reached {
  std::uint64_t sessions = 0, event_batches = 0, plans = 0;
} g_reached;
}  // namespace

extern "C" int fuzz_target_report() {
  std::printf("proto fuzz: %llu sessions, %llu event batches ingested, %llu plan requests planned\n",
              static_cast<unsigned long long>(g_reached.sessions), static_cast<unsigned long long>(g_reached.event_batches),
              static_cast<unsigned long long>(g_reached.plans));
  return g_reached.sessions > 0 && g_reached.event_batches > 0 && g_reached.plans > 0 ? 0 : 1;
}

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace capuchin;
  static const daemon::DaemonOptions opt = [] {
    daemon::DaemonOptions o;
    o.learn_min_events = 8;
    o.max_session_events = 2048;
    return o;
  }();
  proto::FrameReader fr;
  std::unique_ptr<daemon::Session> s;
  proto::EventBatch batch;
  std::size_t off = 0, step = 7;
  while (off < size) {
    const std::size_t n = std::min(step, size - off);
    fr.feed(std::span(data + off, n));
    off += n;
    step = step * 3 + 1;
    proto::FrameReader::Frame f;
    for (;;) {
      auto more = fr.next(f);
      if (!more || !*more) {
        if (!more) return 0;  // the daemon closes the connection here
        break;
      }
      switch (static_cast<proto::MsgType>(f.header.type)) {
        case proto::MsgType::Hello:
          if (auto h = proto::decode_hello(f.payload); h && !s) {
            s = std::make_unique<daemon::Session>(1, *h, opt);
            ++g_reached.sessions;
          }
          break;
        case proto::MsgType::Names:
          if (auto v = proto::decode_names(f.payload); v && s) (void)s->on_names(*v);
          break;
        case proto::MsgType::Events:
          if (proto::decode_events(f.payload, batch) && s) {
            if (!s->on_events(batch)) return 0;
            ++g_reached.event_batches;
          }
          break;
        case proto::MsgType::ExecStats:
          if (auto e = proto::decode_exec_stats(f.payload); e && s) s->on_exec_stats(*e);
          break;
        case proto::MsgType::Decisions:
          if (s) (void)s->on_decisions(std::string_view(reinterpret_cast<const char*>(f.payload.data()), f.payload.size()));
          break;
        case proto::MsgType::PlanRequest:
          // Planned as the daemon plans it (on a worker there), the reply encoded and decoded back.
          if (auto j = proto::decode_plan_request(f.payload); j && s && j->events.size() <= 256) {
            s->prepare_segment_job(*j);
            const proto::PlanReply rep = s->segment_planned(*j, plan::plan_segment(*j));
            ++g_reached.plans;
            std::vector<std::uint8_t> out;
            proto::encode_plan_reply(out, rep);
            if (out.size() >= sizeof(proto::FrameHeader))
              (void)proto::decode_plan_reply(std::span(out).subspan(sizeof(proto::FrameHeader)));
          }
          break;
        case proto::MsgType::PlanReply: (void)proto::decode_plan_reply(f.payload); break;
        case proto::MsgType::SetBudget: (void)proto::decode_set_budget(f.payload); break;
        case proto::MsgType::Plan: (void)proto::decode_plan(f.payload); break;
        case proto::MsgType::Welcome: (void)proto::decode_welcome(f.payload); break;
        case proto::MsgType::Error: (void)proto::decode_error(f.payload); break;
        case proto::MsgType::Bye: break;
      }
    }
  }
  if (s) {
    (void)s->detail();
    (void)s->tensors(10);
    (void)s->take_plan();
  }
  return 0;
}
