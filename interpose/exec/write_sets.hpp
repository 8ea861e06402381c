// write_sets.hpp: which launches the executor may replay without being told (issue 15). A job
// declares nothing (CAPUCHIN_KERNEL_OUTPUTS stays as an override): each launch's write set is
// learned from what it touches, and a launch shape is replayable only once a probation has
// shown, on the job's own data, that it writes nothing but its outputs and writes them the
// same way twice.
//
// Terms. A block *holds data* once anything may have written it (a launch, copy or memset
// touching it, work whose accesses are unknown); a block allocated and untouched since is
// *fresh*. A launch's *shape* is its function, its grid, block and shared memory, every
// parameter byte except the words that point into the blocks it touches, and for each such word which touched block it names (by
// position), at which offset, and whether that block is fresh: so a GEMM writing a new tensor
// and the same GEMM accumulating into a gradient, or a kernel whose by-value flags differ
// (training vs evaluation), are different shapes.
//
// Probation (once per shape, in the job's thread, outside the executor's lock, while the
// launch's blocks are pinned; every copy, checksum and wait on the launch's own stream, after
// the touched blocks' last recorded uses): every touched block is checksummed (on the device by
// our own kernel, device_checksum.hpp, where it loads; else through host copies); the launch
// runs; its blocks are checksummed again. Outputs are the fresh blocks whose bytes changed. A
// block that held data and changed means a side effect (in-place update, running statistics):
// refused (`side-effect`). Otherwise every touched block is copied to the host (to undo what
// follows), the outputs are overwritten with other bytes (each byte's complement) and the
// launch is replayed at once with the same parameters: an output whose checksum differs from
// what the launch wrote means the kernel is not deterministic (atomics, a run-dependent value)
// or reads or keeps part of its output (an in-place kernel on a tensor written unseen, a
// partial write): `not-deterministic`, and the function is never replayed again; a changed
// input is a side effect. Every block the replay changed gets back the bytes the original
// launch left, so the job never sees the probation.
//
// A launch passed a pointer to memory the executor does not serve (the driver knows the address:
// a library's own workspace, mapped host memory) is never replayable (`foreign-memory`): what it
// reads there may be something else by the time of a replay (split-K partial sums), and its
// probation's replay would repeat what it does there. What a probation cannot see: a write that
// happens only sometimes (an overflow flag) to a block holding data, which later launches of a
// replayable shape then make without a version change; and writes through pointers stored in
// device memory (the scan sees only parameters). A shape whose launch wrote such memory is replayable when it also has a
// visible output; its replay then writes that memory again (the same bytes while its inputs are
// unchanged, which the replay's version checks require of the visible inputs only). Bounded
// cost: at most kMaxProbations shapes per function; later unseen shapes are not replayable.
//
// Contract: the table (WriteSets) is used under the executor's lock; the probation steps run
// without it, through the driver entry points in Api and the checksum kernels. A
// failed driver call makes the probation inconclusive: nothing is learned, the blocks it
// changed are restored where possible, the shape is tried again at a later launch.
#pragma once

#include <cuda.h>

#include <cstdint>
#include <unordered_map>
#include <vector>

#include "api.hpp"
#include "device_checksum.hpp"
#include "event_pool.hpp"

namespace capuchin::interpose::exec {

struct Block;
struct KernelInfo;

enum class Verdict : std::uint8_t {
  Unknown,           // not probed yet (or inconclusive)
  Replayable,        // writes only its outputs, deterministically
  SideEffect,        // changes a block that held data
  NotDeterministic,  // a replay wrote different bytes
  NoOutput,          // writes no fresh block it touches: nothing to recompute from it
  ForeignMemory,     // is passed memory the executor does not serve (a library's workspace, host
                     // memory): what it reads there may have changed by the time of a replay
};
const char* to_string(Verdict v);

// Up to this many touched blocks take part in a shape (more: not replayable).
inline constexpr unsigned kMaxShapeBlocks = 32;
inline constexpr unsigned kMaxProbations = 16;  // per function

struct Shape {
  std::uint64_t key = 0;
  std::uint32_t fresh_mask = 0;  // by position in the launch's touched blocks
  bool usable = false;           // a layout, at most kMaxShapeBlocks blocks, a new block among them
};
// The launch's shape; `touched` in the order before_launch resolved them.
struct Launch;
Shape shape_of(CUfunction f, const KernelInfo& ki, void** params, const std::vector<Block*>& touched, const Launch& l);

class WriteSets {
 public:
  struct Known {
    Verdict verdict = Verdict::Unknown;
    std::uint32_t outputs = 0;  // by position: the fresh blocks it writes
  };
  // Whether a launch of this function can have a verdict that changes what the executor does:
  // a replayable shape of it is known, or one could be probed now. Otherwise its shape is not
  // computed at all (a shape costs a pass over the parameters on the launch path).
  static bool worth_a_shape(const KernelInfo& ki, bool may_probe);
  // A shape's verdict; NotDeterministic for any shape of a function found nondeterministic.
  Known lookup(const KernelInfo& ki, std::uint64_t shape) const;
  // Whether a launch of this function with an unknown shape is probed now (the function's quota
  // left, never found nondeterministic). Counts the probation.
  bool begin_probation(KernelInfo& ki);
  // A verdict against replaying is never overwritten (another thread's probation of the same shape).
  void learn(KernelInfo& ki, std::uint64_t shape, Known k);
  std::uint64_t probations() const { return probations_; }
  // Bytes the probations checksummed and bytes they copied between device and host (their cost
  // beside the synchronisations), and the shapes found replayable: the executor summary prints them.
  void count_bytes(std::uint64_t hashed, std::uint64_t copied) {
    bytes_hashed_ += hashed;
    bytes_copied_ += copied;
  }
  std::uint64_t bytes_hashed() const { return bytes_hashed_; }
  std::uint64_t bytes_copied() const { return bytes_copied_; }
  std::uint64_t replayable_shapes() const { return replayable_; }

