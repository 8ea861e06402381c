// A small writer of Python pickles, for files Python tools load with the standard `pickle`
// module (capuchin export memory-viz writes PyTorch's memory snapshot with it).
//
// Contract:
//   - The output is pickle protocol 2 (readable by every Python 3 `pickle.load`): a PROTO
//     header, one value, STOP. Values: None, bool, int (any int64 or uint64, exact), float
//     (IEEE double, exact), str, list and dict, nested to any depth.
//   - Values are appended in order, depth-first: begin_list()/begin_dict() open a container
//     that receives the values that follow until its end_list()/end_dict(); inside a dict the
//     values alternate key, value (a key is any scalar; str keys are what Python tools expect).
//   - Strings are UTF-8; invalid sequences are written as U+FFFD, so the result always loads.
//     Equal strings are written once and referenced after (the pickle memo), as Python's own
//     pickler does for a shared object: files with many repeated keys stay small.
//   - Misuse (an end without its begin or of the other kind, an odd number of items in a dict,
//     not exactly one top-level value) is recorded when it happens and reported by finish(),
//     which never throws; nothing else can fail.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "capuchin/expected.hpp"

namespace capuchin {

class PickleWriter {
 public:
  PickleWriter();

  void none();
  void boolean(bool v);
  void integer(std::int64_t v);
  void unsigned_integer(std::uint64_t v);
  void real(double v);
  void str(std::string_view utf8);

  void begin_list();
  void end_list();
  void begin_dict();
  void end_dict();

  // The complete pickle, or what was misused first. Call once, after the top-level value.
  Expected<std::string> finish();

 private:
  struct Open {
    bool dict;
    std::uint64_t items;
  };
  void value_written();
  void close(bool dict);
  void misuse(std::string what);
  void put_u32(std::uint32_t v);

  std::string out_;
  std::vector<Open> open_;
  std::uint64_t top_values_ = 0;
  std::unordered_map<std::string, std::uint32_t> memo_;
  std::string error_;
  bool finished_ = false;
};

}  // namespace capuchin
