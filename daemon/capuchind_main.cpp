// capuchind: the daemon that learns access patterns and serves plans and queries over a
// Unix socket (Boost.Asio, spdlog). This is its skeleton: options and logging are in place;
// sessions and the query API arrive with the daemon issue, so today it refuses to start
// rather than pretend to serve.
#include <CLI/CLI.hpp>
#include <boost/asio/io_context.hpp>
#include <spdlog/spdlog.h>

#include "capuchin/version.hpp"

int main(int argc, char** argv) {
  CLI::App app{"capuchind: the capuchin daemon"};
  app.set_version_flag("--version", std::string(capuchin::kVersion));
  std::string socket_path, log_dir;
  app.add_option("--socket", socket_path, "Unix socket to listen on");
  app.add_option("--log-dir", log_dir, "directory for per-session decision logs");
  CLI11_PARSE(app, argc, argv);

  boost::asio::io_context io;  // the daemon's single event loop (used by the daemon issue)
  spdlog::error("capuchind {}: serving sessions is not implemented yet; nothing to do", capuchin::kVersion);
  return 2;
}
