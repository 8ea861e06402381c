// call_site.cpp: whose call an entry point is serving (see call_site.hpp).
#include "call_site.hpp"

#include <dlfcn.h>

#include <cstring>
#include <string_view>

#include "config.hpp"
#include "executor_impl.hpp"

namespace capuchin::interpose::exec {

// CUDA libraries that allocate memory for themselves (communication buffers, workspaces,
// handles): theirs is left to the driver. A framework's allocator is the application's.
bool in_cuda_library(Executor& e, const void* caller) {
  if (caller == nullptr) return false;  // not known (a driver-level call): the application's
  auto [known, fresh] = e.library_callers.try_emplace(reinterpret_cast<std::uint64_t>(caller), false);
  if (!fresh) return *known;
  bool* verdict = known;  // valid until the table's next insert: none below
  Dl_info info{};
  if (dladdr(caller, &info) == 0 || info.dli_fname == nullptr) return false;
  const char* slash = std::strrchr(info.dli_fname, '/');
  const std::string_view name = slash != nullptr ? slash + 1 : info.dli_fname;
  // (Not libcudart: it calls the driver on the application's behalf, e.g. cudaMallocFromPoolAsync.)
  static constexpr std::string_view kLibraries[] = {"libnccl",   "libcudnn",   "libcublas", "libcufft",  "libcusparse",
                                                    "libcusolver", "libcurand", "libnvshmem", "libcutensor", "libnvjpeg",
                                                    "libcupti"};
  for (std::string_view lib : kLibraries)
    if (name.substr(0, lib.size()) == lib) return *verdict = true;
  return false;
}

// The calling thread's current device; false when the driver cannot say (*why: its CUresult).
bool current_device(const Executor& e, int* dev, CUresult* why) {
  CUdevice d = 0;
  if (e.api.ctx_get_device == nullptr) d = e.moves.device;  // a driver without it: one device for us
  else if (const CUresult r = e.api.ctx_get_device(&d); r != CUDA_SUCCESS) {
    if (why != nullptr) *why = r;
    return false;
  }
  *dev = static_cast<int>(d);
  return true;
}

// Work issued while another device is current (cudaSetDevice): that device's, not the
// executor's. Launches and copies there that touch none of its blocks are left alone (not
// fed to the policy, not timed).
bool other_device_current(const Executor& e) {
  if (e.one_device) return false;
  int dev = 0;
  return current_device(e, &dev) && dev != e.moves.device;
}

// The executor serves the device it started on: its budget is that device's, and its
// streams, managed prefetches and VMM chunks are there. An allocation made while another
// device is current (cudaSetDevice) is passed through untouched; said once in the log.
// `dev`: the current device, nullptr when the driver cannot say.
bool on_executor_device(Executor& e, std::size_t bytes, const int* dev) {
  if (dev == nullptr) {  // when in doubt, the driver's; counted and said once
    if (!e.device_unknown_noted) {
      e.device_unknown_noted = true;
      log(LogLevel::Warn, "executor: the driver cannot say which device is current (cuCtxGetDevice fails); such "
                          "allocations are passed through unmanaged");
    }
    e.decisions.record(Action::Fallback, kNoBlockId, bytes, "device-unknown", -1, "no current device: the driver's");
    return false;
  }
  if (*dev == e.moves.device) return true;
  if (!e.other_device_noted) {
    e.other_device_noted = true;
    log(LogLevel::Info, "executor: serves device %d only; allocations on device %d are passed through unmanaged",
        e.moves.device, *dev);
  }
  e.decisions.record(Action::Fallback, kNoBlockId, bytes, "other-device", -1, "allocated on another device: the driver's");
  return false;
}

}  // namespace capuchin::interpose::exec
