// Unit tests of the closed-session store (daemon/session_store.hpp) and of the registry that
// keeps closed sessions across a restart through it: a round trip of the format, the bound,
// ids that continue (never reused), a corrupt store (one warning naming it, a fresh start,
// ids from the decision-log names), atomic writes, the lock, and decisions read back from a
// closed session's log.
#include <gtest/gtest.h>
#include <spdlog/sinks/ringbuffer_sink.h>
#include <spdlog/spdlog.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <thread>

#include "query.hpp"
#include "session_store.hpp"

using namespace capuchin;
namespace fs = std::filesystem;
using json = nlohmann::json;

namespace {

struct TempDir {
  fs::path path;
  TempDir() {
    std::string t = (fs::temp_directory_path() / "capuchin-store-XXXXXX").string();
    path = ::mkdtemp(t.data());
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path, ec);
  }
};

std::string slurp(const fs::path& p) {
  std::ifstream f(p);
  return {std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>()};
}

json ask(daemon::Registry& reg, const std::string& method, json params = json::object()) {
  return json::parse(reg.handle_request(json{{"method", method}, {"params", params}}.dump()));
}

daemon::DaemonOptions options(const TempDir& d, std::uint32_t kept) {
  daemon::DaemonOptions o;
  o.socket_path = (d.path / "s.sock").string();
  o.log_dir = (d.path / "logs").string();
  o.state_file = daemon::default_store_path(o.socket_path);
  o.sessions_kept = kept;
  return o;
}

// Opens and closes `n` sessions, pids 100, 101, ...
void run_sessions(daemon::Registry& reg, int n) {
  for (int i = 0; i < n; ++i) {
    proto::HelloInfo h;
    h.pid = static_cast<std::uint32_t>(100 + i);
    h.cmdline = "train --job " + std::to_string(i);
    h.budget_bytes = 1u << 20;
    daemon::Session* s = reg.open_session(h);
    ASSERT_NE(s, nullptr);
    reg.close_session(s, "bye");
  }
}

// Warnings logged while it lives.
struct CapturedLog {
  std::shared_ptr<spdlog::sinks::ringbuffer_sink_mt> sink = std::make_shared<spdlog::sinks::ringbuffer_sink_mt>(64);
  CapturedLog() { spdlog::default_logger()->sinks().push_back(sink); }
  ~CapturedLog() { spdlog::default_logger()->sinks().pop_back(); }
  std::vector<std::string> warnings() const {
    std::vector<std::string> w;
    for (auto& l : sink->last_formatted()) if (l.find("warn") != std::string::npos) w.push_back(l);
    return w;
  }
};

}  // namespace

TEST(SessionStore, FormatRoundTrips) {
  const std::string r3 = json{{"id", 3}, {"cmdline", "a \"quoted\" cmd"}, {"state", "closed"}}.dump();
  const std::string r7 = json{{"id", 7}, {"peak_bytes", 123}}.dump();
  const std::vector<std::string_view> recs{r7, r3};  // any order: read back by id
  const std::string text = daemon::store_text(9, "/run/x.sock", recs);
  auto s = daemon::parse_store(text);
  ASSERT_TRUE(s.has_value()) << s.error().message;
  EXPECT_EQ(s->next_id, 9u);
  ASSERT_EQ(s->sessions.size(), 2u);
  EXPECT_EQ(s->sessions[0]["cmdline"], "a \"quoted\" cmd");
  EXPECT_EQ(s->sessions[1]["peak_bytes"], 123);
  // next_id below a stored id is raised past it: an id is never handed out twice.
  auto low = daemon::parse_store(daemon::store_text(2, "", recs));
  ASSERT_TRUE(low.has_value());
  EXPECT_EQ(low->next_id, 8u);
  // A missing file is an empty store; bad ones are errors.
  TempDir d;
  auto missing = daemon::read_store((d.path / "none.json").string());
  ASSERT_TRUE(missing.has_value());
  EXPECT_EQ(missing->next_id, 1u);
  EXPECT_FALSE(daemon::parse_store(text.substr(0, text.size() / 2)).has_value());
  EXPECT_FALSE(daemon::parse_store(R"({"format":"capuchind-sessions","version":2,"next_id":1,"sessions":[]})").has_value());
  EXPECT_FALSE(daemon::parse_store(R"({"format":"capuchind-sessions","version":1,"next_id":1,"sessions":[{"x":1}]})").has_value());
}

