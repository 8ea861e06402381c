// capuchind: the daemon that learns access patterns from every attached process, plans for
// them and answers queries over one Unix socket (Boost.Asio, one io_context; spdlog logs).
// Usage: capuchind [--socket PATH] [--log-dir DIR] [--state-file FILE] [--gpu h200]
//                  [--idle-exit SECONDS] ...
// Exit status: 0 after SIGINT/SIGTERM or the idle timeout, 1 when it cannot serve (bad
// options, socket taken by a live daemon, cannot bind). Closed sessions, and the sessions
// still attached when it exits (ended "daemon exited"), are kept in the closed-session store
// (daemon/session_store.hpp) for the next daemon on the same socket; a store it cannot read
// is a warning, never a reason not to start.
#include "capuchin/args.hpp"
#include <boost/asio/io_context.hpp>
#include <boost/asio/signal_set.hpp>
#include <boost/asio/steady_timer.hpp>
#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <sys/resource.h>
#include <sys/stat.h>

#include <csignal>
#include <filesystem>
#include <string>

#include <cuda.h>

#include "capuchin/build_info.hpp"
#include "capuchin/sim.hpp"
#include "capuchin/units.hpp"
#include "capuchin/version.hpp"
#include "query.hpp"
#include "server.hpp"

namespace {

void idle_check(boost::asio::steady_timer& timer, capuchin::daemon::Registry& reg, int idle_exit_s, int& idle_s,
                boost::asio::io_context& io, std::string& exit_reason) {
  timer.expires_after(std::chrono::seconds(1));
  timer.async_wait([&, idle_exit_s](const boost::system::error_code& ec) {
    if (ec) return;
    idle_s = reg.attached() == 0 ? idle_s + 1 : 0;
    if (idle_s >= idle_exit_s) {
      spdlog::info("no session for {} s: exiting", idle_exit_s);
      exit_reason = fmt::format("daemon exited (idle for {} s)", idle_exit_s);
      io.stop();
      return;
    }
    idle_check(timer, reg, idle_exit_s, idle_s, io, exit_reason);
  });
}

}  // namespace

int main(int argc, char** argv) {
  capuchin::args::Parser app{"capuchind: the capuchin daemon (sessions, plans, queries on a Unix socket)"};
  app.version("--version", capuchin::version_line("capuchind", capuchin::kGitCommit, CUDA_VERSION));
  capuchin::daemon::DaemonOptions opt;
  std::string log_max = "16MiB", level = "info";
  int idle_exit_s = 0;
  app.option("--socket", opt.socket_path, "Unix socket to listen on (default: $XDG_RUNTIME_DIR/capuchin/capuchind.sock, "
                                          "else /tmp/capuchin-$UID/capuchind.sock)");
  app.option("--log-dir", opt.log_dir, "directory for per-session decision logs (default: logs/ beside the socket)");
  app.option("--state-file", opt.state_file,
             "closed sessions kept across restarts (default: <socket name>.sessions.json beside the socket; "
             "none: not kept)");
  app.option("--keep-sessions", opt.sessions_kept, "closed sessions the state file keeps (the most recent)")
      .range(0u, 100000u);
  app.option("--gpu", opt.gpu, "GPU profile the planner models (capuchin sim --list-gpus)");
  app.option("--max-session-events", opt.max_session_events, "events kept per session for learning")
      .range(1024u, 1u << 26);
  app.option("--log-max-bytes", log_max, "rotate a session's decision log at this size");
  app.option("--log-files", opt.log_files, "rotated decision-log files kept per session").range(1u, 100u);
  app.option("--max-sessions", opt.max_sessions, "attached sessions at most").range(1u, 65536u);
  app.option("--idle-exit", idle_exit_s, "exit after this many seconds without a session (0: never)")
      .range(0, 1 << 30);
  app.option("--log-level", level, "daemon log level: trace, debug, info, warn, error, off");
  if (auto status = app.parse(argc, argv)) return *status;

  spdlog::set_level(spdlog::level::from_str(level));
  spdlog::set_pattern("[%Y-%m-%d %H:%M:%S.%e] capuchind[%P] %l: %v");
  if (opt.socket_path.empty()) opt.socket_path = capuchin::proto::default_socket_path();
  if (opt.log_dir.empty()) opt.log_dir = (std::filesystem::path(opt.socket_path).parent_path() / "logs").string();
  // Beside the socket: one store per socket (one daemon serves a socket), and the same
  // lifetime as the decision logs under it (a runtime directory goes at logout with both).
  if (opt.state_file.empty()) opt.state_file = capuchin::daemon::default_store_path(opt.socket_path);
  if (opt.state_file == "none") opt.state_file.clear();
  if (auto b = capuchin::parse_size(log_max); b) {
    opt.log_max_bytes = *b;
  } else {
    spdlog::error("--log-max-bytes: {}", b.error().message);
    return 1;
  }
  if (auto g = capuchin::sim::find_gpu_profile(opt.gpu); !g) {
    spdlog::error("--gpu: {}", g.error().message);
    return 1;
  }
  std::signal(SIGPIPE, SIG_IGN);
  ::umask(077);  // the socket's directory, decision logs: this user's only

  capuchin::daemon::Registry registry(opt);  // outlives the io_context and its connections
  // Every attached process and query holds a descriptor: take the hard limit, not the soft 1024.
  if (rlimit nofile{}; ::getrlimit(RLIMIT_NOFILE, &nofile) == 0 && nofile.rlim_cur < nofile.rlim_max) {
    nofile.rlim_cur = nofile.rlim_max;
    (void)::setrlimit(RLIMIT_NOFILE, &nofile);
  }
  boost::asio::io_context io(1);
  capuchin::daemon::Server server(io, registry);
  if (auto s = server.listen(opt.socket_path); !s) {
    spdlog::error("{}", s.error().message);
    return 1;
  }
  registry.restore();  // the socket is this daemon's now: so is the store beside it
  spdlog::info("capuchind {} serving {} (decision logs in {}, closed sessions in {}, GPU profile {})", capuchin::kVersion,
               opt.socket_path, opt.log_dir, opt.state_file.empty() ? std::string("memory only") : opt.state_file, opt.gpu);

  std::string exit_reason = "daemon exited";
  boost::asio::signal_set signals(io, SIGINT, SIGTERM);
  signals.async_wait([&](const boost::system::error_code& ec, int sig) {
    if (ec) return;
    spdlog::info("signal {}: shutting down", sig);
    exit_reason = fmt::format("daemon exited (signal {})", sig);
    io.stop();
  });
  boost::asio::steady_timer idle_timer(io);
  int idle_s = 0;
  if (idle_exit_s > 0) idle_check(idle_timer, registry, idle_exit_s, idle_s, io, exit_reason);

  io.run();
  server.stop();
  registry.close_all(exit_reason);  // sessions still attached end here, and are stored so
  registry.flush_store();
  return 0;
}
