// pickle.cpp: the protocol-2 pickle writer (contract in include/capuchin/pickle.hpp). Opcodes
// and their encodings as Python's Lib/pickle.py and Lib/pickletools.py document them.
#include "capuchin/pickle.hpp"

#include <fmt/format.h>

#include <bit>
#include <cstring>

namespace capuchin {
namespace {

// Opcodes (protocol <= 2).
constexpr char kProto = '\x80', kStop = '.', kNone = 'N', kTrue = '\x88', kFalse = '\x89';
constexpr char kBinInt1 = 'K', kBinInt2 = 'M', kBinInt = 'J', kLong1 = '\x8a', kBinFloat = 'G';
constexpr char kBinUnicode = 'X', kBinPut = 'q', kLongBinPut = 'r', kBinGet = 'h', kLongBinGet = 'j';
constexpr char kMark = '(', kEmptyList = ']', kAppends = 'e', kEmptyDict = '}', kSetItems = 'u';

// Length of the valid UTF-8 sequence at s[i], 0 when it is not one (overlong forms,
// surrogates and code points past U+10FFFF are not valid).
std::size_t utf8_sequence(std::string_view s, std::size_t i) {
  const auto b = [&](std::size_t k) { return static_cast<unsigned char>(s[i + k]); };
  const unsigned char c = b(0);
  if (c < 0x80) return 1;
  std::size_t n = 0;
  unsigned char lo = 0x80, hi = 0xbf;  // the allowed range of the second byte
  if (c >= 0xc2 && c <= 0xdf) n = 2;
  else if (c >= 0xe0 && c <= 0xef) n = 3, lo = c == 0xe0 ? 0xa0 : 0x80, hi = c == 0xed ? 0x9f : 0xbf;
  else if (c >= 0xf0 && c <= 0xf4) n = 4, lo = c == 0xf0 ? 0x90 : 0x80, hi = c == 0xf4 ? 0x8f : 0xbf;
  if (n == 0 || i + n > s.size()) return 0;
  if (b(1) < lo || b(1) > hi) return 0;
  for (std::size_t k = 2; k < n; ++k)
    if (b(k) < 0x80 || b(k) > 0xbf) return 0;
  return n;
}

std::string valid_utf8(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (std::size_t i = 0; i < s.size();) {
    const std::size_t n = utf8_sequence(s, i);
    if (n == 0) {
      out += "\xef\xbf\xbd";  // U+FFFD REPLACEMENT CHARACTER
      ++i;
    } else {
      out.append(s.substr(i, n));
      i += n;
    }
  }
  return out;
}

}  // namespace

PickleWriter::PickleWriter() {
  out_.push_back(kProto);
  out_.push_back('\x02');
}

void PickleWriter::put_u32(std::uint32_t v) {
  for (int k = 0; k < 4; ++k) out_.push_back(static_cast<char>((v >> (8 * k)) & 0xff));
}

void PickleWriter::misuse(std::string what) {
  if (error_.empty()) error_ = std::move(what);
}

void PickleWriter::value_written() {
  if (finished_) misuse("a value after finish()");
  if (open_.empty()) ++top_values_;
  else ++open_.back().items;
}

void PickleWriter::none() {
  out_.push_back(kNone);
  value_written();
}

void PickleWriter::boolean(bool v) {
  out_.push_back(v ? kTrue : kFalse);
  value_written();
}

void PickleWriter::integer(std::int64_t v) {
  if (v >= 0 && v < 0x100) {
    out_.push_back(kBinInt1);
    out_.push_back(static_cast<char>(v));
  } else if (v >= 0 && v < 0x10000) {
    out_.push_back(kBinInt2);
    out_.push_back(static_cast<char>(v & 0xff));
    out_.push_back(static_cast<char>(v >> 8));
  } else if (v >= INT32_MIN && v <= INT32_MAX) {
    out_.push_back(kBinInt);
    put_u32(static_cast<std::uint32_t>(static_cast<std::int32_t>(v)));
  } else {
    // LONG1: little-endian two's complement in as few bytes as keep the sign.
    std::string bytes;
    std::int64_t x = v;
    for (;;) {
      bytes.push_back(static_cast<char>(x & 0xff));
      x >>= 8;  // arithmetic shift: the sign fills in
      const bool top_bit = (static_cast<unsigned char>(bytes.back()) & 0x80) != 0;
      if ((x == 0 && !top_bit) || (x == -1 && top_bit)) break;
    }
    out_.push_back(kLong1);
    out_.push_back(static_cast<char>(bytes.size()));
    out_ += bytes;
  }
  value_written();
}

void PickleWriter::unsigned_integer(std::uint64_t v) {
  if (v <= static_cast<std::uint64_t>(INT64_MAX)) return integer(static_cast<std::int64_t>(v));
  out_.push_back(kLong1);
  out_.push_back('\x09');  // 8 bytes of magnitude and a zero byte: positive
  for (int k = 0; k < 8; ++k) out_.push_back(static_cast<char>((v >> (8 * k)) & 0xff));
  out_.push_back('\x00');
  value_written();
}

void PickleWriter::real(double v) {
  out_.push_back(kBinFloat);
  const auto bits = std::bit_cast<std::uint64_t>(v);
  for (int k = 7; k >= 0; --k) out_.push_back(static_cast<char>((bits >> (8 * k)) & 0xff));  // big-endian
  value_written();
}

void PickleWriter::str(std::string_view utf8) {
  std::string s = valid_utf8(utf8);
  if (auto it = memo_.find(s); it != memo_.end()) {
    if (it->second < 0x100) {
      out_.push_back(kBinGet);
      out_.push_back(static_cast<char>(it->second));
    } else {
      out_.push_back(kLongBinGet);
      put_u32(it->second);
    }
    value_written();
    return;
  }
  if (s.size() > UINT32_MAX) {
    misuse("a string of 4 GiB or more");
    s.clear();
  }
  out_.push_back(kBinUnicode);
  put_u32(static_cast<std::uint32_t>(s.size()));
  out_ += s;
  const auto index = static_cast<std::uint32_t>(memo_.size());
  if (index < 0x100) {
    out_.push_back(kBinPut);
    out_.push_back(static_cast<char>(index));
  } else {
    out_.push_back(kLongBinPut);
    put_u32(index);
  }
  memo_.emplace(std::move(s), index);
  value_written();
}

// A container is its empty object, then MARK, its items, and one APPENDS / SETITEMS that adds
// them all; an empty one drops the MARK (nothing was written after it) and needs no more.
void PickleWriter::begin_list() {
  value_written();
  out_.push_back(kEmptyList);
  out_.push_back(kMark);
  open_.push_back({false, 0});
}

void PickleWriter::begin_dict() {
  value_written();
  out_.push_back(kEmptyDict);
  out_.push_back(kMark);
  open_.push_back({true, 0});
}

void PickleWriter::end_list() { close(false); }
void PickleWriter::end_dict() { close(true); }

void PickleWriter::close(bool dict) {
  const char* kind = dict ? "end_dict()" : "end_list()";
  if (open_.empty()) return misuse(fmt::format("{} without its begin", kind));
  const Open o = open_.back();
  if (o.dict != dict) return misuse(fmt::format("{} closes a {}", kind, o.dict ? "dict" : "list"));
  if (dict && o.items % 2 != 0) misuse(fmt::format("a dict ended with a key and no value ({} items)", o.items));
  open_.pop_back();
  if (o.items == 0) out_.pop_back();  // the MARK
  else out_.push_back(dict ? kSetItems : kAppends);
}

Expected<std::string> PickleWriter::finish() {
  if (finished_) misuse("finish() called twice");
  finished_ = true;
  if (!open_.empty()) misuse(fmt::format("{} container(s) not ended", open_.size()));
  if (top_values_ != 1) misuse(fmt::format("{} top-level values (a pickle holds one)", top_values_));
  if (!error_.empty()) return make_error("pickle writer misused: " + error_);
  out_.push_back(kStop);
  return std::move(out_);
}

}  // namespace capuchin
