// The default location of the daemon's socket (see protocol.hpp).
#include <unistd.h>

#include <cstdlib>
#include <string>

#include "capuchin/protocol.hpp"

namespace capuchin::proto {

std::string default_socket_path() {
  const char* xdg = std::getenv("XDG_RUNTIME_DIR");
  if (xdg != nullptr && xdg[0] == '/') return std::string(xdg) + "/capuchin/capuchind.sock";
  return "/tmp/capuchin-" + std::to_string(getuid()) + "/capuchind.sock";
}

}  // namespace capuchin::proto
