// ByteSource: the bytes of a trace from a file descriptor or memory, inflated when they
// start with the gzip magic bytes (1f 8b), whatever the file is called. Internal to the
// trace library. Contract: read() fills up to n bytes and returns 0 only at the end of the
// data; corrupt or truncated gzip data is an error naming zlib's reason.
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <string_view>

#include "capuchin/expected.hpp"

namespace capuchin::trace::detail {

class ByteSource {
 public:
  virtual ~ByteSource() = default;
  virtual Expected<std::size_t> read(char* out, std::size_t n) = 0;
  virtual bool compressed() const = 0;
};

// "-" means standard input.
Expected<std::unique_ptr<ByteSource>> open_file_source(const std::string& path);
std::unique_ptr<ByteSource> memory_source(std::string_view data);

}  // namespace capuchin::trace::detail
