// TraceWriter: one JSON line per event, through zlib's gzFile when the path ends in ".gz"
// (plain stdio otherwise). See include/capuchin/trace.hpp for the contract.
#include <zlib.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

#include "capuchin/trace.hpp"

namespace capuchin::trace {

struct TraceWriter::Impl {
  std::string path;
  gzFile gz = nullptr;
  std::FILE* fp = nullptr;
  bool failed = false;

  Status put(const std::string& line) {
    if (failed) return make_error(path + ": earlier write failed");
    bool ok;
    if (gz) {
      ok = gzwrite(gz, line.data(), static_cast<unsigned>(line.size())) == static_cast<int>(line.size()) &&
           gzputc(gz, '\n') == '\n';
    } else {
      ok = std::fwrite(line.data(), 1, line.size(), fp) == line.size() && std::fputc('\n', fp) == '\n';
    }
    if (!ok) {
      failed = true;
      return make_error(path + ": write failed: " + std::strerror(errno));
    }
    return {};
  }

  Status close() {
    int rc = 0;
    if (gz) rc = gzclose(gz);
    if (fp) rc = std::fclose(fp);
    gz = nullptr;
    fp = nullptr;
    if (rc != 0 && !failed) {
      failed = true;
      return make_error(path + ": close failed (data may be incomplete)");
    }
    return {};
  }
};

TraceWriter::TraceWriter(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
TraceWriter::TraceWriter(TraceWriter&&) noexcept = default;
TraceWriter& TraceWriter::operator=(TraceWriter&&) noexcept = default;
TraceWriter::~TraceWriter() {
  if (impl_) (void)impl_->close();
}

Expected<TraceWriter> TraceWriter::open(const std::string& path, const Header& header) {
  auto impl = std::make_unique<Impl>();
  impl->path = path;
  const bool gzip = path.size() >= 3 && path.compare(path.size() - 3, 3, ".gz") == 0;
  if (gzip) {
    impl->gz = gzopen(path.c_str(), "wb6");
    if (!impl->gz) return make_error(path + ": cannot open for writing: " + std::strerror(errno));
    gzbuffer(impl->gz, 1 << 17);
  } else {
    impl->fp = std::fopen(path.c_str(), "wb");
    if (!impl->fp) return make_error(path + ": cannot open for writing: " + std::strerror(errno));
  }
  if (auto s = impl->put(format_header(header)); !s) return Unexpected{s.error()};
  return TraceWriter(std::move(impl));
}

Status TraceWriter::write(const EventView& ev) { return impl_->put(format_event(ev)); }
Status TraceWriter::close() { return impl_->close(); }

}  // namespace capuchin::trace
