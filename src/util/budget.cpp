// Parsing, resolving and printing budgets. See include/capuchin/budget.hpp.
#include "capuchin/budget.hpp"

#include <fmt/format.h>

#include <cctype>
#include <charconv>
#include <cmath>
#include <optional>

#include "capuchin/text.hpp"
#include "capuchin/units.hpp"

namespace capuchin {
namespace {

// The three forms, with `number` (the bare number the user wrote, if any) in the ones it fits.
std::string forms(std::optional<double> number, std::string_view text) {
  if (number && *number > 0 && *number <= 1)
    return fmt::format("write a size ({0}GiB, {0}MB), a share of the device's memory ({1:g}%) or a multiple of the "
                       "job's natural peak ({0}x)", text, *number * 100);
  if (number && *number > 1)
    return fmt::format("write a size with a unit ({0}MiB, {0}GiB), a share of the device's memory (e.g. 60%) or a "
                       "multiple of the job's natural peak (e.g. 0.5x)", text);
  return "write a size (40GiB, 500MB), a share of the device's memory (60%) or a multiple of the job's natural peak (0.5x)";
}

// The number before a '%' or 'x' suffix; nullopt-like failure as an error naming the text.
Expected<double> number_before_suffix(std::string_view whole, std::string_view digits) {
  double v = 0;
  auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), v);
  if (digits.empty() || ec != std::errc() || end != digits.data() + digits.size() || !std::isfinite(v))
    return make_error(fmt::format("budget '{}' is not a number followed by '{}'", whole, whole.back()));
  return v;
}

}  // namespace

Expected<Budget> parse_budget(std::string_view text) {
  const std::string_view s = trim_spaces(text);
  if (s.empty()) return make_error("the budget is empty: " + forms(std::nullopt, ""));
  const char last = static_cast<char>(std::tolower(static_cast<unsigned char>(s.back())));
  if (last == '%' || last == 'x') {
    auto v = number_before_suffix(s, trim_spaces(s.substr(0, s.size() - 1)));
    if (!v) return Unexpected{v.error()};
    if (last == '%') {
      if (!(*v > 0 && *v <= 100)) return make_error(fmt::format("budget '{}': a share of the device lies in (0%, 100%]", s));
      return Budget{Budget::Kind::OfDevice, 0, *v / 100.0};
    }
    if (!(*v > 0 && *v <= 1))
      return make_error(fmt::format("budget '{}': a multiple of the natural peak lies in (0x, 1x] (more saves nothing)", s));
    return Budget{Budget::Kind::OfPeak, 0, *v};
  }
  // A number without a unit: plain digits of 1024 or more are bytes; anything else (a
  // decimal, an exponent, a small integer) could mean any of the three forms.
  if (s.find_first_not_of("0123456789.eE+-") == std::string_view::npos) {
    double v = 0;
    auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
    const bool parsed = ec == std::errc() && end == s.data() + s.size() && std::isfinite(v);
    const bool digits = s.find_first_not_of("0123456789") == std::string_view::npos;
    if (parsed && v <= 0) return make_error(fmt::format("budget '{}' must be more than 0: {}", s, forms(std::nullopt, s)));
    if (parsed && (!digits || v < 1024))
      return make_error(fmt::format("budget '{}' is ambiguous: {}", s, forms(v, s)));
  }
  auto b = parse_size(s);
  if (!b) return make_error(fmt::format("budget: {}; {}", b.error().message, forms(std::nullopt, "")));
  return Budget{Budget::Kind::Bytes, *b, 0};
}

std::uint64_t Budget::resolve(std::uint64_t device_bytes, std::uint64_t natural_peak_bytes) const {
  switch (kind) {
    case Kind::Bytes: return bytes;
    case Kind::OfDevice: return static_cast<std::uint64_t>(ratio * static_cast<double>(device_bytes));
    case Kind::OfPeak: return static_cast<std::uint64_t>(ratio * static_cast<double>(natural_peak_bytes));
  }
  return 0;
}

std::string Budget::describe() const {
  switch (kind) {
    case Kind::Bytes: return format_bytes(bytes);
    case Kind::OfDevice: return fmt::format("{:g}% of the device", ratio * 100);
    case Kind::OfPeak: return fmt::format("{:g}x the natural peak", ratio);
  }
  return {};
}

}  // namespace capuchin
