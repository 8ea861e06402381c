// TraceReader: splits the byte stream into lines, parses each with simdjson (in place: the
// line buffer keeps SIMDJSON_PADDING spare bytes) and checks every rule of the format,
// resolving ids to dense indices. See include/capuchin/trace.hpp for the contract.
#include <fmt/format.h>
#include <simdjson.h>

#include <algorithm>
#include <cstring>
#include <unordered_map>
#include <vector>

#include "byte_source.hpp"
#include "capuchin/trace.hpp"

namespace capuchin::trace {
namespace {

namespace sj = simdjson;

constexpr std::size_t kChunk = 1 << 20;
constexpr std::size_t kFirstChunk = 1 << 16;

struct Fail {
  TraceErrc code;
  std::string reason;
};

// The fields of one event line, as found, before the op-specific rules run.
struct Fields {
  std::string_view op;
  bool has_op = false;
  sj::dom::element id, bytes, role, stream, name, reads, writes, touch, flops, dur, dir, src, dst, n, replay;
  std::uint32_t present = 0;
};
enum : std::uint32_t {
  F_id = 1u << 0, F_bytes = 1u << 1, F_role = 1u << 2, F_stream = 1u << 3, F_name = 1u << 4,
  F_reads = 1u << 5, F_writes = 1u << 6, F_touch = 1u << 7, F_flops = 1u << 8, F_dur = 1u << 9,
  F_dir = 1u << 10, F_src = 1u << 11, F_dst = 1u << 12, F_n = 1u << 13, F_replay = 1u << 14,
};

}  // namespace

struct TraceReader::Impl {
  std::string name;
  std::unique_ptr<detail::ByteSource> src;
  std::vector<char> buf;  // [begin, end) holds unread bytes; capacity keeps padding spare
  std::size_t begin = 0, end = 0;
  bool eof = false;
  std::uint64_t line_no = 0;
  bool failed = false;
  TraceError error;
  Header header;
  sj::dom::parser parser;

  std::unordered_map<std::uint64_t, std::uint32_t> index_of;  // id -> dense index
  std::vector<std::uint8_t> freed;                            // by dense index
  std::uint64_t last_iter = 0;

  std::vector<std::uint64_t> reads, writes, touch;
  std::vector<std::uint32_t> read_index, write_index, touch_index;

  TraceError make(TraceErrc code, std::string reason, std::uint64_t line) const {
    return TraceError{code, name, line, std::move(reason)};
  }
  Unexpected<TraceError> fail(TraceErrc code, std::string reason) {
    failed = true;
    error = make(code, std::move(reason), line_no);
    return {error};
  }

  // Next line without its '\n' in `out`; false at the end of the data.
  TraceExpected<bool> next_line(std::string_view& out) {
    for (;;) {
      const char* p = buf.data() + begin;
      const void* nl = end > begin ? std::memchr(p, '\n', end - begin) : nullptr;  // memchr(null, 0) is UB
      if (nl) {
        std::size_t len = static_cast<const char*>(nl) - p;
        out = std::string_view(p, len);
        begin += len + 1;
        ++line_no;
        return true;
      }
      if (eof) {
        if (begin == end) return false;
        out = std::string_view(p, end - begin);  // last line without '\n'
        begin = end;
        ++line_no;
        return true;
      }
      if (end - begin > kMaxLineBytes) {
        ++line_no;
        return fail(TraceErrc::LineTooLong, "line longer than " + std::to_string(kMaxLineBytes) + " bytes");
      }
      // Compact, grow if a long line needs it, refill.
      if (begin > 0) {
        std::memmove(buf.data(), buf.data() + begin, end - begin);
        end -= begin;
        begin = 0;
      }
      // Small first read (small traces and fuzz inputs stay cheap), full chunks after.
      const std::size_t chunk = buf.empty() ? kFirstChunk : kChunk;
      std::size_t want = end + chunk + sj::SIMDJSON_PADDING;
      if (buf.size() < want) buf.resize(want);
      auto r = src->read(buf.data() + end, chunk);
      if (!r) {
        ++line_no;
        return fail(TraceErrc::Decompress, r.error().message);
      }
      if (*r == 0) eof = true;
      end += *r;
    }
  }

