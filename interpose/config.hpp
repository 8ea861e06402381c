// config.hpp: the interposer's environment configuration (read once, at load or after a
// fork) and its logger.
//
// Contract: Config::from_env never allocates on the hook path (it runs in the library
// constructor) and never fails: bad values fall back to defaults with a warning. log()
// formats into a stack buffer and writes with one write(2) to stderr: no allocation, no
// lock, errno preserved, so hooks may call it.
#pragma once

#include <cstddef>
#include <cstdint>

namespace capuchin::interpose {

enum class LogLevel : int { Off = 0, Error = 1, Warn = 2, Info = 3, Debug = 4 };

enum class SinkKind : std::uint8_t { None, File, Null };

struct Config {
  bool disabled = false;              // CAPUCHIN_DISABLE=1: pure pass-through
  SinkKind sink = SinkKind::None;     // CAPUCHIN_RECORD=path -> File; CAPUCHIN_SINK=null -> Null
  char record_path[4096] = {};        // CAPUCHIN_RECORD, %p expanded to the pid
  bool record_path_has_pid = false;   // path had %p: a forked child records to its own file
  std::uint32_t ring_records = 1u << 16;  // CAPUCHIN_RING_RECORDS (power of two, 64 B each)
  std::uint32_t max_threads = 256;        // CAPUCHIN_MAX_THREADS
  std::uint32_t drain_interval_us = 2000; // CAPUCHIN_DRAIN_US
  std::uint32_t timing_every = 16;        // CAPUCHIN_TIMING_EVERY: time 1 launch in N per thread (0: off)
  LogLevel log_level = LogLevel::Warn;    // CAPUCHIN_LOG=off|error|warn|info|debug
  bool daemon = false;                    // CAPUCHIN_SOCKET=path: stream events to capuchind (daemon_sink.hpp)
  char socket_path[108] = {};
  char budget[64] = {};                   // CAPUCHIN_BUDGET (budget.hpp), for the daemon's hello
  char backend[16] = {};                  // CAPUCHIN_BACKEND=uvm|pinned
  char run_tag[65] = {};                  // CAPUCHIN_RUN_TAG (set by `capuchin run`), for the daemon's hello

  bool capturing() const { return !disabled && (sink != SinkKind::None || daemon || budget[0] != '\0'); }
  static Config from_env();
  // Re-expands %p in CAPUCHIN_RECORD for the current pid (after fork).
  void expand_record_path();
};

// The process-wide log level (set once at init; a relaxed read on the hook path).
void set_log_level(LogLevel level);
LogLevel log_level();
void log(LogLevel level, const char* fmt, ...) __attribute__((format(printf, 2, 3)));

}  // namespace capuchin::interpose
