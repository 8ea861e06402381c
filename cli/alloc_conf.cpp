// alloc_conf.cpp: see alloc_conf.hpp.
#include "alloc_conf.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <array>

#include "capuchin/text.hpp"

namespace capuchin::cli {

namespace {

constexpr std::string_view kBackend = "backend:cudaMallocAsync";

// Options PyTorch's cudaMallocAsync backend ignores: they configure the native caching
// allocator only (c10/cuda/CUDAAllocatorConfig, c10/core/AllocatorConfig).
constexpr std::array<std::string_view, 8> kNativeOnly = {
    "max_split_size_mb",          "max_non_split_rounding_mb",  "garbage_collection_threshold",
    "roundup_power2_divisions",   "expandable_segments",        "release_lock_on_cudamalloc",
    "release_lock_on_hipmalloc",  "graph_capture_record_stream_reuse"};

// The options of `value`, split at commas outside brackets; nullopt when brackets do not balance.
std::optional<std::vector<std::string_view>> split_options(std::string_view value) {
  std::vector<std::string_view> out;
  int depth = 0;
  std::size_t start = 0;
  for (std::size_t i = 0; i <= value.size(); ++i) {
    const char c = i < value.size() ? value[i] : ',';
    if (c == '[') ++depth;
    if (c == ']' && --depth < 0) return std::nullopt;
    if (c == ',' && depth == 0) {
      out.push_back(value.substr(start, i - start));
      start = i + 1;
    }
  }
  if (depth != 0) return std::nullopt;
  return out;
}

// "key:value" with spaces dropped around both; an option without ':' is its key alone.
std::string normalise(std::string_view option, std::string_view& key) {
  const std::size_t colon = option.find(':');
  key = trim_spaces(option.substr(0, colon));
  if (colon == std::string_view::npos) return std::string(key);
  return fmt::format("{}:{}", key, trim_spaces(option.substr(colon + 1)));
}

}  // namespace

MergedAllocConf merge_pytorch_alloc_conf(std::optional<std::string_view> user) {
  MergedAllocConf out;
  if (!user || trim_spaces(*user).empty()) {
    out.value = kBackend;
    return out;
  }
  const auto options = split_options(*user);
  if (!options) {
    out.value = *user;
    out.notes.push_back(fmt::format("'{}' has unbalanced brackets: left unchanged (PyTorch will reject it)", *user));
    return out;
  }
  std::vector<std::string> kept, dropped;
  for (std::string_view option : *options) {
    std::string_view key;
    std::string normalised = normalise(option, key);
    if (key.empty() && normalised.empty()) continue;
    if (key == "backend") {
      if (normalised != kBackend)
        out.notes.push_back(fmt::format("'{}' replaced by {} (capuchin serves each tensor's own allocation)",
                                        normalised, kBackend));
    } else if (std::find(kNativeOnly.begin(), kNativeOnly.end(), key) != kNativeOnly.end()) {
      dropped.push_back(std::move(normalised));
    } else {
      kept.push_back(std::move(normalised));
    }
  }
  if (!dropped.empty())
    out.notes.push_back(fmt::format("dropped {} (native caching allocator only; {} ignores them)",
                                    fmt::join(dropped, ", "), kBackend));
  out.value = std::string(kBackend);
  for (const std::string& k : kept) out.value += "," + k;
  return out;
}

}  // namespace capuchin::cli