 private:
  std::unordered_map<std::uint64_t, Known> shapes_;  // the function's counters are its KernelInfo's
  std::uint64_t probations_ = 0, bytes_hashed_ = 0, bytes_copied_ = 0, replayable_ = 0;
};

// One probation's state, carried by the launch from before it to after it.
struct Probation {
  struct Range {
    std::uint64_t id = 0;  // the block's
    CUdeviceptr base = 0;
    std::size_t bytes = 0;
    bool fresh = false;
    std::uint64_t before = 0, after = 0, replayed = 0;  // checksums: before, after the launch, after its replay
  };
  std::vector<Range> ranges;  // the touched blocks, by position
  std::vector<std::vector<std::uint8_t>> kept;  // each range's bytes after the launch (for restores)
  DeviceChecksum* device = nullptr;  // the executor's checksum kernels (null: hash on the host)
  bool on_device = false;  // they run in this launch's context (decided before the launch; off once they fail)
  CUstream stream = nullptr;  // the launch's (driver) stream: every copy and wait is on it
  // The touched blocks' last uses (events of the executor's pool, referenced until the probation
  // ends): waited for before the first hash, instead of the whole device (which could wait for
  // another rank's collective that itself waits for this host).
  std::vector<CUevent> waits;
  std::vector<Ev> held;  // their references (released under the executor's lock)
  // Parameter words that name none of the touched blocks: asked of the driver whether they
  // point at memory (then the verdict is ForeignMemory and nothing runs twice).
  std::vector<std::uint64_t> other_words;
  bool ok = true;             // every driver call so far succeeded
  std::uint64_t bytes_hashed = 0, bytes_copied = 0;
  WriteSets::Known verdict;   // after the launch (Unknown: inconclusive)
  bool counted = false;       // among the probations in flight (entry.cpp)
};

// Driver steps of a probation (no lock held). Before the launch: wait for the blocks' last
// uses and the stream, hash every range.
void probation_before(const Api& api, Probation& p);
// After the launch ran on `stream`: hash, classify, and when it may be replayable replay it with
// `relaunch` (CUresult(), the same call again), compare and restore. Returns the verdict.
template <class Relaunch>
WriteSets::Known probation_after(const Api& api, Probation& p, Relaunch&& relaunch);

// --- implementation details of probation_after (write_sets.cpp)
WriteSets::Known probation_classify(const Api& api, Probation& p);
bool probation_keep(const Api& api, Probation& p);  // every range's bytes copied to p.kept
bool probation_scramble(const Api& api, Probation& p, WriteSets::Known k);  // outputs complemented
WriteSets::Known probation_compare(const Api& api, Probation& p, WriteSets::Known k, bool relaunched);

template <class Relaunch>
WriteSets::Known probation_after(const Api& api, Probation& p, Relaunch&& relaunch) {
  WriteSets::Known k = probation_classify(api, p);
  if (k.verdict != Verdict::Replayable) return k;
  if (!probation_keep(api, p)) return WriteSets::Known{};  // nothing was changed yet
  if (!probation_scramble(api, p, k)) return probation_compare(api, p, WriteSets::Known{}, false);
  return probation_compare(api, p, k, relaunch() == CUDA_SUCCESS);
}

}  // namespace capuchin::interpose::exec
