// client.hpp: the CLI's side of the daemon's JSON query API (one request line, one response
// line over the Unix socket), the socket the CLI talks to, and starting a daemon on demand.
//
// Contract: errors are values naming the socket and the problem (no daemon, permission
// denied, a daemon error reply with its code and message); nothing throws.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

#include "capuchin/expected.hpp"

namespace capuchin::cli {

// --socket if given, else $CAPUCHIN_SOCKET, else the default (proto::default_socket_path()).
std::string resolve_socket(const std::string& flag);

// Sends {"v":1,"method":method,"params":params}; returns the response's `result`.
Expected<nlohmann::json> query_daemon(const std::string& socket, const std::string& method,
                                      const nlohmann::json& params = nlohmann::json::object());

// Whether a daemon answers a status query on `socket`.
bool daemon_answers(const std::string& socket);

// Starts capuchind (beside this executable) detached on `socket` and waits until it answers.
Status start_daemon(const std::string& socket, int idle_exit_s);

// Directory of this executable (from /proc/self/exe).
std::string self_dir();

}  // namespace capuchin::cli
