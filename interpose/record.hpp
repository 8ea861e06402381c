// record.hpp: the fixed-size event record the hooks write into per-thread rings.
//
// Contract: a Record is 64 bytes, trivially copyable, written only by the hook thread that
// owns the ring and read only by the drain thread after the ring's release store. An event
// is one head record, optionally followed by `cont` continuation records of the same ring
// (a launch's touched allocation ids, kIdsPerCont per record). All fields are raw values
// (stream handles, function-cache indices); the drain thread turns them into trace events.
#pragma once

#include <cstddef>
#include <cstdint>
#include <type_traits>

namespace capuchin::interpose {

enum class Kind : std::uint8_t {
  Alloc,          // id, base, bytes, stream, sub (AllocSub)
  Free,           // id, stream
  Launch,         // func (aux = function-cache index), stream, count = ids that follow
  Copy,           // src_id, dst_id, bytes, stream, sub (CopyDir)
  Memset,         // id (dst), bytes, stream
  Sync,           // sub (SyncSub)
  CaptureBegin,   // aux = capture sequence, stream
  CaptureEnd,     // aux = capture sequence, graph
  Instantiate,    // graph, exec
  GraphLaunch,    // exec, stream
  Iteration,      // n
  Ids,            // continuation: up to kIdsPerCont ids
};

enum class AllocSub : std::uint8_t { Device, Async, Managed, Vmm };
enum class CopySub : std::uint8_t { H2D, D2H, D2D, Unknown };
enum class SyncSub : std::uint8_t { Device, Stream, Event };

enum RecordFlags : std::uint8_t {
  kCaptured = 1u << 0,   // issued into a stream capture (aux = capture sequence)
  kPerThread = 1u << 1,  // issued through a _ptsz/_ptds entry point (NULL stream = per-thread)
  kTruncated = 1u << 2,  // a launch touched more allocations than fit; the rest were dropped
};

inline constexpr std::uint64_t kNoId = ~std::uint64_t{0};
inline constexpr unsigned kIdsPerCont = 7;

struct Record {
  Kind kind;
  std::uint8_t flags;
  std::uint8_t sub;
  std::uint8_t cont;     // continuation records following this head record
  std::uint32_t aux;     // function-cache index (launch) or capture sequence
  union {
    struct {
      std::uint64_t ts;  // global sequence number (RingPool::next_stamp), the trace order
      std::uint64_t a, b, c, d, e, f;
    } h;
    std::uint64_t ids[kIdsPerCont];  // Kind::Ids
  };
};
static_assert(sizeof(Record) == 64, "records are one cache line");
static_assert(std::is_trivially_copyable_v<Record>);

// Field names for each kind's payload, so producers and the decoder agree.
// Alloc:       a=id b=base c=bytes d=stream
// Free:        a=id d=stream
// Launch:      a=CUfunction b=count of ids c=unknown-words d=stream e=capture sequence
//              f=kernel-timing pair (0: not timed)
// Copy:        a=src_id b=dst_id c=bytes d=stream
// Memset:      a=id c=bytes d=stream
// CaptureBegin d=stream; CaptureEnd a=graph; Instantiate a=graph b=exec;
// GraphLaunch: a=exec d=stream; Iteration: a=n

}  // namespace capuchin::interpose
