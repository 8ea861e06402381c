// DTR's simrd operator logs as capuchin traces (see include/capuchin/trace_import.hpp for the
// mapping). The log is converted whole into a list of events first (names resolved to
// storages, constants placed), and only then emitted, so a bad line emits nothing.
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "byte_source.hpp"
#include "capuchin/trace_import.hpp"

namespace capuchin::trace {
namespace {

using nlohmann::json;

constexpr std::uint32_t kNoStorage = ~0u;  // a zero-byte tensor: no allocation

struct Storage {
  std::uint64_t id = 0, bytes = 0;
  std::uint32_t names = 0;  // names that refer to it
  bool constant = false, freed = false;
  std::size_t alloc_event = 0;  // index in Converter::events_
};

struct Pending {
  Op op = Op::Sync;
  std::uint64_t id = 0, bytes = 0, dur_ns = 0;
  std::uint32_t storage = kNoStorage;  // alloc / free
  std::string name;                    // kernel
  std::vector<std::uint64_t> reads, writes;
};

class Converter {
 public:
  Converter(std::string_view log, std::string_view name) : log_(log), name_(name) {}

  Status run() {
    split_lines();
    std::size_t i = 0;
    for (; i < lines_.size(); ++i) {  // up to and including ANNOTATE START
      auto j = parse(i);
      if (!j) return Unexpected{j.error()};
      if (field(*j, "INSTRUCTION") == "ANNOTATE" && field(*j, "ANNOTATION") == "START") break;
      ++sum_.skipped_before_start;
    }
    if (i == lines_.size()) return make_error(std::string(name_) + ": no {\"INSTRUCTION\":\"ANNOTATE\",\"ANNOTATION\":\"START\"} line: not a simrd log");
    for (line_ = i + 1; line_ < lines_.size(); ++line_)
      if (auto s = step(); !s) return s;
    if (sum_.calls + sum_.mutates == 0) return make_error(std::string(name_) + ": no CALL or MUTATE after START: nothing to import");
    return {};
  }

  Status emit(const std::function<Status(const EventView&)>& out) {
    // Constants the step never frees are the set-up (parameters); the rest, and everything
    // else, are the iteration, in log order.
    std::vector<std::size_t> setup, body;
    for (std::size_t k = 0; k < events_.size(); ++k) {
      const Pending& p = events_[k];
      const bool setup_alloc = p.op == Op::Alloc && storages_[p.storage].constant && !storages_[p.storage].freed;
      (setup_alloc ? setup : body).push_back(k);
    }
    sum_.setup_constants = setup.size();
    // The peak as emitted (constants moved to the set-up are held from its start).
    std::uint64_t live = 0;
    sum_.peak_bytes = 0;
    auto held = [&](const Pending& p) {
      if (p.op == Op::Alloc) sum_.peak_bytes = std::max(sum_.peak_bytes, live += p.bytes);
      if (p.op == Op::Free) live -= storages_[p.storage].bytes;
    };
    for (std::size_t k : setup) {
      held(events_[k]);
      if (auto s = out(view(events_[k], Role::Param)); !s) return s;
    }
    EventView it;
    it.op = Op::Iter;
    it.n = 1;
    if (auto s = out(it); !s) return s;
    for (std::size_t k : body) {
      const Pending& p = events_[k];
      const Role role = p.op == Op::Alloc && storages_[p.storage].constant ? Role::Input : Role::None;
      held(p);
      if (auto s = out(view(p, role)); !s) return s;
    }
    sum_.events = setup.size() + 1 + body.size();
    return {};
  }

  const SimrdSummary& summary() const { return sum_; }

 private:
  void split_lines() {
    std::size_t at = 0;
    while (at < log_.size()) {
      std::size_t end = log_.find('\n', at);
      if (end == std::string_view::npos) end = log_.size();
      std::string_view l = log_.substr(at, end - at);
      if (!l.empty() && l.back() == '\r') l.remove_suffix(1);
      lines_.push_back(l);
      at = end + 1;
    }
    while (!lines_.empty() && lines_.back().find_first_not_of(" \t") == std::string_view::npos) lines_.pop_back();
    sum_.lines = lines_.size();
  }

  Unexpected<Error> fail(std::size_t line, const std::string& why) const {
    return make_error(std::string(name_) + ":" + std::to_string(line + 1) + ": " + why);
  }

  Expected<json> parse(std::size_t line) const {
    json j = json::parse(lines_[line], nullptr, false);
    if (j.is_discarded() || !j.is_object()) return fail(line, "not a JSON object");
    if (!j.contains("INSTRUCTION") || !j["INSTRUCTION"].is_string()) return fail(line, "no INSTRUCTION string");
    return j;
  }

