// bench_gpu_calls: the host time of one call of each driver entry point the executor makes
// around a job's work (event records, queries and waits; the current device; the UVM moves
// and the discard of a freed block), on a real driver. bench_host_cost counts these calls per
// iteration against a null driver, which returns at once; this prices them, so the counts can
// be read as host time (scripts/gpu-check.sh reports it, never judges it).
//
// Each figure is the median, over 7 runs, of a run's mean ns per call: 20,000 calls per run
// (2,000 for the UVM moves, each of 64 KiB of managed memory, the executor's page, each run
// starting with every block on the side it moves from; a run ends with a synchronisation,
// outside the timed loop). The events and streams are idle when
// queried or waited for, as the executor mostly finds them. Driver entry points come through
// cudaGetDriverEntryPointByVersion (capuchin's own path is its dlsym/cuGetProcAddress tables).
//
// Output: `call <name> ns <median>` per entry point; `call <name> unavailable` when the driver
// lacks one (cuMemDiscardBatchAsync: cudaTypedefs.h's PFN_cuMemDiscardBatchAsync_v13000).
// Exit 77 with no GPU, 1 on a CUDA error.
#include <cuda.h>
#include <cuda_runtime_api.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <vector>

#include "../../tests/gpu/gpu_common.cuh"

namespace {

using EventRecord = CUresult (*)(CUevent, CUstream);
using EventQuery = CUresult (*)(CUevent);
using StreamWaitEvent = CUresult (*)(CUstream, CUevent, unsigned);
using StreamQuery = CUresult (*)(CUstream);
using CtxGetDevice = CUresult (*)(CUdevice*);
using PrefetchV2 = CUresult (*)(CUdeviceptr, size_t, CUmemLocation, unsigned, CUstream);
using DiscardBatch = CUresult (*)(CUdeviceptr*, size_t*, size_t, unsigned long long, CUstream);

constexpr size_t kPage = 64 * 1024;  // the executor's managed block granule (CAPUCHIN_UVM_PAGE)

void ok(CUresult r, const char* what) {
  if (r == CUDA_SUCCESS) return;
  std::printf("FAIL %s: CUresult %d\n", what, static_cast<int>(r));
  std::exit(1);
}

// Prints `call NAME ns M`: M the median over 7 runs of a run's mean ns per `call(i)`, i from 0
// to per_run - 1. `before_run` comes before each run and a synchronisation after it, untimed;
// one untimed run first warms the path up.
template <class Before, class Call>
void measure(const char* name, int per_run, Before&& before_run, Call&& call) {
  using Clock = std::chrono::steady_clock;
  std::vector<double> runs;
  for (int r = 0; r < 8; ++r) {
    before_run();
    const auto t0 = Clock::now();
    for (int i = 0; i < per_run; ++i) call(i);
    const auto t1 = Clock::now();
    GPU_CK(cudaDeviceSynchronize());
    if (r > 0) runs.push_back(std::chrono::duration<double, std::nano>(t1 - t0).count() / per_run);
  }
  std::sort(runs.begin(), runs.end());
  std::printf("call %s ns %.1f\n", name, runs[runs.size() / 2]);
  std::fflush(stdout);
}

}  // namespace

