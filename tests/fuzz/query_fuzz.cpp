// Fuzz target: the daemon's JSON request handler. Each input line is one request to a
// Registry holding one session; every line must get a one-line JSON answer, never a crash.
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string_view>

#include "query.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace capuchin;
  daemon::Registry reg{daemon::DaemonOptions{}};
  proto::HelloInfo h;
  h.pid = 1;
  (void)reg.open_session(h);
  std::string_view in(reinterpret_cast<const char*>(data), size);
  while (!in.empty()) {
    const std::size_t nl = in.find('\n');
    const std::string_view line = in.substr(0, nl);
    const std::string resp = reg.handle_request(line);
    if (resp.find('\n') != std::string::npos || nlohmann::json::parse(resp, nullptr, false).is_discarded()) __builtin_trap();
    if (nl == std::string_view::npos) break;
    in.remove_prefix(nl + 1);
  }
  return 0;
}
