// install_paths.cpp: finding libcapuchin.so and capuchind (see install_paths.hpp).
#include "install_paths.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>

#include "client.hpp"

// Set by cli/CMakeLists.txt from the install layout (bin/ -> lib/capuchin/), so the lookup
// and the install rules cannot drift apart.
#ifndef CAPUCHIN_LIBDIR_FROM_BINDIR
#error "CAPUCHIN_LIBDIR_FROM_BINDIR must be defined by the build"
#endif

namespace capuchin::cli {

namespace {

const char* env_path(const char* name) {
  const char* v = std::getenv(name);
  return v != nullptr && v[0] != '\0' ? v : nullptr;
}

std::string self_exe() {
  std::error_code ec;
  auto p = std::filesystem::read_symlink("/proc/self/exe", ec);
  return ec ? std::string("capuchin") : p.string();
}

}  // namespace

std::vector<std::string> interposer_candidates(const std::string& exe_dir) {
  const std::filesystem::path dir(exe_dir);
  return {(dir / CAPUCHIN_LIBDIR_FROM_BINDIR / "libcapuchin.so").lexically_normal().string(),
          (dir / ".." / "lib" / "libcapuchin.so").lexically_normal().string()};
}

Expected<std::string> find_interposer() {
  if (const char* env = env_path("CAPUCHIN_INTERPOSER")) {
    if (::access(env, R_OK) != 0)
      return make_error(fmt::format("CAPUCHIN_INTERPOSER={}: no such readable file (it must name libcapuchin.so)", env));
    return std::string(env);
  }
  const auto tried = interposer_candidates(self_dir());
  for (const auto& p : tried)
    if (::access(p.c_str(), R_OK) == 0) return p;
  return make_error(fmt::format(
      "cannot find the interposer libcapuchin.so; looked for {} (relative to this executable, {}). "
      "Set CAPUCHIN_INTERPOSER=/path/to/libcapuchin.so, or run the capuchin of an install prefix "
      "(PREFIX/bin/capuchin beside PREFIX/lib/capuchin/libcapuchin.so)",
      fmt::join(tried, " and "), self_exe()));
}

Expected<std::string> find_daemon() {
  if (const char* env = env_path("CAPUCHIN_DAEMON")) {
    if (::access(env, X_OK) != 0)
      return make_error(fmt::format("CAPUCHIN_DAEMON={}: no such executable (it must name capuchind)", env));
    return std::string(env);
  }
  const std::string exe = (std::filesystem::path(self_dir()) / "capuchind").string();
  if (::access(exe.c_str(), X_OK) != 0)
    return make_error(fmt::format("no capuchind beside capuchin ({}); set CAPUCHIN_DAEMON=/path/to/capuchind "
                                  "or start one yourself (capuchind --socket PATH)", exe));
  return exe;
}

}  // namespace capuchin::cli