  static std::string field(const json& j, const char* key) {
    auto it = j.find(key);
    return it != j.end() && it->is_string() ? it->get<std::string>() : std::string();
  }

  // A string field (the logs write numbers as strings) or a number, as an integer.
  std::optional<std::int64_t> number(const json& j, const char* key) const {
    auto it = j.find(key);
    if (it == j.end()) return std::nullopt;
    return integer(*it);
  }

  // An integer as a JSON number or a string of one ("4096", "9.0e9"); nothing for NaN, an
  // infinity or a value past int64 (casting those would be undefined).
  static std::optional<std::int64_t> integer(const json& v) {
    if (v.is_number_integer()) return v.get<std::int64_t>();
    double d = 0;
    if (v.is_number()) {
      d = v.get<double>();
    } else if (v.is_string()) {
      const std::string s = v.get<std::string>();
      char* end = nullptr;
      errno = 0;
      d = std::strtod(s.c_str(), &end);
      if (s.empty() || end != s.c_str() + s.size() || errno != 0) return std::nullopt;
    } else {
      return std::nullopt;
    }
    if (!std::isfinite(d) || d < -9.2e18 || d > 9.2e18) return std::nullopt;
    return static_cast<std::int64_t>(d);
  }

  Expected<std::string> name_field(const json& j, const char* key) const {
    std::string s = field(j, key);
    if (s.empty()) return fail(line_, std::string("no ") + key + " name");
    return s;
  }

  Expected<std::vector<std::string>> names_field(const json& j, const char* key) const {
    auto it = j.find(key);
    if (it == j.end() || !it->is_array()) return fail(line_, std::string("no ") + key + " array");
    std::vector<std::string> r;
    for (const json& e : *it) {
      if (!e.is_string()) return fail(line_, std::string(key) + " holds a non-string");
      r.push_back(e.get<std::string>());
    }
    return r;
  }

  Expected<std::uint32_t> storage_of(const std::string& n) const {
    auto it = names_.find(n);
    if (it == names_.end()) return fail(line_, "'" + n + "' is used before any line defines it");
    return it->second;
  }

  Status define(const std::string& n, std::uint32_t s) {
    if (!names_.try_emplace(n, s).second) return fail(line_, "'" + n + "' is defined twice");
    if (s != kNoStorage) ++storages_[s].names;
    return {};
  }

  // One name of storage s gone: freed with its last name.
  void drop(std::uint32_t s) {
    if (s == kNoStorage || --storages_[s].names > 0) return;
    Storage& st = storages_[s];
    st.freed = true;
    Pending p;
    p.op = Op::Free;
    p.id = st.id;
    p.storage = s;
    events_.push_back(std::move(p));
    ++sum_.frees;
  }

  std::uint32_t allocate(std::uint64_t bytes, bool constant) {
    if (bytes == 0) return kNoStorage;
    const auto s = static_cast<std::uint32_t>(storages_.size());
    storages_.push_back(Storage{next_id_++, bytes, 0, constant, false, events_.size()});
    Pending p;
    p.op = Op::Alloc;
    p.id = storages_[s].id;
    p.bytes = bytes;
    p.storage = s;
    events_.push_back(std::move(p));
    ++sum_.storages;
    return s;
  }

  // The next line, which must be the `what` line (MEMORY, ALIAS) of `n`: its number field.
  Expected<std::int64_t> describing_line(const char* what, const std::string& n, const char* missing) {
    if (++line_ >= lines_.size()) return fail(line_ - 1, "'" + n + "' has no " + what + " line after " + missing);
    auto j = parse(line_);
    if (!j) return Unexpected{j.error()};
    if (field(*j, "INSTRUCTION") != what || field(*j, "NAME") != n)
      return fail(line_, std::string("expected the ") + what + " line of '" + n + "'");
    auto v = number(*j, what);
    if (!v) return fail(line_, std::string(what) + " is not an integer");
    return *v;
  }

  // The MEMORY line after a CONSTANT or a CALL's result `n`: its bytes.
  Expected<std::uint64_t> memory_line(const std::string& n) {
    auto b = describing_line("MEMORY", n, "it");
    if (!b) return Unexpected{b.error()};
    if (*b < 0) return fail(line_, "MEMORY is not a byte count");
    return static_cast<std::uint64_t>(*b);
  }

  Expected<std::int64_t> alias_line(const std::string& n) { return describing_line("ALIAS", n, "its MEMORY"); }

  Expected<std::uint64_t> time_field(const json& j) const {
    auto t = number(j, "TIME");
    if (!t || *t < 0) return fail(line_, "TIME is not a duration in ns");
    return static_cast<std::uint64_t>(*t);
  }

