// capuchin/args.hpp: command-line options for the project's small programs (capuchind, the
// simcuda workloads, the host-cost benchmarks), parsed by CLI11 behind a narrow, non-template
// front compiled once (src/util/args.cpp).
//
// Why: CLI11 2.1 (Debian 12) is header-only and its App is all inline code; every translation
// unit that used it compiled 10 s of it at -O1 and 25 s instrumented under clang's ASan, six of
// them per build. The `capuchin` CLI, with its subcommand tree, keeps using CLI11 directly.
//
// Contract: options bind to variables that outlive parse(); a variable keeps its value when its
// option is not given (that value is the default). parse() prints help, a version line or an
// error as CLI11 does and then returns the exit status main should return; std::nullopt means
// "go on". Option and Command handles stay valid while their Parser lives. A mistake in adding
// an option (the same name twice) throws CLI11's exception, as CLI11 itself did: it is the
// program's bug, found the first time it runs.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace CLI {
class App;
class Option;
}  // namespace CLI

namespace capuchin::args {

// One option, to refine after adding it.
class Option {
 public:
  enum class Kind { Signed, Unsigned, Real, Other };
  Option(CLI::Option* o, Kind kind) : opt_(o), kind_(kind) {}
  // A numeric value within [lo, hi], checked (and printed) as the option's type: an integer
  // option's whole bounds as integers, so "2.5" or 2^53 + 1 is refused exactly. The bounds are
  // doubles: a bound that is not a whole number, or not below 2^63 (2^64 unsigned), is checked
  // as a real one.
  Option& range(double lo, double hi);
  Option& one_of(const std::vector<std::string>& words);  // one of these words exactly
  Option& required();
  Option& needs(const Option& other);  // given only together with `other`

 private:
  CLI::Option* opt_;
  Kind kind_;
};

// A command: the program itself or one of its subcommands.
class Command {
 public:
  explicit Command(CLI::App* app) : app_(app) {}
  // NAME "--x" is an option; a NAME without dashes is a positional argument.
  Option option(const std::string& name, int& value, const std::string& help);
  Option option(const std::string& name, unsigned& value, const std::string& help);
  Option option(const std::string& name, long& value, const std::string& help);
  Option option(const std::string& name, unsigned long& value, const std::string& help);
  Option option(const std::string& name, float& value, const std::string& help);
  Option option(const std::string& name, double& value, const std::string& help);
  Option option(const std::string& name, std::string& value, const std::string& help);
  Option flag(const std::string& name, bool& value, const std::string& help);
  Command subcommand(const std::string& name, const std::string& help);
  void require_subcommand();  // exactly one
  bool parsed() const;        // after Parser::parse: this (sub)command was given

 private:
  CLI::App* app_;
};

class Parser : public Command {
 public:
  explicit Parser(const std::string& description);
  ~Parser();
  Parser(const Parser&) = delete;
  Parser& operator=(const Parser&) = delete;
  void version(const std::string& flag, const std::string& line);
  std::optional<int> parse(int argc, char** argv);

 private:
  explicit Parser(std::unique_ptr<CLI::App> root);
  std::unique_ptr<CLI::App> root_;
};

}  // namespace capuchin::args
