// session_store.hpp: the daemon's closed sessions kept across restarts (issue 17: an
// auto-started daemon exits after 60 idle seconds, and its successor forgot every session and
// restarted ids at 1, reusing decision-log file names).
//
// The store is one small JSON file beside the socket (default_store_path): the id the next
// session gets and, per closed session, the detail `capuchin session ID` showed when it closed
// (with its start and end times and its decision log's path), at most `keep` of them (the
// highest ids). Format, version 1, one session per line:
//   {"format":"capuchind-sessions","version":1,"socket":"...","next_id":N,"sessions":[
//   {...detail...},
//   ...]}
//
// Contract: writes are atomic (a temporary file beside it, fsync, rename, fsync of the
// directory), so a crash leaves the old store or the new one, never a mix; a store that does
// not parse is an error value naming the file (the daemon warns once and starts fresh). No
// Asio and no registry state here: StoreWriter writes on its own thread, so the io thread
// only hands it the text (persistence never waits for the disk on the io thread).
#pragma once

#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

#include "capuchin/expected.hpp"

namespace capuchin::daemon {

struct DecisionFilter;

// <socket's directory>/<socket's name without extension>.sessions.json: one store per socket
// (one daemon serves a socket), beside the decision logs' default directory, so both share a
// lifetime (under $XDG_RUNTIME_DIR both go at logout).
std::string default_store_path(const std::string& socket_path);

struct StoredSessions {
  std::uint64_t next_id = 1;                      // never reused: decision-log names hold the id
  std::vector<nlohmann::ordered_json> sessions;   // oldest first; each has an unsigned "id"
};

// The store's text: `records` are the sessions' JSON objects already serialized (one line each,
// so a close costs a concatenation, not re-serializing every kept session).
std::string store_text(std::uint64_t next_id, const std::string& socket, const std::vector<std::string_view>& records);
Expected<StoredSessions> parse_store(std::string_view text);
// A missing file is an empty store, not an error; anything else unreadable or malformed is an
// error whose message names the file.
Expected<StoredSessions> read_store(const std::string& path);
// Writes `path` atomically (path.tmp, fsync, rename, fsync of its directory), mode 0600.
Status write_file_atomic(const std::string& path, std::string_view text);

// The highest session id in the decision-log file names of `log_dir` (session-<id>-pid<pid>...),
// 0 when none: ids continue after them even when the store is lost.
std::uint64_t highest_logged_id(const std::string& log_dir);

// An exclusive lock on path.lock, held while it lives: two daemons given one store
// (--state-file) must not overwrite each other's.
class StoreLock {
 public:
  StoreLock() = default;
  explicit StoreLock(int fd) : fd_(fd) {}
  StoreLock(StoreLock&& o) noexcept : fd_(std::exchange(o.fd_, -1)) {}
  StoreLock& operator=(StoreLock&& o) noexcept;
  StoreLock(const StoreLock&) = delete;
  StoreLock& operator=(const StoreLock&) = delete;
  ~StoreLock();

 private:
  int fd_ = -1;
};
Expected<StoreLock> lock_store(const std::string& path);

// A closed session's decisions read back from its decision log (the file and its rotated
// predecessors, newest records last), as Session::decisions answers: a message names the
// file when it no longer exists. At most the newest 16 MiB are read (it runs on the io thread).
Expected<nlohmann::ordered_json> decisions_from_log(const std::string& path, const DecisionFilter& f);

// Writes the latest submitted text on its own thread; texts submitted while one is written
// are coalesced (only the newest is written). A failed write is warned about once per
// distinct error, and the next submission tries again.
class StoreWriter {
 public:
  explicit StoreWriter(std::string path);
  ~StoreWriter();  // writes what is pending, then joins
  StoreWriter(const StoreWriter&) = delete;
  StoreWriter& operator=(const StoreWriter&) = delete;

  void submit(std::string text);
  void flush();  // returns once everything submitted so far is written (or failed)
  const std::string& path() const { return path_; }

 private:
  void run();
  const std::string path_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::optional<std::string> pending_;  // guarded by mu_: the newest text not yet taken
  bool busy_ = false;                   // guarded by mu_: the thread is writing a taken text
  bool stop_ = false;                   // guarded by mu_
  std::string last_error_;              // the writer thread's only
  std::thread thread_;                  // last: started once the members above exist
};

}  // namespace capuchin::daemon
