// The reader: every rule of the format, each broken input rejected with its own error code
// and line; valid inputs (plain, gzip, optional fields, unknown fields) accepted.
#include <gtest/gtest.h>
#include <zlib.h>

#include <string>
#include <vector>

#include "capuchin/replayable.hpp"
#include "capuchin/trace.hpp"
#include "capuchin/trace_model.hpp"

namespace capuchin::trace {
namespace {

constexpr const char* kHeader = R"({"format":"capuchin-trace","version":1})";

// Reads every event; returns the error, or nullopt if the trace is valid.
std::optional<TraceError> read_error(const std::string& text) {
  auto r = TraceReader::from_memory(text, "t.jsonl");
  if (!r) return r.error();
  EventView ev;
  for (;;) {
    auto more = r->next(ev);
    if (!more) return more.error();
    if (!*more) return std::nullopt;
  }
}

std::string with_header(const std::string& body) { return std::string(kHeader) + "\n" + body; }

struct Bad {
  const char* what;
  std::string text;
  TraceErrc code;
  std::uint64_t line;
};

void PrintTo(const Bad& b, std::ostream* os) { *os << b.what; }

class Malformed : public ::testing::TestWithParam<Bad> {};

TEST_P(Malformed, NamesRuleAndLine) {
  const Bad& b = GetParam();
  auto err = read_error(b.text);
  ASSERT_TRUE(err.has_value()) << b.what << ": accepted";
  EXPECT_EQ(to_string(err->code), to_string(b.code)) << b.what << ": " << err->message();
  EXPECT_EQ(err->line, b.line) << b.what << ": " << err->message();
  const std::string where = b.line ? "t.jsonl:" + std::to_string(b.line) + ": " : std::string("t.jsonl: ");
  EXPECT_EQ(err->message().rfind(where, 0), 0u) << err->message();
}

const std::string kAlloc0 = R"({"op":"alloc","id":0,"bytes":64})" "\n";

INSTANTIATE_TEST_SUITE_P(
    Reader, Malformed,
    ::testing::Values(
        Bad{"empty file", "", TraceErrc::EmptyFile, 0},
        Bad{"header not JSON", "{format: capuchin}\n", TraceErrc::BrokenJson, 1},
        Bad{"header is an array", "[1,2]\n", TraceErrc::NotObject, 1},
        Bad{"wrong format name", R"({"format":"chrome-trace","version":1})" "\n", TraceErrc::BadHeader, 1},
        Bad{"header missing format", R"({"version":1})" "\n", TraceErrc::BadHeader, 1},
        Bad{"no header, event first", kAlloc0, TraceErrc::BadHeader, 1},
        Bad{"version 2", R"({"format":"capuchin-trace","version":2})" "\n", TraceErrc::UnsupportedVersion, 1},
        Bad{"version as string", R"({"format":"capuchin-trace","version":"1"})" "\n", TraceErrc::BadHeader, 1},
        Bad{"broken JSON event", with_header(kAlloc0 + R"({"op":"free","id":0)" "\n"), TraceErrc::BrokenJson, 3},
        Bad{"unknown op", with_header(R"({"op":"launch","name":"k"})" "\n"), TraceErrc::UnknownOp, 2},
        Bad{"missing op", with_header(R"({"id":3,"bytes":8})" "\n"), TraceErrc::MissingField, 2},
        Bad{"alloc missing bytes", with_header(R"({"op":"alloc","id":0})" "\n"), TraceErrc::MissingField, 2},
        Bad{"alloc missing id", with_header(R"({"op":"alloc","bytes":8})" "\n"), TraceErrc::MissingField, 2},
        Bad{"kernel missing name", with_header(kAlloc0 + R"({"op":"kernel","reads":[0],"writes":[]})" "\n"), TraceErrc::MissingField, 3},
        Bad{"kernel missing reads/writes", with_header(R"({"op":"kernel","name":"k"})" "\n"), TraceErrc::MissingField, 2},
        Bad{"kernel reads without writes", with_header(kAlloc0 + R"({"op":"kernel","name":"k","reads":[0]})" "\n"), TraceErrc::MissingField, 3},
        Bad{"copy missing dir", with_header(R"({"op":"copy","bytes":8})" "\n"), TraceErrc::MissingField, 2},
        Bad{"iter missing n", with_header(R"({"op":"iter"})" "\n"), TraceErrc::MissingField, 2},
        Bad{"negative alloc bytes", with_header(R"({"op":"alloc","id":0,"bytes":-64})" "\n"), TraceErrc::NegativeBytes, 2},
        Bad{"zero alloc bytes", with_header(R"({"op":"alloc","id":0,"bytes":0})" "\n"), TraceErrc::NegativeBytes, 2},
        Bad{"negative copy bytes", with_header(R"({"op":"copy","dir":"h2d","bytes":-1})" "\n"), TraceErrc::NegativeBytes, 2},
        Bad{"negative kernel bytes", with_header(kAlloc0 + R"({"op":"kernel","name":"k","touch":[0],"bytes":-5})" "\n"), TraceErrc::NegativeBytes, 3},
        Bad{"negative id", with_header(R"({"op":"alloc","id":-1,"bytes":8})" "\n"), TraceErrc::BadValue, 2},
        Bad{"id as string", with_header(R"({"op":"alloc","id":"a","bytes":8})" "\n"), TraceErrc::WrongType, 2},
        Bad{"bytes as float", with_header(R"({"op":"alloc","id":0,"bytes":1.5})" "\n"), TraceErrc::WrongType, 2},
        Bad{"reads not an array", with_header(kAlloc0 + R"({"op":"kernel","name":"k","reads":0,"writes":[]})" "\n"), TraceErrc::WrongType, 3},
        Bad{"read before alloc", with_header(kAlloc0 + R"({"op":"kernel","name":"k","reads":[7],"writes":[0]})" "\n"), TraceErrc::IdNotAllocated, 3},
        Bad{"write after free", with_header(kAlloc0 + R"({"op":"free","id":0})" "\n" R"({"op":"kernel","name":"k","reads":[],"writes":[0]})" "\n"), TraceErrc::IdAfterFree, 4},
        Bad{"touch after free", with_header(kAlloc0 + R"({"op":"free","id":0})" "\n" R"({"op":"kernel","name":"k","touch":[0]})" "\n"), TraceErrc::IdAfterFree, 4},
        Bad{"copy dst never allocated", with_header(R"({"op":"copy","dir":"h2d","bytes":8,"dst":4})" "\n"), TraceErrc::IdNotAllocated, 2},
        Bad{"copy src after free", with_header(kAlloc0 + R"({"op":"free","id":0})" "\n" R"({"op":"copy","dir":"d2h","bytes":8,"src":0})" "\n"), TraceErrc::IdAfterFree, 4},
        Bad{"free before alloc", with_header(R"({"op":"free","id":9})" "\n"), TraceErrc::IdNotAllocated, 2},
        Bad{"double free", with_header(kAlloc0 + R"({"op":"free","id":0})" "\n" R"({"op":"free","id":0})" "\n"), TraceErrc::IdAfterFree, 4},
        Bad{"id reused after free", with_header(kAlloc0 + R"({"op":"free","id":0})" "\n" + kAlloc0), TraceErrc::IdReused, 4},
        Bad{"id allocated twice", with_header(kAlloc0 + kAlloc0), TraceErrc::IdReused, 3},
        Bad{"unknown copy dir", with_header(R"({"op":"copy","dir":"h2h","bytes":8})" "\n"), TraceErrc::BadValue, 2},
        Bad{"unknown role", with_header(R"({"op":"alloc","id":0,"bytes":8,"role":"weights"})" "\n"), TraceErrc::BadValue, 2},
        Bad{"iteration skips", with_header(R"({"op":"iter","n":1})" "\n" R"({"op":"iter","n":3})" "\n"), TraceErrc::BadIteration, 3},
        Bad{"iteration starts at 0", with_header(R"({"op":"iter","n":0})" "\n"), TraceErrc::BadIteration, 2},
        Bad{"blank line between events", with_header(kAlloc0 + "\n" + kAlloc0), TraceErrc::EmptyLine, 3},
        Bad{"event is a number", with_header("42\n"), TraceErrc::NotObject, 2},
        Bad{"op is a number", with_header(R"({"op":1})" "\n"), TraceErrc::WrongType, 2},
        Bad{"negative flops", with_header(kAlloc0 + R"({"op":"kernel","name":"k","touch":[0],"flops":-1})" "\n"), TraceErrc::BadValue, 3},
        Bad{"replay not a boolean", with_header(kAlloc0 + R"({"op":"kernel","name":"k","touch":[0],"replay":"no"})" "\n"), TraceErrc::WrongType, 3},
        Bad{"garbage after object", with_header(R"({"op":"sync"} x)" "\n"), TraceErrc::BrokenJson, 2}),
    [](const ::testing::TestParamInfo<Bad>& info) {
      std::string n = info.param.what;
      for (char& c : n)
        if (!std::isalnum(static_cast<unsigned char>(c))) c = '_';
      return n;
    });

TEST(Reader, AcceptsTheFormatDocumentsExample) {
  const std::string text = R"({"format":"capuchin-trace","version":1,"source":"hand","model":"two-layer","iterations":1}
{"op":"alloc","id":0,"bytes":4096,"role":"param"}
{"op":"iter","n":1}
{"op":"alloc","id":1,"bytes":8192,"role":"input"}
{"op":"copy","dir":"h2d","bytes":8192,"dst":1}
{"op":"alloc","id":2,"bytes":8192,"role":"activation"}
{"op":"kernel","name":"aten::mm","reads":[1,0],"writes":[2],"flops":2097152,"bytes":20480}
{"op":"kernel","name":"aten::relu_","reads":[2],"writes":[2],"bytes":16384}
{"op":"free","id":1}
{"op":"sync"}
{"op":"free","id":2}
)";
  auto r = TraceReader::from_memory(text);
  ASSERT_TRUE(r) << r.error().message();
  EXPECT_EQ(r->header().model, "two-layer");
  EXPECT_EQ(r->header().iterations, 1);
  std::vector<Op> ops;
  EventView ev;
  for (;;) {
    auto more = r->next(ev);
    ASSERT_TRUE(more) << more.error().message();
    if (!*more) break;
    ops.push_back(ev.op);
    if (ev.op == Op::Kernel && ev.name == "aten::mm") {
      ASSERT_EQ(ev.reads.size(), 2u);
      EXPECT_EQ(ev.reads[0], 1u);
      EXPECT_EQ(ev.read_index[0], 1u);  // id 1 was the second allocation
      EXPECT_EQ(ev.read_index[1], 0u);
      EXPECT_DOUBLE_EQ(ev.flops, 2097152.0);
      EXPECT_TRUE(ev.flags & kHasBytes);
      EXPECT_EQ(ev.bytes, 20480u);
    }
    if (ev.op == Op::Copy) {
      EXPECT_EQ(ev.dir, CopyDir::H2D);
      EXPECT_TRUE(ev.flags & kHasDst);
      EXPECT_FALSE(ev.flags & kHasSrc);
    }
  }
  EXPECT_EQ(ops.size(), 10u);
  EXPECT_EQ(r->tensor_count(), 3u);
}

TEST(Reader, IgnoresUnknownFieldsAndAcceptsMissingFinalNewline) {
  const std::string text = with_header(R"({"op":"alloc","id":5,"bytes":8,"future":{"x":[1,2]},"stream":2})" "\n"
                                       R"({"op":"sync","why":"loss"})");
  auto r = TraceReader::from_memory(text);
  ASSERT_TRUE(r);
  EventView ev;
  ASSERT_TRUE(*r->next(ev));
  EXPECT_EQ(ev.stream, 2u);
  ASSERT_TRUE(*r->next(ev));
  EXPECT_EQ(ev.op, Op::Sync);
  EXPECT_EQ(r->line(), 3u);
  EXPECT_FALSE(*r->next(ev));
}

// `replay` (docs/TRACE_FORMAT.md) is kept as read, and written back only where it was given.
TEST(Reader, KeepsAKernelsReplayMarkAndWritesItBack) {
  const std::string text = with_header(kAlloc0 + R"({"op":"kernel","name":"a","reads":[],"writes":[0],"replay":false})" "\n"
                                       R"({"op":"kernel","name":"b","reads":[],"writes":[0],"replay":true})" "\n"
                                       R"({"op":"kernel","name":"c","reads":[],"writes":[0]})" "\n");
  auto t = parse_trace(text, "t.jsonl");
  ASSERT_TRUE(t) << t.error().message();
  const auto& ev = t->events;
  ASSERT_EQ(ev.size(), 4u);
  EXPECT_EQ(ev[1].flags & (kHasReplay | kReplayable), kHasReplay);
  EXPECT_EQ(ev[2].flags & (kHasReplay | kReplayable), kHasReplay | kReplayable);
  EXPECT_EQ(ev[3].flags & kHasReplay, 0u);
  EXPECT_FALSE(replayable(*t, ev[1]));
  EXPECT_TRUE(replayable(*t, ev[2]));
  EXPECT_TRUE(replayable(*t, ev[3]));
  Trace::ViewScratch scratch;
  EXPECT_NE(format_event(t->view(1, scratch)).find(R"("replay":false)"), std::string::npos);
  EXPECT_NE(format_event(t->view(2, scratch)).find(R"("replay":true)"), std::string::npos);
  EXPECT_EQ(format_event(t->view(3, scratch)).find("replay"), std::string::npos);
}

TEST(Replayable, KnowsPyTorchOperatorsThatAReplayWouldNotReproduce) {
  EXPECT_STREQ(known_not_replayable("aten::native_batch_norm"), "side-effect");
  EXPECT_STREQ(known_not_replayable("aten::bernoulli_.float"), "random");
  EXPECT_STREQ(known_not_replayable("aten::native_dropout"), "random");
  EXPECT_STREQ(known_not_replayable("aten::index_add_"), "atomics");
  EXPECT_EQ(known_not_replayable("aten::add.Tensor"), nullptr);
  EXPECT_EQ(known_not_replayable("aten::convolution"), nullptr);
  EXPECT_EQ(known_not_replayable("native_batch_norm"), nullptr);  // not an ATen name
  EXPECT_EQ(known_not_replayable("aten::"), nullptr);
}

TEST(Reader, StaysFailedAfterAnError) {
  auto r = TraceReader::from_memory(with_header("{oops}\n{\"op\":\"sync\"}\n"));
  ASSERT_TRUE(r);
  EventView ev;
  auto first = r->next(ev);
  ASSERT_FALSE(first);
  auto second = r->next(ev);
  ASSERT_FALSE(second);
  EXPECT_EQ(second.error().line, 2u);
}

std::string gzip(const std::string& text) {
  z_stream zs{};
  deflateInit2(&zs, 6, Z_DEFLATED, 16 + MAX_WBITS, 8, Z_DEFAULT_STRATEGY);
  std::string out(deflateBound(&zs, text.size()) + 64, '\0');
  zs.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(text.data()));
  zs.avail_in = static_cast<uInt>(text.size());
  zs.next_out = reinterpret_cast<Bytef*>(out.data());
  zs.avail_out = static_cast<uInt>(out.size());
  deflate(&zs, Z_FINISH);
  out.resize(zs.total_out);
  deflateEnd(&zs);
  return out;
}

