# capuchin_warnings: the warning set every first-party target compiles with.
add_library(capuchin_warnings INTERFACE)
target_compile_options(capuchin_warnings INTERFACE
  -Wall -Wextra -Wpedantic -Wshadow -Wnon-virtual-dtor -Wold-style-cast -Wcast-align
  -Wdouble-promotion -Wformat=2 -Wimplicit-fallthrough)
