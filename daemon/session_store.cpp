// session_store.cpp: the closed-session store, its atomic writes and reading closed sessions'
// decision logs back (see session_store.hpp).
#include "session_store.hpp"

#include <fcntl.h>
#include <fmt/format.h>
#include <spdlog/spdlog.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>

#include "capuchin/decision_log.hpp"
#include "session.hpp"

namespace capuchin::daemon {

namespace fs = std::filesystem;
using json = nlohmann::ordered_json;

namespace {
constexpr std::string_view kFormat = "capuchind-sessions";
constexpr int kStoreVersion = 1;
constexpr std::size_t kMaxStoreBytes = 64u << 20;  // far above any bounded store: anything larger is not ours
constexpr std::size_t kMaxLogReadBytes = 64u << 20;  // per decision-log file read back for a query

Expected<std::string> read_file(const std::string& path, std::size_t max_bytes, bool tail, bool* missing) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    if (missing != nullptr) *missing = errno == ENOENT;
    return make_error(fmt::format("cannot open {}: {}", path, std::strerror(errno)));
  }
  struct stat st{};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    return make_error(fmt::format("{} is not a regular file", path));
  }
  auto size = static_cast<std::size_t>(st.st_size);
  off_t from = 0;
  if (size > max_bytes) {
    if (!tail) {
      ::close(fd);
      return make_error(fmt::format("{} is {} bytes, more than a session store holds", path, size));
    }
    from = static_cast<off_t>(size - max_bytes);
    size = max_bytes;
  }
  std::string text(size, '\0');
  std::size_t got = 0;
  while (got < size) {
    const ssize_t n = ::pread(fd, text.data() + got, size - got, from + static_cast<off_t>(got));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      const int e = errno;
      ::close(fd);
      return make_error(fmt::format("cannot read {}: {}", path, std::strerror(e)));
    }
    if (n == 0) break;  // shrank meanwhile
    got += static_cast<std::size_t>(n);
  }
  ::close(fd);
  text.resize(got);
  return text;
}
}  // namespace

std::string default_store_path(const std::string& socket_path) {
  const fs::path p(socket_path);
  return (p.parent_path() / (p.stem().string() + ".sessions.json")).string();
}

std::string store_text(std::uint64_t next_id, const std::string& socket, const std::vector<std::string_view>& records) {
  std::size_t size = 128 + socket.size();
  for (const auto r : records) size += r.size() + 2;
  std::string out;
  out.reserve(size);
  out += fmt::format(R"({{"format":"{}","version":{},"socket":{},"next_id":{},"sessions":[)", kFormat, kStoreVersion,
                     json(socket).dump(-1, ' ', false, json::error_handler_t::replace), next_id);
  bool first = true;
  for (const auto r : records) {
    out += first ? "\n" : ",\n";
    out += r;
    first = false;
  }
  out += "\n]}\n";
  return out;
}

Expected<StoredSessions> parse_store(std::string_view text) {
  const json j = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return make_error("not JSON (truncated or overwritten?)");
  if (!j.is_object() || j.value("format", std::string()) != kFormat) return make_error("not a capuchind session store");
  if (!j.contains("version") || !j["version"].is_number_integer() || j["version"].get<int>() != kStoreVersion)
    return make_error(fmt::format("store version {} (this daemon reads version {})",
                                  j.contains("version") ? j["version"].dump() : std::string("missing"), kStoreVersion));
  if (!j.contains("next_id") || !j["next_id"].is_number_unsigned()) return make_error("no unsigned next_id");
  if (!j.contains("sessions") || !j["sessions"].is_array()) return make_error("no sessions array");
  StoredSessions s;
  s.next_id = std::max<std::uint64_t>(1, j["next_id"].get<std::uint64_t>());
  for (const auto& r : j["sessions"]) {
    if (!r.is_object() || !r.contains("id") || !r["id"].is_number_unsigned() || r["id"].get<std::uint64_t>() == 0)
      return make_error(fmt::format("session record {} has no session id", s.sessions.size()));
    s.next_id = std::max(s.next_id, r["id"].get<std::uint64_t>() + 1);
    s.sessions.push_back(r);
  }
  std::sort(s.sessions.begin(), s.sessions.end(),
            [](const json& a, const json& b) { return a["id"].get<std::uint64_t>() < b["id"].get<std::uint64_t>(); });
  return s;
}

Expected<StoredSessions> read_store(const std::string& path) {
  bool missing = false;
  auto text = read_file(path, kMaxStoreBytes, /*tail=*/false, &missing);
  if (!text) {
    if (missing) return StoredSessions{};
    return Unexpected{text.error()};
  }
  auto s = parse_store(*text);
  if (!s) return make_error(fmt::format("{}: {}", path, s.error().message));
  return s;
}

Status write_file_atomic(const std::string& path, std::string_view text) {
  const std::string tmp = path + ".tmp";  // one writer per store (lock_store): a fixed name cannot clash
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0) return make_error(fmt::format("cannot create {}: {}", tmp, std::strerror(errno)));
  auto fail = [&](std::string what) {
    const int e = errno;
    ::close(fd);
    ::unlink(tmp.c_str());
    return make_error(fmt::format("{} {}: {}", what, tmp, std::strerror(e)));
  };
  std::size_t off = 0;
  while (off < text.size()) {
    const ssize_t n = ::write(fd, text.data() + off, text.size() - off);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return fail("cannot write");
    off += static_cast<std::size_t>(n);
  }
  // Durable before it replaces the old store: a crash after the rename never finds it empty.
  if (::fsync(fd) != 0) return fail("cannot fsync");
  if (::close(fd) != 0) {
    ::unlink(tmp.c_str());
    return make_error(fmt::format("cannot close {}: {}", tmp, std::strerror(errno)));
  }
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    const int e = errno;
    ::unlink(tmp.c_str());
    return make_error(fmt::format("cannot rename {} to {}: {}", tmp, path, std::strerror(e)));
  }
  const std::string dir = fs::path(path).parent_path().string();
  if (const int dfd = ::open(dir.empty() ? "." : dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC); dfd >= 0) {
    (void)::fsync(dfd);  // the rename itself durable; best effort (some filesystems refuse)
    ::close(dfd);
  }
  return {};
}

