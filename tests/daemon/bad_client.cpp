// bad_client SOCKET: sends capuchind every kind of bad input (garbage, huge lengths, a wrong
// protocol version, truncated frames, frames out of order, inconsistent batches, unknown
// methods, over-long JSON lines) and checks each gets an error reply or a closed connection,
// and that the daemon still answers afterwards. Exit 0 when all held, 1 otherwise.
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "capuchin/protocol.hpp"

namespace {

const char* g_path;
int g_failures = 0;

int connect_daemon() {
  const int fd = ::socket(AF_UNIX, SOCK_STREAM, 0);
  sockaddr_un a{};
  a.sun_family = AF_UNIX;
  std::strncpy(a.sun_path, g_path, sizeof a.sun_path - 1);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
    std::perror("connect");
    return -1;
  }
  timeval tv{5, 0};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  return fd;
}

// Sends `bytes` (optionally closing our write side), reads until EOF or timeout.
std::string exchange(const std::string& bytes, bool half_close, bool* closed) {
  const int fd = connect_daemon();
  if (fd < 0) return {};
  std::size_t off = 0;
  while (off < bytes.size()) {
    const ssize_t n = ::send(fd, bytes.data() + off, bytes.size() - off, MSG_NOSIGNAL);
    if (n <= 0) break;  // the daemon may close early (e.g. on a huge line): fine
    off += static_cast<std::size_t>(n);
  }
  if (half_close) ::shutdown(fd, SHUT_WR);
  std::string got;
  char buf[4096];
  *closed = false;
  for (;;) {
    const ssize_t n = ::recv(fd, buf, sizeof buf, 0);
    if (n == 0) {
      *closed = true;
      break;
    }
    if (n < 0) break;  // timeout: still open
    got.append(buf, static_cast<std::size_t>(n));
    if (!half_close && got.find('\n') != std::string::npos && got[0] == '{') break;  // one JSON answer
  }
  ::close(fd);
  return got;
}

std::string frame(capuchin::proto::MsgType t, const std::string& payload, std::uint16_t version = 1,
                  std::uint32_t length_override = 0) {
  std::vector<std::uint8_t> out;
  capuchin::proto::append_frame(out, t, std::span(reinterpret_cast<const std::uint8_t*>(payload.data()), payload.size()));
  if (version != 1) std::memcpy(out.data() + 4, &version, 2);
  if (length_override) std::memcpy(out.data() + 8, &length_override, 4);
  return std::string(out.begin(), out.end());
}

std::string hello() {
  std::vector<std::uint8_t> out;
  capuchin::proto::HelloInfo h;
  h.pid = static_cast<std::uint32_t>(getpid());
  h.cmdline = "bad_client";
  capuchin::proto::encode_hello(out, h);
  return std::string(out.begin(), out.end());
}

void expect(const char* name, bool ok, const std::string& got) {
  std::printf("%-40s %s\n", name, ok ? "ok" : "FAILED");
  if (!ok) {
    ++g_failures;
    std::printf("  got %zu bytes: %s\n", got.size(), got.substr(0, 200).c_str());
  }
}

bool is_error_frame(const std::string& s) {
  if (s.size() < 16) return false;
  auto h = capuchin::proto::decode_header(std::span(reinterpret_cast<const std::uint8_t*>(s.data()), s.size()));
  return h && h->type == static_cast<std::uint16_t>(capuchin::proto::MsgType::Error);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s SOCKET\n", argv[0]);
    return 2;
  }
  g_path = argv[1];
  using capuchin::proto::MsgType;
  bool closed = false;
  std::string r;

  r = exchange("\x01\x02garbage\n", true, &closed);
  expect("garbage", r.find("\"bad-request\"") != std::string::npos && closed, r);
  r = exchange(frame(MsgType::Events, "", 1, 0xfffffff0u), false, &closed);
  expect("huge length", is_error_frame(r) && r.find("exceeds the limit") != std::string::npos && closed, r);
  r = exchange(frame(MsgType::Hello, "", static_cast<std::uint16_t>(capuchin::proto::kProtocolVersion + 1)), false, &closed);
  expect("wrong protocol version", is_error_frame(r) && r.find("version") != std::string::npos && closed, r);
  r = exchange(frame(MsgType::Events, std::string(8, '\0')), false, &closed);
  expect("events before hello", is_error_frame(r) && r.find("before hello") != std::string::npos && closed, r);
  r = exchange(hello().substr(0, 20), true, &closed);
  expect("truncated frame", closed, r);
  {
    std::string bad_batch(8, '\0');
    const std::uint32_t n = 1, nids = 5;
    std::memcpy(bad_batch.data(), &n, 4);
    std::memcpy(bad_batch.data() + 4, &nids, 4);
    bad_batch += std::string(32, '\0');  // one Alloc of 0 bytes, and no ids at all
    r = exchange(hello() + frame(MsgType::Events, bad_batch), false, &closed);
    expect("inconsistent event batch", r.find("carries") != std::string::npos, r);
    expect("inconsistent event batch closes", closed, r);
  }
  {
    std::string bad_hello(40, '\0');
    r = exchange(frame(MsgType::Hello, bad_hello), false, &closed);
    expect("malformed hello", r.find("hello") != std::string::npos && closed, r);
  }
  r = exchange(hello() + frame(MsgType::Plan, ""), false, &closed);
  expect("plan sent to the daemon", r.find("sent by the daemon") != std::string::npos && closed, r);
  r = exchange("{\"v\":1,\"method\":\"no-such-method\"}\n{\"method\":\"status\"}\n", true, &closed);
  expect("unknown method, then a good request",
         r.find("\"unknown-method\"") != std::string::npos && r.find("\"ok\":true") != std::string::npos, r);
  r = exchange("{\"v\":9,\"method\":\"status\"}\n", false, &closed);
  expect("wrong query version", r.find("\"bad-version\"") != std::string::npos, r);
  r = exchange("{\"method\":\"session\",\"params\":{\"session\":999999}}\n", false, &closed);
  expect("no such session", r.find("\"no-such-session\"") != std::string::npos, r);
  r = exchange("{\"method\":\"set-budget\",\"params\":{\"session\":1,\"budget\":\"lots\"}}\n", false, &closed);
  expect("bad set-budget", r.find("\"ok\":false") != std::string::npos, r);
  r = exchange("{\"method\":[1,2]}\n", false, &closed);
  expect("method not a string", r.find("\"bad-request\"") != std::string::npos, r);
  r = exchange("{" + std::string(3u << 20, ' '), false, &closed);
  expect("JSON line over 1 MiB", r.find("\"too-large\"") != std::string::npos, r);
  r = exchange("{\"method\":\"status\"}\n", false, &closed);
  expect("daemon still answers", r.find("\"ok\":true") != std::string::npos && r.find("\"sessions\"") != std::string::npos, r);
  std::printf("bad_client: %d failure(s)\n", g_failures);
  return g_failures ? 1 : 0;
}
