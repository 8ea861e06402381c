// managed_memory.cpp: Managed blocks (every block under uvm; small and sub-granule ones under
// pinned): one cuMemAllocManaged allocation of the whole span. Moves are cuMemPrefetchAsync to
// the host or the device on capuchin's streams, so an access capture missed only page-faults,
// never reads a wrong byte. A freed block still on the device is discarded where the driver
// can (cuMemDiscardBatchAsync), else moved to the host: at its free under pressure, else when a
// shortage needs its room (entry.cpp, residency.cpp). Where the driver can discard, a live
// block can also be dropped (discarded) and recomputed into fresh pages. Contract: memory.hpp.
#include <cinttypes>

#include "config.hpp"
#include "memory.hpp"
#include "ordering.hpp"

namespace capuchin::interpose::exec {

namespace {

class ManagedMemory final : public BlockMemory {
 public:
  ManagedMemory(MoveContext& ctx, std::size_t page) : BlockMemory(true), c_(ctx), page_(page) {}

  Kind kind() const override { return Kind::Managed; }
  std::size_t span_for(std::size_t bytes) const override { return (bytes + page_ - 1) / page_ * page_; }

  CUresult create(Block& b, bool) override {
    b.span = span_for(b.bytes);
    b.kind = Kind::Managed;
    // The whole span: a later reuse may ask for more bytes than this request (same span).
    CUdeviceptr p = 0;
    if (CUresult r = c_.api->mem_alloc_managed(&p, b.span, CU_MEM_ATTACH_GLOBAL); r != CUDA_SUCCESS) return r;
    b.base = p;
    b.where = Where::Fresh;
    return CUDA_SUCCESS;
  }

  CUresult reuse(Block& b, bool) override {
    // its pages hold dead data, or none (dropped: discarded)
    if (b.where == Where::Host || b.where == Where::Dropped) c_.ledger->move(b, Where::Fresh);
    return CUDA_SUCCESS;
  }

  void release(Block& b) override {
    c_.ledger->forget(b);
    if (CUresult r = c_.api->mem_free(b.base); r != CUDA_SUCCESS)
      log(LogLevel::Warn, "executor: freeing a cached managed block failed (CUresult %d)", static_cast<int>(r));
  }

  bool evict(Block& b) override {
    order_after_uses(*c_.events, b, c_.out);
    move_out(b, false);
    return true;
  }

  void evict_dead(Block& b) override {
    order_after_uses(*c_.events, b, c_.out);  // the work before its free
    move_out(b, true);
  }

  bool discard_dead(Block& b, Ev& done) override {
    if (c_.api->mem_discard == nullptr || b.where == Where::Fresh) return false;
    order_after_uses(*c_.events, b, c_.out);
    if (b.where == Where::Incoming && b.ready && c_.events->order(c_.out, b.ready) != CUDA_SUCCESS)
      log(LogLevel::Error, "executor: ordering a discard after a prefetch failed");
    CUdeviceptr p = b.base;
    size_t n = b.span;
    if (c_.api->mem_discard(&p, &n, 1, 0, c_.out) != CUDA_SUCCESS) return false;  // kept as it is: still correct
    c_.events->unref(b.ready);
    b.ready = note_managed_out(c_, charged(b.where) ? b.span : 0);  // a move back in follows it
    c_.ledger->move(b, Where::Fresh);
    done = c_.events->ref(b.ready);
    return true;
  }

  void complete_evict(Block&) override {}
  void cancel_evict(Block&) override {}

  bool prefetch(Block& b, bool keep_data, const CUstream* user) override {
    const bool fill_in_user_order = b.where == Where::Fresh && user != nullptr;
    const CUstream on = fill_in_user_order ? *user : c_.in;
    c_.ledger->move(b, Where::Incoming);  // counted first: the room it needs is what is waited for
    // Its own move out (or discard) first; room on the device is made by moves out issued
    // before: the move in follows just enough of them.
    if (b.ready && !c_.events->done(b.ready) && c_.events->order(on, b.ready) != CUDA_SUCCESS)
      log(LogLevel::Error, "executor: ordering a prefetch after its eviction failed");
    if (Ev room = room_after_managed_outs(c_); room && c_.events->order(on, room) != CUDA_SUCCESS)
      log(LogLevel::Error, "executor: ordering a prefetch after evictions failed");
    CUmemLocation dev{CU_MEM_LOCATION_TYPE_DEVICE, c_.device};
    // A failed prefetch leaves the pages where they are, still addressable: the kernel faults
    // them in (slow, never wrong). Only a move of data is timed (a fresh block's is a fill).
    const CUresult r = timed_move(c_, on, b.bytes, false, keep_data && on == c_.in,
                                  [&] { return c_.api->mem_prefetch(b.base, b.bytes, dev, 0, on); });
    if (r != CUDA_SUCCESS)
      log(LogLevel::Warn, "executor: prefetching tensor %" PRIu64 " to the device failed (CUresult %d)", b.id, static_cast<int>(r));
    c_.events->unref(b.ready);
    if (fill_in_user_order) {
      // A fill in the order of the work that needs it: that work follows it on the same stream,
      // so no event marks it (its complete_prefetch would wait on `on` for an event recorded on
      // `on`, then drop it: two driver calls per reused block under pressure, ordering nothing).
      c_.ledger->move(b, Where::Device);
      return true;
    }
    b.ready = c_.events->record(on);
    return true;
  }

  void complete_prefetch(Block& b, CUstream s) override {
    if (b.ready && c_.events->order(s, b.ready) != CUDA_SUCCESS)
      log(LogLevel::Error, "executor: ordering a launch after a prefetch failed");
    c_.events->unref(b.ready);
    c_.ledger->move(b, Where::Device);
  }

