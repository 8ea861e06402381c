// bench_daemon_ingest: how many events per second one session pushes into capuchind's
// learner. Three figures on the same synthetic training stream (a 600-event iteration of
// allocations, kernels over 3 tensors each, frees and a loss read-back, repeated):
//   decode only      FrameReader + decode_events into flat arrays
//   decode+learner   the above + Session::on_events (window, id map, iteration detection,
//                    pattern following, planning at h200 under a 0.6 budget, compaction)
//   real socket      a client process thread streaming frames over a Unix socket into the
//                    daemon's Asio server (one io_context thread) and its session
// Per-core rates divide by the CPU time of the thread doing the work. Usage:
// bench_daemon_ingest [EVENTS (default 4000000)].
#include <pthread.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include <boost/asio/io_context.hpp>
#include <spdlog/spdlog.h>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "capuchin/protocol.hpp"
#include "query.hpp"
#include "server.hpp"
#include "session.hpp"

using namespace capuchin;

namespace {

double thread_cpu_s(clockid_t c) {
  timespec ts{};
  clock_gettime(c, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
}
double now_s() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }

// Frames for `total` events: hello, names, then batches of 4096 events.
std::vector<std::uint8_t> make_stream(std::size_t total, std::size_t& events_out) {
  std::vector<std::uint8_t> out;
  proto::HelloInfo h;
  h.pid = static_cast<std::uint32_t>(getpid());
  h.budget_of_peak = 0.6;
  h.cmdline = "bench_daemon_ingest";
  proto::encode_hello(out, h);
  std::vector<std::string> names;
  for (int i = 0; i < 150; ++i) names.push_back("kernel_" + std::to_string(i));
  proto::encode_names(out, 0, names);
  std::vector<proto::WireEvent> ev;
  std::vector<std::uint64_t> ids;
  std::uint64_t next = 1000;
  std::size_t n = 0;
  auto flush = [&] {
    if (ev.empty()) return;
    proto::encode_events(out, ev, ids);
    n += ev.size();
    ev.clear();
    ids.clear();
  };
  for (std::uint64_t w = 1; w <= 20; ++w) ev.push_back({0, 1, 0, 0, 0, 0, w, 1u << 20});
  while (n + ev.size() < total) {
    // One iteration: 150 kernels, each allocating an output and reading a weight and the
    // previous output; outputs freed in reverse (backward), then a sync.
    std::vector<std::uint64_t> acts;
    std::uint64_t prev = 1;
    for (std::uint32_t k = 0; k < 150; ++k) {
      const std::uint64_t a = next++;
      ev.push_back({0, 4, 0, 0, 0, 0, a, (1u + k % 7) << 20});
      ev.push_back({2, 0, trace::kHasReadsWrites, 0, k, 0, proto::pack_counts(2, 1, 0), 0});
      ids.push_back(1 + k % 20);
      ids.push_back(prev);
      ids.push_back(a);
      acts.push_back(a);
      prev = a;
    }
    for (auto it = acts.rbegin(); it != acts.rend(); ++it) ev.push_back({1, 0, 0, 0, 0, 0, *it, 0});
    ev.push_back({5, 0, 0, 0, 0, 0, 0, 0});
    if (ev.size() >= 4096) flush();
  }
  flush();
  proto::encode_bye(out);
  events_out = n;
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  spdlog::set_level(spdlog::level::warn);
  const std::size_t want = argc > 1 ? std::strtoull(argv[1], nullptr, 10) : 4000000;
  std::size_t events = 0;
  const std::vector<std::uint8_t> stream = make_stream(want, events);
  std::printf("bench_daemon_ingest: %zu events, %.1f MiB on the wire (%.1f bytes/event)\n", events,
              static_cast<double>(stream.size()) / (1 << 20), static_cast<double>(stream.size()) / static_cast<double>(events));

  // 1 and 2: in-process, fed in 256 KiB reads like the server does.
  for (int with_session = 0; with_session < 2; ++with_session) {
    daemon::DaemonOptions opt;
    std::unique_ptr<daemon::Session> s;
    proto::FrameReader fr;
    proto::EventBatch batch;
    std::size_t decoded = 0;
    clockid_t me;
    pthread_getcpuclockid(pthread_self(), &me);
    const double c0 = thread_cpu_s(me), w0 = now_s();
    for (std::size_t off = 0; off < stream.size(); off += 256 * 1024) {
      fr.feed(std::span(stream.data() + off, std::min<std::size_t>(256 * 1024, stream.size() - off)));
      proto::FrameReader::Frame f;
      while (*fr.next(f)) {
        const auto t = static_cast<proto::MsgType>(f.header.type);
        if (t == proto::MsgType::Hello && with_session) s = std::make_unique<daemon::Session>(1, *proto::decode_hello(f.payload), opt);
        if (t == proto::MsgType::Names && s) (void)s->on_names(*proto::decode_names(f.payload));
        if (t == proto::MsgType::Events) {
          if (!proto::decode_events(f.payload, batch)) return 1;
          decoded += batch.events.size();
          if (s && !s->on_events(batch)) return 1;
        }
      }
    }
    const double cpu = thread_cpu_s(me) - c0, wall = now_s() - w0;
    std::printf("%-16s %7.1f M events/s per core (%.3f s CPU, %.3f s wall)", with_session ? "decode+learner" : "decode only",
                static_cast<double>(decoded) / cpu / 1e6, cpu, wall);
    if (s) std::printf("  iterations learned %llu, plans %llu", static_cast<unsigned long long>(s->iteration()),
                       static_cast<unsigned long long>(s->plans_made()));
    std::printf("\n");
  }

  // 3: through the real server on a Unix socket.
  char dir[] = "/tmp/capuchin-bench-XXXXXX";
  if (mkdtemp(dir) == nullptr) return 1;
  daemon::DaemonOptions opt;
  opt.socket_path = std::string(dir) + "/d.sock";
  daemon::Registry reg(opt);
  boost::asio::io_context io(1);
  daemon::Server server(io, reg);
  if (auto st = server.listen(opt.socket_path); !st) {
    std::fprintf(stderr, "%s\n", st.error().message.c_str());
    return 1;
  }
  clockid_t io_clock{};
  std::thread io_thread([&] { io.run(); });
  pthread_getcpuclockid(io_thread.native_handle(), &io_clock);
  const double c0 = thread_cpu_s(io_clock), w0 = now_s();
  const int fd = ::socket(AF_UNIX, SOCK_STREAM, 0);
  sockaddr_un a{};
  a.sun_family = AF_UNIX;
  std::strncpy(a.sun_path, opt.socket_path.c_str(), sizeof a.sun_path - 1);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) return 1;
  for (std::size_t off = 0; off < stream.size();) {
    const ssize_t n = ::send(fd, stream.data() + off, stream.size() - off, MSG_NOSIGNAL);
    if (n <= 0) return 1;
    off += static_cast<std::size_t>(n);
  }
  ::shutdown(fd, SHUT_WR);
  char buf[4096];
  while (::recv(fd, buf, sizeof buf, 0) > 0) {  // welcome, plans; EOF once all is processed
  }
  const double cpu = thread_cpu_s(io_clock) - c0, wall = now_s() - w0;
  ::close(fd);
  const daemon::Session* s = reg.find(1);
  std::printf("real socket      %7.1f M events/s per daemon core (%.3f s daemon CPU, %.3f s wall: %.1f M events/s)",
              static_cast<double>(events) / cpu / 1e6, cpu, wall, static_cast<double>(events) / wall / 1e6);
  if (s) std::printf("  session saw %llu events, %llu iterations", static_cast<unsigned long long>(s->events_total()),
                     static_cast<unsigned long long>(s->iteration()));
  std::printf("\n");
  io.stop();
  io_thread.join();
  server.stop();
  ::rmdir(dir);
  return s != nullptr && s->events_total() == events ? 0 : 1;
}
