// The real-model traces the simulator's tests run on: tests/data's copy of resnet18 always,
// and ../shared/traces' mobilenet_v2 and tiny_transformer when that folder is beside the
// checkout (it is not in a clone).
#pragma once

#include <filesystem>
#include <string>
#include <vector>

namespace capuchin::sim {

// Built with AddressSanitizer or ThreadSanitizer (the asan and tsan presets). The tests that
// sweep every policy over every real trace, profile and budget run 5-10x slower there (2 of
// CI's 8 asan minutes went to two of them) and exercise no code the release build's full
// sweep does not; under a sanitizer they run a subset of profiles and budgets.
// GCC defines __SANITIZE_*__; clang answers __has_feature.
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define CAPUCHIN_TEST_SANITIZED 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
#define CAPUCHIN_TEST_SANITIZED 1
#endif
#endif
inline constexpr bool kSanitized =
#ifdef CAPUCHIN_TEST_SANITIZED
    true;
#else
    false;
#endif

// The real traces the sweeps run: resnet18 (tests/data), and where ../shared is beside the
// checkout mobilenet_v2 and tiny_transformer. Under a sanitizer resnet18 only: the other two
// took 5/6 of the sanitized sweeps' time and run the same code.
inline std::vector<std::string> trace_files() {
  std::vector<std::string> files{std::string(CAPUCHIN_TEST_DATA) + "/resnet18-b16.jsonl.gz"};
  if (kSanitized) return files;
  for (const char* n : {"mobilenet_v2-b16.jsonl.gz", "tiny_transformer-b8.jsonl.gz"}) {
    const std::string p = std::string(CAPUCHIN_SHARED_TRACES) + "/" + n;
    if (std::filesystem::exists(p)) files.push_back(p);
  }
  return files;
}

}  // namespace capuchin::sim