  // The distinct storages of `args` (zero-byte ones have none).
  Expected<std::vector<std::uint32_t>> arg_storages(const std::vector<std::string>& args) const {
    std::vector<std::uint32_t> r;
    for (const std::string& a : args) {
      auto s = storage_of(a);
      if (!s) return Unexpected{s.error()};
      r.push_back(*s);
    }
    return r;
  }

  void kernel(const std::string& op, std::uint64_t ns, const std::vector<std::uint32_t>& reads,
              const std::vector<std::uint32_t>& writes) {
    Pending k;
    k.op = Op::Kernel;
    k.name = op;
    k.dur_ns = ns;
    auto add = [&](std::vector<std::uint64_t>& to, std::uint32_t s) {
      if (s == kNoStorage) return;
      const std::uint64_t id = storages_[s].id;
      if (std::find(to.begin(), to.end(), id) == to.end()) to.push_back(id);
    };
    for (std::uint32_t s : reads) add(k.reads, s);
    for (std::uint32_t s : writes) add(k.writes, s);
    events_.push_back(std::move(k));
    sum_.operator_ns += ns;
  }

  Status step() {
    auto j = parse(line_);
    if (!j) return Unexpected{j.error()};
    const std::string in = field(*j, "INSTRUCTION");
    if (in == "CONSTANT") return constant(*j);
    if (in == "CALL") return call(*j);
    if (in == "MUTATE") return mutate(*j);
    if (in == "COPY") return copy(*j);
    if (in == "COPY_FROM") return copy_from(*j);
    if (in == "RELEASE") return release(*j);
    if (in == "ANNOTATE") {
      if (field(*j, "ANNOTATION") == "START") return fail(line_, "a second START: one training step per log is supported");
      return {};  // BACKWARD: noted by the log only
    }
    if (in == "MEMORY" || in == "ALIAS") return fail(line_, in + " without the CONSTANT or CALL it describes");
    return fail(line_, "unknown INSTRUCTION '" + in + "'");
  }

  Status constant(const json& j) {
    auto n = name_field(j, "NAME");
    if (!n) return Unexpected{n.error()};
    auto bytes = memory_line(*n);
    if (!bytes) return Unexpected{bytes.error()};
    ++sum_.constants;
    return define(*n, allocate(*bytes, true));
  }

  // What a CALL and a MUTATE both have: NAME, TIME, and ARGS resolved to their storages.
  struct Operator {
    std::string name;
    std::uint64_t ns = 0;
    std::vector<std::uint32_t> reads;  // one per argument
  };
  Expected<Operator> operator_of(const json& j) const {
    auto op = name_field(j, "NAME");
    auto args = names_field(j, "ARGS");
    auto ns = time_field(j);
    if (!op) return Unexpected{op.error()};
    if (!args) return Unexpected{args.error()};
    if (!ns) return Unexpected{ns.error()};
    auto reads = arg_storages(*args);
    if (!reads) return Unexpected{reads.error()};
    return Operator{std::move(*op), *ns, std::move(*reads)};
  }

  Status call(const json& j) {
    auto o = operator_of(j);
    if (!o) return Unexpected{o.error()};
    auto results = names_field(j, "RESULT");
    if (!results) return Unexpected{results.error()};
    const std::vector<std::uint32_t>& reads = o->reads;
    std::vector<std::uint32_t> writes;
    for (const std::string& r : *results) {
      auto bytes = memory_line(r);
      if (!bytes) return Unexpected{bytes.error()};
      auto alias = alias_line(r);
      if (!alias) return Unexpected{alias.error()};
      std::uint32_t s = kNoStorage;
      if (*alias >= 0) {
        if (static_cast<std::size_t>(*alias) >= reads.size())
          return fail(line_, "ALIAS " + std::to_string(*alias) + " of '" + r + "' is not an index into the CALL's ARGS");
        s = reads[static_cast<std::size_t>(*alias)];
        ++sum_.aliases;
      } else {
        s = allocate(*bytes, false);
        if (s == kNoStorage) ++sum_.zero_byte_results;
        else writes.push_back(s);
      }
      if (auto d = define(r, s); !d) return d;
    }
    kernel(o->name, o->ns, reads, writes);
    ++sum_.calls;
    return {};
  }

  Status mutate(const json& j) {
    auto o = operator_of(j);
    if (!o) return Unexpected{o.error()};
    auto m = j.find("MUTATE");
    if (m == j.end() || !m->is_array()) return fail(line_, "no MUTATE array");
    std::vector<std::uint32_t> writes;
    for (const json& e : *m) {
      const std::int64_t k = integer(e).value_or(-1);
      if (k < 0 || static_cast<std::size_t>(k) >= o->reads.size())
        return fail(line_, "MUTATE holds " + e.dump() + ", not an index into ARGS");
      writes.push_back(o->reads[static_cast<std::size_t>(k)]);
    }
    kernel(o->name, o->ns, o->reads, writes);  // in place: its written storages are read too
    ++sum_.mutates;
    return {};
  }

