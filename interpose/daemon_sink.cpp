// daemon_sink.cpp: the connection to capuchind on the drain thread (see daemon_sink.hpp).
#include "daemon_sink.hpp"

#include <cuda.h>
#include <fcntl.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cinttypes>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <fstream>
#include <mutex>

#include "capuchin/budget.hpp"
#include "capuchin/units.hpp"
#include "real_api.hpp"

namespace capuchin::interpose {
namespace {

DaemonLinkStats g_link;
std::atomic<ExecTotalsSource> g_totals_source{nullptr};
std::atomic<int> g_job_device{-1};  // the executor's device (-1: not known yet)
// Shared with the drain thread, which may still be flushing while the process's static
// destructors run at exit: these live on the heap and are never destroyed (a destroyed
// std::string here was a double free at exit, seen 2 runs in 12 under capuchin run).
struct Shared {
  std::mutex lines_mu;
  std::string lines;
  // One remote plan request at a time (the executor's planner thread is the only asker).
  std::mutex req_mu;
  std::condition_variable req_cv;
  std::vector<std::uint8_t> request;  // the encoded frame, until the drain sends it
  bool request_open = false;          // waiting for the reply to request_segment
  bool request_failed = false;        // the link dropped meanwhile
  std::uint64_t request_segment = 0;
  std::optional<proto::PlanReply> reply;
  std::atomic<std::uint64_t> budget{0}, budget_generation{0};
};
Shared& shared() {
  static Shared* s = new Shared;
  return *s;
}

using Clock = std::chrono::steady_clock;
constexpr int kConnectTimeoutMs = 100;

// connect() on a non-blocking socket, waiting at most timeout_ms for it to complete. A Unix
// socket whose listener's backlog is full answers EAGAIN at once: not connected.
bool connect_within(int fd, const sockaddr_un& a, int timeout_ms) {
  if (::connect(fd, reinterpret_cast<const sockaddr*>(&a), sizeof a) == 0) return true;
  if (errno != EINPROGRESS && errno != EINTR) return false;
  pollfd p{fd, POLLOUT, 0};
  int n = 0;
  do n = ::poll(&p, 1, timeout_ms);
  while (n < 0 && errno == EINTR);
  if (n != 1) return false;
  int err = 0;
  socklen_t len = sizeof err;
  return ::getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) == 0 && err == 0;
}

std::string read_cmdline() {
  std::ifstream f("/proc/self/cmdline", std::ios::binary);
  std::string s((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  while (!s.empty() && s.back() == '\0') s.pop_back();
  for (char& c : s)
    if (c == '\0') c = ' ';
  return s.substr(0, proto::kMaxCmdlineBytes);
}

// The memory of device `ordinal` (the executor's, else 0: the process's first visible device),
// 0 while the driver cannot say (not initialised yet). Driver calls that need no context, made
// from the drain thread.
std::uint64_t device_memory(int ordinal) {
  using GetFn = CUresult (*)(CUdevice*, int);
  using TotalFn = CUresult (*)(size_t*, CUdevice);
  auto get = reinterpret_cast<GetFn>(driver_symbol("cuDeviceGet"));
  auto total = reinterpret_cast<TotalFn>(driver_symbol("cuDeviceTotalMem"));
  CUdevice d = 0;
  size_t bytes = 0;
  if (get == nullptr || total == nullptr || get(&d, ordinal) != CUDA_SUCCESS || total(&bytes, d) != CUDA_SUCCESS) return 0;
  return bytes;
}

class DaemonSink final : public Sink {
 public:
  DaemonSink(const Config& c, std::unique_ptr<Sink> inner) : path_(c.socket_path), inner_(std::move(inner)) {
    hello_.pid = static_cast<std::uint32_t>(getpid());
    hello_.cmdline = read_cmdline();
    hello_.run_tag = c.run_tag;
    if (c.budget[0] != '\0') {
      if (auto b = parse_budget(c.budget); b) {
        if (b->kind == Budget::Kind::Bytes) hello_.budget_bytes = b->bytes;
        else if (b->kind == Budget::Kind::OfDevice) hello_.budget_of_device = b->ratio;
        else hello_.budget_of_peak = b->ratio;
      } else {
        log(LogLevel::Warn, "CAPUCHIN_BUDGET=%s: %s; no budget", c.budget, b.error().message.c_str());
      }
    }
    if (std::strcmp(c.backend, "pinned") == 0) hello_.backend = proto::Backend::Pinned;
    executor_expected_ = c.budget[0] != '\0';
  }
  ~DaemonSink() override { (void)close(); }

  Status write(const trace::EventView& ev) override {
    if (inner_ && !inner_failed_) {
      if (auto s = inner_->write(ev); !s) {
        inner_failed_ = true;  // the file is lost, the daemon link is not
        log(LogLevel::Error, "recording to the trace file failed: %s", s.error().message.c_str());
      }
    }
    if (!seen_event_) {  // a connect deferred for the device is due now, before this event goes
      seen_event_ = true;
      if (fd_ < 0) try_connect();
    }
    if (fd_ < 0) {
      g_link.events_offline.fetch_add(1, std::memory_order_relaxed);
      return {};
    }
    if (!enc_.add(ev)) {
      send_pending();
      if (fd_ >= 0) (void)enc_.add(ev);
    }
    if (enc_.size() >= 4096) send_pending();
    return {};
  }

  // Called by the drain thread after every pass: sends the batch, reads replies, and
  // reconnects when it is time to.
  Status flush() override {
    if (fd_ < 0 && !awaiting_device()) try_connect();
    if (fd_ < 0) return {};
    send_pending();
    {
      std::string lines;
      {
        std::lock_guard<std::mutex> g(shared().lines_mu);
        lines.swap(shared().lines);
      }
      if (!lines.empty() && fd_ >= 0) {
        out_.clear();
        proto::encode_decisions(out_, lines);
        send_bytes();
      }
    }
    send_plan_request();  // first: the executor may be waiting for its answer
    send_exec_stats();
    receive();
    return {};
  }

  Status close() override {
    if (closed_) return {};
    closed_ = true;
    if (fd_ >= 0) {
      send_pending();
      send_exec_stats();
      if (fd_ >= 0) {
        out_.clear();
        proto::encode_bye(out_);
        send_bytes();
      }
      disconnect(false);
    }
    log(LogLevel::Info,
        "daemon link: connects=%" PRIu64 " disconnects=%" PRIu64 " events_sent=%" PRIu64 " events_offline=%" PRIu64
        " plan_requests=%" PRIu64 " plan_replies=%" PRIu64 " budgets_received=%" PRIu64 " advisory_plans=%" PRIu64,
        g_link.connects.load(), g_link.disconnects.load(), g_link.events_sent.load(), g_link.events_offline.load(),
        g_link.plan_requests.load(), g_link.plan_replies.load(), g_link.budgets_received.load(),
        g_link.plans_received.load());
    if (inner_) return inner_->close();
    return {};
  }
  const char* kind() const override { return "daemon"; }

 private:
  // Non-blocking, bounded by kConnectTimeoutMs: a daemon that is stopped or whose backlog is
  // full (connect would block forever) is a daemon that is absent, and the drain thread, which
  // the job's exit joins, never waits on it longer than that.
  void try_connect() {
    const auto now = Clock::now();
    if (now < next_try_) return;
    sockaddr_un a{};
    const int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (fd < 0) return backoff();
    a.sun_family = AF_UNIX;
    std::strncpy(a.sun_path, path_.c_str(), sizeof a.sun_path - 1);
    if (!connect_within(fd, a, kConnectTimeoutMs)) {
      ::close(fd);
      if (!warned_) log(LogLevel::Info, "no capuchind answering on %s yet; the job runs unmanaged, retrying", path_.c_str());
      warned_ = true;
      return backoff();
    }
    const int flags = ::fcntl(fd, F_GETFL);
    if (flags < 0 || ::fcntl(fd, F_SETFL, flags & ~O_NONBLOCK) != 0) {  // sends block, up to SO_SNDTIMEO
      ::close(fd);
      return backoff();
    }
    timeval tv{0, 200000};
    ::setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
    fd_ = fd;
    enc_.reset_names();
    reader_ = proto::FrameReader();
    if (const int dev = g_job_device.load(std::memory_order_acquire); dev >= 0 && dev != hello_.device) {
      hello_.device = dev;
      hello_.device_memory_bytes = 0;
    }
    if (hello_.device_memory_bytes == 0) hello_.device_memory_bytes = device_memory(hello_.device);
    out_.clear();
    proto::encode_hello(out_, hello_);
    send_bytes();
    if (fd_ < 0) return;
    g_link.connects.fetch_add(1, std::memory_order_relaxed);
    delay_ms_ = 100;
    warned_ = false;
    log(LogLevel::Info, "attached to capuchind on %s", path_.c_str());
  }

  void backoff() {
    next_try_ = Clock::now() + std::chrono::milliseconds(delay_ms_);
    delay_ms_ = std::min(delay_ms_ * 2, 5000);
  }

  void disconnect(bool count) {
    if (fd_ < 0) return;
    ::close(fd_);
    fd_ = -1;
    {
      std::lock_guard<std::mutex> g(shared().req_mu);  // a request in flight will not be answered
      if (shared().request_open) shared().request_failed = true;
    }
    shared().req_cv.notify_all();
    g_link.session_id.store(0, std::memory_order_relaxed);
    if (count) {
      g_link.disconnects.fetch_add(1, std::memory_order_relaxed);
      log(LogLevel::Info, "lost capuchind; the job continues unmanaged and will re-attach");
    }
    backoff();
  }

  // The executor's totals, when they changed since the last report (the daemon's session
  // view: evicted bytes, stalls, resident bytes).
  void send_exec_stats() {
    ExecTotals c{};
    const ExecTotalsSource source = g_totals_source.load(std::memory_order_acquire);
    if (fd_ < 0 || source == nullptr || !source(c) || (sent_stats_ && c == last_stats_)) return;
    out_.clear();
    proto::encode_exec_stats(out_, c);
    if (send_bytes()) last_stats_ = c, sent_stats_ = true;
  }

  void send_plan_request() {
    std::vector<std::uint8_t> req;
    {
      std::lock_guard<std::mutex> g(shared().req_mu);
      req.swap(shared().request);
    }
    if (req.empty() || fd_ < 0) return;
    out_.swap(req);
    if (send_bytes()) g_link.plan_requests.fetch_add(1, std::memory_order_relaxed);
  }

  void send_pending() {
    if (fd_ < 0 || enc_.empty()) return;
    const std::size_t n = enc_.size();
    out_.clear();
    enc_.finish(out_);
    if (send_bytes()) g_link.events_sent.fetch_add(n, std::memory_order_relaxed);
  }

  bool send_bytes() {
    std::size_t off = 0;
    while (off < out_.size()) {
      const ssize_t n = ::send(fd_, out_.data() + off, out_.size() - off, MSG_NOSIGNAL);
      if (n > 0) {
        off += static_cast<std::size_t>(n);
        continue;
      }
      if (n < 0 && errno == EINTR) continue;
      disconnect(true);  // gone, or too slow to take our events
      return false;
    }
    g_link.bytes_sent.fetch_add(out_.size(), std::memory_order_relaxed);
    return true;
  }

  void receive() {
    std::uint8_t buf[65536];
    for (;;) {
      const ssize_t n = ::recv(fd_, buf, sizeof buf, MSG_DONTWAIT);
      if (n == 0) return disconnect(true);
      if (n < 0) {
        if (errno == EINTR) continue;
        if (errno != EAGAIN && errno != EWOULDBLOCK) disconnect(true);
        break;
      }
      reader_.feed(std::span<const std::uint8_t>(buf, static_cast<std::size_t>(n)));
    }
    proto::FrameReader::Frame f;
    for (;;) {
      auto more = reader_.next(f);
      if (!more) {
        log(LogLevel::Warn, "bad frame from capuchind: %s", more.error().message.c_str());
        return disconnect(true);
      }
      if (!*more) return;
      switch (static_cast<proto::MsgType>(f.header.type)) {
        case proto::MsgType::Welcome:
          if (auto w = proto::decode_welcome(f.payload); w) g_link.session_id.store(w->session_id, std::memory_order_relaxed);
          break;
        case proto::MsgType::Plan:  // the daemon's advisory plan: for its own views, counted here
          if (proto::decode_plan(f.payload)) g_link.plans_received.fetch_add(1, std::memory_order_relaxed);
          break;
        case proto::MsgType::PlanReply:
          if (auto r = proto::decode_plan_reply(f.payload); r) {
            g_link.plan_replies.fetch_add(1, std::memory_order_relaxed);
            std::lock_guard<std::mutex> g(shared().req_mu);
            if (shared().request_open && r->segment == shared().request_segment) shared().reply = std::move(*r);
          } else {
            log(LogLevel::Warn, "bad plan reply from capuchind: %s", r.error().message.c_str());
          }
          shared().req_cv.notify_all();
          break;
        case proto::MsgType::SetBudget:
          if (auto b = proto::decode_set_budget(f.payload); b) {
            shared().budget.store(*b, std::memory_order_relaxed);
            shared().budget_generation.fetch_add(1, std::memory_order_release);
            g_link.budgets_received.fetch_add(1, std::memory_order_relaxed);
          }
          break;
        case proto::MsgType::Error:
          if (auto e = proto::decode_error(f.payload); e) log(LogLevel::Warn, "capuchind: %s", e->message.c_str());
          g_link.refused.fetch_add(1, std::memory_order_relaxed);
          return disconnect(true);
        default: break;
      }
    }
  }

  std::string path_;
  std::unique_ptr<Sink> inner_;
  bool inner_failed_ = false;
  proto::HelloInfo hello_;
  proto::BatchEncoder enc_;
  proto::FrameReader reader_;
  std::vector<std::uint8_t> out_;
  ExecTotals last_stats_{};
  bool sent_stats_ = false;
  int fd_ = -1;
  bool closed_ = false, warned_ = false;
  int delay_ms_ = 100;
  Clock::time_point next_try_{};
  bool executor_expected_ = false;  // CAPUCHIN_BUDGET given: the executor will name the device
  bool seen_event_ = false;

  // A job with a budget attaches once its executor named the device it serves (or its first
  // event is drained): a rank on device 1 must not be reported, nor its budget fraction
  // resolved, on device 0.
  bool awaiting_device() const {
    return executor_expected_ && !seen_event_ && g_job_device.load(std::memory_order_acquire) < 0;
  }
};

}  // namespace

std::optional<proto::PlanReply> plan_remotely(const plan::SegmentJob& job, std::chrono::milliseconds timeout) {
  if (g_link.session_id.load(std::memory_order_relaxed) == 0) return std::nullopt;
  std::vector<std::uint8_t> frame;
  if (!proto::encode_plan_request(frame, job)) return std::nullopt;
  Shared& s = shared();
  std::unique_lock<std::mutex> lock(s.req_mu);
  s.request = std::move(frame);
  s.request_open = true;
  s.request_failed = false;
  s.request_segment = job.segment;
  s.reply.reset();
  // In slices: a link that drops before the request is sent is seen here, not at the timeout.
  const auto deadline = Clock::now() + timeout;
  while (!s.reply.has_value() && !s.request_failed && Clock::now() < deadline) {
    s.req_cv.wait_for(lock, std::chrono::milliseconds(20));
    if (g_link.session_id.load(std::memory_order_relaxed) == 0) break;
  }
  std::optional<proto::PlanReply> out = std::move(s.reply);
  s.reply.reset();
  s.request.clear();
  s.request_open = false;
  return out;
}

std::uint64_t daemon_budget(std::uint64_t* generation) {
  *generation = shared().budget_generation.load(std::memory_order_acquire);
  return shared().budget.load(std::memory_order_relaxed);
}

void set_job_device(int device) { g_job_device.store(device, std::memory_order_release); }

void set_exec_totals_source(ExecTotalsSource source) { g_totals_source.store(source, std::memory_order_release); }

void queue_decision_lines(std::string lines) {
  std::lock_guard<std::mutex> g(shared().lines_mu);
  if (shared().lines.size() + lines.size() < (1u << 20)) shared().lines += lines;
}

std::unique_ptr<Sink> make_daemon_sink(const Config& config, std::unique_ptr<Sink> inner) {
  return std::make_unique<DaemonSink>(config, std::move(inner));
}

}  // namespace capuchin::interpose
