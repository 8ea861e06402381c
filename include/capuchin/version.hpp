// The project's version, shared by the CLI, the daemon and the interposer.
#pragma once

#include <string_view>

namespace capuchin {
inline constexpr std::string_view kVersion = "0.1.0";
}
