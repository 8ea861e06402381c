// The pickle writer (include/capuchin/pickle.hpp): scalars encode byte for byte as Python's
// own pickle.dumps(v, protocol=2) does (expected bytes taken from CPython 3.11); containers
// as MARK-based opcodes any Python unpickler accepts; misuse is reported, never thrown.
#include "capuchin/pickle.hpp"

#include <gtest/gtest.h>

#include <string>

namespace capuchin {
namespace {

std::string hex(const std::string& s) {
  static const char* d = "0123456789abcdef";
  std::string h;
  for (unsigned char c : s) h += {d[c >> 4], d[c & 15]};
  return h;
}

template <class F>
std::string pickled(F&& write) {
  PickleWriter w;
  write(w);
  auto r = w.finish();
  EXPECT_TRUE(r) << (r ? "" : r.error().message);
  return r ? hex(*r) : "";
}

TEST(Pickle, ScalarsMatchPythonProtocol2) {
  EXPECT_EQ(pickled([](auto& w) { w.none(); }), "80024e2e");
  EXPECT_EQ(pickled([](auto& w) { w.boolean(true); }), "8002882e");
  EXPECT_EQ(pickled([](auto& w) { w.boolean(false); }), "8002892e");
  EXPECT_EQ(pickled([](auto& w) { w.real(1.5); }), "8002473ff80000000000002e");
  EXPECT_EQ(pickled([](auto& w) { w.real(-0.0); }), "80024780000000000000002e");
  EXPECT_EQ(pickled([](auto& w) { w.str("ab"); }), "80025802000000616271002e");
  EXPECT_EQ(pickled([](auto& w) { w.str("\xc3\xa9"); }), "80025802000000c3a971002e");
}

TEST(Pickle, IntegersUseTheSmallestOpcodeLikePython) {
  const std::pair<std::int64_t, const char*> cases[] = {
      {0, "80024b002e"},
      {255, "80024bff2e"},
      {256, "80024d00012e"},
      {65535, "80024dffff2e"},
      {65536, "80024a000001002e"},
      {-1, "80024affffffff2e"},
      {2147483647, "80024affffff7f2e"},
      {-2147483648LL, "80024a000000802e"},
      {2147483648LL, "80028a0500000080002e"},
      {-2147483649LL, "80028a05ffffff7fff2e"},
      {INT64_MAX, "80028a08ffffffffffffff7f2e"},
      {INT64_MIN, "80028a0800000000000000802e"},
  };
  for (const auto& [v, want] : cases) EXPECT_EQ(pickled([v = v](auto& w) { w.integer(v); }), want) << v;
  EXPECT_EQ(pickled([](auto& w) { w.unsigned_integer(UINT64_MAX); }), "80028a09ffffffffffffffff002e");
  EXPECT_EQ(pickled([](auto& w) { w.unsigned_integer(300); }), "80024d2c012e");
}

TEST(Pickle, RepeatedStringsAreWrittenOnceThenReferenced) {
  // ["a", "a"]: EMPTY_LIST MARK 'a' BINPUT 0, BINGET 0, APPENDS.
  EXPECT_EQ(pickled([](auto& w) {
              w.begin_list();
              w.str("a");
              w.str("a");
              w.end_list();
            }),
            "80025d2858010000006171006800652e");
}

TEST(Pickle, ContainersNestAndEmptyOnesNeedNoMark) {
  // {"k": [1, {}], "e": []}
  const std::string got = pickled([](auto& w) {
    w.begin_dict();
    w.str("k");
    w.begin_list();
    w.integer(1);
    w.begin_dict();
    w.end_dict();
    w.end_list();
    w.str("e");
    w.begin_list();
    w.end_list();
    w.end_dict();
  });
  // } ( 'k' q0 ] ( K1 } e 'e' q1 ] u .
  EXPECT_EQ(got, "80027d2858010000006b71005d284b017d6558010000006571015d752e");
}

TEST(Pickle, InvalidUtf8BecomesReplacementCharacters) {
  // "a\xff" -> "a" U+FFFD (4 bytes); a lone surrogate (ED A0 80) -> three U+FFFD.
  EXPECT_EQ(pickled([](auto& w) { w.str("a\xff"); }), "8002580400000061efbfbd71002e");
  EXPECT_EQ(pickled([](auto& w) { w.str("\xed\xa0\x80"); }), "80025809000000efbfbdefbfbdefbfbd71002e");
  // A valid 4-byte sequence passes unchanged.
  EXPECT_EQ(pickled([](auto& w) { w.str("\xf0\x9f\x90\x92"); }), "80025804000000f09f909271002e");
}

TEST(Pickle, ManyStringsUseLongMemoIndices) {
  PickleWriter w;
  w.begin_list();
  for (int i = 0; i < 300; ++i) w.str(std::to_string(i));
  w.str("299");  // memo index 299: LONG_BINGET
  w.end_list();
  auto r = w.finish();
  ASSERT_TRUE(r);
  EXPECT_NE(hex(*r).find("6a2b010000"), std::string::npos);  // 'j' 299 little-endian
  EXPECT_NE(hex(*r).find("722b010000"), std::string::npos);  // 'r' 299 when it was first written
}

TEST(Pickle, MisuseIsReportedByFinish) {
  const auto fails = [](auto&& write, const char* words) {
    PickleWriter w;
    write(w);
    auto r = w.finish();
    ASSERT_FALSE(r) << words;
    EXPECT_NE(r.error().message.find(words), std::string::npos) << r.error().message;
  };
  fails([](auto& w) { w.end_list(); }, "without its begin");
  fails([](auto& w) { w.begin_list(); }, "not ended");
  fails([](auto& w) { w.begin_list(), w.end_dict(); }, "closes a list");
  fails([](auto& w) { w.begin_dict(), w.str("k"), w.end_dict(); }, "key and no value");
  fails([](auto& w) { w.none(), w.none(); }, "2 top-level values");
  fails([](auto&) {}, "0 top-level values");
  PickleWriter twice;
  twice.none();
  ASSERT_TRUE(twice.finish());
  EXPECT_FALSE(twice.finish());
}

}  // namespace
}  // namespace capuchin
