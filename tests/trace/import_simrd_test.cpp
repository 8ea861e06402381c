// import_simrd (include/capuchin/trace_import.hpp): a hand-written log whose trace is worked
// out line by line in the comments (constants placed by whether the step frees them, views,
// in-place operators, COPY / COPY_FROM / RELEASE and the frees they cause, zero-byte results),
// the errors (each names its line; nothing is emitted), and DTR's real logs from
// ../shared/external when present: valid traces, peak and operator time as the logs say, and
// repeatable (`capuchin sim --iters N`).
#include <gtest/gtest.h>

#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "capuchin/trace_import.hpp"
#include "capuchin/trace_model.hpp"
#include "capuchin/trace_repeat.hpp"

namespace capuchin::trace {
namespace {

// p: a parameter (never freed) -> set-up, id 0. x: the batch (released at the end) -> id 1,
// inside the iteration. a = conv(x, p): new storage id 2 (400 bytes). v = view(a): alias of
// a, no allocation. relu_(a) in place (MUTATE [0]). z = empty(): zero bytes, no allocation.
// s = sum(v, z): id 3. COPY w = s; COPY_FROM v <- p (v now names p; a keeps its name 'a').
// RELEASE a -> a's storage still named by... nothing else (v moved to p): free 2.
// RELEASE x -> free 1. RELEASE unknown -> ignored. RELEASE s -> 3 still named by w: kept.
const char* kLog = R"({"INSTRUCTION":"CONSTANT","NAME":"early"}
{"INSTRUCTION":"MEMORY","MEMORY":"8","NAME":"early"}
{"ANNOTATION":"START","INSTRUCTION":"ANNOTATE"}
{"INSTRUCTION":"CONSTANT","NAME":"p"}
{"INSTRUCTION":"MEMORY","MEMORY":"100","NAME":"p"}
{"INSTRUCTION":"CONSTANT","NAME":"x"}
{"INSTRUCTION":"MEMORY","MEMORY":"200","NAME":"x"}
{"ARGS":["x","p"],"INSTRUCTION":"CALL","NAME":"conv","RESULT":["a"],"TIME":"1000"}
{"INSTRUCTION":"MEMORY","MEMORY":"400","NAME":"a"}
{"ALIAS":"-1","INSTRUCTION":"ALIAS","NAME":"a"}
{"ARGS":["a"],"INSTRUCTION":"CALL","NAME":"view","RESULT":["v"],"TIME":"5"}
{"INSTRUCTION":"MEMORY","MEMORY":"400","NAME":"v"}
{"ALIAS":"0","INSTRUCTION":"ALIAS","NAME":"v"}
{"ARGS":["a"],"INSTRUCTION":"MUTATE","MUTATE":[0],"NAME":"relu_","TIME":"20"}
{"ANNOTATION":"BACKWARD","INSTRUCTION":"ANNOTATE"}
{"ARGS":[],"INSTRUCTION":"CALL","NAME":"empty","RESULT":["z"],"TIME":"1"}
{"INSTRUCTION":"MEMORY","MEMORY":"0","NAME":"z"}
{"ALIAS":"-1","INSTRUCTION":"ALIAS","NAME":"z"}
{"ARGS":["v","z"],"INSTRUCTION":"CALL","NAME":"sum","RESULT":["s"],"TIME":"7"}
{"INSTRUCTION":"MEMORY","MEMORY":"4","NAME":"s"}
{"ALIAS":"-1","INSTRUCTION":"ALIAS","NAME":"s"}
{"DST":"w","INSTRUCTION":"COPY","SRC":"s"}
{"DST":"v","INSTRUCTION":"COPY_FROM","SRC":"p"}
{"INSTRUCTION":"RELEASE","NAME":"a"}
{"INSTRUCTION":"RELEASE","NAME":"x"}
{"INSTRUCTION":"RELEASE","NAME":"nobody"}
{"INSTRUCTION":"RELEASE","NAME":"s"}
)";

const char* kExpected[] = {
    R"({"op":"alloc","id":0,"bytes":100,"role":"param"})",
    R"({"op":"iter","n":1})",
    R"({"op":"alloc","id":1,"bytes":200,"role":"input"})",
    R"({"op":"alloc","id":2,"bytes":400})",
    R"({"op":"kernel","name":"conv","reads":[1,0],"writes":[2],"dur_ns":1000})",
    R"({"op":"kernel","name":"view","reads":[2],"writes":[],"dur_ns":5})",
    R"({"op":"kernel","name":"relu_","reads":[2],"writes":[2],"dur_ns":20})",
    R"({"op":"kernel","name":"empty","reads":[],"writes":[],"dur_ns":1})",
    R"({"op":"alloc","id":3,"bytes":4})",
    R"({"op":"kernel","name":"sum","reads":[2],"writes":[3],"dur_ns":7})",
    R"({"op":"free","id":2})",
    R"({"op":"free","id":1})",
};

Expected<SimrdSummary> convert(std::string_view log, std::vector<std::string>& lines) {
  return import_simrd(log, "hand.log", [&](const EventView& ev) {
    lines.push_back(format_event(ev));
    return Status{};
  });
}

std::string as_trace(const std::vector<std::string>& lines) {
  std::string t = R"({"format":"capuchin-trace","version":1})";
  t += '\n';
  for (const std::string& l : lines) t += l + '\n';
  return t;
}

TEST(ImportSimrd, HandLogBecomesTheWorkedOutTrace) {
  std::vector<std::string> lines;
  auto s = convert(kLog, lines);
  ASSERT_TRUE(s) << s.error().message;
  ASSERT_EQ(lines.size(), std::size(kExpected));
  for (std::size_t i = 0; i < lines.size(); ++i) EXPECT_EQ(lines[i], kExpected[i]) << "event " << i;
  EXPECT_EQ(s->skipped_before_start, 2u);
  EXPECT_EQ(s->calls, 4u);
  EXPECT_EQ(s->mutates, 1u);
  EXPECT_EQ(s->constants, 2u);
  EXPECT_EQ(s->setup_constants, 1u);
  EXPECT_EQ(s->storages, 4u);
  EXPECT_EQ(s->frees, 2u);
  EXPECT_EQ(s->aliases, 1u);
  EXPECT_EQ(s->zero_byte_results, 1u);
  EXPECT_EQ(s->undefined_releases, 1u);
  EXPECT_EQ(s->operator_ns, 1033u);
  EXPECT_EQ(s->peak_bytes, 704u);
  EXPECT_EQ(s->events, lines.size());
  auto t = parse_trace(as_trace(lines));
  ASSERT_TRUE(t) << t.error().message();
  EXPECT_EQ(t->iterations.size(), 1u);
}

struct BadCase {
  const char* what;
  std::string log;
  std::string message;
};

TEST(ImportSimrd, BadLogsNameTheirLineAndEmitNothing) {
  const std::string start = R"({"ANNOTATION":"START","INSTRUCTION":"ANNOTATE"})" "\n";
  const std::string p = R"({"INSTRUCTION":"CONSTANT","NAME":"p"})" "\n" R"({"INSTRUCTION":"MEMORY","MEMORY":"8","NAME":"p"})" "\n";
  const std::string call = R"({"ARGS":["p"],"INSTRUCTION":"CALL","NAME":"f","RESULT":["r"],"TIME":"3"})" "\n";
  const std::vector<BadCase> cases = {
      {"no START", p, "hand.log: no {\"INSTRUCTION\":\"ANNOTATE\",\"ANNOTATION\":\"START\"} line: not a simrd log"},
      {"not JSON", start + "{oops\n", "hand.log:2: not a JSON object"},
      {"unknown instruction", start + R"({"INSTRUCTION":"TELEPORT"})" "\n", "hand.log:2: unknown INSTRUCTION 'TELEPORT'"},
      {"undefined argument", start + R"({"ARGS":["q"],"INSTRUCTION":"CALL","NAME":"f","RESULT":["r"],"TIME":"3"})" "\n",
       "hand.log:2: 'q' is used before any line defines it"},
      {"CALL without MEMORY", start + p + call, "hand.log:4: 'r' has no MEMORY line after it"},
      {"MEMORY of another name", start + p + call + R"({"INSTRUCTION":"MEMORY","MEMORY":"8","NAME":"other"})" "\n",
       "hand.log:5: expected the MEMORY line of 'r'"},
      {"alias outside ARGS",
       start + p + call + R"({"INSTRUCTION":"MEMORY","MEMORY":"8","NAME":"r"})" "\n" R"({"ALIAS":"1","INSTRUCTION":"ALIAS","NAME":"r"})" "\n",
       "hand.log:6: ALIAS 1 of 'r' is not an index into the CALL's ARGS"},
      {"bad TIME", start + p + R"({"ARGS":["p"],"INSTRUCTION":"CALL","NAME":"f","RESULT":["r"],"TIME":"soon"})" "\n",
       "hand.log:4: TIME is not a duration in ns"},
      {"defined twice", start + p + R"({"DST":"p","INSTRUCTION":"COPY","SRC":"p"})" "\n", "hand.log:4: 'p' is defined twice"},
      {"stray MEMORY", start + R"({"INSTRUCTION":"MEMORY","MEMORY":"8","NAME":"p"})" "\n",
       "hand.log:2: MEMORY without the CONSTANT or CALL it describes"},
      {"no operator", start + p, "hand.log: no CALL or MUTATE after START: nothing to import"},
      {"MUTATE index", start + p + R"({"ARGS":["p"],"INSTRUCTION":"MUTATE","MUTATE":[2],"NAME":"g","TIME":"1"})" "\n",
       "hand.log:4: MUTATE holds 2, not an index into ARGS"},
  };
  for (const BadCase& c : cases) {
    std::vector<std::string> lines;
    auto s = convert(c.log, lines);
    ASSERT_FALSE(s) << c.what;
    EXPECT_EQ(s.error().message, c.message) << c.what;
    EXPECT_TRUE(lines.empty()) << c.what;
  }
}

TEST(ImportSimrd, FileErrorsLeaveAnExistingTraceAlone) {
  const std::filesystem::path dir = std::filesystem::temp_directory_path() / ("simrd_test_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  const std::string bad = (dir / "bad.log").string(), out = (dir / "out.jsonl").string();
  std::ofstream(bad) << R"({"ANNOTATION":"START","INSTRUCTION":"ANNOTATE"})" "\n{oops\n";
  std::ofstream(out) << "precious\n";
  auto s = import_simrd_file(bad, out, "m");
  ASSERT_FALSE(s);
  EXPECT_EQ(s.error().message, bad + ":2: not a JSON object");
  std::ifstream in(out);
  std::string kept((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_EQ(kept, "precious\n");
  EXPECT_EQ(std::distance(std::filesystem::directory_iterator(dir), std::filesystem::directory_iterator{}), 2)
      << "no partial file left behind";
  auto missing = import_simrd_file((dir / "absent.log").string(), out, "m");
  ASSERT_FALSE(missing);
  std::filesystem::remove_all(dir);
}

// DTR's logs: each converts, reads back valid, allocates at its peak what DTR's baseline run
// measured (within 1%: dtr-prototype-measured.json's total_mem, MB), charges exactly the logs'
// operator times, and repeats.
TEST(ImportSimrd, DtrLogsConvertAndRepeat) {
  const std::filesystem::path dir = std::filesystem::path(CAPUCHIN_SHARED_DIR) / "external" / "dtr-simrd";
  if (!std::filesystem::exists(dir)) GTEST_SKIP() << dir << " absent (../shared is beside a checkout, not in a clone)";
  struct Known { const char* prefix; double measured_peak_mb; };
  const Known known[] = {{"transformer-10-", 9872.0}, {"unet-6-", 8419.2}, {"tv_densenet121-84-", 11027.6}};
  int seen = 0;
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    const std::string path = entry.path().string(), file = entry.path().filename().string();
    if (file.size() < 7 || file.compare(file.size() - 7, 7, ".log.gz") != 0) continue;
    ++seen;
    const std::string out = (std::filesystem::temp_directory_path() / (file + "." + std::to_string(::getpid()) + ".jsonl.gz")).string();
    auto s = import_simrd_file(path, out, "m");
    ASSERT_TRUE(s) << s.error().message;
    auto t = load_trace(out);
    std::remove(out.c_str());
    ASSERT_TRUE(t) << t.error().message();
    std::uint64_t ns = 0;
    for (const Event& e : t->events) ns += e.op == Op::Kernel ? e.dur_ns : 0;
    EXPECT_EQ(ns, s->operator_ns) << file;
    EXPECT_EQ(t->events.size(), s->events) << file;
    for (const Known& k : known)
      if (file.rfind(k.prefix, 0) == 0) EXPECT_NEAR(static_cast<double>(s->peak_bytes) / 1e6, k.measured_peak_mb, k.measured_peak_mb / 100) << file;
    auto r = repeat_last_iteration(*t, 3);
    EXPECT_TRUE(r) << file << ": " << (r ? "" : r.error().message);
  }
  EXPECT_EQ(seen, 5);
}

}  // namespace
}  // namespace capuchin::trace