  TraceExpected<sj::dom::object> parse_object(std::string_view line) {
    // The buffer holds >= SIMDJSON_PADDING readable bytes past any line, so parse in place.
    auto doc = parser.parse(line.data(), line.size(), false);
    if (doc.error()) return fail(TraceErrc::BrokenJson, std::string("broken JSON: ") + sj::error_message(doc.error()));
    sj::dom::object obj;
    if (doc.value_unsafe().get_object().get(obj)) return fail(TraceErrc::NotObject, "line is not a JSON object");
    return obj;
  }

  TraceStatus read_header() {
    std::string_view line;
    auto got = next_line(line);
    if (!got) return Unexpected{got.error()};
    if (!*got) return fail(TraceErrc::EmptyFile, "empty file: no header line");
    auto obj = parse_object(line);
    if (!obj) return Unexpected{obj.error()};
    std::string_view format;
    bool has_format = false, has_version = false;
    for (auto field : *obj) {
      std::string_view k = field.key;
      sj::dom::element v = field.value;
      if (k == "format") {
        if (v.get_string().get(format)) return fail(TraceErrc::BadHeader, "header field 'format' must be a string");
        has_format = true;
      } else if (k == "version") {
        std::int64_t ver;
        if (v.get_int64().get(ver)) return fail(TraceErrc::BadHeader, "header field 'version' must be an integer");
        if (ver != kFormatVersion)
          return fail(TraceErrc::UnsupportedVersion, "unsupported trace version " + std::to_string(ver) + " (this reader knows version 1)");
        has_version = true;
      } else if (k == "op" && !has_format) {
        return fail(TraceErrc::BadHeader, "line 1 is an event, not a header: a trace starts with {\"format\":\"capuchin-trace\",\"version\":1}");
      } else if (k == "source" || k == "model" || k == "dtype" || k == "device" || k == "notes") {
        std::string_view s;
        if (v.get_string().get(s)) return fail(TraceErrc::WrongType, "header field '" + std::string(k) + "' must be a string");
        std::string& dst = k == "source" ? header.source : k == "model" ? header.model : k == "dtype" ? header.dtype
                         : k == "device" ? header.device : header.notes;
        dst = std::string(s);
      } else if (k == "batch_size" || k == "iterations") {
        std::int64_t x;
        if (v.get_int64().get(x)) return fail(TraceErrc::WrongType, "header field '" + std::string(k) + "' must be an integer");
        (k == "batch_size" ? header.batch_size : header.iterations) = x;
      }
    }
    if (!has_format) return fail(TraceErrc::BadHeader, "header has no 'format' field (expected \"capuchin-trace\")");
    if (format != kFormatName) return fail(TraceErrc::BadHeader, "header format is '" + std::string(format) + "', expected 'capuchin-trace'");
    if (!has_version) return fail(TraceErrc::BadHeader, "header has no 'version' field");
    return {};
  }

  // ---- field helpers ----
  TraceExpected<std::uint64_t> get_uint(sj::dom::element v, std::string_view field) {
    std::int64_t s;
    if (!v.get_int64().get(s)) {
      if (s < 0) {
        if (field == "bytes") return fail(TraceErrc::NegativeBytes, "negative bytes: " + std::to_string(s));
        return fail(TraceErrc::BadValue, "field '" + std::string(field) + "' must be non-negative, got " + std::to_string(s));
      }
      return static_cast<std::uint64_t>(s);
    }
    std::uint64_t u;
    if (!v.get_uint64().get(u)) return u;
    return fail(TraceErrc::WrongType, "field '" + std::string(field) + "' must be an integer");
  }

  TraceExpected<std::uint32_t> resolve(std::uint64_t id) {
    auto it = index_of.find(id);
    if (it == index_of.end()) return fail(TraceErrc::IdNotAllocated, "id " + std::to_string(id) + " used before its alloc");
    if (freed[it->second]) return fail(TraceErrc::IdAfterFree, "id " + std::to_string(id) + " used after its free");
    return it->second;
  }

