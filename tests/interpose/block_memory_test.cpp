// The executor's two kinds of block memory (interpose/exec/memory.hpp) against a fake driver
// table that models what they rely on: managed allocations, prefetches and discards recorded
// per stream; VMM reservations, handles (device- or host-located) and what is mapped where;
// events that complete only when the test says so; stream waits recorded. Checked: the
// states and mappings of memory.hpp's table, the ledger's resident bytes, the stream order of
// each move, and that a failed driver call leaves a block where it was, mapped.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "exec/block.hpp"
#include "exec/memory.hpp"

namespace capuchin::interpose::exec {
namespace {

constexpr std::size_t kGran = 2u << 20;
constexpr std::size_t kPage = 64u << 10;

// ---- the fake driver ------------------------------------------------------------------------
struct Fake {
  CUdeviceptr next_va = 1ull << 40;
  std::map<CUdeviceptr, std::size_t> reserved;
  struct Handle {
    std::size_t bytes;
    bool host;
  };
  std::map<CUmemGenericAllocationHandle, Handle> handles;
  CUmemGenericAllocationHandle next_handle = 1;
  std::map<CUdeviceptr, CUmemGenericAllocationHandle> mapped;  // mapping start -> handle
  std::set<CUdeviceptr> accessible;
  std::map<CUdeviceptr, std::size_t> managed;
  std::vector<std::string> ops;  // "prefetch-dev@S", "prefetch-host@S", "discard@S", "copy@S", "wait@S:E"
  std::vector<bool> event_done;  // by event handle index (handle = index + 1)
  std::set<std::uintptr_t> events_recorded;
  int fail_map_after = -1;       // the n-th cuMemMap from now fails
  // Contexts (EventsAreCreatedInTheExecutorsContext): the current one, those pushed over it,
  // each event's; with check_contexts, an event records only on a stream of its context
  // (kOut and kIn are kExecCtx's).
  CUcontext current = nullptr;
  std::vector<CUcontext> pushed;
  std::vector<CUcontext> event_ctx;
  bool check_contexts = false;
  std::size_t device_peak = 0;  // of device_bytes(), at each creation
  std::size_t device_capacity = ~std::size_t{0};  // a device creation past it: out of memory
  std::size_t device_bytes() const {
    std::size_t s = 0;
    for (const auto& [h, x] : handles) s += x.host ? 0 : x.bytes;
    return s;
  }
} g;

std::string sname(CUstream s) { return std::to_string(reinterpret_cast<std::uintptr_t>(s)); }

CUresult f_alloc_managed(CUdeviceptr* p, size_t n, unsigned) {
  *p = g.next_va;
  g.next_va += (n + kGran) / kGran * kGran;
  g.managed[*p] = n;
  return CUDA_SUCCESS;
}
CUresult f_free(CUdeviceptr p) { return g.managed.erase(p) ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE; }
CUresult f_prefetch(CUdeviceptr, size_t, CUmemLocation loc, unsigned, CUstream s) {
  g.ops.push_back(std::string(loc.type == CU_MEM_LOCATION_TYPE_DEVICE ? "prefetch-dev@" : "prefetch-host@") + sname(s));
  return CUDA_SUCCESS;
}
CUresult f_discard(CUdeviceptr*, size_t*, size_t, unsigned long long, CUstream s) {
  g.ops.push_back("discard@" + sname(s));
  return CUDA_SUCCESS;
}
const CUcontext kExecCtx = reinterpret_cast<CUcontext>(0xe0), kOtherCtx = reinterpret_cast<CUcontext>(0xe1);

CUresult f_ctx_get_current(CUcontext* c) {
  *c = g.current;
  return CUDA_SUCCESS;
}
CUresult f_ctx_push(CUcontext c) {
  g.pushed.push_back(g.current);
  g.current = c;
  return CUDA_SUCCESS;
}
CUresult f_ctx_pop(CUcontext* c) {
  if (g.pushed.empty()) return CUDA_ERROR_INVALID_CONTEXT;
  *c = g.current;
  g.current = g.pushed.back();
  g.pushed.pop_back();
  return CUDA_SUCCESS;
}
CUresult f_event_create(CUevent* e, unsigned) {
  g.event_ctx.push_back(g.current);
  g.event_done.push_back(false);
  *e = reinterpret_cast<CUevent>(g.event_done.size());
  return CUDA_SUCCESS;
}
CUresult f_event_record(CUevent e, CUstream) {
  if (g.check_contexts && g.event_ctx[reinterpret_cast<std::uintptr_t>(e) - 1] != kExecCtx) return CUDA_ERROR_INVALID_HANDLE;
  g.event_done[reinterpret_cast<std::uintptr_t>(e) - 1] = false;  // re-recorded: in flight again
  g.events_recorded.insert(reinterpret_cast<std::uintptr_t>(e));
  return CUDA_SUCCESS;
}
CUresult f_event_query(CUevent e) {
  return g.event_done[reinterpret_cast<std::uintptr_t>(e) - 1] ? CUDA_SUCCESS : CUDA_ERROR_NOT_READY;
}
CUresult f_wait(CUstream s, CUevent e, unsigned) {
  g.ops.push_back("wait@" + sname(s) + ":" + std::to_string(reinterpret_cast<std::uintptr_t>(e)));
  return CUDA_SUCCESS;
}
CUresult f_copy(CUdeviceptr, CUdeviceptr, size_t, CUstream s) {
  g.ops.push_back("copy@" + sname(s));
  return CUDA_SUCCESS;
}
CUresult f_reserve(CUdeviceptr* p, size_t n, size_t, CUdeviceptr, unsigned long long) {
  *p = g.next_va;
  g.next_va += n;
  g.reserved[*p] = n;
  return CUDA_SUCCESS;
}
CUresult f_address_free(CUdeviceptr p, size_t) { return g.reserved.erase(p) ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE; }
CUresult f_create(CUmemGenericAllocationHandle* h, size_t n, const CUmemAllocationProp* p, unsigned long long) {
  const bool host = p->location.type == CU_MEM_LOCATION_TYPE_HOST;
  if (!host && g.device_bytes() + n > g.device_capacity) return CUDA_ERROR_OUT_OF_MEMORY;
  *h = g.next_handle++;
  g.handles[*h] = {n, host};
  g.device_peak = std::max(g.device_peak, g.device_bytes());
  return CUDA_SUCCESS;
}
CUresult f_release(CUmemGenericAllocationHandle h) {
  for (const auto& [at, x] : g.mapped)
    if (x == h) return CUDA_ERROR_INVALID_VALUE;  // still mapped
  g.ops.push_back("release");
  return g.handles.erase(h) ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}
CUresult f_map(CUdeviceptr at, size_t, size_t, CUmemGenericAllocationHandle h, unsigned long long) {
  if (g.fail_map_after == 0) {
    g.fail_map_after = -1;
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  if (g.fail_map_after > 0) --g.fail_map_after;
  if (g.mapped.count(at) != 0 || g.handles.count(h) == 0) return CUDA_ERROR_INVALID_VALUE;
  g.mapped[at] = h;
  return CUDA_SUCCESS;
}
CUresult f_unmap(CUdeviceptr at, size_t) {
  g.accessible.erase(at);
  return g.mapped.erase(at) ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}
CUresult f_access(CUdeviceptr at, size_t, const CUmemAccessDesc*, size_t) {
  g.accessible.insert(at);
  return CUDA_SUCCESS;
}

Api fake_api() {
  Api a;
  a.mem_alloc_managed = f_alloc_managed;
  a.mem_free = f_free;
  a.mem_prefetch = f_prefetch;
  a.mem_discard = f_discard;
  a.event_create = f_event_create;
  a.ctx_get_current = f_ctx_get_current;
  a.ctx_push = f_ctx_push;
  a.ctx_pop = f_ctx_pop;
  a.event_record = f_event_record;
  a.event_query = f_event_query;
  a.stream_wait_event = f_wait;
  a.memcpy_async = f_copy;
  a.address_reserve = f_reserve;
  a.address_free = f_address_free;
  a.mem_create = f_create;
  a.mem_release = f_release;
  a.mem_map = f_map;
  a.mem_unmap = f_unmap;
  a.mem_set_access = f_access;
  return a;
}

const CUstream kOut = reinterpret_cast<CUstream>(0xa1), kIn = reinterpret_cast<CUstream>(0xb2),
               kJob = reinterpret_cast<CUstream>(0xc3);

class BlockMemoryTest : public ::testing::Test {
 protected:
  void SetUp() override {
    g = Fake{};
    api = fake_api();
    events.init(&api, nullptr);
    ledger.budget = 64ull << 20;
    ctx.api = &api;
    ctx.events = &events;
    ctx.ledger = &ledger;
    ctx.out = kOut;
    ctx.in = kIn;
    pool.configure(&api, kGran, 1ull << 30);
    managed = make_managed_memory(ctx, kPage);
    chunks.configure(&api, 0);
    ledger.watch_idle(&chunks, &ctx.managed_out_bytes);
    vmm = make_vmm_memory(ctx, kGran, pool, chunks);
  }
  void complete(Ev e) { g.event_done[reinterpret_cast<std::uintptr_t>(events.handle(e)) - 1] = true; }
  bool has(const std::string& op) const {
    for (const auto& o : g.ops)
      if (o == op) return true;
    return false;
  }
  CUmemGenericAllocationHandle at(CUdeviceptr p) const {
    auto it = g.mapped.find(p);
    return it == g.mapped.end() ? 0 : it->second;
  }
  bool host_handle(CUmemGenericAllocationHandle h) const { return g.handles.at(h).host; }

  Api api;
  EventPool events;
  Ledger ledger;
  MoveContext ctx;
  HostPool pool;
  DeviceChunks chunks;
  std::unique_ptr<BlockMemory> managed, vmm;
};

TEST_F(BlockMemoryTest, ManagedMovesAreStreamOrderedAndTheLedgerFollowsThem) {
  Block b;
  b.bytes = 100000;
  ASSERT_EQ(managed->create(b, false), CUDA_SUCCESS);
  EXPECT_EQ(b.span, 2 * kPage);
  EXPECT_EQ(b.where, Where::Fresh);
  EXPECT_EQ(ledger.resident(), 0u);
  // A first touch is populated on the stream of the work that needs it, not on `in`; that work
  // follows the fill on its stream, so no event marks the fill and the block is on the device.
  g.ops.clear();
  const std::size_t recorded = g.events_recorded.size();
  ASSERT_TRUE(managed->prefetch(b, false, &kJob));
  EXPECT_TRUE(has("prefetch-dev@" + sname(kJob)));
  EXPECT_EQ(g.ops.size(), 1u) << "the fill alone: no wait";
  EXPECT_EQ(g.events_recorded.size(), recorded) << "no event recorded";
  EXPECT_EQ(b.where, Where::Device);
  EXPECT_FALSE(b.ready);
  EXPECT_TRUE(managed->movable(b));  // it may be moved out again
  EXPECT_EQ(ledger.resident(), b.span);
  // Evicted: the ledger frees it at once, the move is on `out`, and its move back in waits for it.
  ASSERT_TRUE(managed->evict(b));
  EXPECT_EQ(b.where, Where::Host);
  EXPECT_EQ(ledger.resident(), 0u);
  EXPECT_TRUE(has("prefetch-host@" + sname(kOut)));
  const Ev out = b.ready;
  ASSERT_TRUE(out);
  g.ops.clear();
  ASSERT_TRUE(managed->prefetch(b, true, &kJob));  // with data: on `in`, after its own move out
  EXPECT_TRUE(has("wait@" + sname(kIn) + ":" + std::to_string(reinterpret_cast<std::uintptr_t>(events.handle(out)))));
  EXPECT_TRUE(has("prefetch-dev@" + sname(kIn)));
  EXPECT_EQ(b.where, Where::Incoming);
}

TEST_F(BlockMemoryTest, ManagedMovesInWaitForJustEnoughMovesOut) {
  ledger.budget = 4 * kPage;
  Block a, b, c;
  for (Block* x : {&a, &b, &c}) {
    x->bytes = kPage;
    ASSERT_EQ(managed->create(*x, false), CUDA_SUCCESS);
    ASSERT_TRUE(managed->prefetch(*x, false, &kJob));
    managed->complete_prefetch(*x, kJob);
  }
  ASSERT_TRUE(managed->evict(a));
  ASSERT_TRUE(managed->evict(b));
  EXPECT_EQ(ledger.resident(), kPage);
  // Two pages more fit the budget only once one of the two moves out landed: the first one.
  Block d, e2;
  d.bytes = e2.bytes = 2 * kPage;
  ASSERT_EQ(managed->create(d, false), CUDA_SUCCESS);
  ledger.move(d, Where::Incoming);  // counted, as prefetch counts it before it looks for room
  const Ev room = room_after_managed_outs(ctx);
  ASSERT_TRUE(room);
  EXPECT_EQ(events.handle(room), events.handle(ctx.managed_outs.front().first));
  complete(ctx.managed_outs.front().first);
  EXPECT_FALSE(room_after_managed_outs(ctx));  // landed: nothing left to wait for
  EXPECT_EQ(ctx.managed_outs.size(), 1u);
}

TEST_F(BlockMemoryTest, ManagedDiscardAtAFreeLeavesNothingToMoveBack) {
  Block b;
  b.bytes = kPage;
  ASSERT_EQ(managed->create(b, false), CUDA_SUCCESS);
  ASSERT_TRUE(managed->prefetch(b, false, &kJob));
  managed->complete_prefetch(b, kJob);
  Ev done;
  ASSERT_TRUE(managed->discard_dead(b, done));
  ASSERT_TRUE(done);
  EXPECT_TRUE(has("discard@" + sname(kOut)));
  EXPECT_EQ(b.where, Where::Fresh);
  EXPECT_EQ(ledger.resident(), 0u);
  events.unref(done);
}

TEST_F(BlockMemoryTest, VmmEvictionCopiesOutThenSwapsTheMappings) {
  Block b;
  b.bytes = 2 * kGran;
  ASSERT_EQ(vmm->create(b, true), CUDA_SUCCESS);
  ASSERT_EQ(b.where, Where::Device);
  const CUmemGenericAllocationHandle dev = at(b.base);
  ASSERT_NE(dev, 0u);
  EXPECT_FALSE(host_handle(dev));
  EXPECT_EQ(ledger.resident(), 2 * kGran);
  EXPECT_TRUE(vmm->movable(b));
  ASSERT_TRUE(vmm->evict(b));
  EXPECT_EQ(b.where, Where::Evicting);
  EXPECT_FALSE(vmm->movable(b));  // already on its way out
  EXPECT_TRUE(b.staging_mapped);
  EXPECT_EQ(at(b.base), dev);  // still the device chunk while the copy runs
  ASSERT_NE(at(b.base + b.span), 0u);
  EXPECT_TRUE(host_handle(at(b.base + b.span)));
  EXPECT_TRUE(has("copy@" + sname(kOut)));
  EXPECT_EQ(ledger.resident(), 2 * kGran);  // held until the copy ends
  complete(b.ready);
  vmm->complete_evict(b);
  EXPECT_EQ(b.where, Where::Host);
  ASSERT_NE(at(b.base), 0u);
  EXPECT_TRUE(host_handle(at(b.base)));  // the host copy at the tensor's own address
  EXPECT_EQ(at(b.base + b.span), 0u);
  EXPECT_EQ(ledger.resident(), 0u);
  // The device chunk, unmapped, waits idle (uncharged, within the budget) for the move back.
  EXPECT_EQ(g.handles.count(dev), 1u);
  EXPECT_EQ(chunks.idle_bytes(), 2 * kGran);
  EXPECT_EQ(g.device_bytes(), 2 * kGran);
  // Back in: a device chunk at staging (the same one, no new one), copied into, then swapped
  // to the address.
  ASSERT_TRUE(vmm->prefetch(b, true, nullptr));
  EXPECT_EQ(at(b.base + b.span), dev);
  EXPECT_EQ(chunks.idle_bytes(), 0u);
  EXPECT_EQ(chunks.created(), 1u);
  EXPECT_EQ(chunks.reused(), 1u);
  EXPECT_EQ(b.where, Where::Incoming);
  EXPECT_TRUE(vmm->host_completes(b));  // the mappings swap on the host once the copy ended
  EXPECT_TRUE(host_handle(at(b.base)));
  EXPECT_FALSE(host_handle(at(b.base + b.span)));
  complete(b.ready);
  vmm->complete_prefetch(b, kJob);
  EXPECT_EQ(b.where, Where::Device);
  EXPECT_FALSE(host_handle(at(b.base)));
  EXPECT_EQ(at(b.base + b.span), 0u);
  EXPECT_EQ(pool.free_bytes(), pool.bytes());  // the host pieces went back to the pool
}

// Idle device chunks never take the device past the budget: a chunk of another span is
// created only once idle ones make room for it, and a charge of any kind (here a managed
// block moving in) releases the idle chunks past what it leaves.
TEST_F(BlockMemoryTest, VmmIdleChunksStayWithinTheBudget) {
  ledger.budget = 4 * kGran;
  Block a, b;
  a.bytes = 2 * kGran;
  b.bytes = 2 * kGran;
  ASSERT_EQ(vmm->create(a, true), CUDA_SUCCESS);
  ASSERT_EQ(vmm->create(b, true), CUDA_SUCCESS);
  for (Block* x : {&a, &b}) {
    ASSERT_TRUE(vmm->evict(*x));
    complete(x->ready);
    vmm->complete_evict(*x);
    ASSERT_EQ(x->where, Where::Host);
  }
  EXPECT_EQ(ledger.resident(), 0u);
  EXPECT_EQ(chunks.idle_bytes(), 4 * kGran);
  EXPECT_EQ(g.device_bytes(), 4 * kGran);
  // A 3-granule tensor: no idle chunk of its span; both idle ones go before it is created
  // (one would leave 1 granule, less than the 2 it holds).
  Block c;
  c.bytes = 3 * kGran;
  ASSERT_EQ(vmm->create(c, true), CUDA_SUCCESS);
  ASSERT_EQ(c.where, Where::Device);
  EXPECT_EQ(chunks.idle_bytes(), 0u);
  EXPECT_EQ(g.device_bytes(), 3 * kGran);
  EXPECT_LE(g.device_peak, ledger.budget);
  // c's chunk idle again; a managed block of 2 granules charged: 1 granule of room is left, so
  // the 3-granule chunk goes.
  ASSERT_TRUE(vmm->evict(c));
  complete(c.ready);
  vmm->complete_evict(c);
  EXPECT_EQ(chunks.idle_bytes(), 3 * kGran);
  Block m;
  m.bytes = 2 * kGran;
  ASSERT_EQ(managed->create(m, false), CUDA_SUCCESS);
  ASSERT_TRUE(managed->prefetch(m, false, &kJob));
  EXPECT_EQ(ledger.resident(), 2 * kGran);
  EXPECT_EQ(chunks.idle_bytes(), 0u);
  EXPECT_EQ(g.device_bytes(), 0u);
  // A lower budget: trim_idle() leaves only what fits beside the charged bytes.
  Block d;
  d.bytes = kGran;
  ASSERT_EQ(vmm->create(d, true), CUDA_SUCCESS);
  vmm->drop(d);
  EXPECT_EQ(chunks.idle_bytes(), kGran);
  ledger.budget = 2 * kGran;
  ledger.trim_idle();
  EXPECT_EQ(chunks.idle_bytes(), 0u);
  EXPECT_EQ(g.device_bytes(), 0u);
}

// A device with less free memory than the budget says (memory the executor does not serve):
// where the driver has no memory for a new chunk, the idle ones go and it is asked again.
TEST_F(BlockMemoryTest, VmmIdleChunksGoWhenTheDriverHasNoMemory) {
  ledger.budget = 8 * kGran;
  g.device_capacity = 4 * kGran;
  Block a, b;
  a.bytes = b.bytes = 2 * kGran;
  ASSERT_EQ(vmm->create(a, true), CUDA_SUCCESS);
  ASSERT_EQ(vmm->create(b, true), CUDA_SUCCESS);
  vmm->drop(a);
  vmm->drop(b);
  ASSERT_EQ(chunks.idle_bytes(), 4 * kGran);  // within the budget: kept
  Block c;
  c.bytes = 3 * kGran;
  ASSERT_EQ(vmm->create(c, true), CUDA_SUCCESS);
  EXPECT_EQ(c.where, Where::Device);  // not host pieces
  EXPECT_EQ(chunks.idle_bytes(), 0u);
  EXPECT_EQ(g.device_bytes(), 3 * kGran);
}

// A managed block populated for its recomputation is charged before its pages are asked for,
// so the idle chunks that charge releases are gone before the pages land (the driver runs the
// prefetch on its stream at once: simcuda found the device full and evicted managed pages).
TEST_F(BlockMemoryTest, ManagedFillReleasesIdleDeviceChunksBeforeItsPagesAreAskedFor) {
  ledger.budget = 2 * kGran;
  Block v;
  v.bytes = 2 * kGran;
  ASSERT_EQ(vmm->create(v, true), CUDA_SUCCESS);
  vmm->drop(v);
  ASSERT_EQ(chunks.idle_bytes(), 2 * kGran);
  Block m;
  m.bytes = kPage;
  ASSERT_EQ(managed->create(m, false), CUDA_SUCCESS);
  g.ops.clear();
  ASSERT_EQ(managed->fill(m, true, kJob), CUDA_SUCCESS);
  EXPECT_EQ(chunks.idle_bytes(), 0u);
  ASSERT_EQ(g.ops.size(), 2u);
  EXPECT_EQ(g.ops[0], "release");
  EXPECT_EQ(g.ops[1], "prefetch-dev@" + sname(kJob));
}

TEST_F(BlockMemoryTest, VmmAFailedMapLeavesTheTensorResidentAndMapped) {
  Block b;
  b.bytes = kGran;
  ASSERT_EQ(vmm->create(b, true), CUDA_SUCCESS);
  const CUmemGenericAllocationHandle dev = at(b.base);
  ASSERT_TRUE(vmm->evict(b));
  complete(b.ready);
  g.fail_map_after = 0;  // mapping the host copy at the address fails
  vmm->complete_evict(b);
  EXPECT_EQ(b.where, Where::Device);
  EXPECT_EQ(at(b.base), dev);  // the device chunk is back where it was
  EXPECT_EQ(ledger.resident(), kGran);
}

TEST_F(BlockMemoryTest, VmmACancelledEvictionRetiresItsPiecesOnlyAfterTheCopy) {
  Block b;
  b.bytes = kGran;
  ASSERT_EQ(vmm->create(b, true), CUDA_SUCCESS);
  ASSERT_TRUE(vmm->evict(b));
  const Ev copy = events.ref(b.ready);
  vmm->cancel_evict(b);
  EXPECT_EQ(b.where, Where::Device);
  EXPECT_FALSE(b.retiring.empty());
  EXPECT_NE(at(b.base + b.span), 0u);    // the copy may still write them
  EXPECT_FALSE(vmm->evict(b));           // the staging range is not free yet
  complete(copy);
  ASSERT_TRUE(vmm->evict(b));            // retired, then evicted again
  EXPECT_TRUE(b.retiring.empty());
  Ev c = copy;
  events.unref(c);
}

TEST_F(BlockMemoryTest, VmmDropAndFillForARecomputation) {
  Block b;
  b.bytes = kGran;
  ASSERT_EQ(vmm->create(b, true), CUDA_SUCCESS);
  vmm->drop(b);
  EXPECT_EQ(b.where, Where::Dropped);
  EXPECT_EQ(at(b.base), 0u);
  EXPECT_EQ(ledger.resident(), 0u);
  ASSERT_EQ(vmm->fill(b, false, nullptr), CUDA_SUCCESS);  // no room: host pieces the replay writes
  EXPECT_EQ(b.where, Where::Host);
  EXPECT_TRUE(host_handle(at(b.base)));
  vmm->drop(b);
  ASSERT_EQ(vmm->fill(b, true, nullptr), CUDA_SUCCESS);
  EXPECT_EQ(b.where, Where::Device);
  EXPECT_FALSE(host_handle(at(b.base)));
  vmm->release(b);
  EXPECT_TRUE(g.mapped.empty());
  EXPECT_TRUE(g.reserved.empty());
  EXPECT_EQ(ledger.resident(), 0u);
}

// A thread with another device current (cudaSetDevice) may be the one that makes the pool
// grow: the event is still created in the executor's context, so it records on the executor's
// streams (cuEventRecord: "hEvent and hStream must be from the same context"), and the
// thread's own context is current again afterwards.
TEST_F(BlockMemoryTest, EventsAreCreatedInTheExecutorsContext) {
  g.check_contexts = true;
  events.init(&api, kExecCtx);
  g.current = kOtherCtx;
  Ev e = events.record(kOut);
  EXPECT_TRUE(e);
  EXPECT_EQ(g.current, kOtherCtx);
  EXPECT_TRUE(g.pushed.empty());
  g.current = kExecCtx;  // and no visit when it is current already
  Ev f = events.record(kIn);
  EXPECT_TRUE(f);
  EXPECT_EQ(g.event_ctx.size(), 2u);
  events.unref(e);
  events.unref(f);
}

}  // namespace
}  // namespace capuchin::interpose::exec
