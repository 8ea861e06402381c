// library.hpp: libcapuchin.so's start (the library constructor) and stop (exit, or
// capuchin_finish): see library.cpp.
#pragma once

#include <cstddef>

namespace capuchin::interpose {

void start_library();
// Stops the executor, then capture (final drain, sink closed); `summary` gets capture's totals line.
void stop_library(char* summary, std::size_t summary_bytes);

}  // namespace capuchin::interpose
