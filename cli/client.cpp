// client.cpp: JSON queries over the daemon's socket and starting a daemon (see client.hpp).
#include "client.hpp"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <thread>

#include "capuchin/protocol.hpp"
#include "install_paths.hpp"

namespace capuchin::cli {

std::string resolve_socket(const std::string& flag) {
  if (!flag.empty()) return flag;
  if (const char* env = std::getenv("CAPUCHIN_SOCKET"); env != nullptr && env[0] != '\0') return env;
  return proto::default_socket_path();
}

std::string self_dir() {
  std::error_code ec;
  auto p = std::filesystem::read_symlink("/proc/self/exe", ec);
  return ec ? std::string(".") : p.parent_path().string();
}

namespace {

using Clock = std::chrono::steady_clock;

// Connects within `timeout`: a daemon whose backlog is full (stopped, or hung without
// accepting) must not block the CLI in connect(). Replies are awaited up to `timeout` too.
Expected<int> connect_to(const std::string& path, std::chrono::milliseconds timeout) {
  sockaddr_un a{};
  if (path.size() >= sizeof a.sun_path) return make_error(fmt::format("socket path too long: {}", path));
  const int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (fd < 0) return make_error(fmt::format("socket(): {}", std::strerror(errno)));
  a.sun_family = AF_UNIX;
  std::strncpy(a.sun_path, path.c_str(), sizeof a.sun_path - 1);
  const auto deadline = Clock::now() + timeout;
  for (;;) {
    if (::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0) break;
    const int e = errno;
    if ((e == EAGAIN || e == EINTR) && Clock::now() < deadline) {  // backlog full: retry until the deadline
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
      continue;
    }
    ::close(fd);
    if (e == ENOENT || e == ECONNREFUSED)
      return make_error(fmt::format("no capuchind answers on {} (start one with `capuchind --socket {}`, or use "
                                    "`capuchin run`)", path, path));
    if (e == EAGAIN)
      return make_error(fmt::format("capuchind on {} does not accept connections (stopped or hung?)", path));
    return make_error(fmt::format("cannot connect to {}: {}", path, std::strerror(e)));
  }
  const int flags = ::fcntl(fd, F_GETFL);
  if (flags >= 0) ::fcntl(fd, F_SETFL, flags & ~O_NONBLOCK);
  const auto ms = std::max<long long>(1, std::chrono::duration_cast<std::chrono::milliseconds>(timeout).count());
  timeval tv{static_cast<time_t>(ms / 1000), static_cast<suseconds_t>(ms % 1000 * 1000)};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  ::setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
  return fd;
}

}  // namespace

Expected<nlohmann::json> query_daemon(const std::string& socket, const std::string& method, const nlohmann::json& params,
                                      std::chrono::milliseconds timeout) {
  const auto deadline = Clock::now() + timeout;  // for the whole query, not each call
  auto fd = connect_to(socket, timeout);
  if (!fd) return Unexpected{fd.error()};
  nlohmann::json req = {{"v", 1}, {"id", 1}, {"method", method}, {"params", params}};
  const std::string line = req.dump() + "\n";
  std::size_t off = 0;
  int send_errno = 0;
  while (off < line.size()) {
    const ssize_t n = ::send(*fd, line.data() + off, line.size() - off, MSG_NOSIGNAL);
    if (n <= 0) {  // the daemon may have answered (e.g. refused us) before closing: read it
      send_errno = errno;
      break;
    }
    off += static_cast<std::size_t>(n);
  }
  std::string resp;
  char buf[65536];
  while (resp.find('\n') == std::string::npos) {
    const auto left = std::chrono::duration_cast<std::chrono::microseconds>(deadline - Clock::now()).count();
    if (left <= 0) break;
    timeval tv{static_cast<time_t>(left / 1000000), static_cast<suseconds_t>(left % 1000000)};
    ::setsockopt(*fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    const ssize_t n = ::recv(*fd, buf, sizeof buf, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    resp.append(buf, static_cast<std::size_t>(n));
    if (resp.size() > (256u << 20)) break;
  }
  ::close(*fd);
  if (auto nl = resp.find('\n'); nl != std::string::npos) resp.resize(nl);
  if (resp.empty() && send_errno != 0)
    return make_error(fmt::format("cannot send to {}: {}", socket, std::strerror(send_errno)));
  if (resp.empty())
    return make_error(fmt::format("{}: the daemon did not answer within {} ms (hung?) or closed the connection", socket,
                                  timeout.count()));
  const nlohmann::json j = nlohmann::json::parse(resp, nullptr, false);
  if (j.is_discarded() || !j.is_object()) return make_error(fmt::format("{}: the daemon's answer is not JSON", socket));
  if (!j.value("ok", false)) {
    std::string code = "error", msg = "unknown error";
    if (j.contains("error") && j["error"].is_object()) {
      if (j["error"].contains("code") && j["error"]["code"].is_string()) code = j["error"]["code"];
      if (j["error"].contains("message") && j["error"]["message"].is_string()) msg = j["error"]["message"];
    }
    return make_error(fmt::format("capuchind: {}: {}", code, msg));
  }
  return j.contains("result") ? j["result"] : nlohmann::json(nullptr);
}

DaemonProbe probe_daemon(const std::string& socket, std::chrono::milliseconds timeout) {
  struct stat sb{};
  if (::stat(socket.c_str(), &sb) != 0) return DaemonProbe::Absent;
  auto r = query_daemon(socket, "status", nlohmann::json::object(), timeout);
  if (r) return DaemonProbe::Answers;
  return r.error().message.find("no capuchind answers") != std::string::npos ? DaemonProbe::Absent : DaemonProbe::Unresponsive;
}

bool daemon_answers(const std::string& socket) { return probe_daemon(socket, std::chrono::seconds(10)) == DaemonProbe::Answers; }

Status start_daemon(const std::string& socket, int idle_exit_s, std::chrono::milliseconds wait) {
  auto found = find_daemon();
  if (!found) return make_error(found.error().message);
  const std::string exe = *found;
  const std::string log_path = (std::filesystem::path(socket).parent_path() / "capuchind.log").string();
  std::error_code ec;
  const auto dir = std::filesystem::path(socket).parent_path();
  if (!dir.empty() && !std::filesystem::exists(dir, ec)) {
    std::filesystem::create_directories(dir, ec);
    ::chmod(dir.c_str(), 0700);  // as the daemon would create it: this user's only
  }
  const std::string idle = std::to_string(idle_exit_s);
  // Double fork: the daemon is re-parented to init and outlives this command.
  const pid_t child = ::fork();
  if (child < 0) return make_error(fmt::format("fork: {}", std::strerror(errno)));
  if (child == 0) {
    ::setsid();
    if (::fork() != 0) ::_exit(0);
    const int in = ::open("/dev/null", O_RDONLY);
    const int out = ::open(log_path.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0600);
    if (in >= 0) ::dup2(in, 0);
    if (out >= 0) ::dup2(out, 1), ::dup2(out, 2);
    ::unsetenv("LD_PRELOAD");
    ::execl(exe.c_str(), exe.c_str(), "--socket", socket.c_str(), "--idle-exit", idle.c_str(), static_cast<char*>(nullptr));
    ::_exit(127);
  }
  int st = 0;
  while (::waitpid(child, &st, 0) < 0 && errno == EINTR) {
  }
  // Bounded as a whole: the job starts within `wait` whatever the daemon does.
  const auto deadline = Clock::now() + wait;
  while (Clock::now() < deadline) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
    if (probe_daemon(socket, std::max(left, std::chrono::milliseconds(1))) == DaemonProbe::Answers) return {};
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return make_error(fmt::format("capuchind did not come up on {} within {} ms (see {})", socket, wait.count(), log_path));
}

}  // namespace capuchin::cli
