// sink.hpp: where the drain thread delivers finished trace events.
//
// Contract: a Sink is used by one thread at a time (the drain thread), receives events in
// trace order (allocations before their uses, frees after), and reports failures as
// Status values; after the first failure the drain thread stops writing to it and counts
// what it could not deliver. Sinks: the trace file (CAPUCHIN_RECORD, the format of
// docs/TRACE_FORMAT.md through capuchin::trace::TraceWriter, gzip when the name ends in
// .gz) and a null sink (CAPUCHIN_SINK=null: capture and discard, for measuring overhead).
// The daemon connection implements this same interface (daemon issue).
#pragma once

#include <memory>
#include <string>

#include "capuchin/expected.hpp"
#include "capuchin/trace.hpp"

namespace capuchin::interpose {

class Sink {
 public:
  virtual ~Sink() = default;
  virtual Status write(const trace::EventView& ev) = 0;
  virtual Status flush() = 0;
  virtual Status close() = 0;
  virtual const char* kind() const = 0;
};

Expected<std::unique_ptr<Sink>> open_file_sink(const std::string& path, const trace::Header& header);
std::unique_ptr<Sink> make_null_sink();

}  // namespace capuchin::interpose
