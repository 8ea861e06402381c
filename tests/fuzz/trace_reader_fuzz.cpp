// Fuzz target for the trace reader. Property: any input either fails with a TraceError (no
// crash, no hang, bounded memory) or yields a Trace that writes back to text which reads
// again into exactly the same events.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "capuchin/trace_model.hpp"

using namespace capuchin::trace;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  auto t = parse_trace(std::string_view(reinterpret_cast<const char*>(data), size), "fuzz");
  if (!t) {
    if (t.error().reason.empty()) std::abort();  // every error names its reason
    return 0;
  }
  (void)compute_stats(*t, compute_liveness(*t));
  std::string text = format_header(t->header) + "\n";
  Trace::ViewScratch s;
  for (std::uint32_t i = 0; i < t->events.size(); ++i) text += format_event(t->view(i, s)) + "\n";
  auto back = parse_trace(text, "fuzz-roundtrip");
  if (!back || back->events.size() != t->events.size()) {
    std::fprintf(stderr, "round trip failed: %s\n", back ? "event count differs" : back.error().message().c_str());
    std::abort();
  }
  Trace::ViewScratch s2;
  for (std::uint32_t i = 0; i < t->events.size(); ++i)
    if (format_event(t->view(i, s)) != format_event(back->view(i, s2))) std::abort();
  return 0;
}
