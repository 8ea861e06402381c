// trace_load.hpp: how the CLI's analysis commands (trace stats, sim, report, export) take a
// trace. A trace without iteration markers (what `capuchin run --record` writes: the
// interposer cannot see the training loop) gets the iterations the learner finds
// (learn::with_learned_iterations), said once on stderr, so that per-iteration figures mean
// one iteration and not the whole run.
#pragma once

#include <fmt/format.h>

#include <cstdint>
#include <string>
#include <vector>

#include "capuchin/learn.hpp"
#include "capuchin/trace_model.hpp"

namespace capuchin::cli {

// file_event, when given and markers are added, receives for each event of the marked trace the
// index of the file's event it is (kNone for an added marker): the file's line is that + 2.
inline void mark_learned_iterations(trace::Trace& t, const std::string& file, std::vector<std::uint32_t>* file_event = nullptr) {
  std::size_t n = 0;
  if (auto marked = learn::with_learned_iterations(t, &n)) {
    if (file_event) {
      file_event->clear();
      std::uint32_t next = 0;  // the markers are the only events added, in order
      for (const trace::Event& e : marked->events) file_event->push_back(e.op == trace::Op::Iter ? trace::kNone : next++);
    }
    t = std::move(*marked);
    fmt::print(stderr, "note: {} has no iteration markers; using the {} iterations the learner finds (capuchin trace learn)\n",
               file, n);
  }
}

inline trace::TraceExpected<trace::Trace> load_trace_with_iterations(const std::string& file,
                                                                     std::vector<std::uint32_t>* file_event = nullptr) {
  auto t = trace::load_trace(file);
  if (t) mark_learned_iterations(*t, file, file_event);
  return t;
}

}  // namespace capuchin::cli
