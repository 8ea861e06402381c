// Byte sizes as people write them: parse "268435456", "500MiB", "12GiB", "1.5GB" and print
// 479227264 as "457.0 MiB". Contract: parse errors are values naming the bad text.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "capuchin/expected.hpp"

namespace capuchin {

// Plain bytes or a number with a unit: B, KiB, MiB, GiB, TiB (powers of 1024) or KB, MB,
// GB, TB (powers of 1000); case-insensitive, optional space. The result must be > 0.
Expected<std::uint64_t> parse_size(std::string_view text);

// Either a fraction (0 < x <= 1, written with a '.') of some reference, or a size.
struct SizeOrFraction {
  bool is_fraction = false;
  double fraction = 0;
  std::uint64_t bytes = 0;
  std::uint64_t resolve(std::uint64_t reference) const {
    return is_fraction ? static_cast<std::uint64_t>(fraction * static_cast<double>(reference)) : bytes;
  }
};
Expected<SizeOrFraction> parse_size_or_fraction(std::string_view text);

std::string format_bytes(std::uint64_t bytes);  // binary units, one decimal

}  // namespace capuchin
