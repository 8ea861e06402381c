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

std::string format_bytes(std::uint64_t bytes);  // binary units, one decimal

}  // namespace capuchin
