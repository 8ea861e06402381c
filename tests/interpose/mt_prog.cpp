// mt_prog: launches from several host threads through the driver, reached as vendor
// libraries reach it (dlopen("libcuda.so.1") + dlsym("cuGetProcAddress_v2") + cuGetProcAddress),
// then forks a child that launches too. Run under LD_PRELOAD=libcapuchin.so on simcuda.
//
// Usage: interpose_mt_prog THREADS LAUNCHES_PER_THREAD [fork|graph|vmm]
// vmm: also creates and maps device memory of its own twice (cuMemCreate + cuMemMap).
// graph: also captures 2 launches on a created stream (one in the `extra` packed-buffer
// form) into a graph, instantiates it and launches it 3 times: 6 more kernels recorded.
// Each launch passes 4 pointers: two per-thread buffers, one shared buffer and an interior
// pointer into the first buffer, so each recorded kernel must touch exactly 3 allocations.
// Each launch is followed by a cuCtxSynchronize (the CUDA 13 ABI, cuCtxSynchronize_v2, from
// cuGetProcAddress at 13000), and 3 more through dlsym("cuCtxSynchronize_v2") end the run.
// Prints "mt_prog ok kernels=N" (parent's launches) and exits 0 when every call succeeded.
#include <cuda.h>
#include <cudaTypedefs.h>
#include <dlfcn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>
#include <vector>

#include "simcuda/simcuda.h"

namespace {

using GetProc = CUresult (*)(const char*, void**, int, cuuint64_t, CUdriverProcAddressQueryResult*);
GetProc g_gpa = nullptr;

template <class F>
F proc(const char* name) {
  void* p = nullptr;
  CUdriverProcAddressQueryResult st{};
  if (g_gpa(name, &p, 13000, CU_GET_PROC_ADDRESS_DEFAULT, &st) != CUDA_SUCCESS || p == nullptr) {
    std::fprintf(stderr, "mt_prog: no %s\n", name);
    std::exit(1);
  }
  return reinterpret_cast<F>(p);
}

void body(void**, const simcuda_launch_info*) {}

#define CHECK(call)                                                             \
  do {                                                                          \
    CUresult r_ = (call);                                                       \
    if (r_ != CUDA_SUCCESS) {                                                   \
      std::fprintf(stderr, "mt_prog: %s failed: %d\n", #call, static_cast<int>(r_)); \
      std::exit(1);                                                             \
    }                                                                           \
  } while (0)

}  // namespace

int main(int argc, char** argv) {
  if (argc < 3) return 2;
  const int threads = std::atoi(argv[1]), per_thread = std::atoi(argv[2]);
  const bool do_fork = argc > 3 && std::strcmp(argv[3], "fork") == 0;
  const bool do_graph = argc > 3 && std::strcmp(argv[3], "graph") == 0;
  const bool do_vmm = argc > 3 && std::strcmp(argv[3], "vmm") == 0;
  void* h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (h == nullptr) return std::fprintf(stderr, "mt_prog: %s\n", dlerror()), 1;
  g_gpa = reinterpret_cast<GetProc>(dlsym(h, "cuGetProcAddress_v2"));
  if (g_gpa == nullptr) return 1;
  auto cu_init = proc<CUresult (*)(unsigned)>("cuInit");
  auto retain = proc<CUresult (*)(CUcontext*, CUdevice)>("cuDevicePrimaryCtxRetain");
  auto set_current = proc<CUresult (*)(CUcontext)>("cuCtxSetCurrent");
  auto mem_alloc = proc<CUresult (*)(CUdeviceptr*, size_t)>("cuMemAlloc");
  auto mem_free = proc<CUresult (*)(CUdeviceptr)>("cuMemFree");
  auto launch = proc<CUresult (*)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                                  CUstream, void**, void**)>("cuLaunchKernel");
  auto sync = proc<PFN_cuCtxSynchronize_v13000>("cuCtxSynchronize");  // at 13000: (CUcontext)
  auto reg = proc<CUfunction (*)(const simcuda_kernel_desc*)>("simcuda_register_kernel");
  CHECK(cu_init(0));
  CUcontext ctx = nullptr;
  CHECK(retain(&ctx, 0));
  CHECK(set_current(ctx));
  const size_t offsets[] = {0, 8, 16, 24}, sizes[] = {8, 8, 8, 8};
  simcuda_kernel_desc desc{"mt_kernel", nullptr, 4, offsets, sizes, body, 0};
  CUfunction f = reg(&desc);
  if (f == nullptr) return 1;
  CUdeviceptr shared = 0;
  CHECK(mem_alloc(&shared, 1 << 16));

