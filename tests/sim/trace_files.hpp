// The real-model traces the simulator's tests run on: tests/data's copy of resnet18 always,
// and ../shared/traces' mobilenet_v2 and tiny_transformer when that folder is beside the
// checkout (it is not in a clone).
#pragma once

#include <filesystem>
#include <string>
#include <vector>

namespace capuchin::sim {

inline std::vector<std::string> trace_files() {
  std::vector<std::string> files{std::string(CAPUCHIN_TEST_DATA) + "/resnet18-b16.jsonl.gz"};
  for (const char* n : {"mobilenet_v2-b16.jsonl.gz", "tiny_transformer-b8.jsonl.gz"}) {
    const std::string p = std::string(CAPUCHIN_SHARED_TRACES) + "/" + n;
    if (std::filesystem::exists(p)) files.push_back(p);
  }
  return files;
}

}  // namespace capuchin::sim
