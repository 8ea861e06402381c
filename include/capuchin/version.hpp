// The project's version, shared by the CLI, the daemon and the interposer.
#pragma once

#include <string>
#include <string_view>

namespace capuchin {
inline constexpr std::string_view kVersion = "0.1.0";

// What `--version` prints: the version, the git commit built from and the CUDA headers built
// against (`cuda_version`: CUDA_VERSION of the cuda.h the caller was compiled with, e.g. 13000).
inline std::string version_line(std::string_view program, const char* commit, int cuda_version) {
  return std::string(program) + " " + std::string(kVersion) + " (commit " + commit + ", CUDA headers " +
         std::to_string(cuda_version / 1000) + "." + std::to_string(cuda_version % 1000 / 10) + ")";
}
}  // namespace capuchin
