// vmm_memory.cpp: Vmm blocks (pinned backend, tensors the granularity wastes little of): a
// VMM reservation of twice the span, the tensor's range then a staging range of capuchin's.
//
// What is mapped where, per state (the contract every method keeps):
//   Device    device chunk at base                 Evicting  device at base, host copy at staging
//   Host      host pieces at base                  Incoming  host at base, device at staging
//   Incoming  (a replay writing it) device at base  Dropped   nothing
// and a cancelled eviction's pieces stay at staging (`retiring`) until its copy ended.
// Evict: host pieces from the pool mapped at staging, the out stream copies into them after
// the tensor's uses; once the copy completed the device chunk is released and the pieces are
// mapped at the tensor's own address, so an access capture missed reads over the link.
// Prefetch is the reverse. Every failed VMM call leaves the block in a state of the table
// above, logged. Contract: memory.hpp.
#include <cinttypes>

#include "config.hpp"
#include "memory.hpp"
#include "ordering.hpp"

namespace capuchin::interpose::exec {

namespace {

class VmmMemory final : public BlockMemory {
 public:
  VmmMemory(MoveContext& ctx, std::size_t gran, HostPool& pool, DeviceChunks& chunks)
      : BlockMemory(false), c_(ctx), gran_(gran), pool_(pool), chunks_(chunks) {}

  Kind kind() const override { return Kind::Vmm; }
  std::size_t span_for(std::size_t bytes) const override { return (bytes + gran_ - 1) / gran_ * gran_; }
  bool pool_exhausted() const override { return exhausted_; }
  bool host_completes(const Block& b) const override { return b.where == Where::Incoming && b.staging_mapped; }
  bool host_clock_memory() const override { return true; }
  bool droppable() const override { return true; }
  bool dead_goes_in_stream_order() const override { return false; }

  CUresult create(Block& b, bool room) override {
    b.span = span_for(b.bytes);
    b.kind = Kind::Vmm;
    CUdeviceptr base = 0;
    if (CUresult r = c_.api->address_reserve(&base, 2 * b.span, gran_, 0, 0); r != CUDA_SUCCESS) return r;
    b.base = base;
    b.reserved = 2 * b.span;
    b.where = Where::Dropped;
    if (CUresult r = fill(b, room, nullptr); r != CUDA_SUCCESS) {
      if (c_.api->address_free(base, b.reserved) != CUDA_SUCCESS) log(LogLevel::Warn, "executor: freeing a reservation failed");
      b.base = 0;
      return r;
    }
    return CUDA_SUCCESS;
  }

  CUresult reuse(Block& b, bool room) override {
    retire(b);
    if (b.where != Where::Host && b.where != Where::Dropped) return CUDA_SUCCESS;
    if (b.where == Where::Host && !unmap_pieces(b.base, b.host, b.id)) return CUDA_ERROR_UNKNOWN;
    give(b.host);
    c_.ledger->move(b, Where::Dropped);
    return fill(b, room, nullptr);
  }

  void release(Block& b) override {
    c_.ledger->forget(b);
    const CUdeviceptr staging = b.base + b.span;
    bool dev_unmapped = true;  // the device chunk, where it is mapped
    if (b.staging_mapped) {
      if (b.where == Where::Evicting) unmap_pieces(staging, b.host, b.id) ? give(b.host) : leak(b.host);
      else dev_unmapped = unmap_logged(staging, b.span, b.id);  // a device chunk moving in
    }
    if (!b.retiring.empty()) unmap_pieces(staging, b.retiring, b.id) ? give(b.retiring) : leak(b.retiring);
    c_.events->unref(b.retire_after);
    if (b.where == Where::Host || (b.where == Where::Incoming && b.staging_mapped)) {
      unmap_pieces(b.base, b.host, b.id) ? give(b.host) : leak(b.host);
    } else if (b.dev != 0 && b.where != Where::Dropped) {
      dev_unmapped = unmap_logged(b.base, b.span, b.id);
    }
    if (b.dev != 0) release_dev(b, dev_unmapped);
    if (c_.api->address_free(b.base, b.reserved) != CUDA_SUCCESS) log(LogLevel::Warn, "executor: freeing a reservation failed");
  }

