// kernels.hpp: what the executor knows of each kernel function: its name, its parameter
// layout and, when declared (CAPUCHIN_KERNEL_OUTPUTS=name:param,...), the one parameter it
// writes, which makes its launches replayable (recompute.cpp). Undeclared functions' write
// sets are inferred per launch shape (write_sets.hpp), which needs every function's layout.
//
// Contract: info() asks the driver once per function (its name, its parameter layout when a
// write set is declared or inferred) and caches the answer; a declaration naming a parameter that is not
// a pointer is reported and ignored (the write set stays unknown). Under the executor's lock.
#pragma once

#include <cuda.h>

#include <array>
#include <cstdint>
#include <string>
#include <unordered_map>
#include <vector>

#include "api.hpp"

namespace capuchin::interpose {
struct FuncLayout;
}

namespace capuchin::interpose::exec {

// What the probations learned of a function (write_sets.hpp keeps the verdicts per shape).
struct FunctionProbations {
  std::uint32_t probations = 0;  // begun (at most kMaxProbations)
  std::uint32_t replayable = 0;  // shapes found replayable
  bool nondeterministic = false;  // a replay wrote different bytes: never replayed, never probed again
};

struct KernelInfo {
  std::string name;
  FunctionProbations probed;
  int output = -1;  // the written parameter; -1: unknown write set
  std::vector<std::uint32_t> offset, size;
  std::uint32_t buffer = 0;  // bytes of the parameter buffer
  std::uint32_t name_index = ~0u;  // its name's index for the policy (Planning::name_index), once asked
};

class KernelTable {
 public:
  // Parses CAPUCHIN_KERNEL_OUTPUTS ("name:param,name:param"); bad items are reported and skipped.
  void declare_outputs(const char* text);
  // Every function's layout is read (inferred write sets need it), not only declared ones'.
  void want_layouts() { all_layouts_ = true; }
  // Every launch asks: a direct-mapped cache of recent functions answers without hashing the
  // map (whose entries never move or go: the cached pointers stay valid).
  KernelInfo& info(CUfunction f, const FuncLayout* layout) {
    Recent& r = recent_[slot(f)];
    if (r.f == f && f != nullptr) [[likely]]
      return *r.ki;
    KernelInfo& ki = info_slow(f, layout);
    r = Recent{f, &ki};
    return ki;
  }

 private:
  struct Recent {
    CUfunction f = nullptr;
    KernelInfo* ki = nullptr;
  };
  static constexpr std::size_t kRecent = 256;
  static std::size_t slot(CUfunction f) {
    const auto v = reinterpret_cast<std::uintptr_t>(f);
    return (v ^ v >> 4 ^ v >> 12) & (kRecent - 1);  // a driver's handles are aligned; a stub's may not be
  }
  KernelInfo& info_slow(CUfunction f, const FuncLayout* layout);

  std::unordered_map<std::string, unsigned> outputs_by_name_;
  std::unordered_map<CUfunction, KernelInfo> funcs_;
  std::array<Recent, kRecent> recent_{};
  bool all_layouts_ = false;
};

}  // namespace capuchin::interpose::exec
