// sink.cpp: the file sink (TraceWriter) and the null sink (see sink.hpp).
#include "sink.hpp"

namespace capuchin::interpose {
namespace {

class FileSink final : public Sink {
 public:
  explicit FileSink(trace::TraceWriter w) : writer_(std::move(w)) {}
  Status write(const trace::EventView& ev) override { return writer_.write(ev); }
  Status flush() override { return {}; }  // TraceWriter buffers; close() flushes
  Status close() override {
    if (closed_) return {};
    closed_ = true;
    return writer_.close();
  }
  const char* kind() const override { return "file"; }

 private:
  trace::TraceWriter writer_;
  bool closed_ = false;
};

class NullSink final : public Sink {
 public:
  Status write(const trace::EventView&) override { return {}; }
  Status flush() override { return {}; }
  Status close() override { return {}; }
  const char* kind() const override { return "null"; }
};

}  // namespace

Expected<std::unique_ptr<Sink>> open_file_sink(const std::string& path, const trace::Header& header) {
  auto w = trace::TraceWriter::open(path, header);
  if (!w) return Unexpected{w.error()};
  return std::unique_ptr<Sink>(new FileSink(std::move(*w)));
}

std::unique_ptr<Sink> make_null_sink() { return std::make_unique<NullSink>(); }

}  // namespace capuchin::interpose
