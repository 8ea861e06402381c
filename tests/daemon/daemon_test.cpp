// Unit tests of the wire protocol (round trips, bounds checks) and of a daemon session
// (learning iterations from a synthetic event stream, planning under a budget, compaction
// keeping memory bounded) and the JSON query handler's errors.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include <nlohmann/json.hpp>

#include "capuchin/protocol.hpp"
#include "query.hpp"
#include "wire_inputs.hpp"
#include "session.hpp"

using namespace capuchin;
using capuchin::test::segment_job;

namespace {

// A synthetic training loop: per iteration, allocate activations, run kernels over the
// weights and activations, read back the loss (sync), free.
struct Gen : test::WireEvents {
  void iteration() {
    const std::uint64_t a = next_id++, b = next_id++, c = next_id++;
    alloc(a, 4 << 20);
    kernel(0, {1}, {a});
    alloc(b, 8 << 20);
    kernel(1, {a, 2}, {b});
    alloc(c, 4 << 20);
    kernel(2, {b, 3}, {c});
    kernel(3, {c, b}, {2});
    free_(c);
    kernel(4, {b, a}, {1});
    free_(b);
    free_(a);
    sync();
  }
};

proto::NamesView names() {
  static const std::string n[] = {"fwd1", "fwd2", "fwd3", "bwd3", "bwd1"};
  proto::NamesView v;
  for (const auto& s : n) v.names.push_back(s);
  return v;
}

}  // namespace

TEST(Protocol, ExecStatsRoundTripAndRejectNonFiniteTimes) {
  proto::ExecStats st;
  st.evicted_bytes = 7;
  st.stall_s = 0.25;
  st.budget_bytes = 11;
  st.peak_resident_bytes = 10;
  st.natural_peak_bytes = 22;
  st.plans_from_daemon = 2;
  std::vector<std::uint8_t> out;
  proto::encode_exec_stats(out, st);
  proto::FrameReader fr;
  fr.feed(std::span(out.data(), out.size()));
  proto::FrameReader::Frame f;
  ASSERT_TRUE(*fr.next(f));
  auto back = proto::decode_exec_stats(f.payload);
  ASSERT_TRUE(back.has_value());
  EXPECT_EQ(*back, st);
  for (double bad : {std::nan(""), -1.0, std::numeric_limits<double>::infinity()}) {
    st.stall_s = bad;
    out.clear();
    proto::encode_exec_stats(out, st);
    proto::FrameReader r2;
    r2.feed(std::span(out.data(), out.size()));
    ASSERT_TRUE(*r2.next(f));
    EXPECT_FALSE(proto::decode_exec_stats(f.payload).has_value()) << bad;
  }
}

TEST(Protocol, HelloAndEventsRoundTrip) {
  std::vector<std::uint8_t> out;
  proto::HelloInfo h;
  h.pid = 77;
  h.budget_of_peak = 0.5;
  h.cmdline = "train --x";
  h.run_tag = "123-456";
  proto::encode_hello(out, h);
  Gen g;
  g.setup();
  g.iteration();
  proto::encode_events(out, g.ev, g.ids);
  proto::FrameReader fr;
  fr.feed(std::span(out.data(), 5));  // split delivery
  proto::FrameReader::Frame f;
  auto r = fr.next(f);
  ASSERT_TRUE(r.has_value());
  EXPECT_FALSE(*r);
  fr.feed(std::span(out.data() + 5, out.size() - 5));
  ASSERT_TRUE(*fr.next(f));
  auto hh = proto::decode_hello(f.payload);
  ASSERT_TRUE(hh.has_value());
  EXPECT_EQ(hh->pid, 77u);
  EXPECT_EQ(hh->cmdline, "train --x");
  EXPECT_DOUBLE_EQ(hh->budget_of_peak, 0.5);
  EXPECT_EQ(hh->budget_of_device, 0.0);
  EXPECT_EQ(hh->run_tag, "123-456");
  ASSERT_TRUE(*fr.next(f));
  proto::EventBatch b;
  ASSERT_TRUE(proto::decode_events(f.payload, b).has_value());
  EXPECT_EQ(b.events.size(), g.ev.size());
  EXPECT_EQ(b.ids, g.ids);
  EXPECT_FALSE(*fr.next(f));
}

