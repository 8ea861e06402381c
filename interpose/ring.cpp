// ring.cpp: the ring pool and per-thread slot ownership (see ring.hpp).
#include "ring.hpp"

#include <pthread.h>
#include <sys/mman.h>
#include <time.h>

#include <new>

namespace capuchin::interpose {
namespace {

// initial-exec: the library is preloaded (static TLS), so reading this is one mov, and
// touching it never calls __tls_get_addr (which may allocate).
__attribute__((tls_model("initial-exec"))) thread_local ThreadSlot* t_slot = nullptr;
__attribute__((tls_model("initial-exec"))) thread_local RingPool* t_pool = nullptr;

pthread_key_t g_exit_key;
pthread_once_t g_exit_once = PTHREAD_ONCE_INIT;

void on_thread_exit(void* p) {
  auto* slot = static_cast<ThreadSlot*>(p);
  if (slot != nullptr && t_pool != nullptr && t_slot == slot) {
    t_pool->abandon(slot);
    t_slot = nullptr;
  }
}

void make_exit_key() { pthread_key_create(&g_exit_key, on_thread_exit); }

}  // namespace

std::uint64_t now_ns() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<std::uint64_t>(ts.tv_sec) * 1000000000ull + static_cast<std::uint64_t>(ts.tv_nsec);
}

bool RingPool::init(std::uint32_t max_threads, std::uint32_t ring_records) {
  const std::size_t slot_bytes = sizeof(ThreadSlot) * max_threads;
  const std::size_t ring_bytes = sizeof(Record) * static_cast<std::size_t>(ring_records) * max_threads;
  void* mem = mmap(nullptr, slot_bytes + ring_bytes, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (mem == MAP_FAILED) return false;
  auto* slots = static_cast<ThreadSlot*>(mem);
  auto* rings = reinterpret_cast<Record*>(static_cast<char*>(mem) + slot_bytes);
  for (std::uint32_t i = 0; i < max_threads; ++i) {
    ThreadSlot* s = new (&slots[i]) ThreadSlot();
    s->index = i;
    s->mask = ring_records - 1;
    s->records = rings + static_cast<std::size_t>(i) * ring_records;
  }
  pthread_once(&g_exit_once, make_exit_key);
  count_ = max_threads;
  slots_ = slots;
  return true;
}

ThreadSlot* RingPool::acquire() {
  for (std::uint32_t i = 0; i < count_; ++i) {
    SlotState expect = SlotState::Free;
    if (slots_[i].state.load(std::memory_order_relaxed) == SlotState::Free &&
        slots_[i].state.compare_exchange_strong(expect, SlotState::Active, std::memory_order_acquire)) {
      ThreadSlot* s = &slots_[i];
      s->cached_tail = s->tail.load(std::memory_order_acquire);
      return s;
    }
  }
  return nullptr;
}

void RingPool::recycle(ThreadSlot* slot) {
  // Only the consumer calls this, on an abandoned slot with tail == head: nobody else
  // touches the slot until the state store below publishes it as free.
  slot->lost_events.store(0, std::memory_order_relaxed);
  slot->state.store(SlotState::Free, std::memory_order_release);
}

void RingPool::reset_after_fork() {
  for (std::uint32_t i = 0; i < count_; ++i) {
    ThreadSlot& s = slots_[i];
    s.head.store(0, std::memory_order_relaxed);
    s.tail.store(0, std::memory_order_relaxed);
    s.cached_tail = 0;
    s.lost_events.store(0, std::memory_order_relaxed);
    s.state.store(SlotState::Free, std::memory_order_release);
  }
}

ThreadSlot* current_slot(RingPool& pool) {
  if (t_slot != nullptr) [[likely]] return t_slot;
  ThreadSlot* s = pool.acquire();
  if (s == nullptr) return nullptr;
  t_slot = s;
  t_pool = &pool;
  pthread_setspecific(g_exit_key, s);
  return s;
}

void forget_current_slot() { t_slot = nullptr; }

}  // namespace capuchin::interpose
