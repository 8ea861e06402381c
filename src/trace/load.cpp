// Reading a Trace from a file or memory through the trace reader (include/capuchin/trace_model.hpp).
// Apart from model.cpp so that code which only builds traces (the executor's planner, inside
// libcapuchin.so) does not link the reader and its JSON parser.
#include "capuchin/trace_model.hpp"

namespace capuchin::trace {

TraceExpected<Trace> build_trace(TraceReader& reader) {
  TraceAppender a(reader.name(), reader.header());
  EventView v;
  for (;;) {
    auto more = reader.next(v);
    if (!more) return Unexpected{more.error()};
    if (!*more) break;
    a.append(v);
  }
  return a.finish();
}

TraceExpected<Trace> load_trace(const std::string& path) {
  auto r = TraceReader::open(path);
  if (!r) return Unexpected{r.error()};
  return build_trace(*r);
}

TraceExpected<Trace> parse_trace(std::string_view data, std::string name) {
  auto r = TraceReader::from_memory(data, std::move(name));
  if (!r) return Unexpected{r.error()};
  return build_trace(*r);
}

}  // namespace capuchin::trace
