// config.cpp: environment parsing and the allocation-free logger (see config.hpp).
#include "config.hpp"

#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace capuchin::interpose {
namespace {

std::atomic<int> g_log_level{static_cast<int>(LogLevel::Warn)};

bool env_true(const char* name) {
  const char* v = std::getenv(name);
  return v != nullptr && v[0] != '\0' && std::strcmp(v, "0") != 0 && std::strcmp(v, "false") != 0 &&
         std::strcmp(v, "no") != 0;
}

// A positive integer from the environment, or `fallback` (with a warning when malformed).
std::uint32_t env_uint(const char* name, std::uint32_t fallback, std::uint32_t lo, std::uint32_t hi) {
  const char* v = std::getenv(name);
  if (v == nullptr || v[0] == '\0') return fallback;
  char* end = nullptr;
  errno = 0;
  unsigned long long x = std::strtoull(v, &end, 10);
  if (errno != 0 || end == v || *end != '\0' || x < lo || x > hi) {
    log(LogLevel::Warn, "%s=%s is not an integer in [%u, %u]; using %u", name, v, lo, hi, fallback);
    return fallback;
  }
  return static_cast<std::uint32_t>(x);
}

}  // namespace

void set_log_level(LogLevel level) { g_log_level.store(static_cast<int>(level), std::memory_order_relaxed); }
LogLevel log_level() { return static_cast<LogLevel>(g_log_level.load(std::memory_order_relaxed)); }

void log(LogLevel level, const char* fmt, ...) {
  if (static_cast<int>(level) > g_log_level.load(std::memory_order_relaxed)) return;
  const int saved = errno;
  static constexpr const char* kNames[] = {"", "error", "warn", "info", "debug"};
  char buf[1024];
  int n = std::snprintf(buf, sizeof buf, "capuchin[%d] %s: ", static_cast<int>(getpid()),
                        kNames[static_cast<int>(level)]);
  va_list ap;
  va_start(ap, fmt);
  int m = std::vsnprintf(buf + n, sizeof buf - static_cast<std::size_t>(n) - 1, fmt, ap);
  va_end(ap);
  std::size_t len = static_cast<std::size_t>(n) + (m < 0 ? 0 : static_cast<std::size_t>(m));
  if (len > sizeof buf - 2) len = sizeof buf - 2;
  buf[len++] = '\n';
  ssize_t w = ::write(2, buf, len);
  (void)w;
  errno = saved;
}

Config Config::from_env() {
  Config c;
  if (const char* lv = std::getenv("CAPUCHIN_LOG")) {
    if (!std::strcmp(lv, "off")) c.log_level = LogLevel::Off;
    else if (!std::strcmp(lv, "error")) c.log_level = LogLevel::Error;
    else if (!std::strcmp(lv, "warn")) c.log_level = LogLevel::Warn;
    else if (!std::strcmp(lv, "info")) c.log_level = LogLevel::Info;
    else if (!std::strcmp(lv, "debug")) c.log_level = LogLevel::Debug;
    else log(LogLevel::Warn, "CAPUCHIN_LOG=%s is not off|error|warn|info|debug; using warn", lv);
  }
  set_log_level(c.log_level);
  c.disabled = env_true("CAPUCHIN_DISABLE");
  c.ring_records = env_uint("CAPUCHIN_RING_RECORDS", c.ring_records, 512, 1u << 24);
  if ((c.ring_records & (c.ring_records - 1)) != 0) {
    std::uint32_t p = 512;
    while (p < c.ring_records) p <<= 1;
    c.ring_records = p;
  }
  c.max_threads = env_uint("CAPUCHIN_MAX_THREADS", c.max_threads, 1, 4096);
  c.drain_interval_us = env_uint("CAPUCHIN_DRAIN_US", c.drain_interval_us, 10, 1000000);
  c.timing_every = env_uint("CAPUCHIN_TIMING_EVERY", c.timing_every, 0, 1u << 30);
  const char* sink = std::getenv("CAPUCHIN_SINK");
  const char* path = std::getenv("CAPUCHIN_RECORD");
  if (sink != nullptr && !std::strcmp(sink, "null")) {
    c.sink = SinkKind::Null;
  } else if (sink != nullptr && sink[0] != '\0' && std::strcmp(sink, "file") != 0) {
    log(LogLevel::Warn, "CAPUCHIN_SINK=%s is not file|null; ignored", sink);
  }
  if (c.sink != SinkKind::Null && path != nullptr && path[0] != '\0') {
    if (std::strlen(path) >= sizeof c.record_path - 32) {
      log(LogLevel::Error, "CAPUCHIN_RECORD is too long; not recording");
    } else {
      c.sink = SinkKind::File;
      c.record_path_has_pid = std::strstr(path, "%p") != nullptr;
      c.expand_record_path();
    }
  }
  // The daemon link: copied as text here (no allocation); parsed when the sink starts.
  if (const char* sock = std::getenv("CAPUCHIN_SOCKET"); sock != nullptr && sock[0] != '\0') {
    if (std::strlen(sock) >= sizeof c.socket_path) {
      log(LogLevel::Error, "CAPUCHIN_SOCKET is longer than a Unix socket path may be; not attaching");
    } else {
      std::memcpy(c.socket_path, sock, std::strlen(sock) + 1);
      c.daemon = true;
    }
  }
  if (const char* b = std::getenv("CAPUCHIN_BUDGET"); b != nullptr && std::strlen(b) < sizeof c.budget)
    std::memcpy(c.budget, b, std::strlen(b) + 1);
  if (const char* t = std::getenv("CAPUCHIN_RUN_TAG"); t != nullptr && std::strlen(t) < sizeof c.run_tag)
    std::memcpy(c.run_tag, t, std::strlen(t) + 1);
  if (const char* b = std::getenv("CAPUCHIN_BACKEND"); b != nullptr && b[0] != '\0') {
    if (std::strcmp(b, "uvm") == 0 || std::strcmp(b, "pinned") == 0) std::memcpy(c.backend, b, std::strlen(b) + 1);
    else log(LogLevel::Warn, "CAPUCHIN_BACKEND=%s is not uvm|pinned; using uvm", b);
  }
  return c;
}

void Config::expand_record_path() {
  const char* path = std::getenv("CAPUCHIN_RECORD");
  if (path == nullptr) return;
  char out[sizeof record_path] = {};
  std::size_t o = 0;
  for (const char* p = path; *p != '\0' && o + 24 < sizeof out; ++p) {
    if (p[0] == '%' && p[1] == 'p') {
      o += static_cast<std::size_t>(std::snprintf(out + o, sizeof out - o, "%d", static_cast<int>(getpid())));
      ++p;
    } else {
      out[o++] = *p;
    }
  }
  std::memcpy(record_path, out, sizeof out);
}

}  // namespace capuchin::interpose