TEST(Protocol, RejectsBadHeadersAndPayloads) {
  std::vector<std::uint8_t> out;
  proto::encode_bye(out);
  auto h = proto::decode_header(out);
  ASSERT_TRUE(h.has_value());
  std::vector<std::uint8_t> bad = out;
  bad[0] = 'X';
  EXPECT_EQ(proto::decode_header(bad).error().code, proto::ProtoErrc::BadMagic);
  bad = out;
  bad[4] = static_cast<std::uint8_t>(proto::kProtocolVersion + 1);
  EXPECT_EQ(proto::decode_header(bad).error().code, proto::ProtoErrc::BadVersion);
  bad = out;
  const std::uint32_t huge = proto::kMaxFrameBytes + 1;
  std::memcpy(bad.data() + 8, &huge, 4);
  EXPECT_EQ(proto::decode_header(bad).error().code, proto::ProtoErrc::TooLarge);
  bad = out;
  bad[6] = 99;
  EXPECT_EQ(proto::decode_header(bad).error().code, proto::ProtoErrc::UnknownType);
  EXPECT_EQ(proto::decode_header(std::span(out.data(), 3)).error().code, proto::ProtoErrc::Truncated);
  // An event batch whose counts disagree with its bytes, and one with a bad op.
  proto::EventBatch b;
  std::vector<std::uint8_t> p(8, 0);
  p[0] = 1;
  EXPECT_FALSE(proto::decode_events(p, b).has_value());
  Gen g;
  g.sync();
  g.ev[0].op = 42;
  std::vector<std::uint8_t> frame;
  proto::encode_events(frame, g.ev, g.ids);
  EXPECT_EQ(proto::decode_events(std::span(frame).subspan(16), b).error().code, proto::ProtoErrc::BadPayload);
  // An allocation of 2^56 bytes (once a free's signature to the learner): refused.
  g.ev[0].op = static_cast<std::uint8_t>(trace::Op::Alloc);
  g.ev[0].bytes = std::uint64_t{1} << 56;
  frame.clear();
  proto::encode_events(frame, g.ev, g.ids);
  auto absurd = proto::decode_events(std::span(frame).subspan(16), b);
  ASSERT_FALSE(absurd.has_value());
  EXPECT_NE(absurd.error().message.find("over the limit"), std::string::npos) << absurd.error().message;
}

TEST(Protocol, BatchEncoderSendsNamesBeforeEvents) {
  proto::BatchEncoder enc;
  trace::EventView k;
  k.op = trace::Op::Kernel;
  k.name = "gemm";
  std::uint64_t ids[] = {5, 6};
  k.touch = ids;
  ASSERT_TRUE(enc.add(k));
  ASSERT_TRUE(enc.add(k));
  std::vector<std::uint8_t> out;
  enc.finish(out);
  proto::FrameReader fr;
  fr.feed(out);
  proto::FrameReader::Frame f;
  ASSERT_TRUE(*fr.next(f));
  EXPECT_EQ(f.header.type, static_cast<std::uint16_t>(proto::MsgType::Names));
  auto n = proto::decode_names(f.payload);
  ASSERT_TRUE(n.has_value());
  ASSERT_EQ(n->names.size(), 1u);
  EXPECT_EQ(n->names[0], "gemm");
  ASSERT_TRUE(*fr.next(f));
  proto::EventBatch b;
  ASSERT_TRUE(proto::decode_events(f.payload, b).has_value());
  EXPECT_EQ(b.events.size(), 2u);
  EXPECT_EQ(b.ids.size(), 4u);
}