  Status copy(const json& j) {
    auto dst = name_field(j, "DST");
    auto src = name_field(j, "SRC");
    if (!dst) return Unexpected{dst.error()};
    if (!src) return Unexpected{src.error()};
    auto s = storage_of(*src);
    if (!s) return Unexpected{s.error()};
    return define(*dst, *s);
  }

  Status copy_from(const json& j) {
    auto dst = name_field(j, "DST");
    auto src = name_field(j, "SRC");
    if (!dst) return Unexpected{dst.error()};
    if (!src) return Unexpected{src.error()};
    auto old = storage_of(*dst);
    auto s = storage_of(*src);
    if (!old) return Unexpected{old.error()};
    if (!s) return Unexpected{s.error()};
    names_[*dst] = *s;
    if (*s != kNoStorage) ++storages_[*s].names;
    drop(*old);
    return {};
  }

  Status release(const json& j) {
    auto n = name_field(j, "NAME");
    if (!n) return Unexpected{n.error()};
    auto it = names_.find(*n);
    if (it == names_.end()) {
      ++sum_.undefined_releases;
      return {};
    }
    const std::uint32_t s = it->second;
    names_.erase(it);
    drop(s);
    return {};
  }

  EventView view(const Pending& p, Role role) const {
    EventView v;
    v.op = p.op;
    v.id = p.id;
    if (p.op == Op::Alloc) {
      v.bytes = p.bytes;
      v.role = role;
      if (role != Role::None) v.flags |= kHasRole;
    } else if (p.op == Op::Kernel) {
      v.name = p.name;
      v.dur_ns = p.dur_ns;
      v.reads = p.reads;
      v.writes = p.writes;
      v.flags |= kHasDur | kHasReadsWrites;
    }
    return v;
  }

  std::string_view log_, name_;
  std::vector<std::string_view> lines_;
  std::size_t line_ = 0;
  std::unordered_map<std::string, std::uint32_t> names_;  // a log name -> its storage
  std::vector<Storage> storages_;
  std::vector<Pending> events_;
  std::uint64_t next_id_ = 0;
  SimrdSummary sum_;
};

Expected<std::string> read_all(const std::string& path) {
  auto src = detail::open_file_source(path);
  if (!src) return Unexpected{src.error()};
  std::string data;
  char buf[1 << 16];
  for (;;) {
    auto n = (*src)->read(buf, sizeof buf);
    if (!n) return make_error(path + ": " + n.error().message);
    if (*n == 0) return data;
    data.append(buf, *n);
  }
}

}  // namespace

Expected<SimrdSummary> import_simrd(std::string_view log, std::string_view name,
                                    const std::function<Status(const EventView&)>& emit) {
  Converter c(log, name);
  if (auto s = c.run(); !s) return Unexpected{s.error()};
  if (auto s = c.emit(emit); !s) return Unexpected{s.error()};
  return c.summary();
}

Expected<SimrdSummary> import_simrd_file(const std::string& in, const std::string& out, const std::string& model) {
  auto log = read_all(in);
  if (!log) return Unexpected{log.error()};
  Header h;
  h.source = "dtr-simrd";
  h.model = model;
  h.iterations = 1;
  const std::size_t slash = in.find_last_of('/');
  h.notes = "imported by capuchin trace import simrd from " + in.substr(slash == std::string::npos ? 0 : slash + 1) +
            ": DTR's operator log of one PyTorch training step (uwsampl/dtr-prototype simrd logs, NVIDIA Titan V); "
            "kernel dur_ns are its measured operator times";
  // Beside the destination, renamed into place once complete: an existing `out` survives any error.
  const bool gz = out.size() >= 3 && out.compare(out.size() - 3, 3, ".gz") == 0;
  const std::string tmp = out + ".partial-" + std::to_string(::getpid()) + (gz ? ".gz" : "");
  auto w = TraceWriter::open(tmp, h);
  if (!w) {
    std::remove(tmp.c_str());  // it may exist, if only the header could not be written
    return Unexpected{w.error()};
  }
  auto sum = import_simrd(*log, in, [&](const EventView& ev) { return w->write(ev); });
  Status closed = w->close();
  if (sum && !closed) sum = Unexpected{closed.error()};
  if (sum && std::rename(tmp.c_str(), out.c_str()) != 0)
    sum = make_error(out + ": cannot move " + tmp + " into place: " + std::strerror(errno));
  if (!sum) std::remove(tmp.c_str());
  return sum;
}

}  // namespace capuchin::trace