int main() {
  gpu_check::require_gpu_or_skip("bench_gpu_calls");
  GPU_CK(cudaFree(nullptr));  // the primary context, current
  auto record = gpu_check::driver_entry<EventRecord>("cuEventRecord");
  auto query = gpu_check::driver_entry<EventQuery>("cuEventQuery");
  auto wait = gpu_check::driver_entry<StreamWaitEvent>("cuStreamWaitEvent");
  auto stream_query = gpu_check::driver_entry<StreamQuery>("cuStreamQuery");
  auto get_device = gpu_check::driver_entry<CtxGetDevice>("cuCtxGetDevice");
  auto prefetch = gpu_check::driver_entry_or_null<PrefetchV2>("cuMemPrefetchAsync", 12020);
  auto discard = gpu_check::driver_entry_or_null<DiscardBatch>("cuMemDiscardBatchAsync", 13000);  // cudaTypedefs.h: PFN_..._v13000

  cudaStream_t s = nullptr, s2 = nullptr;
  GPU_CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  GPU_CK(cudaStreamCreateWithFlags(&s2, cudaStreamNonBlocking));
  cudaEvent_t ev = nullptr;
  GPU_CK(cudaEventCreateWithFlags(&ev, cudaEventDisableTiming));
  const auto cs = reinterpret_cast<CUstream>(s), cs2 = reinterpret_cast<CUstream>(s2);
  const auto ce = reinterpret_cast<CUevent>(ev);
  auto sync = [&] { GPU_CK(cudaDeviceSynchronize()); };
  auto nothing = [] {};

  measure("cuEventRecord", 20000, nothing, [&](int) { ok(record(ce, cs), "cuEventRecord"); });
  measure("cuEventQuery", 20000, nothing, [&](int) { (void)query(ce); });  // complete: recorded on an idle stream
  measure("cuStreamWaitEvent", 20000, nothing, [&](int) { ok(wait(cs2, ce, 0), "cuStreamWaitEvent"); });
  measure("cuStreamQuery", 20000, nothing, [&](int) { (void)stream_query(cs); });
  CUdevice dev = 0;
  measure("cuCtxGetDevice", 20000, nothing, [&](int) { ok(get_device(&dev), "cuCtxGetDevice"); });

  int device = 0, concurrent = 0;
  GPU_CK(cudaGetDevice(&device));
  GPU_CK(cudaDeviceGetAttribute(&concurrent, cudaDevAttrConcurrentManagedAccess, device));
  if (prefetch == nullptr || concurrent == 0) {
    std::printf("call cuMemPrefetchAsync(64KiB,to-host) unavailable\ncall cuMemPrefetchAsync(64KiB,to-device) unavailable\ncall cuMemDiscardBatchAsync+cuMemPrefetchAsync(64KiB) unavailable\n");
    return 0;
  }
  const int blocks = 2000;  // one 64 KiB block per call
  void* managed = nullptr;
  GPU_CK(cudaMallocManaged(&managed, kPage * blocks));
  const auto base = reinterpret_cast<CUdeviceptr>(managed);
  const CUmemLocation to_dev{CU_MEM_LOCATION_TYPE_DEVICE, device}, to_host{CU_MEM_LOCATION_TYPE_HOST, 0};
  GPU_CK(cudaMemset(managed, 1, kPage * blocks));  // populated
  sync();
  // Each run starts with every block on `from` (one bulk prefetch, untimed), so each timed call
  // moves its block.
  auto uvm_row = [&](const char* name, CUmemLocation from, auto&& move) {
    measure(name, blocks, [&] {
      ok(prefetch(base, kPage * blocks, from, 0, cs), "cuMemPrefetchAsync (all)");
      sync();
    }, [&](int i) { move(base + kPage * static_cast<size_t>(i)); });
  };
  uvm_row("cuMemPrefetchAsync(64KiB,to-host)", to_dev,
          [&](CUdeviceptr p) { ok(prefetch(p, kPage, to_host, 0, cs), "cuMemPrefetchAsync (to host)"); });
  uvm_row("cuMemPrefetchAsync(64KiB,to-device)", to_host,
          [&](CUdeviceptr p) { ok(prefetch(p, kPage, to_dev, 0, cs), "cuMemPrefetchAsync (to device)"); });
  if (discard == nullptr) {
    std::printf("call cuMemDiscardBatchAsync+cuMemPrefetchAsync(64KiB) unavailable\n");
  } else {
    // A freed block's discard and its fill at the reuse, as the executor makes them (there on two
    // streams: the discard on its out stream, the fill on the job's): per pair.
    uvm_row("cuMemDiscardBatchAsync+cuMemPrefetchAsync(64KiB)", to_dev, [&](CUdeviceptr p) {
      size_t n = kPage;
      ok(discard(&p, &n, 1, 0, cs), "cuMemDiscardBatchAsync");
      ok(prefetch(p, kPage, to_dev, 0, cs), "cuMemPrefetchAsync (fill)");
    });
  }
  GPU_CK(cudaFree(managed));
  GPU_CK(cudaEventDestroy(ev));
  GPU_CK(cudaStreamDestroy(s));
  GPU_CK(cudaStreamDestroy(s2));
  return 0;
}
