// Parsing and printing byte sizes. See include/capuchin/units.hpp.
#include "capuchin/units.hpp"

#include <fmt/format.h>

#include <array>
#include <cctype>
#include <charconv>
#include <cmath>

#include "capuchin/text.hpp"

namespace capuchin {
namespace {

std::string lower(std::string_view s) {
  std::string r(s);
  for (char& c : r) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return r;
}

}  // namespace



Expected<std::uint64_t> parse_size(std::string_view text) {
  const std::string_view s = trim_spaces(text);
  double value = 0;
  auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), value);
  if (ec != std::errc() || s.empty() || s.front() == '-' || s.front() == '+')
    return make_error(fmt::format("'{}' is not a size (examples: 268435456, 500MiB, 12GiB)", text));
  const std::string unit = lower(trim_spaces(std::string_view(end, s.data() + s.size() - end)));
  struct U { const char* name; double mult; };
  static constexpr std::array<U, 10> units{{{"", 1}, {"b", 1}, {"kib", 1024.0}, {"mib", 1048576.0},
                                            {"gib", 1073741824.0}, {"tib", 1099511627776.0}, {"kb", 1e3},
                                            {"mb", 1e6}, {"gb", 1e9}, {"tb", 1e12}}};
  for (const U& u : units) {
    if (unit != u.name) continue;
    const double bytes = value * u.mult;
    if (!std::isfinite(bytes) || bytes < 1 || bytes > 1.8e19)
      return make_error(fmt::format("size '{}' is out of range (must be at least 1 byte)", text));
    return static_cast<std::uint64_t>(std::llround(bytes));
  }
  return make_error(fmt::format("unknown unit '{}' in '{}' (use B, KiB, MiB, GiB, TiB, KB, MB, GB, TB)", unit, text));
}

std::string format_bytes(std::uint64_t bytes) {
  static constexpr std::array<const char*, 5> names{"B", "KiB", "MiB", "GiB", "TiB"};
  double v = static_cast<double>(bytes);
  std::size_t u = 0;
  while (v >= 1024.0 && u + 1 < names.size()) v /= 1024.0, ++u;
  if (u == 0) return fmt::format("{} B", bytes);
  return fmt::format("{:.1f} {}", v, names[u]);
}

}  // namespace capuchin