  // Discarded on the drop stream (pre: quiet, so nothing of the job's is ordered after it but
  // the recomputation, which fill orders): no data moves; b.ready marks it, which the caller
  // waits for, so its room is there when the ledger counts it.
  void drop(Block& b) override {
    if (c_.api->mem_discard == nullptr || b.where != Where::Device) return;
    CUdeviceptr p = b.base;
    size_t n = b.span;
    if (CUresult r = c_.api->mem_discard(&p, &n, 1, 0, c_.drop); r != CUDA_SUCCESS) {
      log(LogLevel::Warn, "executor: discarding tensor %" PRIu64 " failed (CUresult %d); it stays", b.id, static_cast<int>(r));
      return;
    }
    c_.events->unref(b.ready);
    b.ready = c_.events->record(c_.drop);  // none: the caller waits for the stream
    c_.ledger->move(b, Where::Dropped);
  }
  // Pages for the replay on `s` to write, populated on the device in its order after the
  // discard (a fill, no transfer). Without room as well: the driver then makes its own (slower,
  // never wrong).
  CUresult fill(Block& b, bool, CUstream s) override {
    // Counted before the pages are asked for, as prefetch does: a charge releases idle device
    // chunks past the budget (device_chunks.hpp), which must be gone before the pages land.
    c_.ledger->move(b, Where::Device);
    if (b.ready && !c_.events->done(b.ready) && c_.events->order(s, b.ready) != CUDA_SUCCESS)
      log(LogLevel::Error, "executor: ordering a recomputation after its discard failed");
    if (Ev room = room_after_managed_outs(c_); room && c_.events->order(s, room) != CUDA_SUCCESS)
      log(LogLevel::Error, "executor: ordering a recomputation after moves out failed");
    c_.events->unref(b.ready);
    CUmemLocation dev{CU_MEM_LOCATION_TYPE_DEVICE, c_.device};
    if (CUresult r = c_.api->mem_prefetch(b.base, b.bytes, dev, 0, s); r != CUDA_SUCCESS)
      log(LogLevel::Warn, "executor: populating tensor %" PRIu64 " for its recomputation failed (CUresult %d)", b.id, static_cast<int>(r));
    return CUDA_SUCCESS;
  }
  bool host_completes(const Block&) const override { return false; }
  bool host_clock_memory() const override { return false; }
  bool droppable() const override { return c_.api->mem_discard != nullptr; }
  bool dead_goes_in_stream_order() const override { return true; }

 private:
  // To the host on the out stream, after a move in still in flight.
  void move_out(Block& b, bool dead) {
    if (b.where == Where::Incoming && b.ready) {
      if (c_.events->order(c_.out, b.ready) != CUDA_SUCCESS) log(LogLevel::Error, "executor: ordering an eviction failed");
      c_.events->unref(b.ready);
    }
    CUdeviceptr p = b.base;
    size_t n = b.span;  // dead: all of it (a discard leaves a partly covered last page resident)
    if (!dead || c_.api->mem_discard == nullptr || c_.api->mem_discard(&p, &n, 1, 0, c_.out) != CUDA_SUCCESS) {
      CUmemLocation host{CU_MEM_LOCATION_TYPE_HOST, 0};
      // A failed move out leaves the pages on the device: the driver evicts them itself if it
      // must (slower, never wrong); the budget then counts them as gone, which the log says.
      const CUresult r = timed_move(c_, c_.out, b.bytes, true, !dead,
                                    [&] { return c_.api->mem_prefetch(b.base, b.bytes, host, 0, c_.out); });
      if (r != CUDA_SUCCESS)
        log(LogLevel::Warn, "executor: prefetching tensor %" PRIu64 " to the host failed (CUresult %d)", b.id, static_cast<int>(r));
    }
    c_.events->unref(b.ready);
    b.ready = note_managed_out(c_, b.span);  // a move back in follows it
    c_.ledger->move(b, Where::Host);
  }

  MoveContext& c_;
  std::size_t page_;
};

}  // namespace

Ev note_managed_out(MoveContext& ctx, std::uint64_t bytes) {
  Ev e = ctx.events->record(ctx.out);
  if (!e) return Ev{};  // no event: nothing to wait by (a broken context; the job's next call says so)
  ctx.managed_outs.emplace_back(e, bytes);
  ctx.managed_out_bytes += bytes;
  return ctx.events->ref(e);
}

Ev room_after_managed_outs(MoveContext& ctx, std::uint64_t incoming) {
  while (!ctx.managed_outs.empty() && ctx.events->done(ctx.managed_outs.front().first)) {
    ctx.managed_out_bytes -= ctx.managed_outs.front().second;
    ctx.events->unref(ctx.managed_outs.front().first);
    ctx.managed_outs.pop_front();
  }
  const std::uint64_t held = ctx.ledger->resident() + incoming;
  const std::uint64_t slack = ctx.ledger->budget > held ? ctx.ledger->budget - held : 0;
  std::uint64_t pending = ctx.managed_out_bytes;
  for (const auto& [e, bytes] : ctx.managed_outs) {
    if (pending <= slack) return Ev{};
    pending -= bytes;
    if (pending <= slack) return e;
  }
  return Ev{};
}

std::unique_ptr<BlockMemory> make_managed_memory(MoveContext& ctx, std::size_t page) {
  return std::make_unique<ManagedMemory>(ctx, page);
}

}  // namespace capuchin::interpose::exec
