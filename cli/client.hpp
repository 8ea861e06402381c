// client.hpp: the CLI's side of the daemon's JSON query API (one request line, one response
// line over the Unix socket), the socket the CLI talks to, and starting a daemon on demand.
//
// Contract: errors are values naming the socket and the problem (no daemon, permission
// denied, a daemon error reply with its code and message); nothing throws.
#pragma once

#include <chrono>
#include <nlohmann/json.hpp>
#include <string>

#include "capuchin/expected.hpp"

namespace capuchin::cli {

// --socket if given, else $CAPUCHIN_SOCKET, else the default (proto::default_socket_path()).
std::string resolve_socket(const std::string& flag);

// Sends {"v":1,"method":method,"params":params}; returns the response's `result`. Connecting
// and the answer each take at most `timeout`.
Expected<nlohmann::json> query_daemon(const std::string& socket, const std::string& method,
                                      const nlohmann::json& params = nlohmann::json::object(),
                                      std::chrono::milliseconds timeout = std::chrono::seconds(10));

// Whether a daemon answers a status query on `socket` within `timeout`: Absent (no socket,
// or nobody listening), Unresponsive (a socket that does not answer: stopped, hung, busy).
enum class DaemonProbe { Answers, Absent, Unresponsive };
DaemonProbe probe_daemon(const std::string& socket, std::chrono::milliseconds timeout);
bool daemon_answers(const std::string& socket);

// Starts capuchind ($CAPUCHIN_DAEMON, else beside this executable: install_paths.hpp) detached on `socket` and waits, at most `wait`
// in all, until it answers.
Status start_daemon(const std::string& socket, int idle_exit_s, std::chrono::milliseconds wait);

// Directory of this executable (from /proc/self/exe).
std::string self_dir();

}  // namespace capuchin::cli