  auto work = [&](int n) {
    CHECK(set_current(ctx));
    for (int i = 0; i < n; ++i) {
      CUdeviceptr a = 0, b = 0;
      CHECK(mem_alloc(&a, 4096));
      CHECK(mem_alloc(&b, 8192));
      CUdeviceptr inner = a + 64;
      void* params[] = {&a, &b, &shared, &inner};
      CHECK(launch(f, 1, 1, 1, 32, 1, 1, 0, nullptr, params, nullptr));
      CHECK(sync(ctx));
      CHECK(mem_free(a));
      CHECK(mem_free(b));
    }
  };
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t) pool.emplace_back(work, per_thread);
  for (auto& t : pool) t.join();
  if (do_fork) {
    std::fflush(stdout);
    const pid_t pid = fork();
    if (pid == 0) {
      // The child: the interposer re-initialised (no recording without %p) and must stay a
      // transparent pass-through. It touches only host-side entry points (CUDA after fork
      // is undefined on real drivers) and starts no thread (TSan cannot follow threads
      // created after a multi-threaded fork).
      std::_Exit(dlsym(h, "cuMemAlloc_v2") != nullptr && dlsym(h, "cuGetProcAddress_v2") != nullptr ? 0 : 1);
    }
    int status = 0;
    if (waitpid(pid, &status, 0) != pid || !WIFEXITED(status) || WEXITSTATUS(status) != 0) {
      std::fprintf(stderr, "mt_prog: child failed\n");
      return 1;
    }
    work(5);  // the parent keeps capturing after the fork
  }
  if (do_graph) {
    auto stream_create = proc<CUresult (*)(CUstream*, unsigned)>("cuStreamCreate");
    auto begin = proc<CUresult (*)(CUstream, CUstreamCaptureMode)>("cuStreamBeginCapture");
    auto end = proc<CUresult (*)(CUstream, CUgraph*)>("cuStreamEndCapture");
    auto instantiate = proc<CUresult (*)(CUgraphExec*, CUgraph, unsigned long long)>("cuGraphInstantiate");
    auto graph_launch = proc<CUresult (*)(CUgraphExec, CUstream)>("cuGraphLaunch");
    auto stream_sync = proc<CUresult (*)(CUstream)>("cuStreamSynchronize");
    CUstream s = nullptr;
    CHECK(stream_create(&s, 0));
    CUdeviceptr a = 0, b = 0;
    CHECK(mem_alloc(&a, 4096));
    CHECK(mem_alloc(&b, 4096));
    CUdeviceptr inner = a + 8;
    CHECK(begin(s, CU_STREAM_CAPTURE_MODE_GLOBAL));
    void* params[] = {&a, &b, &shared, &inner};
    CHECK(launch(f, 1, 1, 1, 32, 1, 1, 0, s, params, nullptr));
    CUdeviceptr packed[4] = {b, a, shared, b + 16};
    size_t packed_size = sizeof packed;
    void* extra[] = {CU_LAUNCH_PARAM_BUFFER_POINTER, packed, CU_LAUNCH_PARAM_BUFFER_SIZE, &packed_size,
                     CU_LAUNCH_PARAM_END};
    CHECK(launch(f, 1, 1, 1, 32, 1, 1, 0, s, nullptr, extra));
    CUgraph g = nullptr;
    CHECK(end(s, &g));
    CUgraphExec exec = nullptr;
    CHECK(instantiate(&exec, g, 0));
    for (int i = 0; i < 3; ++i) CHECK(graph_launch(exec, s));
    CHECK(stream_sync(s));
    CHECK(proc<CUresult (*)(CUgraphExec)>("cuGraphExecDestroy")(exec));
    CHECK(proc<CUresult (*)(CUgraph)>("cuGraphDestroy")(g));
    CHECK(proc<CUresult (*)(CUstream)>("cuStreamDestroy")(s));
    CHECK(mem_free(a));
    CHECK(mem_free(b));
  }
  if (do_vmm) {
    // Device memory of the program's own making, twice: reserve, create, map, access, and back.
    auto reserve = proc<PFN_cuMemAddressReserve_v10020>("cuMemAddressReserve");
    auto create = proc<PFN_cuMemCreate_v10020>("cuMemCreate");
    auto map = proc<PFN_cuMemMap_v10020>("cuMemMap");
    auto set_access = proc<PFN_cuMemSetAccess_v10020>("cuMemSetAccess");
    auto unmap = proc<PFN_cuMemUnmap_v10020>("cuMemUnmap");
    auto release = proc<PFN_cuMemRelease_v10020>("cuMemRelease");
    auto address_free = proc<PFN_cuMemAddressFree_v10020>("cuMemAddressFree");
    constexpr size_t kGranule = 2u << 20;
    CUmemAllocationProp prop{};
    prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    prop.location = {CU_MEM_LOCATION_TYPE_DEVICE, 0};
    const CUmemAccessDesc access{{CU_MEM_LOCATION_TYPE_DEVICE, 0}, CU_MEM_ACCESS_FLAGS_PROT_READWRITE};
    for (int i = 0; i < 2; ++i) {
      CUdeviceptr va = 0;
      CUmemGenericAllocationHandle mh = 0;
      CHECK(reserve(&va, kGranule, 0, 0, 0));
      CHECK(create(&mh, kGranule, &prop, 0));
      CHECK(map(va, kGranule, 0, mh, 0));
      CHECK(set_access(va, kGranule, &access, 1));
      CHECK(unmap(va, kGranule));
      CHECK(release(mh));
      CHECK(address_free(va, kGranule));
    }
  }
  // CUDA 13's cuCtxSynchronize_v2(CUcontext) by its exported name, as dlsym finds it: wrapped
  // too, so these 3 syncs are in the trace.
  auto sync_v2 = reinterpret_cast<PFN_cuCtxSynchronize_v13000>(dlsym(h, "cuCtxSynchronize_v2"));
  if (sync_v2 == nullptr) return std::fprintf(stderr, "mt_prog: no cuCtxSynchronize_v2\n"), 1;
  for (int i = 0; i < 3; ++i) CHECK(sync_v2(ctx));
  CHECK(mem_free(shared));
  std::printf("mt_prog ok kernels=%d\n", threads * per_thread + (do_fork ? 5 : 0) + (do_graph ? 6 : 0));
  return 0;
}
