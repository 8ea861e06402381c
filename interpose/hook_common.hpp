// Small helpers every hook family (driver_hooks.cpp, runtime_hooks.cpp) uses, written once.
// Contract: inline, no lock, no allocation; callable from any hook.
#pragma once

#include <cstdint>

#include "capture.hpp"
#include "exec/executor.hpp"

namespace capuchin::interpose {

inline std::uint64_t u64(const void* p) { return reinterpret_cast<std::uint64_t>(p); }

// With CAPUCHIN_BUDGET the executor serves allocations and sees every access first
// (exec/executor.hpp); record() is asked first so capture is started.
inline bool executor_on(HookScope& scope) {
  (void)scope.record();
  return scope.outer && exec::on();
}

}  // namespace capuchin::interpose
