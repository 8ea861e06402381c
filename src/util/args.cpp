// args.cpp: the one translation unit that compiles CLI11 for capuchin/args.hpp's programs (see
// there for why and for the contract).
#include "capuchin/args.hpp"

#include <cmath>

#include <CLI/CLI.hpp>

namespace capuchin::args {

Option& Option::range(double lo, double hi) {
  // Integer bounds go to an integer validator only where they are whole and representable; a
  // fractional bound on an integer option is checked as a real one.
  auto whole_within = [](double x, double min, double max) { return std::trunc(x) == x && x >= min && x < max; };
  constexpr double kTwo63 = 0x1p63, kTwo64 = 0x1p64;
  if (kind_ == Kind::Signed && whole_within(lo, -kTwo63, kTwo63) && whole_within(hi, -kTwo63, kTwo63))
    opt_->check(CLI::Range(static_cast<long long>(lo), static_cast<long long>(hi)));
  else if (kind_ == Kind::Unsigned && whole_within(lo, 0, kTwo64) && whole_within(hi, 0, kTwo64))
    opt_->check(CLI::Range(static_cast<unsigned long long>(lo), static_cast<unsigned long long>(hi)));
  else
    opt_->check(CLI::Range(lo, hi));
  return *this;
}

Option& Option::one_of(const std::vector<std::string>& words) {
  opt_->check(CLI::IsMember(words));
  return *this;
}

Option& Option::required() {
  opt_->required();
  return *this;
}

Option& Option::needs(const Option& other) {
  opt_->needs(other.opt_);
  return *this;
}

Option Command::option(const std::string& name, int& value, const std::string& help) {
  return Option(app_->add_option(name, value, help), Option::Kind::Signed);
}
Option Command::option(const std::string& name, unsigned& value, const std::string& help) {
  return Option(app_->add_option(name, value, help), Option::Kind::Unsigned);
}
Option Command::option(const std::string& name, long& value, const std::string& help) {
  return Option(app_->add_option(name, value, help), Option::Kind::Signed);
}
Option Command::option(const std::string& name, unsigned long& value, const std::string& help) {
  return Option(app_->add_option(name, value, help), Option::Kind::Unsigned);
}
Option Command::option(const std::string& name, float& value, const std::string& help) {
  return Option(app_->add_option(name, value, help), Option::Kind::Real);
}
Option Command::option(const std::string& name, double& value, const std::string& help) {
  return Option(app_->add_option(name, value, help), Option::Kind::Real);
}
Option Command::option(const std::string& name, std::string& value, const std::string& help) {
  return Option(app_->add_option(name, value, help), Option::Kind::Other);
}
Option Command::flag(const std::string& name, bool& value, const std::string& help) {
  return Option(app_->add_flag(name, value, help), Option::Kind::Other);
}

Command Command::subcommand(const std::string& name, const std::string& help) {
  return Command(app_->add_subcommand(name, help));
}

void Command::require_subcommand() { app_->require_subcommand(1); }

bool Command::parsed() const { return app_->parsed(); }

Parser::Parser(const std::string& description) : Parser(std::make_unique<CLI::App>(description)) {}

Parser::Parser(std::unique_ptr<CLI::App> root) : Command(root.get()), root_(std::move(root)) {}

Parser::~Parser() = default;

void Parser::version(const std::string& flag, const std::string& line) { root_->set_version_flag(flag, line); }

std::optional<int> Parser::parse(int argc, char** argv) {
  try {
    root_->parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return root_->exit(e);  // help and version exit 0 with their text; errors name the problem
  }
  return std::nullopt;
}

}  // namespace capuchin::args
