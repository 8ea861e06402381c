// Names of the format's enumerations, error messages, and the JSON text of events and
// headers (nlohmann::ordered_json, so keys keep the documented order: `op` first).
#include <nlohmann/json.hpp>

#include <array>

#include "capuchin/trace.hpp"

namespace capuchin::trace {

std::string_view to_string(Op op) {
  static constexpr std::array<std::string_view, 6> k{"alloc", "free", "kernel", "copy", "iter", "sync"};
  return k[static_cast<std::size_t>(op)];
}

std::string_view to_string(Role role) {
  static constexpr std::array<std::string_view, 8> k{"", "param", "grad", "optim", "activation", "workspace", "input", "other"};
  return k[static_cast<std::size_t>(role)];
}

std::string_view to_string(CopyDir dir) {
  static constexpr std::array<std::string_view, 3> k{"h2d", "d2h", "d2d"};
  return k[static_cast<std::size_t>(dir)];
}

std::optional<Role> parse_role(std::string_view s) {
  for (int r = 1; r <= static_cast<int>(Role::Other); ++r)
    if (to_string(static_cast<Role>(r)) == s) return static_cast<Role>(r);
  return std::nullopt;
}

std::optional<CopyDir> parse_copy_dir(std::string_view s) {
  for (int d = 0; d <= static_cast<int>(CopyDir::D2D); ++d)
    if (to_string(static_cast<CopyDir>(d)) == s) return static_cast<CopyDir>(d);
  return std::nullopt;
}

std::string_view to_string(TraceErrc c) {
  switch (c) {
    case TraceErrc::Io: return "io";
    case TraceErrc::Decompress: return "decompress";
    case TraceErrc::EmptyFile: return "empty-file";
    case TraceErrc::LineTooLong: return "line-too-long";
    case TraceErrc::EmptyLine: return "empty-line";
    case TraceErrc::BrokenJson: return "broken-json";
    case TraceErrc::NotObject: return "not-object";
    case TraceErrc::BadHeader: return "bad-header";
    case TraceErrc::UnsupportedVersion: return "unsupported-version";
    case TraceErrc::UnknownOp: return "unknown-op";
    case TraceErrc::MissingField: return "missing-field";
    case TraceErrc::WrongType: return "wrong-type";
    case TraceErrc::BadValue: return "bad-value";
    case TraceErrc::NegativeBytes: return "negative-bytes";
    case TraceErrc::IdNotAllocated: return "id-not-allocated";
    case TraceErrc::IdAfterFree: return "id-after-free";
    case TraceErrc::IdReused: return "id-reused";
    case TraceErrc::BadIteration: return "bad-iteration";
  }
  return "unknown";
}

std::string TraceError::message() const {
  if (line == 0) return file + ": " + reason;
  return file + ":" + std::to_string(line) + ": " + reason;
}

using ojson = nlohmann::ordered_json;

std::string format_header(const Header& h) {
  ojson j;
  j["format"] = kFormatName;
  j["version"] = h.version;
  auto put = [&](const char* k, const std::string& v) {
    if (!v.empty()) j[k] = v;
  };
  put("source", h.source);
  put("model", h.model);
  if (h.batch_size) j["batch_size"] = *h.batch_size;
  put("dtype", h.dtype);
  if (h.iterations) j["iterations"] = *h.iterations;
  put("device", h.device);
  put("notes", h.notes);
  return j.dump();
}

std::string format_event(const EventView& ev) {
  ojson j;
  j["op"] = to_string(ev.op);
  switch (ev.op) {
    case Op::Alloc:
      j["id"] = ev.id;
      j["bytes"] = ev.bytes;
      if (ev.flags & kHasRole) j["role"] = to_string(ev.role);
      break;
    case Op::Free:
      j["id"] = ev.id;
      break;
    case Op::Kernel:
      j["name"] = ev.name;
      if (ev.flags & kHasReadsWrites) {
        j["reads"] = ev.reads;
        j["writes"] = ev.writes;
      }
      if (ev.flags & kHasTouch) j["touch"] = ev.touch;
      if (ev.flags & kHasFlops) {
        // Integral flop counts stay integers in the text (they are, in every trace we know).
        if (ev.flops == static_cast<double>(static_cast<std::uint64_t>(ev.flops)) && ev.flops < 9.0e15)
          j["flops"] = static_cast<std::uint64_t>(ev.flops);
        else
          j["flops"] = ev.flops;
      }
      if (ev.flags & kHasBytes) j["bytes"] = ev.bytes;
      if (ev.flags & kHasDur) j["dur_ns"] = ev.dur_ns;
      if (ev.flags & kHasReplay) j["replay"] = (ev.flags & kReplayable) != 0;
      break;
    case Op::Copy:
      j["dir"] = to_string(ev.dir);
      j["bytes"] = ev.bytes;
      if (ev.flags & kHasSrc) j["src"] = ev.src;
      if (ev.flags & kHasDst) j["dst"] = ev.dst;
      break;
    case Op::Iter:
      j["n"] = ev.n;
      break;
    case Op::Sync:
      break;
  }
  if (ev.flags & kHasStream) j["stream"] = ev.stream;
  // Invalid UTF-8 in a kernel name is replaced rather than thrown on.
  return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

}  // namespace capuchin::trace
