// kernels.cpp: the simcuda extension API (kernel registration, access declarations, stats),
// kernel execution on a stream worker, the SIGSEGV backstop and the process-wide Driver.
//
// Contract: a kernel body runs inside sigsetjmp; simcuda_access() on a range the device may not
// touch, or a real SIGSEGV raised by the body on the worker, jumps back out and the launch is
// reported as an illegal address (the caller makes it the context's sticky error). Bodies are
// therefore not unwound: they must not own heap objects across simcuda_access calls.
#include <setjmp.h>
#include <signal.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <nlohmann/json.hpp>

#include "internal.hpp"

namespace simcuda {
namespace {

struct KernelContext {
  sigjmp_buf env;
  double cost_ns = 0;
  double flops = 0;
  int device = 0;  // the device the kernel runs on
  bool faulted = false;
};

thread_local KernelContext* tls_kernel = nullptr;
struct sigaction g_previous_segv;

void on_segv(int sig, siginfo_t* info, void* uc) {
  KernelContext* k = tls_kernel;
  if (k != nullptr && !k->faulted) {
    k->faulted = true;
    siglongjmp(k->env, 2);
  }
  // Not a kernel's fault: hand it to whoever was there before (or crash as usual).
  if ((g_previous_segv.sa_flags & SA_SIGINFO) && g_previous_segv.sa_sigaction != nullptr) {
    g_previous_segv.sa_sigaction(sig, info, uc);
    return;
  }
  if (g_previous_segv.sa_handler != SIG_DFL && g_previous_segv.sa_handler != SIG_IGN) {
    g_previous_segv.sa_handler(sig);
    return;
  }
  signal(sig, SIG_DFL);  // returning re-executes the access and takes the default action
}

void install_segv_backstop() {
  const char* off = std::getenv("SIMCUDA_NO_SEGV_HANDLER");
  if (off != nullptr && *off != '\0' && *off != '0') return;
  struct sigaction sa {};
  sa.sa_sigaction = on_segv;
  sa.sa_flags = SA_SIGINFO | SA_NODEFER;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGSEGV, &sa, &g_previous_segv);
}

pid_t g_driver_pid = 0;  // the process whose device the statistics describe

// A forked child shares none of the parent's device work (CUDA cannot be used across fork):
// its exit writes nothing, so it neither clobbers the parent's statistics nor waits on locks
// a parent thread held at the fork.
void dump_stats_at_exit() {
  if (getpid() != g_driver_pid) return;
  const char* path = std::getenv("SIMCUDA_STATS_FILE");
  if (path != nullptr && *path != '\0') simcuda_write_stats_json(path);
}

}  // namespace

Driver& driver() {
  static Driver* instance = [] {
    auto* d = new Driver;  // never destroyed: workers may still run during exit
    install_segv_backstop();
    g_driver_pid = getpid();
    std::atexit(dump_stats_at_exit);
    return d;
  }();
  return *instance;
}

bool is_function(CUfunc_st* f) {
  Driver& d = driver();
  std::lock_guard<std::mutex> lock(d.kernels_mu);
  for (const auto& k : d.kernels)
    if (k.get() == f) return true;
  return false;
}

CUfunc_st* function_of_kernel(const void* h) {
  Driver& d = driver();
  std::lock_guard<std::mutex> lock(d.kernels_mu);
  for (const auto& k : d.kernels)
    if (&k->kernel == h) return k.get();
  return nullptr;
}

CUfunc_st* launchable(CUfunction h) {
  if (h == nullptr) return nullptr;
  if (is_function(h)) return h;
  return function_of_kernel(h);
}

double run_kernel(const OpPayload& op, bool* illegal_address) {
  CUfunc_st* f = op.func;
  std::vector<uint8_t> params = op.params;  // bodies may scribble on their arguments
  std::vector<void*> argv(f->param_offsets.size());
  for (size_t i = 0; i < argv.size(); ++i) argv[i] = params.data() + f->param_offsets[i];
  simcuda_launch_info info{};
  for (int i = 0; i < 3; ++i) {
    info.grid[i] = op.grid[i];
    info.block[i] = op.block[i];
  }
  info.shared_mem_bytes = op.shared_mem;
  info.kernel_name = f->name.c_str();
  KernelContext ctx;
  ctx.device = op.device;
  tls_kernel = &ctx;
  if (sigsetjmp(ctx.env, 1) == 0) {
    f->body(argv.data(), &info);
  } else {
    *illegal_address = true;
  }
  tls_kernel = nullptr;
  return SIMCUDA_KERNEL_LAUNCH_NS + f->fixed_ns + ctx.flops / SIMCUDA_FLOPS_PER_NS + ctx.cost_ns;
}

