// query.hpp: the daemon's state shared by every connection (sessions, counters) and the
// newline-delimited JSON query API. No Asio here, so the request handler is fuzzable alone.
//
// Requests: one JSON object per line, {"v": 1, "id": any, "method": "...", "params": {...}}
// ("v" optional, must be 1 when present). Responses: one line, {"v": 1, "id": ..., "ok": true,
// "result": ...} or {"v": 1, "id": ..., "ok": false, "error": {"code": "...", "message": "..."}}.
// Methods: status, sessions, session, tensors, plan, decisions, set-budget, metrics.
// Contract: handle_request never throws and answers every line, whatever it holds.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <string_view>

#include "session.hpp"

namespace capuchin::daemon {

struct Counters {
  std::uint64_t connections = 0, rejected_peers = 0, frames = 0, bad_frames = 0, queries = 0, bad_queries = 0;
  std::uint64_t sessions_opened = 0;
};

class Registry {
 public:
  explicit Registry(DaemonOptions opt);
  const DaemonOptions& options() const { return opt_; }
  Counters& counters() { return counters_; }

  // A new session for a hello; null when the session limit is reached.
  Session* open_session(const proto::HelloInfo& hello);
  // Marks it closed (kept for queries until closed_sessions_kept newer ones closed).
  void close_session(Session* s, std::string_view why);
  Session* find(std::uint64_t id);
  std::size_t attached() const;
  void close_all(std::string_view why);

  // One request line (without the newline) -> one response line (without the newline).
  std::string handle_request(std::string_view line);
  // Requests nested deeper are refused before they are parsed.
  static constexpr std::size_t kMaxRequestDepth = 64;

 private:
  std::string handle_request_unchecked(std::string_view line);
  std::string metrics_text() const;
  DaemonOptions opt_;
  std::chrono::steady_clock::time_point start_;
  std::map<std::uint64_t, std::unique_ptr<Session>> sessions_;
  std::uint64_t next_id_ = 1;
  Counters counters_;
};

}  // namespace capuchin::daemon