  bool evict(Block& b) override {
    if (!retire(b)) return false;  // the staging range still holds a cancelled copy's pieces
    b.host = take(b.span);
    if (b.host.empty()) return false;
    const CUdeviceptr staging = b.base + b.span;
    if (CUresult r = map_pieces(staging, b.host); r != CUDA_SUCCESS) {
      log(LogLevel::Warn, "executor: mapping the host copy of tensor %" PRIu64 " failed (CUresult %d)", b.id, static_cast<int>(r));
      give(b.host);
      return false;
    }
    order_after_uses(*c_.events, b, c_.out);
    if (CUresult r = timed_move(c_, c_.out, b.bytes, true, true, [&] { return c_.api->memcpy_async(staging, b.base, b.bytes, c_.out); });
        r != CUDA_SUCCESS) {
      log(LogLevel::Error, "executor: the copy out of tensor %" PRIu64 " failed (CUresult %d); it stays resident", b.id,
          static_cast<int>(r));
      unmap_pieces(staging, b.host, b.id) ? give(b.host) : leak(b.host);
      return false;
    }
    c_.events->unref(b.ready);
    b.ready = c_.events->record(c_.out);
    b.staging_mapped = true;
    c_.ledger->move(b, Where::Evicting);
    return true;
  }

  void evict_dead(Block& b) override {
    if (b.where == Where::Device) drop(b);
  }

  void complete_evict(Block& b) override {
    if (b.where != Where::Evicting) return;
    c_.events->unref(b.ready);
    const CUdeviceptr staging = b.base + b.span;
    b.staging_mapped = false;
    if (!unmap_pieces(staging, b.host, b.id)) {  // the copy may stay mapped there: never reused
      log(LogLevel::Error, "executor: tensor %" PRIu64 " stays resident; its host copy is not returned to the pool", b.id);
      leak(b.host);
      c_.ledger->move(b, Where::Device);
      return;
    }
    if (!unmap_logged(b.base, b.span, b.id)) {
      give(b.host);
      c_.ledger->move(b, Where::Device);
      return;
    }
    if (CUresult r = map_pieces(b.base, b.host); r != CUDA_SUCCESS) {
      // The device chunk still holds the data: it goes back and the tensor stays resident.
      log(LogLevel::Error, "executor: cannot map the host copy of tensor %" PRIu64 " at its address (CUresult %d); it stays resident",
          b.id, static_cast<int>(r));
      if (map_one(b.base, b.span, b.dev) != CUDA_SUCCESS)
        log(LogLevel::Error, "executor: tensor %" PRIu64 " could not be mapped back: its address is invalid", b.id);
      give(b.host);
      c_.ledger->move(b, Where::Device);
      return;
    }
    release_dev(b, true);
    c_.ledger->move(b, Where::Host);
  }

  void cancel_evict(Block& b) override {
    if (b.where != Where::Evicting) return;
    // The copy still reads the device chunk, which stays; its pieces retire once it ended.
    b.retiring = std::move(b.host);
    b.host.clear();
    c_.events->assign(b.retire_after, b.ready);
    b.staging_mapped = false;
    c_.ledger->move(b, Where::Device);
  }

  bool prefetch(Block& b, bool keep_data, const CUstream*) override {
    if (!retire(b)) return false;
    CUmemGenericAllocationHandle d = 0;
    if (CUresult r = take_chunk(b.span, &d); r != CUDA_SUCCESS) {
      log(LogLevel::Info, "executor: no device memory for tensor %" PRIu64 " (CUresult %d)", b.id, static_cast<int>(r));
      return false;
    }
    if (keep_data && b.where == Where::Host && !b.host.empty()) {
      const CUdeviceptr staging = b.base + b.span;
      if (CUresult r = map_one(staging, b.span, d); r != CUDA_SUCCESS) {
        log(LogLevel::Error, "executor: cannot map device memory for tensor %" PRIu64 " (CUresult %d)", b.id, static_cast<int>(r));
        release_handle(d);  // not kept idle: map_one's undo may have failed too
        return false;
      }
      order_after_uses(*c_.events, b, c_.in);  // work still writing the host copy (an upload into it, a replay)
      if (CUresult r = timed_move(c_, c_.in, b.bytes, false, true, [&] { return c_.api->memcpy_async(staging, b.base, b.bytes, c_.in); });
          r != CUDA_SUCCESS) {
        log(LogLevel::Error, "executor: the copy in of tensor %" PRIu64 " failed (CUresult %d)", b.id, static_cast<int>(r));
        // (no copy was queued: once unmapped, nothing uses the chunk)
        unmap_logged(staging, b.span, b.id) ? chunks_.give(d, b.span) : release_handle(d);
        return false;
      }
      b.dev = d;
      b.staging_mapped = true;
      c_.events->unref(b.ready);
      b.ready = c_.events->record(c_.in);
      c_.ledger->move(b, Where::Incoming);
      return true;
    }
    // No data to keep (a dropped block, or a host-backed one whose bytes are undefined): the
    // device chunk replaces whatever is at base.
    if (!b.host.empty() && !unmap_pieces(b.base, b.host, b.id)) {
      chunks_.give(d, b.span);
      return false;
    }
    if (CUresult r = map_one(b.base, b.span, d); r != CUDA_SUCCESS) {
      log(LogLevel::Error, "executor: cannot map device memory for tensor %" PRIu64 " (CUresult %d)", b.id, static_cast<int>(r));
      release_handle(d);  // not kept idle: map_one's undo may have failed too
      if (!b.host.empty() && map_pieces(b.base, b.host) != CUDA_SUCCESS)
        log(LogLevel::Error, "executor: tensor %" PRIu64 " could not be mapped back: its address is invalid", b.id);
      return false;
    }
    give(b.host);
    b.dev = d;
    c_.ledger->move(b, Where::Device);
    return true;
  }