TEST(Protocol, PlanRequestAndReplyRoundTripAndRejectBadInput) {
  plan::SegmentJob job = segment_job();
  plan::SegmentEvent& bwd = job.events[4];  // its writes unknown for good: a touch list
  ASSERT_EQ(bwd.op, static_cast<std::uint8_t>(trace::Op::Kernel));
  bwd.touch = bwd.unreplayable = true;
  bwd.nreads += bwd.nwrites;
  bwd.nwrites = 0;
  job.late.push_back(plan::LateArrival{true, true, 1, 0, 3, 0.0025});
  job.late.push_back(plan::LateArrival{false, false, 0, 2, 4, 0.001});
  job.swap_out_bytes_per_s = 6.25e9;  // the link the job measured (managed memory to the host is slow)
  job.swap_in_bytes_per_s = 24.5e9;
  std::vector<std::uint8_t> out;
  ASSERT_TRUE(proto::encode_plan_request(out, job));
  const auto payload = std::span<const std::uint8_t>(out).subspan(sizeof(proto::FrameHeader));
  auto back = proto::decode_plan_request(payload);
  ASSERT_TRUE(back.has_value()) << back.error().message;
  EXPECT_EQ(back->segment, 7u);
  EXPECT_EQ(back->events.size(), job.events.size());
  EXPECT_EQ(back->ids, job.ids);
  EXPECT_EQ(back->names, job.names);
  EXPECT_EQ(back->carried, job.carried);
  ASSERT_EQ(back->late.size(), 2u);
  EXPECT_TRUE(back->late[0].local && back->late[0].prev);
  EXPECT_EQ(back->late[0].k, 1u);
  EXPECT_EQ(back->late[0].access, 3u);
  EXPECT_DOUBLE_EQ(back->late[0].late_s, 0.0025);
  EXPECT_FALSE(back->late[1].local);
  EXPECT_EQ(back->late[1].id, 2u);
  EXPECT_TRUE(back->simcuda);
  EXPECT_DOUBLE_EQ(back->swap_out_bytes_per_s, 6.25e9);
  EXPECT_DOUBLE_EQ(back->swap_in_bytes_per_s, 24.5e9);
  EXPECT_EQ(back->events[1].nwrites, 1u);
  EXPECT_EQ(back->events[1].dur_ns, 50000u);
  for (std::size_t i = 0; i < job.events.size(); ++i) {
    EXPECT_EQ(back->events[i].touch, job.events[i].touch) << i;
    EXPECT_EQ(back->events[i].unreplayable, job.events[i].unreplayable) << i;
  }
  // The daemon plans it exactly as the job would have.
  auto here = plan::plan_segment(job);
  auto there = plan::plan_segment(*back);
  ASSERT_TRUE(here.has_value()) << here.error();
  ASSERT_TRUE(there.has_value());
  EXPECT_EQ(here->decisions.size(), there->decisions.size());
  EXPECT_EQ(here->sigs, there->sigs);
  proto::PlanReply rep;
  rep.segment = 7;
  rep.ok = true;
  rep.plan = *there;
  out.clear();
  proto::encode_plan_reply(out, rep);
  auto rback = proto::decode_plan_reply(std::span<const std::uint8_t>(out).subspan(sizeof(proto::FrameHeader)));
  ASSERT_TRUE(rback.has_value()) << rback.error().message;
  EXPECT_TRUE(rback->ok);
  EXPECT_EQ(rback->plan.sigs, there->sigs);
  EXPECT_EQ(rback->plan.decisions.size(), there->decisions.size());
  EXPECT_EQ(rback->plan.budget, 10u << 20);
  // Every reason a planner gives travels (a decoder that stopped at cross-iteration made the job
  // drop, after its timeout, any plan with a replay-victim swap); a code past the last is refused.
  ASSERT_FALSE(rep.plan.sigs.empty());
  rep.plan.decisions.assign(1, plan::SegmentDecision{});  // an eviction at the first position
  for (std::uint8_t code = 0; code <= plan::kLastReason + 1; ++code) {
    rep.plan.decisions[0].reason = static_cast<plan::Reason>(code);
    out.clear();
    proto::encode_plan_reply(out, rep);
    auto coded = proto::decode_plan_reply(std::span<const std::uint8_t>(out).subspan(sizeof(proto::FrameHeader)));
    if (code > plan::kLastReason) {
      EXPECT_FALSE(coded.has_value()) << int{code};
      continue;
    }
    ASSERT_TRUE(coded.has_value()) << int{code} << ": " << coded.error().message;
    EXPECT_EQ(coded->plan.decisions[0].reason, static_cast<plan::Reason>(code));
  }
  // The same for the daemon's advisory Plan message.
  proto::PlanMessage advisory;
  advisory.decisions.resize(1);
  for (std::uint8_t code = 0; code <= plan::kLastReason + 1; ++code) {
    advisory.decisions[0].reason = code;
    out.clear();
    proto::encode_plan(out, advisory);
    auto coded = proto::decode_plan(std::span<const std::uint8_t>(out).subspan(sizeof(proto::FrameHeader)));
    EXPECT_EQ(coded.has_value(), code <= plan::kLastReason) << int{code};
    if (coded.has_value()) EXPECT_EQ(coded->decisions[0].reason, code);
  }
  // Malformed requests: a kernel name out of range, ids past the array, a truncated payload.
  auto bad_name = job;
  bad_name.events[1].name = 9;
  out.clear();
  ASSERT_TRUE(proto::encode_plan_request(out, bad_name));
  auto r1 = proto::decode_plan_request(std::span<const std::uint8_t>(out).subspan(sizeof(proto::FrameHeader)));
  ASSERT_FALSE(r1.has_value());
  EXPECT_NE(r1.error().message.find("name index"), std::string::npos) << r1.error().message;
  auto bad_ids = job;
  bad_ids.events[3].ids_off = 1000;
  out.clear();
  ASSERT_TRUE(proto::encode_plan_request(out, bad_ids));
  auto r2 = proto::decode_plan_request(std::span<const std::uint8_t>(out).subspan(sizeof(proto::FrameHeader)));
  ASSERT_FALSE(r2.has_value());
  EXPECT_NE(r2.error().message.find("ids past"), std::string::npos) << r2.error().message;
  // A measured rate that no link has (negative, not a number, 100 TB/s) is refused by name.
  for (double rate : {-1.0, std::nan(""), 1e14}) {
    auto bad_rate = job;
    bad_rate.swap_out_bytes_per_s = rate;
    out.clear();
    ASSERT_TRUE(proto::encode_plan_request(out, bad_rate));
    auto r3 = proto::decode_plan_request(std::span<const std::uint8_t>(out).subspan(sizeof(proto::FrameHeader)));
    ASSERT_FALSE(r3.has_value()) << rate;
    EXPECT_NE(r3.error().message.find("measured link rate"), std::string::npos) << r3.error().message;
  }
  for (std::size_t cut = 0; cut < payload.size(); cut += 17)
    EXPECT_FALSE(proto::decode_plan_request(payload.subspan(0, cut)).has_value()) << cut;
  // A refusal carries its reason.
  proto::PlanReply no;
  no.segment = 3;
  no.why = "empty iteration";
  out.clear();
  proto::encode_plan_reply(out, no);
  auto nback = proto::decode_plan_reply(std::span<const std::uint8_t>(out).subspan(sizeof(proto::FrameHeader)));
  ASSERT_TRUE(nback.has_value());
  EXPECT_FALSE(nback->ok);
  EXPECT_EQ(nback->why, "empty iteration");
}