TEST(SessionStore, ClosedSessionsSurviveARestartBoundedAndIdsContinue) {
  TempDir d;
  const auto opt = options(d, 3);
  json before;
  {
    daemon::Registry reg(opt);
    reg.restore();
    run_sessions(reg, 5);
    proto::HelloInfo h;
    h.pid = 200;
    h.cmdline = "still running";
    ASSERT_NE(reg.open_session(h), nullptr);  // id 6, attached at shutdown
    before = ask(reg, "session", {{"session", 5}})["result"];
    reg.close_all("daemon exited (signal 15)");
    reg.flush_store();
  }
  ASSERT_TRUE(fs::exists(opt.state_file));
  EXPECT_EQ(fs::status(opt.state_file).permissions() & fs::perms::all, fs::perms::owner_read | fs::perms::owner_write);
  daemon::Registry reg(opt);
  reg.restore();
  // Bounded: the 3 highest ids (4, 5 and the one ended by the daemon's exit).
  const json all = ask(reg, "sessions", {{"all", true}})["result"];
  ASSERT_EQ(all.size(), 3u) << all.dump();
  EXPECT_EQ(all[0]["id"], 4);
  EXPECT_EQ(all[2]["id"], 6);
  for (const auto& s : all) {
    EXPECT_EQ(s["state"], "closed");
    EXPECT_FALSE(s["started_at"].get<std::string>().empty());
    EXPECT_FALSE(s["ended_at"].get<std::string>().empty());
  }
  EXPECT_EQ(all[2]["close_reason"], "daemon exited (signal 15)");
  EXPECT_TRUE(ask(reg, "sessions")["result"].empty());  // none attached
  EXPECT_EQ(ask(reg, "session", {{"session", 5}})["result"], before);
  EXPECT_EQ(ask(reg, "session", {{"session", 1}})["error"]["code"], "no-such-session");
  // Its decisions come from its decision log; a plan summary answers; tensors say they are gone.
  const json dec = ask(reg, "decisions", {{"session", 5}})["result"];
  ASSERT_EQ(dec.size(), 2u) << dec.dump();
  EXPECT_EQ(dec[0]["action"], "attach");
  EXPECT_EQ(dec[1]["action"], "detach");
  EXPECT_EQ(ask(reg, "decisions", {{"session", 5}, {"action", "detach"}})["result"].size(), 1u);
  EXPECT_TRUE(ask(reg, "plan", {{"session", 5}})["ok"].get<bool>());
  const json t = ask(reg, "tensors", {{"session", 5}});
  EXPECT_EQ(t["error"]["code"], "not-kept");
  EXPECT_EQ(ask(reg, "set-budget", {{"session", 5}, {"budget", "1GiB"}})["error"]["code"], "session-closed");
  fs::remove(before["decision_log"].get<std::string>());
  const json gone = ask(reg, "decisions", {{"session", 5}});
  EXPECT_EQ(gone["error"]["code"], "no-decision-log");
  EXPECT_NE(gone["error"]["message"].get<std::string>().find("no longer exists"), std::string::npos) << gone.dump();
  // New ids continue after every id used.
  daemon::Session* s = reg.open_session(proto::HelloInfo{});
  ASSERT_NE(s, nullptr);
  EXPECT_EQ(s->id(), 7u);
}

TEST(SessionStore, CorruptStoreWarnsOnceAndIdsContinueFromTheLogNames) {
  TempDir d;
  const auto opt = options(d, 200);
  {
    daemon::Registry reg(opt);
    reg.restore();
    run_sessions(reg, 4);
    reg.flush_store();
  }
  { std::ofstream(opt.state_file) << R"({"format":"capuchind-sessions","version":1,"next_id":5,"sessions":[{"id":1,)"; }
  CapturedLog log;
  daemon::Registry reg(opt);
  reg.restore();
  const auto w = log.warnings();
  ASSERT_EQ(w.size(), 1u);
  EXPECT_NE(w[0].find(opt.state_file), std::string::npos) << w[0];
  EXPECT_TRUE(fs::exists(opt.state_file + ".corrupt"));  // kept aside for a look, not overwritten
  EXPECT_TRUE(ask(reg, "sessions", {{"all", true}})["result"].empty());
  daemon::Session* s = reg.open_session(proto::HelloInfo{});
  ASSERT_NE(s, nullptr);
  EXPECT_EQ(s->id(), 5u);  // after session-4-pid103.jsonl
  reg.close_session(s, "bye");
  reg.flush_store();
  auto again = daemon::read_store(opt.state_file);  // a good store again
  ASSERT_TRUE(again.has_value()) << again.error().message;
  EXPECT_EQ(again->next_id, 6u);
}

TEST(SessionStore, WritesAreAtomic) {
  TempDir d;
  const std::string path = (d.path / "store.json").string();
  // Two large texts written over and over: a reader never sees anything but one of them whole.
  const std::string a(4u << 20, 'a'), b(3u << 20, 'b');
  ASSERT_TRUE(daemon::write_file_atomic(path, a).has_value());
  std::atomic<bool> done{false};
  std::atomic<int> torn{0}, reads{0};
  std::thread reader([&] {
    while (!done) {
      const std::string s = slurp(path);
      if (s != a && s != b) ++torn;
      ++reads;
    }
  });
  for (int i = 0; i < 30; ++i) ASSERT_TRUE(daemon::write_file_atomic(path, i % 2 ? a : b).has_value());
  done = true;
  reader.join();
  EXPECT_EQ(torn.load(), 0) << "of " << reads.load() << " reads";
  EXPECT_FALSE(fs::exists(path + ".tmp"));
  // A directory that is not there: an error naming the file, nothing written.
  const auto bad = daemon::write_file_atomic((d.path / "no" / "store.json").string(), "x");
  ASSERT_FALSE(bad.has_value());
  EXPECT_NE(bad.error().message.find("no/store.json"), std::string::npos) << bad.error().message;
}

TEST(SessionStore, OneDaemonPerStore) {
  TempDir d;
  const std::string path = (d.path / "store.json").string();
  {
    auto first = daemon::lock_store(path);
    ASSERT_TRUE(first.has_value());
    const auto second = daemon::lock_store(path);
    ASSERT_FALSE(second.has_value());
    EXPECT_NE(second.error().message.find("another capuchind"), std::string::npos) << second.error().message;
  }
  EXPECT_TRUE(daemon::lock_store(path).has_value());  // released with the first
}

TEST(SessionStore, HighestLoggedIdReadsDecisionLogNames) {
  TempDir d;
  for (const char* n : {"session-3-pid10.jsonl", "session-12-pid9.1.jsonl", "session-x-pid1.jsonl", "other-99.jsonl"})
    std::ofstream(d.path / n) << "";
  EXPECT_EQ(daemon::highest_logged_id(d.path.string()), 12u);
  EXPECT_EQ(daemon::highest_logged_id((d.path / "missing").string()), 0u);
}
