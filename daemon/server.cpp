// server.cpp: the listening socket and the per-connection state machines (see server.hpp).
#include "server.hpp"

#include <fmt/format.h>
#include <spdlog/spdlog.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/un.h>
#include <unistd.h>

#include <array>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/write.hpp>
#include <cerrno>
#include <csignal>
#include <cstring>
#include <deque>
#include <filesystem>

namespace capuchin::daemon {

namespace asio = boost::asio;
using local = asio::local::stream_protocol;

namespace {

constexpr std::size_t kReadChunk = 256 * 1024;
constexpr std::size_t kMaxJsonLine = 1u << 20;
constexpr std::size_t kMaxWriteQueue = 64u << 20;
constexpr std::size_t kMaxConnections = 1024;  // more are answered "too-many-connections" and closed

// One read buffer for every connection: connections wait for readability (no buffer while
// idle) and read into it on the io thread, the only thread that runs their handlers, which
// consume the bytes before returning. An idle connection costs a few hundred bytes, not 256 KiB.
std::vector<std::uint8_t>& read_buffer() {
  static std::vector<std::uint8_t>* buf = new std::vector<std::uint8_t>(kReadChunk);
  return *buf;
}

std::size_t g_open_connections = 0;  // io thread only

// Warnings a peer can provoke at will are logged at most a few times a minute, with a count.
class RateLimitedWarning {
 public:
  explicit RateLimitedWarning(const char* what) : what_(what) {}
  void operator()() {
    ++suppressed_;
    const auto now = std::chrono::steady_clock::now();
    if (now - last_ < std::chrono::seconds(20)) return;
    spdlog::warn("{} ({} time{} since the last such warning)", what_, suppressed_, suppressed_ == 1 ? "" : "s");
    suppressed_ = 0;
    last_ = now;
  }

 private:
  const char* what_;
  std::uint64_t suppressed_ = 0;
  std::chrono::steady_clock::time_point last_{};
};
RateLimitedWarning g_not_reading{"closed a connection whose peer does not read its replies"};
RateLimitedWarning g_too_many{"refused a connection: too many open"};

class Connection : public std::enable_shared_from_this<Connection> {
 public:
  Connection(local::socket s, Registry& reg, asio::thread_pool& workers) : sock_(std::move(s)), reg_(reg), workers_(workers) {
    ++g_open_connections;
  }
  ~Connection() {
    --g_open_connections;
    detach(dead_ ? "does not read its replies" : "connection dropped");
  }

  void start() {
    ++reg_.counters().connections;
    if (g_open_connections > kMaxConnections) {
      g_too_many();
      json_error_and_close("too-many-connections", fmt::format("the daemon serves at most {} connections", kMaxConnections));
      return;
    }
    ucred cred{};
    socklen_t len = sizeof cred;
    if (getsockopt(sock_.native_handle(), SOL_SOCKET, SO_PEERCRED, &cred, &len) != 0) {
      spdlog::warn("cannot read the peer's credentials: {}; refusing", std::strerror(errno));
      refuse("cannot check the peer's credentials");
      return;
    }
    peer_pid_ = cred.pid;
    if (cred.uid != getuid() && cred.uid != 0) {
      ++reg_.counters().rejected_peers;
      spdlog::warn("refused a connection from uid {} (pid {}): only uid {} or root may attach", cred.uid, cred.pid,
                   getuid());
      refuse(fmt::format("permission denied: uid {} may not use this daemon", cred.uid));
      return;
    }
    read();
  }

 private:
  enum class Mode { Unknown, Binary, Json };

  void refuse(const std::string& why) {
    const std::string line = fmt::format(R"({{"v":1,"id":null,"ok":false,"error":{{"code":"forbidden","message":"{}"}}}})", why) + "\n";
    closing_ = true;
    send(std::vector<std::uint8_t>(line.begin(), line.end()));
  }

  void read() {
    if (closing_ || dead_) return;
    auto self = shared_from_this();
    sock_.async_wait(local::socket::wait_read, [this, self](const boost::system::error_code& wait_ec) {
      if (wait_ec) return on_eof(wait_ec);
      std::vector<std::uint8_t>& buf = read_buffer();
      boost::system::error_code ec;
      sock_.non_blocking(true, ec);
      const std::size_t n = ec ? 0 : sock_.read_some(asio::buffer(buf), ec);
      if (ec == asio::error::would_block || ec == asio::error::try_again) return read();
      if (ec) return on_eof(ec);
      on_bytes(std::span<const std::uint8_t>(buf.data(), n));
      read();
    });
  }

