// library.cpp: libcapuchin.so's start and stop, the one place that knows both halves: capture
// (capture.cpp: hooks record into rings, the drain thread writes traces and talks to the
// daemon) starts first; the executor (exec/, only with CAPUCHIN_BUDGET) starts on it and hands
// the daemon link its totals through a function pointer, so capture never calls the executor.
// At exit the executor stops first (its last decisions reach the daemon link before capture
// closes it).
#include <cstdlib>

#include "capture.hpp"
#include "daemon_sink.hpp"
#include "exec/executor.hpp"
#include "library.hpp"

namespace capuchin::interpose {

namespace {


void at_exit() { stop_library(nullptr, 0); }

}  // namespace

void start_library() {
  if (!init_from_env()) return;
  // Before std::atexit: the planner's statics are then destroyed after the exit handler ran.
  if (config().budget[0] != '\0') exec::warm_up_planning();
  std::atexit(at_exit);
  if (exec::init()) set_exec_totals_source(exec::counters);
}

void stop_library(char* summary, std::size_t summary_bytes) {
  exec::shutdown();
  shutdown_capture(summary, summary_bytes);
}

}  // namespace capuchin::interpose
