// record.hpp: the fixed-size event record the hooks write into per-thread rings.
//
// Contract: a Record is 64 bytes, trivially copyable, written only by the hook thread that
// owns the ring and read only by the drain thread after the ring's release store. An event
// is one head record, optionally followed by `cont` continuation records of the same ring
// (the words of a launch's parameters that may point into an allocation, kIdsPerCont per
// record). All fields are raw values (addresses, stream handles, function-cache indices): the
// drain thread keeps the map of live allocations, resolves addresses to allocation ids in the
// global event order and turns the records into trace events, so no hook searches or updates
// a shared map.
#pragma once

#include <cstddef>
#include <cstdint>
#include <type_traits>

namespace capuchin::interpose {

enum class Kind : std::uint8_t {
  Alloc,          // id, base, bytes, stream, sub (AllocSub)
  Free,           // base, stream
  Launch,         // func (aux = function-cache index), stream, count = candidate words that follow
  Copy,           // src address, dst address, bytes, stream, sub (CopyHint)
  Memset,         // dst address, bytes, stream
  Sync,           // sub (SyncSub)
  CaptureBegin,   // aux = capture sequence, stream
  CaptureEnd,     // aux = capture sequence, graph
  Instantiate,    // graph, exec
  GraphLaunch,    // exec, stream
  Iteration,      // n
  Ids,            // continuation: up to kIdsPerCont words
  HostAlloc,      // base, bytes: host memory the driver knows (pinned, registered)
  HostFree,       // base
  Unmap,          // base, bytes: every mapping that starts in [base, base + bytes) is gone
};

enum class AllocSub : std::uint8_t { Device, Async, Managed, Vmm };
enum class CopySub : std::uint8_t { H2D, D2H, D2D, Unknown };
// What the API call says of a copy's direction (Infer: cuMemcpy / cudaMemcpyDefault).
enum class CopyHint : std::uint8_t { Infer, H2D, D2H, D2D };
enum class SyncSub : std::uint8_t { Device, Stream, Event };

enum RecordFlags : std::uint8_t {
  kCaptured = 1u << 0,   // issued into a stream capture (aux = capture sequence)
  kPerThread = 1u << 1,  // issued through a _ptsz/_ptds entry point (NULL stream = per-thread)
  kTruncated = 1u << 2,  // a launch touched more allocations than fit; the rest were dropped
};

inline constexpr std::uint64_t kNoId = ~std::uint64_t{0};
inline constexpr unsigned kIdsPerCont = 7;

struct RecordHead {
  std::uint64_t ts;  // global sequence number (RingPool::next_stamp), the trace order
  std::uint64_t a, b, c, d, e, f;
};

struct Record {
  Kind kind;
  std::uint8_t flags;
  std::uint8_t sub;
  std::uint8_t cont;     // continuation records following this head record
  std::uint32_t aux;     // function-cache index (launch) or capture sequence
  union {
    RecordHead h;
    std::uint64_t ids[kIdsPerCont];  // Kind::Ids
  };
};
static_assert(sizeof(Record) == 64, "records are one cache line");
static_assert(std::is_trivially_copyable_v<Record>);

// Field names for each kind's payload, so producers and the decoder agree.
// Alloc:       a=id b=base c=bytes d=stream
// Free:        b=base d=stream
// Launch:      a=CUfunction b=count of words d=stream e=capture sequence
//              f=kernel-timing pair (0: not timed)
// Copy:        a=src address b=dst address c=bytes d=stream (sub = CopyHint, aux = capture sequence)
// Memset:      a=dst address c=bytes d=stream (aux = capture sequence)
// HostAlloc:   b=base c=bytes; HostFree: b=base; Unmap: b=base c=bytes
// CaptureBegin d=stream; CaptureEnd a=graph; Instantiate a=graph b=exec;
// GraphLaunch: a=exec d=stream; Iteration: a=n

}  // namespace capuchin::interpose
