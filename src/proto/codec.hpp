// codec.hpp (internal to src/proto): the byte-level helpers every payload codec uses:
// appending trivially copyable values and strings, bounds-checked reading (a read past the
// end marks the reader failed instead of reading), and frame begin/end with the length
// patched in. Not a public header.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

#include "capuchin/protocol.hpp"

namespace capuchin::proto::codec {

inline Unexpected<ProtoError> fail(ProtoErrc c, std::string msg) { return {ProtoError{c, std::move(msg)}}; }

// Appends raw bytes of trivially copyable values.
struct Writer {
  std::vector<std::uint8_t>& out;
  template <class T>
  void put(const T& v) {
    static_assert(std::is_trivially_copyable_v<T>);
    const auto* p = reinterpret_cast<const std::uint8_t*>(&v);
    out.insert(out.end(), p, p + sizeof(T));
  }
  void bytes(const void* p, std::size_t n) {
    const auto* b = static_cast<const std::uint8_t*>(p);
    out.insert(out.end(), b, b + n);
  }
  void str(std::string_view s) {
    put(static_cast<std::uint32_t>(s.size()));
    bytes(s.data(), s.size());
  }
};

// Reads values off a payload; any read past the end marks it failed.
struct Reader {
  std::span<const std::uint8_t> in;
  std::size_t pos = 0;
  bool ok = true;
  template <class T>
  T get() {
    T v{};
    if (!ok || in.size() - pos < sizeof(T)) {
      ok = false;
      return v;
    }
    std::memcpy(&v, in.data() + pos, sizeof(T));
    pos += sizeof(T);
    return v;
  }
  std::string_view str(std::uint32_t limit) {
    const auto n = get<std::uint32_t>();
    if (!ok || n > limit || in.size() - pos < n) {
      ok = false;
      return {};
    }
    std::string_view s(reinterpret_cast<const char*>(in.data() + pos), n);
    pos += n;
    return s;
  }
  std::size_t left() const { return in.size() - pos; }
};

// Starts a frame in `out`, returns where its header is so the length can be patched.
inline std::size_t begin_frame(std::vector<std::uint8_t>& out, MsgType t) {
  const std::size_t at = out.size();
  FrameHeader h;
  h.type = static_cast<std::uint16_t>(t);
  Writer{out}.put(h);
  return at;
}
inline void end_frame(std::vector<std::uint8_t>& out, std::size_t at) {
  const auto len = static_cast<std::uint32_t>(out.size() - at - sizeof(FrameHeader));
  std::memcpy(out.data() + at + offsetof(FrameHeader, length), &len, sizeof len);
}


}  // namespace capuchin::proto::codec
