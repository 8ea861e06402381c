// query.hpp: the daemon's state shared by every connection (sessions, counters) and the
// newline-delimited JSON query API. No Asio here, so the request handler is fuzzable alone.
//
// Requests: one JSON object per line, {"v": 1, "id": any, "method": "...", "params": {...}}
// ("v" optional, must be 1 when present). Responses: one line, {"v": 1, "id": ..., "ok": true,
// "result": ...} or {"v": 1, "id": ..., "ok": false, "error": {"code": "...", "message": "..."}}.
// Methods: status, sessions, session, tensors, plan, decisions, set-budget, metrics.
// Contract: handle_request never throws and answers every line, whatever it holds.
//
// Closed sessions: the last closed_sessions_kept stay in memory whole (tensors, plan); the
// last sessions_kept are also in the closed-session store (session_store.hpp), so a daemon
// started later (the auto-started one exits when idle) still lists them, shows their detail
// and reads their decisions back from their decision logs; ids are never reused. Everything
// here runs on the io thread; the store's file is written on StoreWriter's thread.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <string_view>

#include "session.hpp"
#include "session_store.hpp"

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
  // Marks it closed (kept for queries until closed_sessions_kept newer ones closed) and puts
  // it in the closed-session store.
  void close_session(Session* s, std::string_view why);
  Session* find(std::uint64_t id);
  std::size_t attached() const;
  // Closes every attached session (the daemon exits: `why` says so in each) and stores them.
  void close_all(std::string_view why);

  // Loads the closed-session store (options().state_file; "" for none) and makes ids continue
  // after every id it or the decision-log file names hold; later closes are written to it.
  // Never fails: a store that cannot be read is one warning naming it (it is moved aside to
  // FILE.corrupt) and a fresh start; a store another daemon holds is one warning, not used.
  // Called once the socket is this daemon's, before any session opens.
  void restore();
  // Returns once the store's file holds every session closed so far (at shutdown).
  void flush_store();

  // One request line (without the newline) -> one response line (without the newline).
  std::string handle_request(std::string_view line);
  // Requests nested deeper are refused before they are parsed.
  static constexpr std::size_t kMaxRequestDepth = 64;

 private:
  // A closed session as the store keeps it: its detail at close, and that serialized once.
  struct Kept {
    nlohmann::ordered_json detail;
    std::string line;
  };
  std::string handle_request_unchecked(std::string_view line);
  std::string metrics_text() const;
  void keep(const Session& s);  // into kept_, bounded
  void persist();               // hands the store's new text to the writer (no disk I/O here)
  // Answers a query about a session known only from the store (closed, maybe by an earlier daemon).
  nlohmann::ordered_json answer_kept(const std::string& method, std::uint64_t id, const Kept& k,
                                     const nlohmann::ordered_json& params, std::string& code, std::string& message) const;
  DaemonOptions opt_;
  std::chrono::steady_clock::time_point start_;
  StoreLock store_lock_;                 // held while writer_ writes the store
  std::unique_ptr<StoreWriter> writer_;  // null: no store; outlives sessions_ (declared before it)
  std::map<std::uint64_t, Kept> kept_;   // the store's sessions by id, at most opt_.sessions_kept
  std::map<std::uint64_t, std::unique_ptr<Session>> sessions_;
  std::uint64_t next_id_ = 1;
  Counters counters_;
};

}  // namespace capuchin::daemon