TEST(Reader, DetectsGzipByMagicBytesNotName) {
  const std::string text = with_header(kAlloc0 + R"({"op":"free","id":0})" "\n");
  auto r = TraceReader::from_memory(gzip(text), "no-gz-suffix.jsonl");
  ASSERT_TRUE(r) << r.error().message();
  EventView ev;
  int n = 0;
  while (*r->next(ev)) ++n;
  EXPECT_EQ(n, 2);
}

TEST(Reader, TruncatedGzipIsAnError) {
  std::string text = with_header("");
  for (int i = 0; i < 2000; ++i) text += R"({"op":"alloc","id":)" + std::to_string(i) + R"(,"bytes":64})" "\n";
  std::string gz = gzip(text);
  gz.resize(gz.size() / 2);
  auto err = read_error(gz);
  ASSERT_TRUE(err);
  EXPECT_EQ(err->code, TraceErrc::Decompress) << err->message();
  EXPECT_NE(err->reason.find("truncated"), std::string::npos) << err->message();
}

TEST(Reader, MissingFileNamesThePath) {
  auto r = TraceReader::open("/nonexistent/trace.jsonl");
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code, TraceErrc::Io);
  EXPECT_NE(r.error().message().find("/nonexistent/trace.jsonl"), std::string::npos);
}

TEST(Reader, OverlongLineIsAnErrorNotAnAllocationSpree) {
  std::string text = with_header(R"({"op":"kernel","name":")");
  text.append(kMaxLineBytes + 10, 'a');
  auto err = read_error(text);
  ASSERT_TRUE(err);
  EXPECT_EQ(err->code, TraceErrc::LineTooLong);
  EXPECT_EQ(err->line, 2u);
}

}  // namespace
}  // namespace capuchin::trace
