// plan_codec.cpp: PlanRequest / PlanReply payloads (remote segment planning; see
// protocol.hpp). Fixed 64- and 40-byte records for events and decisions, counted arrays
// and strings; decoding checks every count against its limit and the bytes present, every
// enum against its range and every id offset against the id array, so a decoded job is
// safe to plan whatever the peer sent.
#include <fmt/format.h>

#include <cmath>

#include "capuchin/protocol.hpp"
#include "codec.hpp"

namespace capuchin::proto {
namespace {

using namespace codec;

constexpr std::uint32_t kMaxGpuName = 64;
constexpr std::uint32_t kMaxSummary = 4096;

struct WireSegEvent {
  std::uint8_t op, dir, touch, unreplayable;
  std::uint32_t name;
  std::uint64_t sig, id, id2, bytes;
  std::uint32_t ids_off, nreads, nwrites, reserved2;
  std::uint64_t dur_ns;
};
static_assert(sizeof(WireSegEvent) == 64 && std::is_trivially_copyable_v<WireSegEvent>);

struct WireSegDecision {
  std::uint32_t at;
  std::uint8_t act, local, prev, reason;
  std::uint32_t k, access;
  std::uint64_t id, bytes;
  double cost_s;
};
static_assert(sizeof(WireSegDecision) == 40 && std::is_trivially_copyable_v<WireSegDecision>);

struct WireLate {
  std::uint8_t local, prev, reserved[2];
  std::uint32_t k;
  std::uint64_t id;
  std::uint32_t access, reserved2;
  double late_s;
};
static_assert(sizeof(WireLate) == 32 && std::is_trivially_copyable_v<WireLate>);
constexpr std::uint32_t kMaxLate = 1u << 16;

struct WireJobHead {
  std::uint64_t segment, budget, baseline;
  std::uint32_t flags;  // 1 simcuda, 2 allow_recompute, 4 want_json, 8 keep_plan
  std::uint32_t nevents, nids, nnames, ncarried, nprev;
};
static_assert(sizeof(WireJobHead) == 48);

struct WirePlanHead {
  std::uint64_t segment;
  std::uint32_t ok, fits, recomputes, swaps;
  double expected_overhead_s;
  std::uint64_t budget, natural_peak, planned_peak;
  std::uint32_t nsigs, ndecisions;
  double replay_s;
  std::uint32_t no_drops, reserved;
};
static_assert(sizeof(WirePlanHead) == 80);

// n records of T at the reader's position, checked against what is left.
template <class T>
bool read_array(Reader& r, std::uint32_t n, std::vector<T>& out) {
  if (!r.ok || n > r.left() / sizeof(T)) return r.ok = false;
  out.resize(n);
  if (n > 0) std::memcpy(out.data(), r.in.data() + r.pos, std::size_t{n} * sizeof(T));
  r.pos += std::size_t{n} * sizeof(T);
  return true;
}

}  // namespace

bool encode_plan_request(std::vector<std::uint8_t>& out, const plan::SegmentJob& job) {
  const std::size_t size = sizeof(WireJobHead) + 4 + job.gpu.size() + job.events.size() * sizeof(WireSegEvent) +
                           job.ids.size() * 8 + job.carried.size() * 16 + job.prev_locals.size() * 8 + 4 +
                           job.late.size() * sizeof(WireLate) + 16;
  std::size_t names = 0;
  for (const auto& n : job.names) names += 4 + std::min<std::size_t>(n.size(), kMaxNameBytes);
  if (size + names > kMaxFrameBytes || job.gpu.size() > kMaxGpuName || job.late.size() > kMaxLate) return false;
  const std::size_t at = begin_frame(out, MsgType::PlanRequest);
  Writer w{out};
  WireJobHead h{};
  h.segment = job.segment;
  h.budget = job.budget;
  h.baseline = job.baseline;
  h.flags = (job.simcuda ? 1u : 0u) | (job.allow_recompute ? 2u : 0u) | (job.want_json ? 4u : 0u) | (job.keep_plan ? 8u : 0u);
  h.nevents = static_cast<std::uint32_t>(job.events.size());
  h.nids = static_cast<std::uint32_t>(job.ids.size());
  h.nnames = static_cast<std::uint32_t>(job.names.size());
  h.ncarried = static_cast<std::uint32_t>(job.carried.size());
  h.nprev = static_cast<std::uint32_t>(job.prev_locals.size());
  w.put(h);
  w.str(job.gpu);
  for (const plan::SegmentEvent& e : job.events) {
    WireSegEvent x{};
    x.op = e.op;
    x.dir = e.dir;
    x.touch = e.touch ? 1 : 0;
    x.unreplayable = e.unreplayable ? 1 : 0;
    x.name = e.name;
    x.sig = e.sig;
    x.id = e.id;
    x.id2 = e.id2;
    x.bytes = e.bytes;
    x.ids_off = e.ids_off;
    x.nreads = e.nreads;
    x.nwrites = e.nwrites;
    x.dur_ns = e.dur_ns;
    w.put(x);
  }
  w.bytes(job.ids.data(), job.ids.size() * 8);
  for (const auto& n : job.names) w.str(std::string_view(n).substr(0, kMaxNameBytes));
  for (const auto& [id, span] : job.carried) w.put(id), w.put(span);
  w.bytes(job.prev_locals.data(), job.prev_locals.size() * 8);
  w.put(static_cast<std::uint32_t>(job.late.size()));
  for (const plan::LateArrival& a : job.late) {
    WireLate x{};
    x.local = a.local ? 1 : 0;
    x.prev = a.prev ? 1 : 0;
    x.k = a.k;
    x.id = a.id;
    x.access = a.access;
    x.late_s = a.late_s;
    w.put(x);
  }
  w.put(job.swap_out_bytes_per_s);
  w.put(job.swap_in_bytes_per_s);
  end_frame(out, at);
  return true;
}

ProtoExpected<plan::SegmentJob> decode_plan_request(std::span<const std::uint8_t> payload) {
  Reader r{payload};
  const auto h = r.get<WireJobHead>();
  plan::SegmentJob job;
  job.gpu = std::string(r.str(kMaxGpuName));
  if (!r.ok) return fail(ProtoErrc::Truncated, "plan request truncated");
  if (h.flags > 15) return fail(ProtoErrc::BadPayload, "plan request: unknown flags");
  job.segment = h.segment;
  job.budget = h.budget;
  job.baseline = h.baseline;
  job.simcuda = (h.flags & 1u) != 0;
  job.allow_recompute = (h.flags & 2u) != 0;
  job.keep_plan = (h.flags & 8u) != 0;
  job.want_json = (h.flags & 4u) != 0;
  std::vector<WireSegEvent> events;
  if (!read_array(r, h.nevents, events)) return fail(ProtoErrc::Truncated, "plan request counts more events than it carries");
  if (!read_array(r, h.nids, job.ids)) return fail(ProtoErrc::Truncated, "plan request counts more ids than it carries");
  if (h.nnames > r.left() / 4) return fail(ProtoErrc::Truncated, "plan request counts more names than it carries");
  job.names.reserve(h.nnames);
  for (std::uint32_t i = 0; i < h.nnames; ++i) {
    job.names.emplace_back(r.str(kMaxNameBytes));
    if (!r.ok) return fail(ProtoErrc::Truncated, fmt::format("plan request: name {} truncated", i));
  }
  std::vector<std::uint64_t> carried;
  if (h.ncarried > r.left() / 16 || !read_array(r, h.ncarried * 2, carried))
    return fail(ProtoErrc::Truncated, "plan request counts more carried tensors than it carries");
  for (std::uint32_t i = 0; i < h.ncarried; ++i) {
    if (carried[2 * i + 1] > kMaxEventBytes) return fail(ProtoErrc::BadPayload, "plan request: a carried tensor's size is over the limit");
    job.carried.emplace_back(carried[2 * i], carried[2 * i + 1]);
  }
  if (!read_array(r, h.nprev, job.prev_locals)) return fail(ProtoErrc::Truncated, "plan request: previous places truncated");
  const auto nlate = r.get<std::uint32_t>();
  std::vector<WireLate> late;
  if (!r.ok || nlate > kMaxLate || !read_array(r, nlate, late))
    return fail(ProtoErrc::Truncated, "plan request: late arrivals truncated or too many");
  for (const WireLate& x : late) {
    if (x.local > 1 || x.prev > 1 || !std::isfinite(x.late_s) || x.late_s < 0 || x.late_s > 3600)
      return fail(ProtoErrc::BadPayload, "plan request: a bad late arrival");
    job.late.push_back(plan::LateArrival{x.local != 0, x.prev != 0, x.k, x.id, x.access, x.late_s});
  }
  job.swap_out_bytes_per_s = r.get<double>();
  job.swap_in_bytes_per_s = r.get<double>();
  if (!r.ok) return fail(ProtoErrc::Truncated, "plan request: the measured link truncated");
  for (double rate : {job.swap_out_bytes_per_s, job.swap_in_bytes_per_s})  // 0: not measured
    if (!std::isfinite(rate) || (rate != 0 && (rate < plan::kMinLinkRate || rate > plan::kMaxLinkRate)))
      return fail(ProtoErrc::BadPayload, "plan request: a measured link rate out of range");
  if (r.left() != 0) return fail(ProtoErrc::BadPayload, "plan request: bytes after the last section");
  job.events.reserve(events.size());
  for (std::uint32_t i = 0; i < events.size(); ++i) {
    const WireSegEvent& x = events[i];
    auto bad = [&](std::string_view what) {
      return fail(ProtoErrc::BadPayload, fmt::format("plan request: event {}: {}", i, what));
    };
    if (x.op > static_cast<std::uint8_t>(trace::Op::Sync)) return bad("unknown op");
    if (x.dir > static_cast<std::uint8_t>(trace::CopyDir::D2D)) return bad("unknown copy direction");
    if (x.touch > 1) return bad("bad touch flag");
    if (x.unreplayable > 1) return bad("bad unreplayable flag");
    if (x.bytes > kMaxEventBytes) return bad("bytes over the limit");
    if (x.op == static_cast<std::uint8_t>(trace::Op::Kernel)) {
      if (x.name >= job.names.size()) return bad("kernel name index out of range");
      const std::uint64_t end = std::uint64_t{x.ids_off} + x.nreads + x.nwrites;
      if (end > job.ids.size()) return bad("ids past the id array");
    }
    plan::SegmentEvent e;
    e.op = x.op;
    e.dir = x.dir;
    e.touch = x.touch != 0;
    e.unreplayable = x.unreplayable != 0;
    e.name = x.name;
    e.sig = x.sig;
    e.id = x.id;
    e.id2 = x.id2;
    e.bytes = x.bytes;
    e.ids_off = x.ids_off;
    e.nreads = x.nreads;
    e.nwrites = x.nwrites;
    e.dur_ns = x.dur_ns;
    job.events.push_back(e);
  }
  return job;
}

void encode_plan_reply(std::vector<std::uint8_t>& out, const PlanReply& rep) {
  const std::size_t at = begin_frame(out, MsgType::PlanReply);
  Writer w{out};
  const plan::SegmentPlan& p = rep.plan;
  // A plan too large for one frame is sent as "no plan" (the executor plans itself).
  const bool fits_frame = p.sigs.size() * 8 + p.decisions.size() * sizeof(WireSegDecision) + 8192 < kMaxFrameBytes;
  const bool ok = rep.ok && fits_frame;
  WirePlanHead h{};
  h.segment = rep.segment;
  h.ok = ok ? 1 : 0;
  if (ok) {
    h.fits = p.fits ? 1 : 0;
    h.recomputes = p.recomputes;
    h.swaps = p.swaps;
    h.expected_overhead_s = p.expected_overhead_s;
    h.replay_s = p.replay_s;
    h.no_drops = p.no_drops ? 1 : 0;
    h.budget = p.budget;
    h.natural_peak = p.natural_peak;
    h.planned_peak = p.planned_peak;
    h.nsigs = static_cast<std::uint32_t>(p.sigs.size());
    h.ndecisions = static_cast<std::uint32_t>(p.decisions.size());
  }
  w.put(h);
  w.str(ok ? std::string_view(p.summary).substr(0, kMaxSummary)
           : std::string_view(rep.ok ? "plan too large for one frame" : rep.why).substr(0, kMaxSummary));
  if (!ok) {
    end_frame(out, at);
    return;
  }
  w.bytes(p.sigs.data(), p.sigs.size() * 8);
  for (const plan::SegmentDecision& d : p.decisions) {
    WireSegDecision x{};
    x.at = d.at;
    x.act = static_cast<std::uint8_t>(d.act);
    x.local = d.local ? 1 : 0;
    x.prev = d.prev ? 1 : 0;
    x.reason = static_cast<std::uint8_t>(d.reason);
    x.k = d.k;
    x.access = d.access;
    x.id = d.id;
    x.bytes = d.bytes;
    x.cost_s = d.cost_s;
    w.put(x);
  }
  end_frame(out, at);
}

ProtoExpected<PlanReply> decode_plan_reply(std::span<const std::uint8_t> payload) {
  Reader r{payload};
  const auto h = r.get<WirePlanHead>();
  const std::string_view text = r.str(kMaxSummary);
  if (!r.ok) return fail(ProtoErrc::Truncated, "plan reply truncated");
  if (h.ok > 1 || h.fits > 1 || h.no_drops > 1 || h.reserved != 0) return fail(ProtoErrc::BadPayload, "plan reply: bad flags");
  // A replay time is a duration or 0 (not replayed); anything else would make the executor's
  // controller refuse every later plan.
  if (!(h.replay_s >= 0) || !std::isfinite(h.replay_s)) return fail(ProtoErrc::BadPayload, "plan reply: bad replay time");
  PlanReply rep;
  rep.segment = h.segment;
  rep.ok = h.ok != 0;
  if (!rep.ok) {
    rep.why = std::string(text);
    if (r.left() != 0) return fail(ProtoErrc::BadPayload, "plan reply: bytes after a refusal");
    return rep;
  }
  plan::SegmentPlan& p = rep.plan;
  p.segment = h.segment;
  p.fits = h.fits != 0;
  p.recomputes = h.recomputes;
  p.swaps = h.swaps;
  p.expected_overhead_s = h.expected_overhead_s;
  p.replay_s = h.replay_s;
  p.no_drops = h.no_drops != 0;
  p.budget = h.budget;
  p.natural_peak = h.natural_peak;
  p.planned_peak = h.planned_peak;
  p.summary = std::string(text);
  std::vector<WireSegDecision> ds;
  if (!read_array(r, h.nsigs, p.sigs)) return fail(ProtoErrc::Truncated, "plan reply counts more signatures than it carries");
  if (!read_array(r, h.ndecisions, ds)) return fail(ProtoErrc::Truncated, "plan reply counts more decisions than it carries");
  if (r.left() != 0) return fail(ProtoErrc::BadPayload, "plan reply: bytes after the decisions");
  std::uint32_t last_at = 0;
  for (const WireSegDecision& x : ds) {
    if (x.act > 3 || x.reason > plan::kLastReason || x.local > 1 || x.prev > 1) return fail(ProtoErrc::BadPayload, "plan reply: malformed decision");
    if (x.at >= p.sigs.size() || x.at < last_at) return fail(ProtoErrc::BadPayload, "plan reply: decision positions out of order");
    last_at = x.at;
    plan::SegmentDecision d;
    d.at = x.at;
    d.act = static_cast<plan::Act>(x.act);
    d.local = x.local != 0;
    d.prev = x.prev != 0;
    d.reason = static_cast<plan::Reason>(x.reason);
    d.k = x.k;
    d.access = x.access;
    d.id = x.id;
    d.bytes = x.bytes;
    d.cost_s = x.cost_s;
    p.decisions.push_back(d);
  }
  return rep;
}

void encode_set_budget(std::vector<std::uint8_t>& out, std::uint64_t bytes) {
  const std::size_t at = begin_frame(out, MsgType::SetBudget);
  Writer{out}.put(bytes);
  end_frame(out, at);
}

ProtoExpected<std::uint64_t> decode_set_budget(std::span<const std::uint8_t> payload) {
  if (payload.size() != 8) return fail(ProtoErrc::BadPayload, "set-budget payload has the wrong size");
  std::uint64_t b = 0;
  std::memcpy(&b, payload.data(), 8);
  if (b == 0) return fail(ProtoErrc::BadPayload, "set-budget of 0 bytes");
  return b;
}

}  // namespace capuchin::proto