std::uint64_t highest_logged_id(const std::string& log_dir) {
  std::uint64_t best = 0;
  std::error_code ec;
  for (fs::directory_iterator it(log_dir, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if (!name.starts_with("session-")) continue;
    std::uint64_t id = 0;
    std::size_t i = 8, digits = 0;
    for (; i < name.size() && name[i] >= '0' && name[i] <= '9' && digits < 19; ++i, ++digits)
      id = id * 10 + static_cast<std::uint64_t>(name[i] - '0');
    if (digits > 0 && name.compare(i, 4, "-pid") == 0) best = std::max(best, id);
  }
  return best;
}

StoreLock& StoreLock::operator=(StoreLock&& o) noexcept {
  if (this != &o) {
    if (fd_ >= 0) ::close(fd_);
    fd_ = std::exchange(o.fd_, -1);
  }
  return *this;
}

StoreLock::~StoreLock() {
  if (fd_ >= 0) ::close(fd_);  // closing the descriptor releases the flock
}

Expected<StoreLock> lock_store(const std::string& path) {
  const std::string lock = path + ".lock";
  const int fd = ::open(lock.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600);
  if (fd < 0) return make_error(fmt::format("cannot open {}: {}", lock, std::strerror(errno)));
  if (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
    const int e = errno;
    ::close(fd);
    if (e == EWOULDBLOCK) return make_error(fmt::format("another capuchind holds {}", lock));
    return make_error(fmt::format("cannot lock {}: {}", lock, std::strerror(e)));
  }
  return StoreLock(fd);
}

Expected<json> decisions_from_log(const std::string& path, const DecisionFilter& f) {
  // spdlog's rotating sink names older files <stem>.<n><ext>: newest first, read until enough.
  const fs::path p(path);
  std::vector<DecisionRecord> picked;  // newest first
  // The query runs on the daemon's io thread, which jobs' frames wait for: a filter that
  // rarely matches reads at most this much of the newest records, not every rotated file.
  constexpr std::size_t kMaxQueryReadBytes = 16u << 20;
  std::size_t read_total = 0;
  for (int index = 0; index <= 100 && picked.size() < f.limit && read_total < kMaxQueryReadBytes; ++index) {
    const std::string file =
        index == 0 ? path : (p.parent_path() / fmt::format("{}.{}{}", p.stem().string(), index, p.extension().string())).string();
    bool missing = false;
    auto text = read_file(file, std::min(kMaxLogReadBytes, kMaxQueryReadBytes - read_total), /*tail=*/true, &missing);
    if (!text) {
      if (index > 0 && missing) break;  // no older file
      if (missing) return make_error(fmt::format("its decision log {} no longer exists", path));
      return Unexpected{text.error()};
    }
    read_total += text->size();
    std::string_view all(*text);
    while (!all.empty() && picked.size() < f.limit) {
      if (all.back() == '\n') all.remove_suffix(1);
      const std::size_t nl = all.rfind('\n');
      const std::string_view line = nl == std::string_view::npos ? all : all.substr(nl + 1);
      all = nl == std::string_view::npos ? std::string_view() : all.substr(0, nl + 1);
      if (line.empty()) continue;
      auto d = parse_decision_line(line);
      if (!d) continue;  // a line cut by a crash, or the tail cut above: not a decision
      if (!f.action.empty() && d->action != f.action) continue;
      if (d->t < f.since_t) continue;
      picked.push_back(std::move(*d));
    }
  }
  json arr = json::array();
  for (auto it = picked.rbegin(); it != picked.rend(); ++it) arr.push_back(json::parse(to_json_line(*it)));
  return arr;
}

// ---- StoreWriter -------------------------------------------------------------------------

StoreWriter::StoreWriter(std::string path) : path_(std::move(path)), thread_([this] { run(); }) {}

StoreWriter::~StoreWriter() {
  {
    std::lock_guard lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();  // run() writes what is pending before it returns
}

void StoreWriter::submit(std::string text) {
  {
    std::lock_guard lock(mu_);
    pending_ = std::move(text);  // an older text not yet taken is superseded
  }
  cv_.notify_all();
}

void StoreWriter::flush() {
  std::unique_lock lock(mu_);
  cv_.wait(lock, [&] { return !pending_ && !busy_; });
}

void StoreWriter::run() {
  std::unique_lock lock(mu_);
  for (;;) {
    cv_.wait(lock, [&] { return pending_ || stop_; });
    if (!pending_) return;  // stopping, nothing left
    std::string text = std::move(*pending_);
    pending_.reset();
    busy_ = true;
    lock.unlock();  // the disk is written without the lock: submit() never waits for it
    const Status s = write_file_atomic(path_, text);
    if (!s && s.error().message != last_error_) {
      spdlog::warn("cannot write the session store: {} (closed sessions will not survive a restart until it can)",
                   s.error().message);
    } else if (s && !last_error_.empty()) {
      spdlog::info("the session store {} is written again", path_);
    }
    last_error_ = s ? std::string() : s.error().message;
    lock.lock();
    busy_ = false;
    cv_.notify_all();
  }
}

}  // namespace capuchin::daemon
