// The wire protocol between libcapuchin.so (the interposer) and capuchind, and the framing
// shared with the daemon's JSON query API on the same Unix socket.
//
// Binary side: every message is a frame = a 16-byte FrameHeader (magic "CPCN", protocol
// version, message type, payload length) followed by the payload. Byte order is the host's
// (little-endian only: both ends run on the same machine). A connection opens with Hello
// (interposer -> daemon) answered by Welcome (or Error); then the interposer streams Names
// (kernel-name table additions) and Events (batches of fixed-size 32-byte records plus one
// flat array of allocation ids), and the daemon sends Plan frames back.
//
// JSON side: a connection whose first byte is '{' speaks newline-delimited JSON requests
// (see daemon/query.hpp); the binary magic's first byte is 'C', so one byte tells them apart.
//
// Contract: decoding never throws, never reads outside the given bytes and never allocates
// more than the payload's own size; every failure is a ProtoError naming the problem.
// Frames longer than kMaxFrameBytes are refused before any payload is read.
#pragma once

#include <bit>
#include <cstdint>
#include <cstring>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

#include "capuchin/expected.hpp"
#include "capuchin/segment_plan.hpp"
#include "capuchin/trace.hpp"

namespace capuchin::proto {

static_assert(std::endian::native == std::endian::little, "the wire format is little-endian");

inline constexpr std::uint32_t kMagic = 0x4e435043u;  // "CPCN" in memory order
inline constexpr std::uint16_t kProtocolVersion = 7;  // 2: plan requests carry late arrivals; 3: budget kinds, run tag, executor peaks; 4: keep_plan, plan replies carry their replay time; 5: segment events say whether a touch is unreplayable; 6: plan requests carry the link rates the job measured; 7: plan decisions may give reason replay-victim
inline constexpr std::uint32_t kMaxFrameBytes = 8u << 20;  // payload limit
inline constexpr std::uint32_t kMaxEventsPerBatch = 65536;
inline constexpr std::uint32_t kMaxIdsPerBatch = 1u << 20;
inline constexpr std::uint32_t kMaxNameBytes = 4096;
inline constexpr std::uint32_t kMaxCmdlineBytes = 16384;
// No allocation, copy or launch of a real job moves more than 1 PiB: larger sizes in an event
// are refused (crafted streams must not reach the learner's arithmetic).
inline constexpr std::uint64_t kMaxEventBytes = std::uint64_t{1} << 50;

enum class MsgType : std::uint16_t {
  Hello = 1,      // interposer -> daemon: who I am (HelloInfo)
  Welcome = 2,    // daemon -> interposer: session id
  Events = 3,     // interposer -> daemon: an event batch
  Names = 4,      // interposer -> daemon: kernel names, dense indices from `first`
  Plan = 5,       // daemon -> interposer: a plan (binary decisions + plan_to_json text)
  Bye = 6,        // either way: clean close
  Error = 7,      // either way: code + message, then the sender closes
  ExecStats = 8,  // interposer -> daemon: the executor's counters (reserved for the executor)
  Decisions = 9,  // interposer -> daemon: executed decision records (decision_log.hpp lines)
  PlanRequest = 10,  // interposer -> daemon: the executor's segment to plan (plan::SegmentJob)
  PlanReply = 11,    // daemon -> interposer: the plan for it, or why there is none
  SetBudget = 12,    // daemon -> interposer: the job's new budget in bytes (set-budget)
};
std::string_view to_string(MsgType t);

struct FrameHeader {
  std::uint32_t magic = kMagic;
  std::uint16_t version = kProtocolVersion;
  std::uint16_t type = 0;
  std::uint32_t length = 0;  // payload bytes after the header
  std::uint32_t reserved = 0;
};
static_assert(sizeof(FrameHeader) == 16 && std::is_trivially_copyable_v<FrameHeader>);

enum class ProtoErrc : std::uint8_t {
  BadMagic,        // not a capuchin frame
  BadVersion,      // another protocol version
  TooLarge,        // length over kMaxFrameBytes (or a count over its limit)
  Truncated,       // fewer bytes than the header or the payload's own counts say
  UnknownType,     // a message type this version does not know
  BadPayload,      // a payload whose contents break a rule (named in the message)
  Unexpected,      // a valid message at the wrong time (e.g. Events before Hello)
};
std::string_view to_string(ProtoErrc c);

struct ProtoError {
  ProtoErrc code = ProtoErrc::BadPayload;
  std::string message;
};
template <class T>
using ProtoExpected = Expected<T, ProtoError>;

// Checks a header (magic, version, type, length); `bytes` must hold at least 16 bytes.
ProtoExpected<FrameHeader> decode_header(std::span<const std::uint8_t> bytes);

// ---- Hello / Welcome ---------------------------------------------------------------------

enum class Backend : std::uint8_t { Uvm = 0, Pinned = 1 };

struct HelloInfo {
  std::uint32_t pid = 0;
  std::int32_t device = 0;
  std::uint64_t device_memory_bytes = 0;  // 0: unknown
  // CAPUCHIN_BUDGET (budget.hpp), at most one of the three non-zero; all zero: no budget.
  std::uint64_t budget_bytes = 0;         // a size
  double budget_of_device = 0;            // "60%": 0.6 of device_memory_bytes
  double budget_of_peak = 0;              // "0.5x": of the job's natural peak, once known
  Backend backend = Backend::Uvm;
  std::uint16_t client_version = kProtocolVersion;
  std::string cmdline;                    // arguments separated by ' '
  std::string run_tag;                    // CAPUCHIN_RUN_TAG: the `capuchin run` that started it ("": none)
};
inline constexpr std::size_t kMaxRunTagBytes = 64;

struct Welcome {
  std::uint64_t session_id = 0;
  std::uint16_t server_version = kProtocolVersion;
};

// ---- Events --------------------------------------------------------------------------------

// One trace event on the wire. Per op:
//   Alloc:  a = allocation id, bytes = size, sub = Role
//   Free:   a = allocation id
//   Kernel: name = kernel-name index, a = packed counts (reads | writes << 16 | touch << 32),
//           bytes = bytes moved (kHasBytes); its ids follow in the batch's id array
//   Copy:   sub = CopyDir, bytes = size, a = packed counts (src present | dst present << 16);
//           src then dst ids in the id array
//   Iter:   a = n;  Sync: nothing
struct WireEvent {
  std::uint8_t op = 0;      // trace::Op
  std::uint8_t sub = 0;     // Role (alloc) or CopyDir (copy)
  std::uint16_t flags = 0;  // trace::EventFlags
  std::uint32_t stream = 0;
  std::uint32_t name = 0;
  std::uint32_t reserved = 0;
  std::uint64_t a = 0;
  std::uint64_t bytes = 0;
};
static_assert(sizeof(WireEvent) == 32 && std::is_trivially_copyable_v<WireEvent>);

inline constexpr std::uint64_t pack_counts(std::uint64_t r, std::uint64_t w, std::uint64_t t) {
  return r | (w << 16) | (t << 32);
}
inline constexpr std::uint32_t count_reads(std::uint64_t a) { return static_cast<std::uint32_t>(a & 0xffff); }
inline constexpr std::uint32_t count_writes(std::uint64_t a) { return static_cast<std::uint32_t>((a >> 16) & 0xffff); }
inline constexpr std::uint32_t count_touch(std::uint64_t a) { return static_cast<std::uint32_t>((a >> 32) & 0xffff); }
// Ids an event consumes from the batch's id array.
inline std::uint32_t event_ids(const WireEvent& e) {
  const auto op = static_cast<trace::Op>(e.op);
  if (op != trace::Op::Kernel && op != trace::Op::Copy) return 0;
  return count_reads(e.a) + count_writes(e.a) + count_touch(e.a);
}

// A decoded batch, in flat arrays the caller owns and reuses (no allocation once grown).
struct EventBatch {
  std::vector<WireEvent> events;
  std::vector<std::uint64_t> ids;
};

// Builds Events payloads from trace events (the interposer side). Kernel names become
// indices; names not sent yet are queued for a Names frame, which must go out first.
class BatchEncoder {
 public:
  // Adds one event; false when the batch is full (send it, then add again) or the event
  // cannot be encoded (too many ids: it is then dropped and counted).
  bool add(const trace::EventView& ev);
  std::size_t size() const { return events_.size(); }
  bool empty() const { return events_.empty(); }
  // Appends a Names frame (if names are pending) and an Events frame to `out`, and clears.
  void finish(std::vector<std::uint8_t>& out);
  std::uint64_t dropped() const { return dropped_; }
  // Forget which names were sent (after a reconnect: the new session knows none).
  void reset_names();

