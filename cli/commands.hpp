// The `capuchin` CLI's subcommands. Each add_*_command registers its subcommand on the app
// and sets `exit_code` when it runs. Commands print results to stdout and problems to
// stderr; they never throw past main().
#pragma once

#include <CLI/CLI.hpp>

namespace capuchin::cli {

void add_trace_command(CLI::App& app, int& exit_code);
void add_sim_command(CLI::App& app, int& exit_code);
// daemon_cmd.cpp: --socket, run, status, sessions, session, tensors, plan, decisions, set-budget, metrics
void add_daemon_commands(CLI::App& app, int& exit_code);
// log_cmd.cpp: log, export perfetto, report
void add_log_commands(CLI::App& app, int& exit_code);
// memviz_cmd.cpp: `export memory-viz`, added to the `export` subcommand
void add_memviz_command(CLI::App& exp, int& exit_code);

}  // namespace capuchin::cli
