// Decision records as JSON lines (nlohmann::ordered_json). See decision_log.hpp.
#include "capuchin/decision_log.hpp"

#include <nlohmann/json.hpp>

namespace capuchin {

std::string to_json_line(const DecisionRecord& r) {
  nlohmann::ordered_json j;
  j["t"] = r.t;
  j["pid"] = r.pid;
  j["iteration"] = r.iteration;
  j["action"] = r.action;
  if (r.tensor) j["tensor"] = *r.tensor;
  j["bytes"] = r.bytes;
  if (!r.reason.empty()) j["reason"] = r.reason;
  if (r.expected_s) j["expected_s"] = *r.expected_s;
  if (r.actual_s) j["actual_s"] = *r.actual_s;
  if (!r.note.empty()) j["note"] = r.note;
  return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

Expected<DecisionRecord> parse_decision_line(std::string_view line) {
  const nlohmann::json j = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return make_error("not JSON");
  if (!j.is_object()) return make_error("not a JSON object");
  DecisionRecord r;
  auto num = [&](const char* k, auto& out) -> bool {
    auto it = j.find(k);
    if (it == j.end() || !it->is_number()) return false;
    out = it->get<std::decay_t<decltype(out)>>();
    return true;
  };
  auto str = [&](const char* k, std::string& out) {
    auto it = j.find(k);
    if (it != j.end() && it->is_string()) out = it->get<std::string>();
  };
  if (!num("t", r.t)) return make_error("missing number 't'");
  str("action", r.action);
  if (r.action.empty()) return make_error("missing string 'action'");
  num("pid", r.pid);
  num("iteration", r.iteration);
  num("bytes", r.bytes);
  std::uint64_t tensor = 0;
  if (num("tensor", tensor)) r.tensor = tensor;
  double x = 0;
  if (num("expected_s", x)) r.expected_s = x;
  if (num("actual_s", x)) r.actual_s = x;
  str("reason", r.reason);
  str("note", r.note);
  return r;
}

}  // namespace capuchin