  void on_eof(const boost::system::error_code& ec) {
    std::string why = bye_ ? "bye" : (ec == asio::error::eof ? "disconnected" : "connection error: " + ec.message());
    if (session_ != nullptr && !bye_ && ::kill(static_cast<pid_t>(session_->hello().pid), 0) != 0 && errno == ESRCH)
      why = "process exited";
    detach(why);
    boost::system::error_code ignored;
    sock_.close(ignored);
  }

  void detach(std::string_view why) {
    if (session_ == nullptr) return;
    spdlog::info("session {} (pid {}) closed: {}", session_->id(), session_->hello().pid, why);
    reg_.close_session(session_, why);
    session_ = nullptr;
  }

  void on_bytes(std::span<const std::uint8_t> bytes) {
    if (closing_ || bytes.empty()) return;
    if (mode_ == Mode::Unknown) {
      const char c = static_cast<char>(bytes[0]);
      if (c == static_cast<char>(proto::kMagic & 0xff)) {
        mode_ = Mode::Binary;
      } else if (c == '{' || c == ' ' || c == '\n' || c == '\r' || c == '\t') {
        mode_ = Mode::Json;
      } else {
        ++reg_.counters().bad_frames;
        json_error_and_close("bad-request", "neither a capuchin frame nor a JSON request");
        return;
      }
    }
    if (mode_ == Mode::Json) on_json_bytes(bytes);
    else on_binary_bytes(bytes);
  }

  // ---- JSON queries ----
  void on_json_bytes(std::span<const std::uint8_t> bytes) {
    for (std::uint8_t b : bytes) {
      if (b != '\n') {
        if (line_.size() >= kMaxJsonLine) {
          ++reg_.counters().bad_queries;
          json_error_and_close("too-large", fmt::format("request line over {} bytes", kMaxJsonLine));
          return;
        }
        line_.push_back(static_cast<char>(b));
        continue;
      }
      std::string_view l(line_);
      while (!l.empty() && (l.back() == '\r' || l.back() == ' ')) l.remove_suffix(1);
      if (!l.empty()) {
        std::string resp = reg_.handle_request(l);
        resp.push_back('\n');
        send(std::vector<std::uint8_t>(resp.begin(), resp.end()));
        if (closing_ || dead_) return;
      }
      line_.clear();
    }
  }

  void json_error_and_close(std::string_view code, std::string_view message) {
    nlohmann::ordered_json j;
    j["v"] = 1;
    j["id"] = nullptr;
    j["ok"] = false;
    j["error"] = {{"code", code}, {"message", message}};
    const std::string s = j.dump() + "\n";
    closing_ = true;
    send(std::vector<std::uint8_t>(s.begin(), s.end()));
  }

  // ---- binary session protocol ----
  void on_binary_bytes(std::span<const std::uint8_t> bytes) {
    frames_.feed(bytes);
    proto::FrameReader::Frame f;
    for (;;) {
      if (dead_) return;
      auto more = frames_.next(f);
      if (!more) {
        protocol_error(more.error());
        return;
      }
      if (!*more) return;
      ++reg_.counters().frames;
      if (auto r = on_frame(f); !r) {
        protocol_error(r.error());
        return;
      }
      if (closing_) return;
    }
  }