TEST(Session, PlansTheJobsSegmentsAndSendsSetBudgetToItsExecutor) {
  daemon::DaemonOptions opt;
  proto::HelloInfo h;
  h.pid = 1;
  h.budget_bytes = 10 << 20;
  daemon::Session s(1, h, opt);
  EXPECT_TRUE(s.executor_attached());
  plan::SegmentJob job = segment_job();
  job.dump_dir = "/nonexistent";
  s.prepare_segment_job(job);
  EXPECT_TRUE(job.dump_dir.empty());
  EXPECT_TRUE(job.want_json);
  const proto::PlanReply rep = s.segment_planned(job, plan::plan_segment(job));
  ASSERT_TRUE(rep.ok) << rep.why;
  EXPECT_EQ(rep.segment, 7u);
  EXPECT_TRUE(rep.plan.json.empty());  // kept by the daemon, not sent back
  const auto pj = s.plan();
  EXPECT_NE(pj["summary"].get<std::string>().find("the job's iteration 7"), std::string::npos) << pj.dump();
  EXPECT_TRUE(pj["plan"].is_object());
  // set-budget: bytes go to the job; a fraction resolves against the segment's natural peak.
  std::string code;
  int sent = 0;
  s.on_budget_ready = [&] { ++sent; };
  ASSERT_TRUE(s.set_budget(*parse_budget("12MiB"), "12MiB", &code).has_value());
  EXPECT_EQ(sent, 1);
  EXPECT_EQ(s.take_budget_for_job(), 12u << 20);
  EXPECT_EQ(s.take_budget_for_job(), 0u);
  ASSERT_TRUE(s.set_budget(*parse_budget("0.95x"), "0.95x", &code).has_value());
  EXPECT_EQ(s.take_budget_for_job(), static_cast<std::uint64_t>(0.95 * static_cast<double>(rep.plan.natural_peak)));
  // A job without a learned peak cannot take a multiple of it, nor a share of a device of unknown size.
  daemon::Session fresh(2, h, opt);
  auto st = fresh.set_budget(*parse_budget("0.5x"), "0.5x", &code);
  ASSERT_FALSE(st.has_value());
  EXPECT_NE(st.error().message.find("give a size"), std::string::npos);
  EXPECT_EQ(code, "not-ready");
  code.clear();
  auto dev = fresh.set_budget(*parse_budget("50%"), "50%", &code);
  ASSERT_FALSE(dev.has_value());
  EXPECT_NE(dev.error().message.find("did not say how much memory"), std::string::npos) << dev.error().message;
  EXPECT_EQ(code, "not-ready");
  // Below what one of the job's launches touches at once (4 + 4 + 1 MiB): refused, naming the
  // minimum; nothing is sent to the job.
  EXPECT_EQ(s.job_minimum(), 9u << 20);
  code.clear();
  auto low = s.set_budget(*parse_budget("1KiB"), "1KiB", &code);
  ASSERT_FALSE(low.has_value());
  EXPECT_EQ(code, "below-minimum");
  EXPECT_NE(low.error().message.find(std::to_string(s.job_minimum()) + " bytes"), std::string::npos) << low.error().message;
  EXPECT_EQ(s.take_budget_for_job(), 0u);
}

