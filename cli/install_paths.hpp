// install_paths.hpp: where `capuchin run` finds libcapuchin.so and capuchind, in a build tree,
// an installed prefix (cmake --install, the .deb, the Python wheel) or anywhere else the user
// points it to.
//
// Contract: an explicit variable wins and is never second-guessed (CAPUCHIN_INTERPOSER for
// libcapuchin.so, CAPUCHIN_DAEMON for capuchind: a path that is not there is an error, not a
// reason to look elsewhere); otherwise the places are relative to this executable's own file
// (/proc/self/exe), so a moved or copied install prefix still works. A miss is an error that
// names every path tried and the variable that points capuchin to the file.
#pragma once

#include <string>
#include <vector>

#include "capuchin/expected.hpp"

namespace capuchin::cli {

// The places tried for libcapuchin.so when CAPUCHIN_INTERPOSER is not set, first match wins:
// <exe dir>/<CAPUCHIN_LIBDIR_FROM_BINDIR>/libcapuchin.so (an installed prefix: lib/capuchin/),
// then <exe dir>/../lib/libcapuchin.so (a build tree).
std::vector<std::string> interposer_candidates(const std::string& exe_dir);

// libcapuchin.so to preload: $CAPUCHIN_INTERPOSER if set, else the first readable candidate.
Expected<std::string> find_interposer();

// capuchind to start: $CAPUCHIN_DAEMON if set, else <exe dir>/capuchind.
Expected<std::string> find_daemon();

}  // namespace capuchin::cli