  proto::ProtoExpected<void> on_frame(const proto::FrameReader::Frame& f) {
    using proto::MsgType;
    const auto type = static_cast<MsgType>(f.header.type);
    auto unexpected = [&](std::string what) {
      return Unexpected{proto::ProtoError{proto::ProtoErrc::Unexpected, std::move(what)}};
    };
    if (session_ == nullptr && type != MsgType::Hello && type != MsgType::Bye)
      return unexpected(fmt::format("{} before hello", proto::to_string(type)));
    switch (type) {
      case MsgType::Hello: {
        if (session_ != nullptr) return unexpected("a second hello");
        auto h = proto::decode_hello(f.payload);
        if (!h) return Unexpected{h.error()};
        if (h->pid == 0 && peer_pid_ > 0) h->pid = static_cast<std::uint32_t>(peer_pid_);
        session_ = reg_.open_session(*h);
        if (session_ == nullptr) return Unexpected{proto::ProtoError{proto::ProtoErrc::TooLarge, "too many sessions"}};
        std::weak_ptr<Connection> weak = weak_from_this();
        session_->on_plan_ready = [weak] {
          if (auto c = weak.lock()) c->send_plans();
        };
        session_->on_budget_ready = [weak] {
          if (auto c = weak.lock()) c->send_budget();
        };
        session_->run_planning = [weak, &workers = workers_](Session::PlanTask task) {
          asio::post(workers, [weak, task = std::move(task)] {
            std::function<void()> done = task();
            auto c = weak.lock();
            if (!done || !c) return;
            asio::post(c->sock_.get_executor(), [c, done = std::move(done)] {
              if (c->session_ != nullptr) done();  // the session is still this connection's
            });
          });
        };
        spdlog::info("session {} attached: pid {}, '{}'", session_->id(), h->pid, h->cmdline);
        std::vector<std::uint8_t> out;
        proto::encode_welcome(out, proto::Welcome{session_->id(), proto::kProtocolVersion});
        send(std::move(out));
        return {};
      }
      case MsgType::Names: {
        auto n = proto::decode_names(f.payload);
        if (!n) return Unexpected{n.error()};
        return session_->on_names(*n);
      }
      case MsgType::Events: {
        if (auto r = proto::decode_events(f.payload, batch_); !r) return r;
        return session_->on_events(batch_);
      }
      case MsgType::ExecStats: {
        auto s = proto::decode_exec_stats(f.payload);
        if (!s) return Unexpected{s.error()};
        session_->on_exec_stats(*s);
        return {};
      }
      case MsgType::Decisions:
        return session_->on_decisions(
            std::string_view(reinterpret_cast<const char*>(f.payload.data()), f.payload.size()));
      case MsgType::PlanRequest: {
        auto job = proto::decode_plan_request(f.payload);
        if (!job) return Unexpected{job.error()};
        session_->prepare_segment_job(*job);
        plan_async(std::move(*job));
        return {};
      }
      case MsgType::Bye:
        bye_ = true;
        detach("bye");
        return {};
      case MsgType::Welcome:
      case MsgType::Plan:
      case MsgType::PlanReply:
      case MsgType::SetBudget:
      case MsgType::Error:
        return unexpected(fmt::format("{} is sent by the daemon, not to it", proto::to_string(type)));
    }
    return unexpected("unknown message");
  }

  void send_plans() {
    if (session_ == nullptr || closing_) return;
    while (session_ != nullptr && !dead_) {
      auto p = session_->take_plan();
      if (!p) break;
      std::vector<std::uint8_t> out;
      proto::encode_plan(out, *p);
      send(std::move(out));
    }
  }

  // The job's segment is planned on a worker; the reply is made and sent back on the io
  // thread (the session is only touched there), unless the job has gone meanwhile.
  void plan_async(plan::SegmentJob job) {
    auto self = shared_from_this();
    auto work = std::make_shared<const plan::SegmentJob>(std::move(job));
    asio::post(workers_, [self, work] {
      auto made = plan::plan_segment(*work);
      asio::post(self->sock_.get_executor(), [self, work, made = std::move(made)]() mutable {
        if (self->session_ == nullptr || self->closing_ || self->dead_) return;
        const proto::PlanReply rep = self->session_->segment_planned(*work, std::move(made));
        std::vector<std::uint8_t> out;
        proto::encode_plan_reply(out, rep);
        self->send(std::move(out));
      });
    });
  }

  void send_budget() {
    if (session_ == nullptr || closing_ || dead_) return;
    if (const std::uint64_t b = session_->take_budget_for_job()) {
      std::vector<std::uint8_t> out;
      proto::encode_set_budget(out, b);
      send(std::move(out));
    }
  }

  void protocol_error(const proto::ProtoError& e) {
    ++reg_.counters().bad_frames;
    spdlog::warn("closing a connection{}: {}: {}",
                 session_ ? fmt::format(" (session {})", session_->id()) : std::string(), proto::to_string(e.code),
                 e.message);
    detach(fmt::format("protocol error: {}", e.message));
    std::vector<std::uint8_t> out;
    proto::encode_error(out, static_cast<std::uint32_t>(e.code), e.message);
    closing_ = true;
    send(std::move(out));
  }

  // ---- writing ----
  // Never detaches here: send runs inside session callbacks (set_budget, an advisory plan),
  // whose session must outlive them. A dead connection is detached when its pending read
  // fails (the socket is closed) or when it is destroyed.
  void send(std::vector<std::uint8_t> bytes) {
    if (dead_) return;
    queued_ += bytes.size();
    if (queued_ > kMaxWriteQueue) {  // a peer that never reads its answers: closed, said once
      dead_ = true;
      g_not_reading();
      boost::system::error_code ignored;
      sock_.close(ignored);
      return;
    }
    wq_.push_back(std::move(bytes));
    if (!writing_) write_next();
  }