  void complete_prefetch(Block& b, CUstream s) override {
    if (b.where != Where::Incoming) return;
    if (!b.staging_mapped) {  // a replay writing it in place: stream-ordered
      if (b.ready && c_.events->order(s, b.ready) != CUDA_SUCCESS) log(LogLevel::Error, "executor: ordering after a replay failed");
      c_.events->unref(b.ready);
      c_.ledger->move(b, Where::Device);
      return;
    }
    c_.events->unref(b.ready);
    if (b.staging_stale) {  // the host copy was written while the copy ran: the staged one is stale
      b.staging_stale = false;
      b.staging_mapped = false;
      if (unmap_logged(b.base + b.span, b.span, b.id)) release_dev(b, true);
      else b.dev = 0;  // still mapped at staging: never released (logged), the tensor stays on the host
      c_.ledger->move(b, Where::Host);
      return;
    }
    const bool host_unmapped = unmap_pieces(b.base, b.host, b.id);
    const bool staging_unmapped = unmap_logged(b.base + b.span, b.span, b.id);
    b.staging_mapped = false;
    if (!host_unmapped) {  // the host copy is still at the address, and whole: it stays there
      release_dev(b, staging_unmapped);
      c_.ledger->move(b, Where::Host);
      return;
    }
    if (CUresult r = map_one(b.base, b.span, b.dev); r != CUDA_SUCCESS) {
      log(LogLevel::Error, "executor: cannot map tensor %" PRIu64 " back at its address (CUresult %d); it stays on the host",
          b.id, static_cast<int>(r));
      if (map_pieces(b.base, b.host) != CUDA_SUCCESS)
        log(LogLevel::Error, "executor: tensor %" PRIu64 " could not be mapped back: its address is invalid", b.id);
      release_dev(b, false);  // not kept idle: map_one's undo may have failed too
      c_.ledger->move(b, Where::Host);
      return;
    }
    give(b.host);
    c_.ledger->move(b, Where::Device);
  }

  void drop(Block& b) override {
    retire(b);
    if (b.where == Where::Host) {  // a replay that could not run: its host pieces hold nothing
      unmap_pieces(b.base, b.host, b.id) ? give(b.host) : leak(b.host);
      c_.ledger->move(b, Where::Dropped);
      return;
    }
    if (b.where != Where::Device) return;
    if (!unmap_logged(b.base, b.span, b.id)) return;  // still mapped: stays resident
    release_dev(b, true);
    c_.ledger->move(b, Where::Dropped);
  }

  // Device memory when the caller made room, else (or when the driver has none) host pieces.
  CUresult fill(Block& b, bool room, CUstream) override {
    if (room) {
      CUmemGenericAllocationHandle h = 0;
      CUresult r = take_chunk(b.span, &h);
      if (r == CUDA_SUCCESS && (r = map_one(b.base, b.span, h)) != CUDA_SUCCESS) release_handle(h);  // (its undo may have failed)
      if (r == CUDA_SUCCESS) {
        b.dev = h;
        c_.ledger->move(b, Where::Device);
        return CUDA_SUCCESS;
      }
      if (r != CUDA_ERROR_OUT_OF_MEMORY) return r;
    }
    b.host = take(b.span);
    if (b.host.empty()) return CUDA_ERROR_OUT_OF_MEMORY;
    if (CUresult r = map_pieces(b.base, b.host); r != CUDA_SUCCESS) {
      give(b.host);
      return r;
    }
    c_.ledger->move(b, Where::Host);
    return CUDA_SUCCESS;
  }

 private:
  // A device chunk for a block the caller made room for: an idle one of its span, else a new
  // one once idle chunks past what the budget leaves beside it are released.
  CUresult take_chunk(std::size_t span, CUmemGenericAllocationHandle* out) {
    return chunks_.take(span, c_.ledger->idle_room(span), out);
  }

