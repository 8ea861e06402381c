// File and memory byte sources with transparent gzip inflation (zlib's inflate with
// gzip headers, concatenated members allowed). See byte_source.hpp for the contract.
#include "byte_source.hpp"

#include <fcntl.h>
#include <unistd.h>
#include <zlib.h>

#include <cerrno>
#include <cstring>
#include <vector>

namespace capuchin::trace::detail {
namespace {

// Raw bytes, before any inflation.
class RawInput {
 public:
  virtual ~RawInput() = default;
  virtual Expected<std::size_t> read(char* out, std::size_t n) = 0;
};

class FdInput final : public RawInput {
 public:
  FdInput(int fd, bool owned) : fd_(fd), owned_(owned) {}
  ~FdInput() override {
    if (owned_) ::close(fd_);
  }
  Expected<std::size_t> read(char* out, std::size_t n) override {
    for (;;) {
      ssize_t r = ::read(fd_, out, n);
      if (r >= 0) return static_cast<std::size_t>(r);
      if (errno == EINTR) continue;
      return make_error(std::string("read failed: ") + std::strerror(errno));
    }
  }

 private:
  int fd_;
  bool owned_;
};

class MemoryInput final : public RawInput {
 public:
  explicit MemoryInput(std::string_view data) : data_(data) {}
  Expected<std::size_t> read(char* out, std::size_t n) override {
    std::size_t k = std::min(n, data_.size() - pos_);
    std::memcpy(out, data_.data() + pos_, k);
    pos_ += k;
    return k;
  }

 private:
  std::string data_;
  std::size_t pos_ = 0;
};

// Passes the first bytes (already read to sniff the magic) and then the rest.
class PlainSource final : public ByteSource {
 public:
  PlainSource(std::unique_ptr<RawInput> in, std::string prefix) : in_(std::move(in)), prefix_(std::move(prefix)) {}
  Expected<std::size_t> read(char* out, std::size_t n) override {
    if (pos_ < prefix_.size()) {
      std::size_t k = std::min(n, prefix_.size() - pos_);
      std::memcpy(out, prefix_.data() + pos_, k);
      pos_ += k;
      return k;
    }
    return in_->read(out, n);
  }
  bool compressed() const override { return false; }

 private:
  std::unique_ptr<RawInput> in_;
  std::string prefix_;
  std::size_t pos_ = 0;
};

class GzipSource final : public ByteSource {
 public:
  GzipSource(std::unique_ptr<RawInput> in, std::string prefix) : in_(std::move(in)), in_buf_(kChunk) {
    std::memcpy(in_buf_.data(), prefix.data(), prefix.size());
    zs_.next_in = reinterpret_cast<Bytef*>(in_buf_.data());
    zs_.avail_in = static_cast<uInt>(prefix.size());
    ok_ = inflateInit2(&zs_, 16 + MAX_WBITS) == Z_OK;
  }
  ~GzipSource() override { inflateEnd(&zs_); }
  bool compressed() const override { return true; }

  Expected<std::size_t> read(char* out, std::size_t n) override {
    if (!ok_) return make_error("gzip: cannot initialise zlib");
    zs_.next_out = reinterpret_cast<Bytef*>(out);
    zs_.avail_out = static_cast<uInt>(n);
    while (zs_.avail_out == n) {  // until at least one byte comes out, or the end
      if (zs_.avail_in == 0 && !in_eof_) {
        auto r = in_->read(in_buf_.data(), in_buf_.size());
        if (!r) return Unexpected{r.error()};
        if (*r == 0) in_eof_ = true;
        zs_.next_in = reinterpret_cast<Bytef*>(in_buf_.data());
        zs_.avail_in = static_cast<uInt>(*r);
      }
      if (zs_.avail_in == 0 && in_eof_) {
        if (member_done_) return std::size_t{0};
        return make_error("gzip: unexpected end of file (truncated gzip data)");
      }
      int rc = inflate(&zs_, Z_NO_FLUSH);
      if (rc == Z_STREAM_END) {
        member_done_ = true;
        inflateReset(&zs_);  // a further gzip member may follow
      } else if (rc == Z_OK) {
        member_done_ = false;  // inside a member: its end must still come
      } else if (rc != Z_BUF_ERROR) {
        return make_error(std::string("gzip: corrupt data (") + (zs_.msg ? zs_.msg : zError(rc)) + ")");
      }
    }
    return n - zs_.avail_out;
  }

 private:
  static constexpr std::size_t kChunk = 1 << 18;
  std::unique_ptr<RawInput> in_;
  std::vector<char> in_buf_;
  z_stream zs_{};
  bool ok_ = false;
  bool in_eof_ = false;
  bool member_done_ = false;
};

Expected<std::unique_ptr<ByteSource>> sniff(std::unique_ptr<RawInput> in) {
  char magic[16] = {};  // 2 used; sized so GCC 12 sees no out-of-bounds copy into the string
  std::size_t got = 0;
  while (got < 2) {
    auto r = in->read(magic + got, 2 - got);
    if (!r) return Unexpected{r.error()};
    if (*r == 0) break;
    got += *r;
  }
  std::string prefix(std::string_view(magic, got));
  if (got == 2 && static_cast<unsigned char>(magic[0]) == 0x1f && static_cast<unsigned char>(magic[1]) == 0x8b)
    return std::unique_ptr<ByteSource>(new GzipSource(std::move(in), std::move(prefix)));
  return std::unique_ptr<ByteSource>(new PlainSource(std::move(in), std::move(prefix)));
}

}  // namespace

Expected<std::unique_ptr<ByteSource>> open_file_source(const std::string& path) {
  if (path == "-") return sniff(std::make_unique<FdInput>(STDIN_FILENO, false));
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return make_error(std::string("cannot open: ") + std::strerror(errno));
  return sniff(std::make_unique<FdInput>(fd, true));
}

std::unique_ptr<ByteSource> memory_source(std::string_view data) {
  auto r = sniff(std::make_unique<MemoryInput>(data));
  return std::move(r).value();  // memory reads cannot fail
}

}  // namespace capuchin::trace::detail
