// The tensor access trace format (version 1, see docs/TRACE_FORMAT.md): event types, a
// streaming reader that checks every rule of the format, and a writer.
//
// Contract: the reader never throws; every failure is a TraceError naming the file, the
// 1-based line and the broken rule. Ids are resolved to dense tensor indices (allocation
// order) as they are read, so consumers never hash ids again. Views returned by next()
// stay valid only until the following call.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>

#include "capuchin/expected.hpp"

namespace capuchin::trace {

inline constexpr int kFormatVersion = 1;
inline constexpr std::string_view kFormatName = "capuchin-trace";
inline constexpr std::size_t kMaxLineBytes = 16u << 20;  // longer lines are an error, not OOM
inline constexpr std::uint32_t kNone = 0xffffffffu;

enum class Op : std::uint8_t { Alloc, Free, Kernel, Copy, Iter, Sync };
enum class Role : std::uint8_t { None, Param, Grad, Optim, Activation, Workspace, Input, Other };
enum class CopyDir : std::uint8_t { H2D, D2H, D2D };

std::string_view to_string(Op op);
std::string_view to_string(Role role);  // "" for Role::None
std::string_view to_string(CopyDir dir);
std::optional<Role> parse_role(std::string_view s);
std::optional<CopyDir> parse_copy_dir(std::string_view s);

// Which optional fields an event carried (so a writer reproduces exactly what was read).
enum EventFlags : std::uint32_t {
  kHasRole = 1u << 0,
  kHasStream = 1u << 1,
  kHasFlops = 1u << 2,
  kHasBytes = 1u << 3,  // kernel `bytes` (alloc and copy always have bytes)
  kHasDur = 1u << 4,
  kHasSrc = 1u << 5,
  kHasDst = 1u << 6,
  kHasReadsWrites = 1u << 7,
  kHasTouch = 1u << 8,
  kHasReplay = 1u << 9,   // kernel `replay` (replayable.hpp)
  kReplayable = 1u << 10, // its value
};

struct Header {
  int version = kFormatVersion;
  std::string source, model, dtype, device, notes;
  std::optional<std::int64_t> batch_size, iterations;
};

// One event as read. Ids are the trace's own; the *_index fields are dense tensor indices
// (0, 1, ... in allocation order) that the reader assigned.
struct EventView {
  Op op = Op::Sync;
  std::uint32_t flags = 0;
  std::uint32_t stream = 0;
  Role role = Role::None;
  CopyDir dir = CopyDir::H2D;
  std::uint64_t id = 0;           // alloc, free
  std::uint32_t index = kNone;    // alloc, free: dense index of `id`
  std::uint64_t bytes = 0;        // alloc size, copy size, kernel bytes moved
  std::uint64_t src = 0, dst = 0; // copy (with kHasSrc / kHasDst)
  std::uint32_t src_index = kNone, dst_index = kNone;
  std::uint64_t n = 0;            // iter
  double flops = 0;               // kernel (kHasFlops)
  std::uint64_t dur_ns = 0;       // kernel (kHasDur)
  std::string_view name;          // kernel
  std::span<const std::uint64_t> reads, writes, touch;                    // ids
  std::span<const std::uint32_t> read_index, write_index, touch_index;   // dense indices
};

enum class TraceErrc : std::uint8_t {
  Io,                  // cannot open or read the file
  Decompress,          // gzip stream corrupt or truncated
  EmptyFile,           // no header line
  LineTooLong,         // a line over kMaxLineBytes
  EmptyLine,           // a blank line between events
  BrokenJson,          // the line is not valid JSON
  NotObject,           // valid JSON, but not an object
  BadHeader,           // line 1 is not a capuchin-trace header
  UnsupportedVersion,  // header version other than 1
  UnknownOp,           // `op` names no known event
  MissingField,        // a required field is absent
  WrongType,           // a field has the wrong JSON type
  BadValue,            // a field's value is out of its domain (dir, role, stream, ...)
  NegativeBytes,       // `bytes` < 0 (or 0 for an alloc)
  IdNotAllocated,      // an id used (or freed) before its alloc
  IdAfterFree,         // an id used (or freed again) after its free
  IdReused,            // an alloc of an id that was allocated before
  BadIteration,        // `iter` numbers not 1, 2, 3, ...
};
std::string_view to_string(TraceErrc c);

struct TraceError {
  TraceErrc code = TraceErrc::Io;
  std::string file;
  std::uint64_t line = 0;  // 1-based; 0 when the error concerns no line (e.g. open failed)
  std::string reason;
  // "FILE:LINE: reason" (or "FILE: reason" without a line).
  std::string message() const;
};

template <class T>
using TraceExpected = Expected<T, TraceError>;
using TraceStatus = Expected<void, TraceError>;

// Reads a trace one event at a time, from a file (plain or gzip, told apart by the magic
// bytes, "-" for stdin) or from memory. After an error the reader stays failed.
class TraceReader {
 public:
  static TraceExpected<TraceReader> open(const std::string& path);
  // `data` is copied; `name` is what error messages call it.
  static TraceExpected<TraceReader> from_memory(std::string_view data, std::string name = "<memory>");

  TraceReader(TraceReader&&) noexcept;
  TraceReader& operator=(TraceReader&&) noexcept;
  ~TraceReader();

  const Header& header() const;
  // true: `ev` holds the next event; false: clean end of trace.
  TraceExpected<bool> next(EventView& ev);
  std::uint64_t line() const;          // line of the last event returned
  std::uint32_t tensor_count() const;  // allocations seen so far
  const std::string& name() const;

 private:
  struct Impl;
  explicit TraceReader(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// Writes a trace. Compresses with gzip when the path ends in ".gz". The writer does not
// check the format's rules (the reader does); it writes the fields each event's flags name.
class TraceWriter {
 public:
  static Expected<TraceWriter> open(const std::string& path, const Header& header);
  TraceWriter(TraceWriter&&) noexcept;
  TraceWriter& operator=(TraceWriter&&) noexcept;
  ~TraceWriter();

  Status write(const EventView& ev);
  Status close();  // flushes; also called by the destructor (errors then are lost)

 private:
  struct Impl;
  explicit TraceWriter(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// One event as a JSON line (without the newline), and the header line. Used by the writer.
std::string format_event(const EventView& ev);
std::string format_header(const Header& h);

}  // namespace capuchin::trace