  CUresult map_one(CUdeviceptr at, std::size_t bytes, CUmemGenericAllocationHandle h) const {
    if (CUresult r = c_.api->mem_map(at, bytes, 0, h, 0); r != CUDA_SUCCESS) return r;
    CUmemAccessDesc d{};
    d.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    d.location.id = c_.device;
    d.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
    if (CUresult r = c_.api->mem_set_access(at, bytes, &d, 1); r != CUDA_SUCCESS) {
      (void)c_.api->mem_unmap(at, bytes);  // undo; the set_access error is the one reported
      return r;
    }
    return CUDA_SUCCESS;
  }

  bool unmap_logged(CUdeviceptr at, std::size_t bytes, std::uint64_t id) const {
    if (CUresult r = c_.api->mem_unmap(at, bytes); r != CUDA_SUCCESS) {
      log(LogLevel::Error, "executor: unmapping %zu bytes of tensor %" PRIu64 " failed (CUresult %d)", bytes, id, static_cast<int>(r));
      return false;
    }
    return true;
  }

  // Maps pieces side by side from `at`; on failure none stays mapped.
  CUresult map_pieces(CUdeviceptr at, const std::vector<HostPiece>& pieces) const {
    std::size_t off = 0;
    for (std::size_t i = 0; i < pieces.size(); ++i) {
      if (CUresult r = map_one(at + off, pieces[i].bytes, pieces[i].handle); r != CUDA_SUCCESS) {
        std::size_t undo = 0;
        // Undo what was mapped; the map error is the one reported (an unmap that fails too
        // leaves a piece mapped at an address nothing uses: the caller never reuses it).
        for (std::size_t j = 0; j < i; ++j) (void)c_.api->mem_unmap(at + undo, pieces[j].bytes), undo += pieces[j].bytes;
        return r;
      }
      off += pieces[i].bytes;
    }
    return CUDA_SUCCESS;
  }

  // false: some piece may still be mapped (logged): the caller must not give them back.
  bool unmap_pieces(CUdeviceptr at, const std::vector<HostPiece>& pieces, std::uint64_t id) const {
    std::size_t off = 0;
    bool all = true;
    for (const HostPiece& p : pieces) {
      if (CUresult r = c_.api->mem_unmap(at + off, p.bytes); r != CUDA_SUCCESS) {
        log(LogLevel::Error, "executor: unmapping a host piece of tensor %" PRIu64 " failed (CUresult %d)", id, static_cast<int>(r));
        all = false;
      }
      off += p.bytes;
    }
    return all;
  }

  // A cancelled eviction's pieces go back once its copy ended. false: not yet (staging busy).
  bool retire(Block& b) {
    if (b.retiring.empty()) return true;
    if (!c_.events->done(b.retire_after)) return false;
    c_.events->unref(b.retire_after);
    unmap_pieces(b.base + b.span, b.retiring, b.id) ? give(b.retiring) : leak(b.retiring);
    return true;
  }

  std::vector<HostPiece> take(std::size_t span) {
    std::vector<HostPiece> pieces = pool_.take(span);
    exhausted_ = pieces.empty();
    return pieces;
  }
  void give(std::vector<HostPiece>& pieces) { pool_.give(pieces), pieces.clear(); }
  // Pieces that may still be mapped are never given to the pool (a later take would map them
  // under another tensor too): they are leaked, and said so.
  void leak(std::vector<HostPiece>& pieces) {
    if (!pieces.empty()) log(LogLevel::Error, "executor: %zu host pieces are not returned to the pool (still mapped)", pieces.size());
    pieces.clear();
  }
  void release_handle(CUmemGenericAllocationHandle h) const {
    if (c_.api->mem_release(h) != CUDA_SUCCESS) log(LogLevel::Warn, "executor: releasing device memory failed");
  }
  // The block's device chunk goes idle when nothing maps it any longer (`unmapped`), else back
  // to the driver (a chunk still mapped somewhere must never be mapped again elsewhere).
  void release_dev(Block& b, bool unmapped) {
    unmapped ? chunks_.give(b.dev, b.span) : release_handle(b.dev);
    b.dev = 0;
  }

  MoveContext& c_;
  std::size_t gran_;
  HostPool& pool_;
  DeviceChunks& chunks_;
  bool exhausted_ = false;
};

}  // namespace

std::unique_ptr<BlockMemory> make_vmm_memory(MoveContext& ctx, std::size_t granularity, HostPool& pool, DeviceChunks& chunks) {
  return std::make_unique<VmmMemory>(ctx, granularity, pool, chunks);
}

}  // namespace capuchin::interpose::exec