std::string stats_json() {
  simcuda_stats s{};
  simcuda_get_stats(&s);
  nlohmann::json j;
  j["capacity_bytes"] = s.capacity_bytes;
  j["device_bytes_in_use"] = s.device_bytes_in_use;
  j["peak_device_bytes"] = s.peak_device_bytes;
  j["managed_resident_bytes"] = s.managed_resident_bytes;
  j["uvm_faults"] = s.uvm_faults;
  j["uvm_evictions"] = s.uvm_evictions;
  j["bytes_htod"] = s.bytes_htod;
  j["bytes_dtoh"] = s.bytes_dtoh;
  j["bytes_dtod"] = s.bytes_dtod;
  j["kernels_launched"] = s.kernels_launched;
  j["kernels_executed"] = s.kernels_executed;
  j["max_stream_virtual_ns"] = s.max_stream_virtual_ns;
  j["sticky_error"] = s.sticky_error;
  nlohmann::json streams = nlohmann::json::array();
  for (const auto& [id, ns] : driver().scheduler.stream_clocks())
    streams.push_back({{"id", id}, {"virtual_ns", static_cast<uint64_t>(ns)}});
  j["streams"] = streams;
  nlohmann::json devices = nlohmann::json::array();
  for (int dev = 0; dev < device_count(); ++dev) {
    const DeviceUse u = driver().memory.device_use(dev);
    devices.push_back({{"device", dev}, {"bytes_in_use", u.used}, {"peak_bytes", u.peak},
                       {"managed_resident_bytes", u.managed_resident}});
  }
  j["devices"] = devices;
  return j.dump(2);
}

}  // namespace simcuda

using simcuda::driver;

extern "C" {

CUfunction simcuda_register_kernel(const simcuda_kernel_desc* desc) {
  if (desc == nullptr || desc->name == nullptr || desc->body == nullptr) return nullptr;
  if (desc->num_params > 0 && (desc->param_offsets == nullptr || desc->param_sizes == nullptr)) return nullptr;
  simcuda::Driver& d = driver();
  std::lock_guard<std::mutex> lock(d.kernels_mu);
  if (desc->host_stub != nullptr) {
    auto it = d.kernel_by_stub.find(desc->host_stub);
    if (it != d.kernel_by_stub.end()) return it->second;
  }
  auto f = std::make_unique<CUfunc_st>();
  f->name = desc->name;
  f->host_stub = desc->host_stub;
  f->body = desc->body;
  f->fixed_ns = desc->fixed_ns;
  for (size_t i = 0; i < desc->num_params; ++i) {
    f->param_offsets.push_back(desc->param_offsets[i]);
    f->param_sizes.push_back(desc->param_sizes[i]);
    f->param_buffer_bytes = std::max(f->param_buffer_bytes, desc->param_offsets[i] + desc->param_sizes[i]);
  }
  CUfunc_st* raw = f.get();
  raw->kernel.function = raw;
  d.kernels.push_back(std::move(f));
  if (desc->host_stub != nullptr) d.kernel_by_stub[desc->host_stub] = raw;
  return raw;
}

CUkernel simcuda_kernel_for_stub(const void* host_stub) {
  CUfunction f = simcuda_function_for_stub(host_stub);
  return f == nullptr ? nullptr : &f->kernel;
}

CUfunction simcuda_function_for_stub(const void* host_stub) {
  simcuda::Driver& d = driver();
  std::lock_guard<std::mutex> lock(d.kernels_mu);
  auto it = d.kernel_by_stub.find(host_stub);
  return it == d.kernel_by_stub.end() ? nullptr : it->second;
}

void* simcuda_access(const void* ptr, size_t bytes, int mode) {
  simcuda::KernelContext* k = simcuda::tls_kernel;
  if (k == nullptr) {
    std::fprintf(stderr, "simcuda: simcuda_access called outside a kernel body\n");
    std::abort();
  }
  (void)mode;  // reads and writes cost the same; the mode documents intent for readers
  double cost = 0;
  if (!driver().memory.declare_access(reinterpret_cast<uintptr_t>(ptr), bytes, k->device, &cost)) {
    if (std::getenv("SIMCUDA_DEBUG")) std::fprintf(stderr, "simcuda: illegal access %p +%zu\n", ptr, bytes);
    k->faulted = true;
    siglongjmp(k->env, 1);
  }
  k->cost_ns += cost;
  return const_cast<void*>(ptr);
}

void simcuda_add_flops(double flops) {
  if (simcuda::tls_kernel != nullptr) simcuda::tls_kernel->flops += flops;
}

void simcuda_get_stats(simcuda_stats* out) {
  if (out == nullptr) return;
  *out = simcuda_stats{};
  simcuda::Driver& d = driver();
  d.memory.get_stats(out);
  out->kernels_launched = d.scheduler.kernels_launched();
  out->kernels_executed = d.scheduler.kernels_executed();
  out->max_stream_virtual_ns = static_cast<uint64_t>(d.scheduler.max_virtual_ns());
  out->sticky_error = static_cast<int>(d.scheduler.sticky());
}

CUresult simcuda_get_device_memory(int device, uint64_t* bytes_in_use, uint64_t* peak_bytes) {
  if (!simcuda::valid_device(device)) return CUDA_ERROR_INVALID_DEVICE;
  const simcuda::DeviceUse u = driver().memory.device_use(device);
  if (bytes_in_use != nullptr) *bytes_in_use = u.used;
  if (peak_bytes != nullptr) *peak_bytes = u.peak;
  return CUDA_SUCCESS;
}

uint64_t simcuda_stream_virtual_ns(CUstream stream) { return driver().scheduler.stream_virtual_ns(stream); }

uint64_t simcuda_host_virtual_ns(void) { return static_cast<uint64_t>(driver().scheduler.host_virtual_ns()); }

void simcuda_set_host_time_scale(double scale) { driver().scheduler.set_host_time_scale(scale); }

void simcuda_reset_stats(void) { driver().memory.reset_stats(); }

int simcuda_write_stats_json(const char* path) {
  if (path == nullptr) return -1;
  std::ofstream out(path);
  if (!out) return -1;
  out << simcuda::stats_json() << "\n";
  return out.good() ? 0 : -1;
}

}  // extern "C"