  TraceStatus read_ids(sj::dom::element v, std::string_view field, std::vector<std::uint64_t>& ids,
                       std::vector<std::uint32_t>& idx) {
    sj::dom::array arr;
    if (v.get_array().get(arr)) return fail(TraceErrc::WrongType, "field '" + std::string(field) + "' must be an array of ids");
    for (sj::dom::element e : arr) {
      auto id = get_uint(e, field);
      if (!id) return Unexpected{id.error()};
      auto i = resolve(*id);
      if (!i) return Unexpected{i.error()};
      ids.push_back(*id);
      idx.push_back(*i);
    }
    return {};
  }

  TraceStatus require(const Fields& f, std::uint32_t bit, std::string_view field) {
    if (f.present & bit) return {};
    return fail(TraceErrc::MissingField, fmt::format("'{}' event is missing required field '{}'", f.op, field));
  }

  TraceExpected<bool> next(EventView& ev) {
    if (failed) return Unexpected{error};
    std::string_view line;
    auto got = next_line(line);
    if (!got) return Unexpected{got.error()};
    if (!*got) return false;
    if (line.empty() || line.find_first_not_of(" \t\r") == std::string_view::npos)
      return fail(TraceErrc::EmptyLine, "empty line (every line after the header is one event)");
    auto obj = parse_object(line);
    if (!obj) return Unexpected{obj.error()};

    Fields f;
    for (auto field : *obj) {
      std::string_view k = field.key;
      sj::dom::element v = field.value;
      switch (k.size() > 0 ? k[0] : '\0') {
        case 'o':
          if (k == "op") {
            if (v.get_string().get(f.op)) return fail(TraceErrc::WrongType, "field 'op' must be a string");
            f.has_op = true;
          }
          break;
        case 'i': if (k == "id") { f.id = v; f.present |= F_id; } break;
        case 'b': if (k == "bytes") { f.bytes = v; f.present |= F_bytes; } break;
        case 'r':
          if (k == "reads") { f.reads = v; f.present |= F_reads; }
          else if (k == "role") { f.role = v; f.present |= F_role; }
          else if (k == "replay") { f.replay = v; f.present |= F_replay; }
          break;
        case 's':
          if (k == "stream") { f.stream = v; f.present |= F_stream; }
          else if (k == "src") { f.src = v; f.present |= F_src; }
          break;
        case 'n':
          if (k == "name") { f.name = v; f.present |= F_name; }
          else if (k == "n") { f.n = v; f.present |= F_n; }
          break;
        case 'w': if (k == "writes") { f.writes = v; f.present |= F_writes; } break;
        case 't': if (k == "touch") { f.touch = v; f.present |= F_touch; } break;
        case 'f': if (k == "flops") { f.flops = v; f.present |= F_flops; } break;
        case 'd':
          if (k == "dur_ns") { f.dur = v; f.present |= F_dur; }
          else if (k == "dir") { f.dir = v; f.present |= F_dir; }
          else if (k == "dst") { f.dst = v; f.present |= F_dst; }
          break;
        default: break;  // unknown fields are ignored (forward compatibility)
      }
    }
    if (!f.has_op) return fail(TraceErrc::MissingField, "event is missing required field 'op'");

    ev = EventView{};
    if (f.present & F_stream) {
      auto s = get_uint(f.stream, "stream");
      if (!s) return Unexpected{s.error()};
      if (*s > 0xffffffffull) return fail(TraceErrc::BadValue, "stream number " + std::to_string(*s) + " is too large");
      ev.stream = static_cast<std::uint32_t>(*s);
      ev.flags |= kHasStream;
    }

    const std::string_view op = f.op;
    if (op == "alloc") {
      ev.op = Op::Alloc;
      if (auto s = require(f, F_id, "id"); !s) return Unexpected{s.error()};
      if (auto s = require(f, F_bytes, "bytes"); !s) return Unexpected{s.error()};
      auto id = get_uint(f.id, "id");
      if (!id) return Unexpected{id.error()};
      auto bytes = get_uint(f.bytes, "bytes");
      if (!bytes) return Unexpected{bytes.error()};
      if (*bytes == 0) return fail(TraceErrc::NegativeBytes, "alloc of 0 bytes (bytes must be > 0)");
      if (f.present & F_role) {
        std::string_view r;
        if (f.role.get_string().get(r)) return fail(TraceErrc::WrongType, "field 'role' must be a string");
        auto role = parse_role(r);
        if (!role) return fail(TraceErrc::BadValue, "unknown role '" + std::string(r) + "'");
        ev.role = *role;
        ev.flags |= kHasRole;
      }
      auto [it, inserted] = index_of.try_emplace(*id, static_cast<std::uint32_t>(freed.size()));
      if (!inserted) {
        return fail(TraceErrc::IdReused, freed[it->second] ? "id " + std::to_string(*id) + " reused after its free"
                                                           : "id " + std::to_string(*id) + " allocated twice (it is live)");
      }
      freed.push_back(0);
      ev.id = *id;
      ev.index = it->second;
      ev.bytes = *bytes;
    } else if (op == "free") {
      ev.op = Op::Free;
      if (auto s = require(f, F_id, "id"); !s) return Unexpected{s.error()};
      auto id = get_uint(f.id, "id");
      if (!id) return Unexpected{id.error()};
      auto it = index_of.find(*id);
      if (it == index_of.end()) return fail(TraceErrc::IdNotAllocated, "free of id " + std::to_string(*id) + " that was never allocated");
      if (freed[it->second]) return fail(TraceErrc::IdAfterFree, "id " + std::to_string(*id) + " freed twice");
      freed[it->second] = 1;
      ev.id = *id;
      ev.index = it->second;
    } else if (op == "kernel") {
      ev.op = Op::Kernel;
      if (auto s = require(f, F_name, "name"); !s) return Unexpected{s.error()};
      if (f.name.get_string().get(ev.name)) return fail(TraceErrc::WrongType, "field 'name' must be a string");
      const bool rw = (f.present & (F_reads | F_writes)) != 0;
      if (!rw && !(f.present & F_touch))
        return fail(TraceErrc::MissingField, "'kernel' event is missing required field 'reads'/'writes' (or 'touch')");
      if (rw) {
        if (auto s = require(f, F_reads, "reads"); !s) return Unexpected{s.error()};
        if (auto s = require(f, F_writes, "writes"); !s) return Unexpected{s.error()};
      }
      reads.clear(); writes.clear(); touch.clear();
      read_index.clear(); write_index.clear(); touch_index.clear();
      if (rw) {
        if (auto s = read_ids(f.reads, "reads", reads, read_index); !s) return Unexpected{s.error()};
        if (auto s = read_ids(f.writes, "writes", writes, write_index); !s) return Unexpected{s.error()};
        ev.flags |= kHasReadsWrites;
      }
      if (f.present & F_touch) {
        if (auto s = read_ids(f.touch, "touch", touch, touch_index); !s) return Unexpected{s.error()};
        ev.flags |= kHasTouch;
      }
      ev.reads = reads; ev.writes = writes; ev.touch = touch;
      ev.read_index = read_index; ev.write_index = write_index; ev.touch_index = touch_index;
      if (f.present & F_flops) {
        double fl;
        if (f.flops.get_double().get(fl)) return fail(TraceErrc::WrongType, "field 'flops' must be a number");
        if (!(fl >= 0)) return fail(TraceErrc::BadValue, "field 'flops' must be non-negative");
        ev.flops = fl;
        ev.flags |= kHasFlops;
      }
      if (f.present & F_bytes) {
        auto b = get_uint(f.bytes, "bytes");
        if (!b) return Unexpected{b.error()};
        ev.bytes = *b;
        ev.flags |= kHasBytes;
      }
      if (f.present & F_dur) {
        auto d = get_uint(f.dur, "dur_ns");
        if (!d) return Unexpected{d.error()};
        ev.dur_ns = *d;
        ev.flags |= kHasDur;
      }
      if (f.present & F_replay) {
        bool r = false;
        if (f.replay.get_bool().get(r)) return fail(TraceErrc::WrongType, "field 'replay' must be true or false");
        ev.flags |= kHasReplay | (r ? kReplayable : 0u);
      }
    } else if (op == "copy") {
      ev.op = Op::Copy;
      if (auto s = require(f, F_dir, "dir"); !s) return Unexpected{s.error()};
      if (auto s = require(f, F_bytes, "bytes"); !s) return Unexpected{s.error()};
      std::string_view d;
      if (f.dir.get_string().get(d)) return fail(TraceErrc::WrongType, "field 'dir' must be a string");
      auto dir = parse_copy_dir(d);
      if (!dir) return fail(TraceErrc::BadValue, "unknown copy dir '" + std::string(d) + "' (h2d, d2h or d2d)");
      ev.dir = *dir;
      auto b = get_uint(f.bytes, "bytes");
      if (!b) return Unexpected{b.error()};
      ev.bytes = *b;
      if (f.present & F_src) {
        auto id = get_uint(f.src, "src");
        if (!id) return Unexpected{id.error()};
        auto i = resolve(*id);
        if (!i) return Unexpected{i.error()};
        ev.src = *id; ev.src_index = *i; ev.flags |= kHasSrc;
      }
      if (f.present & F_dst) {
        auto id = get_uint(f.dst, "dst");
        if (!id) return Unexpected{id.error()};
        auto i = resolve(*id);
        if (!i) return Unexpected{i.error()};
        ev.dst = *id; ev.dst_index = *i; ev.flags |= kHasDst;
      }
    } else if (op == "iter") {
      ev.op = Op::Iter;
      if (auto s = require(f, F_n, "n"); !s) return Unexpected{s.error()};
      auto n = get_uint(f.n, "n");
      if (!n) return Unexpected{n.error()};
      if (*n != last_iter + 1)
        return fail(TraceErrc::BadIteration, "iteration " + std::to_string(*n) + " follows iteration " +
                                                 std::to_string(last_iter) + " (expected " + std::to_string(last_iter + 1) + ")");
      last_iter = *n;
      ev.n = *n;
    } else if (op == "sync") {
      ev.op = Op::Sync;
    } else {
      return fail(TraceErrc::UnknownOp, "unknown op '" + std::string(op) + "'");
    }
    return true;
  }
};

TraceReader::TraceReader(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
TraceReader::TraceReader(TraceReader&&) noexcept = default;
TraceReader& TraceReader::operator=(TraceReader&&) noexcept = default;
TraceReader::~TraceReader() = default;


TraceExpected<TraceReader> TraceReader::open(const std::string& path) {
  auto impl = std::make_unique<Impl>();
  impl->name = path;
  auto src = detail::open_file_source(path);
  if (!src) return Unexpected{TraceError{TraceErrc::Io, path, 0, src.error().message}};
  impl->src = std::move(*src);
  if (auto s = impl->read_header(); !s) return Unexpected{s.error()};
  return TraceReader(std::move(impl));
}

TraceExpected<TraceReader> TraceReader::from_memory(std::string_view data, std::string name) {
  auto impl = std::make_unique<Impl>();
  impl->name = std::move(name);
  impl->src = detail::memory_source(data);
  if (auto s = impl->read_header(); !s) return Unexpected{s.error()};
  return TraceReader(std::move(impl));
}

const Header& TraceReader::header() const { return impl_->header; }
TraceExpected<bool> TraceReader::next(EventView& ev) { return impl_->next(ev); }
std::uint64_t TraceReader::line() const { return impl_->line_no; }
std::uint32_t TraceReader::tensor_count() const { return static_cast<std::uint32_t>(impl_->freed.size()); }
const std::string& TraceReader::name() const { return impl_->name; }

}  // namespace capuchin::trace