  void write_next() {
    if (wq_.empty()) {
      writing_ = false;
      if (closing_) {
        boost::system::error_code ignored;
        sock_.shutdown(local::socket::shutdown_both, ignored);
        sock_.close(ignored);
      }
      return;
    }
    writing_ = true;
    auto self = shared_from_this();
    asio::async_write(sock_, asio::buffer(wq_.front()), [this, self](const boost::system::error_code& ec, std::size_t) {
      queued_ -= wq_.front().size();
      wq_.pop_front();
      if (ec) {
        writing_ = false;
        wq_.clear();
        queued_ = 0;
        return;
      }
      write_next();
    });
  }

  local::socket sock_;
  Registry& reg_;
  asio::thread_pool& workers_;
  Mode mode_ = Mode::Unknown;
  std::string line_;
  proto::FrameReader frames_;
  proto::EventBatch batch_;
  Session* session_ = nullptr;
  pid_t peer_pid_ = 0;
  bool bye_ = false;
  bool closing_ = false;
  bool dead_ = false;  // closed for not reading: nothing more is sent or read
  bool writing_ = false;
  std::deque<std::vector<std::uint8_t>> wq_;
  std::size_t queued_ = 0;
};

// Whether a daemon answers on `path` (a connect that succeeds).
bool someone_listens(const std::string& path) {
  const int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return false;
  sockaddr_un a{};
  a.sun_family = AF_UNIX;
  std::strncpy(a.sun_path, path.c_str(), sizeof a.sun_path - 1);
  const bool ok = ::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0;
  ::close(fd);
  return ok;
}

}  // namespace

Status Server::listen(const std::string& path) {
  if (path.size() >= sizeof(sockaddr_un{}.sun_path)) return make_error(fmt::format("socket path too long: {}", path));
  namespace fs = std::filesystem;
  const fs::path dir = fs::path(path).parent_path();
  std::error_code ec;
  if (!dir.empty() && !fs::exists(dir, ec)) {
    fs::create_directories(dir, ec);
    if (ec) return make_error(fmt::format("cannot create {}: {}", dir.string(), ec.message()));
    ::chmod(dir.c_str(), 0700);
  }
  struct stat st{};
  if (::lstat(path.c_str(), &st) == 0) {
    if (!S_ISSOCK(st.st_mode)) return make_error(fmt::format("{} exists and is not a socket", path));
    if (someone_listens(path)) return make_error(fmt::format("another capuchind is already serving {}", path));
    ::unlink(path.c_str());  // stale: its daemon is gone
  }
  boost::system::error_code bec;
  acceptor_.open(local(), bec);
  if (!bec) {
    const mode_t old = ::umask(0177);  // the socket is created 0600
    acceptor_.bind(local::endpoint(path), bec);
    ::umask(old);
  }
  if (!bec) acceptor_.listen(asio::socket_base::max_listen_connections, bec);
  if (bec) return make_error(fmt::format("cannot listen on {}: {}", path, bec.message()));
  ::chmod(path.c_str(), 0600);
  if (::stat(path.c_str(), &st) == 0) inode_ = st.st_ino;
  path_ = path;
  accept();
  return {};
}

void Server::accept() {
  acceptor_.async_accept([this](const boost::system::error_code& ec, local::socket s) {
    if (ec == asio::error::operation_aborted || !acceptor_.is_open()) return;
    if (!ec) {
      std::make_shared<Connection>(std::move(s), registry_, workers_)->start();
      accept();
      return;
    }
    // Out of descriptors (a flood of connections) or another transient failure: retrying at
    // once would spin the io thread; wait a little, said at most a few times a minute.
    static RateLimitedWarning failed{"accepting a connection failed (out of file descriptors?); retrying in 100 ms"};
    failed();
    accept_retry_.expires_after(std::chrono::milliseconds(100));
    accept_retry_.async_wait([this](const boost::system::error_code& wait_ec) {
      if (!wait_ec) accept();
    });
  });
}

void Server::stop() {
  boost::system::error_code ec;
  acceptor_.close(ec);
  struct stat st{};
  if (!path_.empty() && ::stat(path_.c_str(), &st) == 0 && st.st_ino == inode_) ::unlink(path_.c_str());
}

}  // namespace capuchin::daemon