TEST(Session, LearnsIterationsAndPlansUnderABudget) {
  daemon::DaemonOptions opt;
  opt.learn_min_events = 16;
  proto::HelloInfo h;
  h.pid = 1;
  h.budget_of_peak = 0.6;
  daemon::Session s(1, h, opt);
  ASSERT_TRUE(s.on_names(names()).has_value());
  Gen g;
  g.setup();
  for (int i = 0; i < 12; ++i) g.iteration();
  proto::EventBatch b{g.ev, g.ids};
  ASSERT_TRUE(s.on_events(b).has_value());
  const auto d = s.detail();
  EXPECT_EQ(d["learner"], "following") << d.dump();
  EXPECT_GE(s.iteration(), 10u);
  EXPECT_EQ(d["pattern_events"], 12u);  // 3 allocs, 5 kernels, 3 frees, 1 sync
  auto plan = s.take_plan();
  ASSERT_TRUE(plan.has_value());
  EXPECT_GT(plan->budget_bytes, 0u);
  EXPECT_LT(plan->budget_bytes, s.peak_bytes());
  EXPECT_FALSE(plan->json.empty());
  EXPECT_EQ(s.tensors(100).size(), 6u);  // 3 local + 3 carried weights
  // A budget change replans.
  std::string code;
  ASSERT_TRUE(s.set_budget(*parse_budget("1GiB"), "1GiB", &code).has_value());
  auto p2 = s.take_plan();
  ASSERT_TRUE(p2.has_value());
  EXPECT_EQ(p2->plan_seq, 2u);
  EXPECT_TRUE(p2->decisions.empty());  // fits as it is
}

TEST(Session, CompactionKeepsTheWindowBoundedAndFollowing) {
  daemon::DaemonOptions opt;
  opt.learn_min_events = 16;
  opt.max_session_events = 1024;
  daemon::Session s(1, proto::HelloInfo{}, opt);
  ASSERT_TRUE(s.on_names(names()).has_value());
  Gen g;
  g.setup();
  for (int round = 0; round < 50; ++round) {
    for (int i = 0; i < 10; ++i) g.iteration();
    proto::EventBatch b{g.ev, g.ids};
    ASSERT_TRUE(s.on_events(b).has_value());
    g.ev.clear();
    g.ids.clear();
    EXPECT_LE(s.detail()["window_events"].get<std::uint64_t>(), 1024u + 130u);
  }
  const auto d = s.detail();
  EXPECT_GT(d["compactions"].get<std::uint64_t>(), 0u);
  EXPECT_EQ(d["learner"], "following");
  EXPECT_EQ(d["unknown_ids"], 0u);
  EXPECT_GE(s.iteration(), 495u);
  EXPECT_EQ(s.allocated_bytes(), 3u << 20);
  EXPECT_EQ(s.resident_bytes(), 3u << 20);  // no executor: what is allocated is on the device
  // With an executor, resident is its count (tensors evicted from the device are allocated
  // still), and the session view shows both apart.
  proto::ExecStats st;
  st.resident_bytes = 1u << 20;
  s.on_exec_stats(st);
  EXPECT_EQ(s.allocated_bytes(), 3u << 20);
  EXPECT_EQ(s.resident_bytes(), 1u << 20);
  const auto j = s.summary();
  EXPECT_EQ(j["allocated_bytes"].get<std::uint64_t>(), 3u << 20);
  EXPECT_EQ(j["resident_bytes"].get<std::uint64_t>(), 1u << 20);
}

