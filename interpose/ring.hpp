// ring.hpp: per-thread single-producer/single-consumer rings of Records, pooled.
//
// Contract: a thread claims a ThreadSlot on its first event (one CAS, no allocation: every
// slot's ring is carved from one mmap made at init) and keeps it until it exits, when the
// slot is marked abandoned; the drain thread empties an abandoned slot and frees it for
// reuse. Producer side (the owning thread only): reserve(n) -> write -> commit(n), where
// commit is the one release store of `head`; when the ring lacks room the event is dropped
// and counted in `lost_events` (the program is never blocked). Consumer side (the drain
// thread only): read [tail, head) after an acquire load of head, then store tail.
#pragma once

#include <atomic>
#include <cstdint>

#include "record.hpp"

namespace capuchin::interpose {

enum class SlotState : std::uint32_t { Free, Active, Abandoned };

struct alignas(64) ThreadSlot {
  // Producer-owned line.
  std::atomic<std::uint64_t> head{0};
  std::uint64_t cached_tail = 0;              // producer's last view of tail
  std::atomic<std::uint64_t> lost_events{0};  // single writer: the owning thread
  // Consumer-owned line.
  alignas(64) std::atomic<std::uint64_t> tail{0};
  std::atomic<SlotState> state{SlotState::Free};
  std::uint32_t index = 0;
  std::uint64_t mask = 0;
  Record* records = nullptr;

  // Room for n records, or nullptr (the caller then calls drop()).
  Record* reserve_at(std::uint64_t pos) { return &records[pos & mask]; }
  bool has_room(unsigned n) {
    const std::uint64_t h = head.load(std::memory_order_relaxed);
    if (h + n - cached_tail <= mask + 1) return true;
    cached_tail = tail.load(std::memory_order_acquire);
    return h + n - cached_tail <= mask + 1;
  }
  void commit(unsigned n) {
    head.store(head.load(std::memory_order_relaxed) + n, std::memory_order_release);
  }
  void drop() { lost_events.store(lost_events.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed); }
};

class RingPool {
 public:
  // Maps max_threads rings of ring_records (a power of two) records each. Cold path.
  bool init(std::uint32_t max_threads, std::uint32_t ring_records);
  bool ready() const { return slots_ != nullptr; }
  // Claims a free slot for the calling thread; nullptr when every slot is in use.
  ThreadSlot* acquire();
  void abandon(ThreadSlot* slot) { slot->state.store(SlotState::Abandoned, std::memory_order_release); }
  // Consumer: an abandoned, fully drained slot becomes free again.
  void recycle(ThreadSlot* slot);
  // After fork, in the child: every slot becomes free and empty (the parent's threads are gone).
  void reset_after_fork();
  std::uint32_t size() const { return count_; }
  ThreadSlot& slot(std::uint32_t i) { return slots_[i]; }
  // Events refused because every slot was taken.
  std::atomic<std::uint64_t> no_slot_events{0};

  // The global event order: each event takes the next number (acq_rel RMW) just before it
  // is committed. A drain pass reads the counter first (acquire) and emits only events
  // numbered below it; an event that causally precedes one numbered below the horizon was
  // committed before that number was taken, so the pass sees it. (Clocks cannot promise
  // this: TSCs of different vCPUs may disagree, and clock_gettime costs ~40 ns here.)
  std::uint64_t next_stamp() { return sequence_.fetch_add(1, std::memory_order_acq_rel); }
  std::uint64_t stamp_horizon() const { return sequence_.load(std::memory_order_acquire); }

 private:
  ThreadSlot* slots_ = nullptr;
  std::uint32_t count_ = 0;
  alignas(64) std::atomic<std::uint64_t> sequence_{0};
  [[maybe_unused]] char pad_[64 - sizeof(std::atomic<std::uint64_t>)] = {};
};

// The calling thread's slot, claimed on first use (nullptr if the pool is exhausted).
// `pool` must be initialised. Registers a thread-exit hook that abandons the slot.
ThreadSlot* current_slot(RingPool& pool);
// Forget the calling thread's slot (after fork, in the child).
void forget_current_slot();

std::uint64_t now_ns();  // CLOCK_MONOTONIC, ns

}  // namespace capuchin::interpose
