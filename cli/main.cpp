// `capuchin`: the user's entry point. One binary, CLI11 subcommands (see README.md).
#include <cuda.h>

#include <cstdio>

#include "capuchin/build_info.hpp"
#include "capuchin/version.hpp"
#include "commands.hpp"

int main(int argc, char** argv) {
  CLI::App app{"capuchin: train deep-learning models in less GPU memory than they need"};
  app.set_version_flag("--version", capuchin::version_line("capuchin", capuchin::kGitCommit, CUDA_VERSION));
  app.require_subcommand(1);
  int exit_code = 0;
  capuchin::cli::add_trace_command(app, exit_code);
  capuchin::cli::add_sim_command(app, exit_code);
  capuchin::cli::add_daemon_commands(app, exit_code);
  capuchin::cli::add_log_commands(app, exit_code);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  return exit_code;
}
