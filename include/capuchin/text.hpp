// text.hpp: small text helpers the core and the CLI share, written once: trimming what users
// type, and escaping text put into HTML/SVG/XML. Contract: pure functions, no allocation
// beyond the returned string.
#pragma once

#include <string>
#include <string_view>

namespace capuchin {

// `text` without leading and trailing white space.
std::string_view trim_spaces(std::string_view text);

// `text` with &, <, > and " as character references: safe inside elements and quoted attributes.
std::string escape_markup(std::string_view text);

}  // namespace capuchin