 private:
  std::uint32_t name_index(std::string_view name);
  std::vector<WireEvent> events_;
  std::vector<std::uint64_t> ids_;
  std::vector<std::string> names_;            // every name, by index
  std::vector<std::pair<std::string, std::uint32_t>> lookup_;  // sorted for binary search
  std::uint32_t names_sent_ = 0;
  std::uint64_t dropped_ = 0;
};

// ---- Plans ---------------------------------------------------------------------------------

// One planned action. tensor_local: the k-th allocation of the planned iteration (k = tensor);
// else a carried tensor known by its allocation id (tensor = id).
struct WireDecision {
  std::uint32_t at = 0;      // pattern position: issue before this event of the iteration
  std::uint8_t act = 0;      // plan::Act
  std::uint8_t tensor_local = 1;
  std::uint8_t reason = 0;   // plan::Reason
  std::uint8_t reserved = 0;
  std::uint32_t access = 0;
  std::uint32_t reserved2 = 0;
  std::uint64_t tensor = 0;
  std::uint64_t bytes = 0;
};
static_assert(sizeof(WireDecision) == 32 && std::is_trivially_copyable_v<WireDecision>);

struct PlanMessage {
  std::uint32_t plan_seq = 0;         // 1, 2, ... per session
  std::uint32_t pattern_events = 0;   // events in the planned iteration
  std::uint64_t iteration = 0;        // learned from this iteration
  std::uint64_t budget_bytes = 0;
  std::uint64_t planned_peak_bytes = 0;
  std::uint8_t fits = 1;
  std::vector<WireDecision> decisions;
  std::string json;                   // plan::plan_to_json text
};

// ---- Executor reports (defined now, sent by the executor when it lands) --------------------

// The executor's totals (interpose/exec fills them; the daemon link sends them when changed).
struct ExecStats {
  std::uint64_t evicted_bytes = 0, prefetched_bytes = 0, recomputed_bytes = 0;
  std::uint64_t stalls = 0;
  double stall_s = 0;
  std::uint64_t resident_bytes = 0;
  std::uint64_t budget_bytes = 0;          // in force now (0: none yet, a "0.5x" still unresolved)
  std::uint64_t peak_resident_bytes = 0;   // the most the executor ever held on the device
  std::uint64_t natural_peak_bytes = 0;    // the job's peak without capuchin, once known (0: not yet)
  std::uint64_t plans_from_daemon = 0, plans_embedded = 0;  // plans adopted, by who made them
  std::uint64_t iterations = 0;            // learned iterations run
  bool operator==(const ExecStats&) const = default;
};
static_assert(sizeof(ExecStats) == 96 && std::is_trivially_copyable_v<ExecStats>);

// ---- Encoding --------------------------------------------------------------------------------

void append_frame(std::vector<std::uint8_t>& out, MsgType type, std::span<const std::uint8_t> payload);
void encode_hello(std::vector<std::uint8_t>& out, const HelloInfo& h);
void encode_welcome(std::vector<std::uint8_t>& out, const Welcome& w);
void encode_error(std::vector<std::uint8_t>& out, std::uint32_t code, std::string_view message);
void encode_bye(std::vector<std::uint8_t>& out);
void encode_plan(std::vector<std::uint8_t>& out, const PlanMessage& p);
void encode_exec_stats(std::vector<std::uint8_t>& out, const ExecStats& s);
void encode_decisions(std::vector<std::uint8_t>& out, std::string_view json_lines);
// Encodes an Events payload directly (for tests and the benchmark).
void encode_events(std::vector<std::uint8_t>& out, std::span<const WireEvent> events, std::span<const std::uint64_t> ids);
void encode_names(std::vector<std::uint8_t>& out, std::uint32_t first, std::span<const std::string> names);

// ---- Decoding payloads (after decode_header) ---------------------------------------------------

ProtoExpected<HelloInfo> decode_hello(std::span<const std::uint8_t> payload);
ProtoExpected<Welcome> decode_welcome(std::span<const std::uint8_t> payload);
ProtoExpected<void> decode_events(std::span<const std::uint8_t> payload, EventBatch& out);
struct NamesView {
  std::uint32_t first = 0;
  std::vector<std::string_view> names;  // into the payload
};
ProtoExpected<NamesView> decode_names(std::span<const std::uint8_t> payload);
ProtoExpected<PlanMessage> decode_plan(std::span<const std::uint8_t> payload);
ProtoExpected<ExecStats> decode_exec_stats(std::span<const std::uint8_t> payload);
struct ErrorMessage {
  std::uint32_t code = 0;
  std::string message;
};
ProtoExpected<ErrorMessage> decode_error(std::span<const std::uint8_t> payload);

// ---- Remote segment planning (the executor asks, the daemon plans) ------------------------

// The answer to a PlanRequest: the plan made for `segment` (ok), or why there is none.
struct PlanReply {
  std::uint64_t segment = 0;
  bool ok = false;
  std::string why;          // !ok: the reason
  plan::SegmentPlan plan;   // ok: its decisions, pattern and budget (no JSON on the wire)
};
// false (nothing appended) when the job does not fit one frame: plan it locally.
bool encode_plan_request(std::vector<std::uint8_t>& out, const plan::SegmentJob& job);
ProtoExpected<plan::SegmentJob> decode_plan_request(std::span<const std::uint8_t> payload);
void encode_plan_reply(std::vector<std::uint8_t>& out, const PlanReply& r);
ProtoExpected<PlanReply> decode_plan_reply(std::span<const std::uint8_t> payload);
void encode_set_budget(std::vector<std::uint8_t>& out, std::uint64_t bytes);
ProtoExpected<std::uint64_t> decode_set_budget(std::span<const std::uint8_t> payload);

// The daemon's default socket: $XDG_RUNTIME_DIR/capuchin/capuchind.sock when XDG_RUNTIME_DIR
// is set, else /tmp/capuchin-$UID/capuchind.sock. The CLI, the daemon and the interposer
// agree on it; --socket / CAPUCHIN_SOCKET override it.
std::string default_socket_path();

// Splits a byte stream into frames: feed() bytes as they arrive, then next() until it yields
// nothing. The buffer never holds more than one frame plus one read's worth of bytes.
class FrameReader {
 public:
  void feed(std::span<const std::uint8_t> bytes);
  struct Frame {
    FrameHeader header;
    std::span<const std::uint8_t> payload;  // valid until the next feed()/next()
  };
  // A frame, nothing yet (no value and no error: need more bytes), or an error.
  ProtoExpected<bool> next(Frame& f);
  std::size_t buffered() const { return buf_.size() - pos_; }

 private:
  std::vector<std::uint8_t> buf_;
  std::size_t pos_ = 0;
};

}  // namespace capuchin::proto
