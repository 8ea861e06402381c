// Encoding and bounds-checked decoding of capuchin's wire protocol (see protocol.hpp).
// Payload layouts are fixed little-endian structs followed by counted arrays and strings;
// every count is checked against both its limit and the bytes actually present.
#include "capuchin/protocol.hpp"

#include "codec.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <fmt/format.h>

namespace capuchin::proto {
namespace {

using namespace codec;

bool known_type(std::uint16_t t) { return t >= 1 && t <= 12; }

}  // namespace

std::string_view to_string(MsgType t) {
  switch (t) {
    case MsgType::Hello: return "hello";
    case MsgType::Welcome: return "welcome";
    case MsgType::Events: return "events";
    case MsgType::Names: return "names";
    case MsgType::Plan: return "plan";
    case MsgType::Bye: return "bye";
    case MsgType::Error: return "error";
    case MsgType::ExecStats: return "exec-stats";
    case MsgType::Decisions: return "decisions";
    case MsgType::PlanRequest: return "plan-request";
    case MsgType::PlanReply: return "plan-reply";
    case MsgType::SetBudget: return "set-budget";
  }
  return "unknown";
}

std::string_view to_string(ProtoErrc c) {
  switch (c) {
    case ProtoErrc::BadMagic: return "bad-magic";
    case ProtoErrc::BadVersion: return "bad-version";
    case ProtoErrc::TooLarge: return "too-large";
    case ProtoErrc::Truncated: return "truncated";
    case ProtoErrc::UnknownType: return "unknown-type";
    case ProtoErrc::BadPayload: return "bad-payload";
    case ProtoErrc::Unexpected: return "unexpected";
  }
  return "unknown";
}

ProtoExpected<FrameHeader> decode_header(std::span<const std::uint8_t> bytes) {
  if (bytes.size() < sizeof(FrameHeader)) return fail(ProtoErrc::Truncated, "frame header truncated");
  FrameHeader h;
  std::memcpy(&h, bytes.data(), sizeof h);
  if (h.magic != kMagic) return fail(ProtoErrc::BadMagic, fmt::format("bad frame magic 0x{:08x}", h.magic));
  if (h.version != kProtocolVersion)
    return fail(ProtoErrc::BadVersion,
                fmt::format("protocol version {} not supported (this side speaks {})", h.version, kProtocolVersion));
  if (!known_type(h.type)) return fail(ProtoErrc::UnknownType, fmt::format("unknown message type {}", h.type));
  if (h.length > kMaxFrameBytes)
    return fail(ProtoErrc::TooLarge, fmt::format("frame of {} bytes exceeds the limit of {}", h.length, kMaxFrameBytes));
  return h;
}

// ---- encoding ------------------------------------------------------------------------------

void append_frame(std::vector<std::uint8_t>& out, MsgType type, std::span<const std::uint8_t> payload) {
  const std::size_t at = begin_frame(out, type);
  out.insert(out.end(), payload.begin(), payload.end());
  end_frame(out, at);
}

void encode_hello(std::vector<std::uint8_t>& out, const HelloInfo& h) {
  const std::size_t at = begin_frame(out, MsgType::Hello);
  Writer w{out};
  w.put(h.pid);
  w.put(h.device);
  w.put(h.device_memory_bytes);
  w.put(h.budget_bytes);
  w.put(h.budget_of_device);
  w.put(h.budget_of_peak);
  w.put(static_cast<std::uint16_t>(h.backend));
  w.put(h.client_version);
  w.str(std::string_view(h.cmdline).substr(0, kMaxCmdlineBytes));
  w.str(std::string_view(h.run_tag).substr(0, kMaxRunTagBytes));
  end_frame(out, at);
}

void encode_welcome(std::vector<std::uint8_t>& out, const Welcome& wl) {
  const std::size_t at = begin_frame(out, MsgType::Welcome);
  Writer w{out};
  w.put(wl.session_id);
  w.put(wl.server_version);
  end_frame(out, at);
}

void encode_error(std::vector<std::uint8_t>& out, std::uint32_t code, std::string_view message) {
  const std::size_t at = begin_frame(out, MsgType::Error);
  Writer w{out};
  w.put(code);
  w.str(message.substr(0, 4096));
  end_frame(out, at);
}

void encode_bye(std::vector<std::uint8_t>& out) { end_frame(out, begin_frame(out, MsgType::Bye)); }

void encode_plan(std::vector<std::uint8_t>& out, const PlanMessage& p) {
  const std::size_t at = begin_frame(out, MsgType::Plan);
  Writer w{out};
  w.put(p.plan_seq);
  w.put(p.pattern_events);
  w.put(p.iteration);
  w.put(p.budget_bytes);
  w.put(p.planned_peak_bytes);
  w.put(static_cast<std::uint32_t>(p.fits));
  w.put(static_cast<std::uint32_t>(p.decisions.size()));
  w.bytes(p.decisions.data(), p.decisions.size() * sizeof(WireDecision));
  // The JSON is for people and tools; a plan too large for one frame keeps its decisions.
  const std::size_t room = kMaxFrameBytes - std::min<std::size_t>(kMaxFrameBytes, out.size() - at + 64);
  w.str(p.json.size() <= room ? std::string_view(p.json) : std::string_view());
  end_frame(out, at);
}

void encode_exec_stats(std::vector<std::uint8_t>& out, const ExecStats& s) {
  const std::size_t at = begin_frame(out, MsgType::ExecStats);
  Writer{out}.put(s);
  end_frame(out, at);
}

void encode_decisions(std::vector<std::uint8_t>& out, std::string_view json_lines) {
  const std::size_t at = begin_frame(out, MsgType::Decisions);
  Writer{out}.bytes(json_lines.data(), std::min<std::size_t>(json_lines.size(), kMaxFrameBytes));
  end_frame(out, at);
}

void encode_events(std::vector<std::uint8_t>& out, std::span<const WireEvent> events, std::span<const std::uint64_t> ids) {
  const std::size_t at = begin_frame(out, MsgType::Events);
  Writer w{out};
  w.put(static_cast<std::uint32_t>(events.size()));
  w.put(static_cast<std::uint32_t>(ids.size()));
  w.bytes(events.data(), events.size_bytes());
  w.bytes(ids.data(), ids.size_bytes());
  end_frame(out, at);
}

void encode_names(std::vector<std::uint8_t>& out, std::uint32_t first, std::span<const std::string> names) {
  const std::size_t at = begin_frame(out, MsgType::Names);
  Writer w{out};
  w.put(first);
  w.put(static_cast<std::uint32_t>(names.size()));
  for (const auto& n : names) w.str(std::string_view(n).substr(0, kMaxNameBytes));
  end_frame(out, at);
}

// ---- decoding ------------------------------------------------------------------------------

ProtoExpected<HelloInfo> decode_hello(std::span<const std::uint8_t> payload) {
  Reader r{payload};
  HelloInfo h;
  h.pid = r.get<std::uint32_t>();
  h.device = r.get<std::int32_t>();
  h.device_memory_bytes = r.get<std::uint64_t>();
  h.budget_bytes = r.get<std::uint64_t>();
  h.budget_of_device = r.get<double>();
  h.budget_of_peak = r.get<double>();
  const auto backend = r.get<std::uint16_t>();
  h.client_version = r.get<std::uint16_t>();
  h.cmdline = std::string(r.str(kMaxCmdlineBytes));
  h.run_tag = std::string(r.str(kMaxRunTagBytes));
  if (!r.ok) return fail(ProtoErrc::Truncated, "hello payload truncated or its command line too long");
  if (r.left() != 0) return fail(ProtoErrc::BadPayload, "hello payload has trailing bytes");
  if (backend > 1) return fail(ProtoErrc::BadPayload, fmt::format("hello: unknown backend {}", backend));
  h.backend = static_cast<Backend>(backend);
  if (!(h.budget_of_device >= 0 && h.budget_of_device <= 1) || !(h.budget_of_peak >= 0 && h.budget_of_peak <= 1))
    return fail(ProtoErrc::BadPayload, "hello: budget share outside [0, 1]");
  if (h.client_version != kProtocolVersion)
    return fail(ProtoErrc::BadVersion, fmt::format("hello: client speaks protocol {}, daemon {}", h.client_version,
                                                   kProtocolVersion));
  return h;
}

ProtoExpected<Welcome> decode_welcome(std::span<const std::uint8_t> payload) {
  Reader r{payload};
  Welcome w;
  w.session_id = r.get<std::uint64_t>();
  w.server_version = r.get<std::uint16_t>();
  if (!r.ok || r.left() != 0) return fail(ProtoErrc::BadPayload, "welcome payload has the wrong size");
  return w;
}

ProtoExpected<void> decode_events(std::span<const std::uint8_t> payload, EventBatch& out) {
  Reader r{payload};
  const auto n = r.get<std::uint32_t>();
  const auto nids = r.get<std::uint32_t>();
  if (!r.ok) return fail(ProtoErrc::Truncated, "events payload truncated");
  if (n > kMaxEventsPerBatch || nids > kMaxIdsPerBatch)
    return fail(ProtoErrc::TooLarge, fmt::format("event batch of {} events, {} ids exceeds the limits", n, nids));
  const std::size_t need = std::size_t{n} * sizeof(WireEvent) + std::size_t{nids} * sizeof(std::uint64_t);
  if (r.left() != need)
    return fail(ProtoErrc::Truncated,
                fmt::format("event batch says {} events and {} ids ({} bytes) but carries {}", n, nids, need, r.left()));
  out.events.resize(n);
  out.ids.resize(nids);
  if (n > 0) std::memcpy(out.events.data(), payload.data() + r.pos, std::size_t{n} * sizeof(WireEvent));
  if (nids > 0)
    std::memcpy(out.ids.data(), payload.data() + r.pos + std::size_t{n} * sizeof(WireEvent), std::size_t{nids} * 8);
  // One validation pass over the flat array: ops in range, id counts adding up.
  std::uint64_t used = 0;
  for (std::uint32_t i = 0; i < n; ++i) {
    const WireEvent& e = out.events[i];
    if (e.op > static_cast<std::uint8_t>(trace::Op::Sync))
      return fail(ProtoErrc::BadPayload, fmt::format("event {} of the batch has unknown op {}", i, e.op));
    const auto op = static_cast<trace::Op>(e.op);
    if (op == trace::Op::Copy && (count_reads(e.a) > 1 || count_writes(e.a) > 1 || count_touch(e.a) != 0 || e.sub > 2))
      return fail(ProtoErrc::BadPayload, fmt::format("event {} of the batch: malformed copy", i));
    if (op == trace::Op::Alloc && (e.bytes == 0 || e.sub > static_cast<std::uint8_t>(trace::Role::Other)))
      return fail(ProtoErrc::BadPayload, fmt::format("event {} of the batch: malformed alloc", i));
    if (e.bytes > kMaxEventBytes)
      return fail(ProtoErrc::BadPayload, fmt::format("event {} of the batch: {} bytes is over the limit of {}", i, e.bytes,
                                                     kMaxEventBytes));
    used += event_ids(e);
  }
  if (used != nids)
    return fail(ProtoErrc::BadPayload, fmt::format("event batch: events use {} ids, the batch carries {}", used, nids));
  return {};
}

ProtoExpected<NamesView> decode_names(std::span<const std::uint8_t> payload) {
  Reader r{payload};
  NamesView v;
  v.first = r.get<std::uint32_t>();
  const auto n = r.get<std::uint32_t>();
  if (!r.ok) return fail(ProtoErrc::Truncated, "names payload truncated");
  if (n > r.left() / 4) return fail(ProtoErrc::Truncated, "names payload counts more names than it carries");
  v.names.reserve(n);
  for (std::uint32_t i = 0; i < n; ++i) {
    auto s = r.str(kMaxNameBytes);
    if (!r.ok) return fail(ProtoErrc::Truncated, fmt::format("name {} truncated or over {} bytes", i, kMaxNameBytes));
    if (s.empty()) return fail(ProtoErrc::BadPayload, fmt::format("name {} is empty", i));
    v.names.push_back(s);
  }
  if (r.left() != 0) return fail(ProtoErrc::BadPayload, "names payload has trailing bytes");
  return v;
}

ProtoExpected<PlanMessage> decode_plan(std::span<const std::uint8_t> payload) {
  Reader r{payload};
  PlanMessage p;
  p.plan_seq = r.get<std::uint32_t>();
  p.pattern_events = r.get<std::uint32_t>();
  p.iteration = r.get<std::uint64_t>();
  p.budget_bytes = r.get<std::uint64_t>();
  p.planned_peak_bytes = r.get<std::uint64_t>();
  p.fits = static_cast<std::uint8_t>(r.get<std::uint32_t>() != 0);
  const auto n = r.get<std::uint32_t>();
  if (!r.ok) return fail(ProtoErrc::Truncated, "plan payload truncated");
  if (n > r.left() / sizeof(WireDecision)) return fail(ProtoErrc::Truncated, "plan counts more decisions than it carries");
  p.decisions.resize(n);
  if (n > 0) std::memcpy(p.decisions.data(), payload.data() + r.pos, std::size_t{n} * sizeof(WireDecision));
  r.pos += std::size_t{n} * sizeof(WireDecision);
  p.json = std::string(r.str(kMaxFrameBytes));
  if (!r.ok || r.left() != 0) return fail(ProtoErrc::Truncated, "plan payload: bad JSON section");
  for (const auto& d : p.decisions)
    if (d.act > 3 || d.reason > plan::kLastReason || d.tensor_local > 1) return fail(ProtoErrc::BadPayload, "plan: malformed decision");
  return p;
}

ProtoExpected<ExecStats> decode_exec_stats(std::span<const std::uint8_t> payload) {
  if (payload.size() != sizeof(ExecStats)) return fail(ProtoErrc::BadPayload, "exec-stats payload has the wrong size");
  ExecStats s;
  std::memcpy(&s, payload.data(), sizeof s);
  if (!std::isfinite(s.stall_s) || s.stall_s < 0) return fail(ProtoErrc::BadPayload, "exec-stats: stall time not a finite, non-negative number");
  return s;
}

ProtoExpected<ErrorMessage> decode_error(std::span<const std::uint8_t> payload) {
  Reader r{payload};
  ErrorMessage e;
  e.code = r.get<std::uint32_t>();
  e.message = std::string(r.str(4096));
  if (!r.ok) return fail(ProtoErrc::Truncated, "error payload truncated");
  return e;
}

// ---- FrameReader -----------------------------------------------------------------------------

void FrameReader::feed(std::span<const std::uint8_t> bytes) {
  if (pos_ > 0 && pos_ == buf_.size()) {
    buf_.clear();
    pos_ = 0;
  } else if (pos_ > (1u << 16) && pos_ * 2 > buf_.size()) {
    buf_.erase(buf_.begin(), buf_.begin() + static_cast<std::ptrdiff_t>(pos_));
    pos_ = 0;
  }
  buf_.insert(buf_.end(), bytes.begin(), bytes.end());
}

ProtoExpected<bool> FrameReader::next(Frame& f) {
  const std::size_t avail = buf_.size() - pos_;
  if (avail < sizeof(FrameHeader)) return false;
  auto h = decode_header(std::span(buf_.data() + pos_, avail));
  if (!h) return Unexpected{h.error()};
  if (avail < sizeof(FrameHeader) + h->length) return false;
  f.header = *h;
  f.payload = std::span<const std::uint8_t>(buf_.data() + pos_ + sizeof(FrameHeader), h->length);
  pos_ += sizeof(FrameHeader) + h->length;
  return true;
}

// ---- BatchEncoder ----------------------------------------------------------------------------

std::uint32_t BatchEncoder::name_index(std::string_view name) {
  auto it = std::lower_bound(lookup_.begin(), lookup_.end(), name,
                             [](const auto& e, std::string_view n) { return std::string_view(e.first) < n; });
  if (it != lookup_.end() && it->first == name) return it->second;
  const auto idx = static_cast<std::uint32_t>(names_.size());
  names_.emplace_back(name.substr(0, kMaxNameBytes));
  lookup_.insert(it, {std::string(name), idx});
  return idx;
}

bool BatchEncoder::add(const trace::EventView& ev) {
  const std::size_t nids = ev.reads.size() + ev.writes.size() + ev.touch.size();
  if (events_.size() >= kMaxEventsPerBatch || ids_.size() + nids + 2 > kMaxIdsPerBatch) return false;
  WireEvent w;
  w.op = static_cast<std::uint8_t>(ev.op);
  w.flags = static_cast<std::uint16_t>(ev.flags);
  w.stream = ev.stream;
  w.bytes = ev.bytes;
  switch (ev.op) {
    case trace::Op::Alloc:
      w.a = ev.id;
      w.sub = static_cast<std::uint8_t>(ev.role);
      break;
    case trace::Op::Free: w.a = ev.id; break;
    case trace::Op::Kernel:
      if (ev.reads.size() > 0xffff || ev.writes.size() > 0xffff || ev.touch.size() > 0xffff) {
        ++dropped_;
        return true;
      }
      w.name = name_index(ev.name.empty() ? std::string_view("?") : ev.name);
      w.a = pack_counts(ev.reads.size(), ev.writes.size(), ev.touch.size());
      ids_.insert(ids_.end(), ev.reads.begin(), ev.reads.end());
      ids_.insert(ids_.end(), ev.writes.begin(), ev.writes.end());
      ids_.insert(ids_.end(), ev.touch.begin(), ev.touch.end());
      break;
    case trace::Op::Copy: {
      const bool src = (ev.flags & trace::kHasSrc) != 0, dst = (ev.flags & trace::kHasDst) != 0;
      w.sub = static_cast<std::uint8_t>(ev.dir);
      w.a = pack_counts(src, dst, 0);
      if (src) ids_.push_back(ev.src);
      if (dst) ids_.push_back(ev.dst);
      break;
    }
    case trace::Op::Iter: w.a = ev.n; break;
    case trace::Op::Sync: break;
  }
  events_.push_back(w);
  return true;
}

void BatchEncoder::finish(std::vector<std::uint8_t>& out) {
  if (names_sent_ < names_.size()) {
    encode_names(out, names_sent_, std::span(names_).subspan(names_sent_));
    names_sent_ = static_cast<std::uint32_t>(names_.size());
  }
  if (!events_.empty()) encode_events(out, events_, ids_);
  events_.clear();
  ids_.clear();
}

void BatchEncoder::reset_names() { names_sent_ = 0; }

}  // namespace capuchin::proto
