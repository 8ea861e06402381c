// trace_load.hpp: how the CLI's analysis commands (trace stats, sim, report, export) take a
// trace. A trace without iteration markers (what `capuchin run --record` writes: the
// interposer cannot see the training loop) gets the iterations the learner finds
// (learn::with_learned_iterations), said once on stderr, so that per-iteration figures mean
// one iteration and not the whole run.
#pragma once

#include <fmt/format.h>

#include <string>

#include "capuchin/learn.hpp"
#include "capuchin/trace_model.hpp"

namespace capuchin::cli {

inline void mark_learned_iterations(trace::Trace& t, const std::string& file) {
  std::size_t n = 0;
  if (auto marked = learn::with_learned_iterations(t, &n)) {
    t = std::move(*marked);
    fmt::print(stderr, "note: {} has no iteration markers; using the {} iterations the learner finds (capuchin trace learn)\n",
               file, n);
  }
}

inline trace::TraceExpected<trace::Trace> load_trace_with_iterations(const std::string& file) {
  auto t = trace::load_trace(file);
  if (t) mark_learned_iterations(*t, file);
  return t;
}

}  // namespace capuchin::cli