TEST(Session, UnknownNamesAreRefused) {
  daemon::DaemonOptions opt;
  daemon::Session s(1, proto::HelloInfo{}, opt);
  Gen g;
  g.kernel(3, {}, {});
  proto::EventBatch b{g.ev, g.ids};
  EXPECT_FALSE(s.on_events(b).has_value());
}

TEST(Query, ErrorsAreJsonObjectsWithCodes) {
  daemon::Registry reg(daemon::DaemonOptions{});
  auto code = [&](std::string_view req) {
    auto j = nlohmann::json::parse(reg.handle_request(req));
    return j["ok"].get<bool>() ? std::string("ok") : j["error"]["code"].get<std::string>();
  };
  EXPECT_EQ(code("{\"method\":\"status\"}"), "ok");
  EXPECT_EQ(code("nonsense"), "bad-request");
  EXPECT_EQ(code("[1]"), "bad-request");
  EXPECT_EQ(code("{\"v\":2,\"method\":\"status\"}"), "bad-version");
  EXPECT_EQ(code("{\"method\":\"frobnicate\"}"), "unknown-method");
  EXPECT_EQ(code("{\"method\":\"session\"}"), "bad-params");
  EXPECT_EQ(code("{\"method\":\"session\",\"params\":{\"session\":5}}"), "no-such-session");
  EXPECT_EQ(code("{\"method\":\"sessions\",\"params\":{\"all\":\"yes\"}}"), "ok");
  daemon::Session* s = reg.open_session(proto::HelloInfo{});
  ASSERT_NE(s, nullptr);
  EXPECT_EQ(code("{\"method\":\"set-budget\",\"params\":{\"session\":1,\"budget\":\"-3\"}}"), "bad-params");
  EXPECT_EQ(code("{\"method\":\"set-budget\",\"params\":{\"session\":\"1\",\"budget\":\"2GiB\"}}"), "ok");
  EXPECT_EQ(s->budget_bytes(), 2ull << 30);
  auto m = nlohmann::json::parse(reg.handle_request("{\"method\":\"metrics\"}"));
  EXPECT_NE(m["result"].get<std::string>().find("capuchin_session_budget_bytes{session=\"1\""), std::string::npos);
}

// A 200 KB request nested 100,000 deep in params or id overflowed the daemon's stack (the
// handler's JSON copies recurse): refused before parsing; 64 levels still answer.
TEST(Query, DeepNestingIsRefusedNotRecursedInto) {
  daemon::Registry reg(daemon::DaemonOptions{});
  auto code = [&](const std::string& req) {
    auto j = nlohmann::json::parse(reg.handle_request(req));
    return j["ok"].get<bool>() ? std::string("ok") : j["error"]["code"].get<std::string>();
  };
  const std::string deep = std::string(100000, '[') + std::string(100000, ']');
  EXPECT_EQ(code("{\"method\":\"status\",\"params\":{\"x\":" + deep + "}}"), "bad-request");
  EXPECT_EQ(code("{\"method\":\"status\",\"id\":" + deep + "}"), "bad-request");
  EXPECT_EQ(code("{\"method\":\"status\",\"id\":\"" + std::string(100000, '[') + "\"}"), "ok");  // inside a string
  const std::string ok_depth = std::string(62, '[') + std::string(62, ']');  // + the request and params objects
  EXPECT_EQ(code("{\"method\":\"status\",\"params\":{\"x\":" + ok_depth + "}}"), "ok");
}
