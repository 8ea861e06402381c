// query.cpp: the session registry and the JSON request handler (see query.hpp).
#include "query.hpp"

#include <fmt/format.h>
#include <spdlog/spdlog.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <optional>

#include "capuchin/budget.hpp"
#include "capuchin/version.hpp"

namespace capuchin::daemon {

using json = nlohmann::ordered_json;

Registry::Registry(DaemonOptions opt) : opt_(std::move(opt)), start_(std::chrono::steady_clock::now()) {}

Session* Registry::open_session(const proto::HelloInfo& hello) {
  if (attached() >= opt_.max_sessions) return nullptr;
  const std::uint64_t id = next_id_++;
  auto s = std::make_unique<Session>(id, hello, opt_);
  Session* raw = s.get();
  sessions_.emplace(id, std::move(s));
  ++counters_.sessions_opened;
  persist();  // the store's next_id: a crash before this session closes still never reuses its id
  return raw;
}

void Registry::keep(const Session& s) {
  nlohmann::ordered_json d = s.detail();
  std::string line = d.dump(-1, ' ', false, json::error_handler_t::replace);
  kept_.insert_or_assign(s.id(), Kept{std::move(d), std::move(line)});
  while (kept_.size() > opt_.sessions_kept) kept_.erase(kept_.begin());  // the lowest ids: the oldest
}

void Registry::persist() {
  if (!writer_) return;
  // On the io thread: a concatenation of lines serialized at close (tens of microseconds for
  // the default 200); the write and its fsync happen on the writer's thread.
  std::vector<std::string_view> lines;
  lines.reserve(kept_.size());
  for (const auto& [id, k] : kept_) lines.emplace_back(k.line);
  writer_->submit(store_text(next_id_, opt_.socket_path, lines));
}

void Registry::restore() {
  namespace fs = std::filesystem;
  // Decision-log names hold ids too: they bound the next id even when the store is lost, or
  // when this daemon was killed before it wrote the store.
  std::uint64_t next = std::max(next_id_, highest_logged_id(opt_.log_dir) + 1);
  const std::string& path = opt_.state_file;
  if (!path.empty()) {
    std::error_code ec;
    if (const fs::path dir = fs::path(path).parent_path(); !dir.empty() && !fs::exists(dir, ec)) {
      fs::create_directories(dir, ec);
      ::chmod(dir.c_str(), 0700);
    }
    if (auto locked = lock_store(path); !locked) {
      spdlog::warn("session store {} not used: {}; closed sessions will not be kept across a restart", path,
                   locked.error().message);
    } else {
      store_lock_ = std::move(*locked);
      if (auto st = read_store(path); !st) {
        const std::string aside = path + ".corrupt";
        fs::rename(path, aside, ec);
        spdlog::warn("session store {} cannot be used ({}); starting without earlier sessions{}", path, st.error().message,
                     ec ? std::string() : fmt::format(" (the file is moved to {})", aside));
      } else {
        next = std::max(next, st->next_id);
        for (auto& r : st->sessions) {
          std::string line = r.dump(-1, ' ', false, json::error_handler_t::replace);
          const std::uint64_t id = r["id"].get<std::uint64_t>();
          kept_.insert_or_assign(id, Kept{std::move(r), std::move(line)});
        }
        while (kept_.size() > opt_.sessions_kept) kept_.erase(kept_.begin());
      }
      writer_ = std::make_unique<StoreWriter>(path);
    }
  }
  next_id_ = next;
  spdlog::info("{} closed session{} from earlier daemons; new session ids start at {}", kept_.size(),
               kept_.size() == 1 ? "" : "s", next_id_);
}

void Registry::flush_store() {
  if (writer_) writer_->flush();
}

void Registry::close_session(Session* s, std::string_view why) {
  if (s == nullptr || s->closed()) return;
  s->close(why);
  keep(*s);
  persist();
  s->on_plan_ready = nullptr;
  // Forget the oldest closed sessions beyond the number kept for queries.
  std::size_t closed = 0;
  for (const auto& [id, x] : sessions_) closed += x->closed();
  for (auto it = sessions_.begin(); it != sessions_.end() && closed > opt_.closed_sessions_kept;) {
    if (it->second->closed()) {
      it = sessions_.erase(it);
      --closed;
    } else {
      ++it;
    }
  }
}

Session* Registry::find(std::uint64_t id) {
  auto it = sessions_.find(id);
  return it == sessions_.end() ? nullptr : it->second.get();
}

std::size_t Registry::attached() const {
  std::size_t n = 0;
  for (const auto& [id, s] : sessions_) n += !s->closed();
  return n;
}

void Registry::close_all(std::string_view why) {
  std::vector<Session*> open;
  for (auto& [id, s] : sessions_)
    if (!s->closed()) open.push_back(s.get());
  for (Session* s : open) {  // as close_session, with one store write for all of them
    s->close(why);
    keep(*s);
    s->on_plan_ready = nullptr;
  }
  persist();
}

namespace {

struct QueryError {
  std::string code, message;
};

std::string error_response(const json& id, std::string_view code, std::string_view message) {
  json j;
  j["v"] = 1;
  j["id"] = id;
  j["ok"] = false;
  j["error"] = {{"code", code}, {"message", message}};
  return j.dump(-1, ' ', false, json::error_handler_t::replace);
}

// The session id in params.session (a number or a numeric string).
std::optional<std::uint64_t> session_id_param(const json& params, QueryError& err) {
  const auto it = params.find("session");
  if (it == params.end()) {
    err = {"bad-params", "params.session is required"};
    return std::nullopt;
  }
  if (it->is_number_unsigned()) return it->get<std::uint64_t>();
  if (it->is_string()) {
    const std::string s = it->get<std::string>();
    char* end = nullptr;
    const std::uint64_t id = std::strtoull(s.c_str(), &end, 10);
    if (s.empty() || *end != '\0') {
      err = {"bad-params", fmt::format("session '{}' is not a session id", s)};
      return std::nullopt;
    }
    return id;
  }
  err = {"bad-params", "params.session must be a session id"};
  return std::nullopt;
}

std::size_t limit_param(const json& params, std::size_t fallback) {
  const auto it = params.find("limit");
  if (it != params.end() && it->is_number_unsigned()) return std::min<std::size_t>(it->get<std::uint64_t>(), 100000);
  return fallback;
}

}  // namespace

std::string Registry::metrics_text() const {
  std::string m;
  auto gauge = [&](std::string_view name, std::string_view help, std::string_view type) {
    m += fmt::format("# HELP {} {}\n# TYPE {} {}\n", name, help, name, type);
  };
  gauge("capuchin_up", "the daemon is serving", "gauge");
  m += "capuchin_up 1\n";
  gauge("capuchin_uptime_seconds", "seconds since the daemon started", "gauge");
  m += fmt::format("capuchin_uptime_seconds {:.3f}\n",
                   std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count());
  gauge("capuchin_sessions", "attached sessions", "gauge");
  m += fmt::format("capuchin_sessions {}\n", attached());
  gauge("capuchin_connections_total", "connections accepted", "counter");
  m += fmt::format("capuchin_connections_total {}\n", counters_.connections);
  gauge("capuchin_rejected_peers_total", "connections refused by the peer-credential check", "counter");
  m += fmt::format("capuchin_rejected_peers_total {}\n", counters_.rejected_peers);
  gauge("capuchin_frames_total", "binary frames received", "counter");
  m += fmt::format("capuchin_frames_total {}\n", counters_.frames);
  gauge("capuchin_bad_frames_total", "connections closed for bad frames", "counter");
  m += fmt::format("capuchin_bad_frames_total {}\n", counters_.bad_frames);
  gauge("capuchin_queries_total", "JSON queries answered", "counter");
  m += fmt::format("capuchin_queries_total {}\n", counters_.queries);
  struct Per {
    const char* name;
    const char* help;
    const char* type;
    std::uint64_t (*get)(const Session&);
  };
  static const Per per[] = {
      {"capuchin_session_events_total", "events received", "counter", [](const Session& s) { return s.events_total(); }},
      {"capuchin_session_allocated_bytes", "device bytes allocated now", "gauge", [](const Session& s) { return s.allocated_bytes(); }},
      {"capuchin_session_resident_bytes", "bytes on the device now (the executor's count; allocated without one)", "gauge",
       [](const Session& s) { return s.resident_bytes(); }},
      {"capuchin_session_peak_bytes", "most device bytes allocated at once", "gauge", [](const Session& s) { return s.peak_bytes(); }},
      {"capuchin_session_budget_bytes", "memory budget (0: none)", "gauge", [](const Session& s) { return s.budget_bytes(); }},
      {"capuchin_session_iteration", "iterations learned", "gauge", [](const Session& s) { return s.iteration(); }},
      {"capuchin_session_plans_total", "plans made", "counter", [](const Session& s) { return s.plans_made(); }},
      {"capuchin_session_evicted_bytes_total", "bytes evicted (executor)", "counter", [](const Session& s) { return s.exec().evicted_bytes; }},
      {"capuchin_session_stalls_total", "stalls (executor)", "counter", [](const Session& s) { return s.exec().stalls; }},
  };
  for (const Per& p : per) {
    gauge(p.name, p.help, p.type);
    for (const auto& [id, s] : sessions_)
      if (!s->closed()) m += fmt::format("{}{{session=\"{}\",pid=\"{}\"}} {}\n", p.name, id, s->hello().pid, p.get(*s));
  }
  return m;
}

json Registry::answer_kept(const std::string& method, std::uint64_t id, const Kept& k, const json& params, std::string& code,
                           std::string& message) const {
  const json& d = k.detail;
  if (method == "session") return d;
  if (method == "plan") {
    json j;
    j["session"] = id;
    j["plans"] = d.value("plans", 0ull);
    j["summary"] = d.value("plan_summary", std::string("no plan"));
    j["plan"] = nullptr;
    j["note"] = "the plan itself is not kept once its session leaves the daemon's memory; its decisions are in the decision "
                "log (capuchin decisions ID)";
    return j;
  }
  if (method == "tensors") {
    code = "not-kept";
    message = fmt::format("session {} (closed {}) is known from the session store only: its tensors are not kept "
                          "there; `capuchin decisions {}` reads its decision log", id, d.value("ended_at", std::string("earlier")), id);
    return nullptr;
  }
  if (method == "decisions") {
    const auto log = d.find("decision_log");
    if (log == d.end() || !log->is_string()) {
      code = "no-decision-log";
      message = fmt::format("session {} wrote no decision log", id);
      return nullptr;
    }
    DecisionFilter f;
    f.limit = limit_param(params, 100);
    if (auto a = params.find("action"); a != params.end() && a->is_string()) f.action = a->get<std::string>();
    if (auto t = params.find("since"); t != params.end() && t->is_number()) f.since_t = t->get<double>();
    // Read on the io thread: a query a user asks for, bounded by the log's rotation size.
    auto r = decisions_from_log(log->get<std::string>(), f);
    if (!r) {
      code = "no-decision-log";
      message = fmt::format("session {} is closed and {}", id, r.error().message);
      return nullptr;
    }
    return std::move(*r);
  }
  code = "session-closed";  // set-budget
  message = fmt::format("session {} is closed", id);
  return nullptr;
}

std::string Registry::handle_request(std::string_view line) {
  try {  // a safety net: the handler is written not to throw; nothing may escape it
    return handle_request_unchecked(line);
  } catch (const std::exception& e) {
    return error_response(nullptr, "internal", e.what());
  }
}

namespace {
// The deepest nesting of arrays and objects in a JSON text (strings skipped), stopping once
// past `limit`: nlohmann's copies and destructors recurse, and a request nested 100,000 deep
// overflowed the daemon's stack.
std::size_t json_depth(std::string_view text, std::size_t limit) {
  std::size_t depth = 0, deepest = 0;
  bool in_string = false, escaped = false;
  for (char c : text) {
    if (in_string) {
      if (escaped) escaped = false;
      else if (c == '\\') escaped = true;
      else if (c == '"') in_string = false;
      continue;
    }
    if (c == '"') in_string = true;
    else if (c == '[' || c == '{') {
      deepest = std::max(deepest, ++depth);
      if (deepest > limit) return deepest;
    } else if ((c == ']' || c == '}') && depth > 0) {
      --depth;
    }
  }
  return deepest;
}
}  // namespace

std::string Registry::handle_request_unchecked(std::string_view line) {
  ++counters_.queries;
  if (json_depth(line, kMaxRequestDepth) > kMaxRequestDepth) {
    ++counters_.bad_queries;
    return error_response(nullptr, "bad-request", fmt::format("the request nests deeper than {} levels", kMaxRequestDepth));
  }
  const json req = json::parse(line, nullptr, /*allow_exceptions=*/false);
  if (req.is_discarded() || !req.is_object()) {
    ++counters_.bad_queries;
    return error_response(nullptr, "bad-request", "the request is not a JSON object");
  }
  const json id = req.contains("id") ? req["id"] : json(nullptr);
  if (req.contains("v") && !(req["v"].is_number_integer() && req["v"].get<std::int64_t>() == 1)) {
    ++counters_.bad_queries;
    return error_response(id, "bad-version", "this daemon speaks query version 1");
  }
  const auto mit = req.find("method");
  if (mit == req.end() || !mit->is_string()) {
    ++counters_.bad_queries;
    return error_response(id, "bad-request", "the request has no string 'method'");
  }
  const std::string method = mit->get<std::string>();
  json params = json::object();
  if (auto p = req.find("params"); p != req.end()) {
    if (!p->is_object()) {
      ++counters_.bad_queries;
      return error_response(id, "bad-params", "'params' must be an object");
    }
    params = *p;
  }

  json result;
  QueryError err;
  if (method == "status") {
    result["daemon"] = "capuchind";
    result["version"] = std::string(kVersion);
    result["protocol"] = proto::kProtocolVersion;
    result["pid"] = static_cast<std::int64_t>(getpid());
    result["uptime_s"] = std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
    result["socket"] = opt_.socket_path;
    result["log_dir"] = opt_.log_dir;
    result["state_file"] = writer_ ? json(writer_->path()) : json(nullptr);
    result["closed_sessions_kept"] = kept_.size();
    result["gpu_profile"] = opt_.gpu;
    result["sessions"] = json::array();
    for (const auto& [sid, s] : sessions_)
      if (!s->closed()) result["sessions"].push_back(s->summary());
  } else if (method == "sessions") {
    const auto a = params.find("all");
    const bool all = a != params.end() && a->is_boolean() && a->get<bool>();
    // run: only the sessions of one `capuchin run` (its CAPUCHIN_RUN_TAG), closed ones too.
    const auto run = params.find("run");
    if (run != params.end() && !run->is_string()) err = {"bad-params", "params.run must be a string (a CAPUCHIN_RUN_TAG)"};
    const std::string tag = run != params.end() && run->is_string() ? run->get<std::string>() : std::string();
    const auto wanted = [&](const json& j) {
      const auto t = j.find("run_tag");
      return tag.empty() || (t != j.end() && t->is_string() && t->get<std::string>() == tag);
    };
    // In id order: sessions in memory answer for themselves, the store for the others.
    std::map<std::uint64_t, json> listed;
    if (all || !tag.empty())
      for (const auto& [sid, k] : kept_)
        if (wanted(k.detail)) listed.emplace(sid, k.detail);
    for (const auto& [sid, s] : sessions_)
      if ((all || !tag.empty() || !s->closed()) && (tag.empty() || s->run_tag() == tag)) listed.insert_or_assign(sid, s->summary());
    result = json::array();
    for (auto& [sid, j] : listed) result.push_back(std::move(j));
  } else if (method == "session" || method == "tensors" || method == "plan" || method == "decisions" ||
             method == "set-budget") {
    const auto sid = session_id_param(params, err);
    Session* s = sid ? find(*sid) : nullptr;
    const auto kept = sid && s == nullptr ? kept_.find(*sid) : kept_.end();
    if (sid && s == nullptr && kept == kept_.end()) err = {"no-such-session", fmt::format("no session {}", *sid)};
    if (kept != kept_.end()) result = answer_kept(method, *sid, kept->second, params, err.code, err.message);
    if (s != nullptr) {
      if (method == "session") {
        result = s->detail();
      } else if (method == "tensors") {
        result = s->tensors(limit_param(params, 50));
      } else if (method == "plan") {
        result = s->plan();
      } else if (method == "decisions") {
        DecisionFilter f;
        f.limit = limit_param(params, 100);
        if (auto a = params.find("action"); a != params.end() && a->is_string()) f.action = a->get<std::string>();
        if (auto t = params.find("since"); t != params.end() && t->is_number()) f.since_t = t->get<double>();
        result = s->decisions(f);
      } else {  // set-budget
        auto b = params.find("budget");
        if (s->closed()) {
          err = {"session-closed", fmt::format("session {} is closed", s->id())};
        } else if (b == params.end() || !b->is_string()) {
          err = {"bad-params", "params.budget must be a string such as \"40GiB\", \"60%\" or \"0.5x\""};
        } else {
          const std::string text = b->get<std::string>();
          auto parsed = parse_budget(text);
          if (!parsed) {
            err = {"bad-params", parsed.error().message};
          } else {
            std::string code;
            if (auto st = s->set_budget(*parsed, text, &code); !st) err = {code, st.error().message};
            else result = s->detail();
          }
        }
      }
    }
  } else if (method == "metrics") {
    result = metrics_text();
  } else {
    err = {"unknown-method", fmt::format("unknown method '{}' (status, sessions, session, tensors, plan, decisions, "
                                         "set-budget, metrics)", method)};
  }
  if (!err.code.empty()) {
    ++counters_.bad_queries;
    return error_response(id, err.code, err.message);
  }
  json resp;
  resp["v"] = 1;
  resp["id"] = id;
  resp["ok"] = true;
  resp["result"] = std::move(result);
  return resp.dump(-1, ' ', false, json::error_handler_t::replace);
}

}  // namespace capuchin::daemon
