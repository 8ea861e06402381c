// Errors as values for the public API: Expected<T> holds a T or an E (by default Error),
// and Status is Expected<void>. Nothing in capuchin's public API throws; callers test the
// result and read error() for a message that names what went wrong.
#pragma once

#include <string>
#include <utility>
#include <variant>

namespace capuchin {

// A human-readable error. Subsystems with more structure (e.g. TraceError) use their own E.
struct Error {
  std::string message;
};

template <class E>
struct Unexpected {
  E error;
};
template <class E>
Unexpected(E) -> Unexpected<E>;

inline Unexpected<Error> make_error(std::string message) { return {Error{std::move(message)}}; }

template <class T, class E = Error>
class [[nodiscard]] Expected {
 public:
  Expected(T value) : v_(std::in_place_index<0>, std::move(value)) {}  // NOLINT: implicit by design
  Expected(Unexpected<E> u) : v_(std::in_place_index<1>, std::move(u.error)) {}  // NOLINT

  bool has_value() const noexcept { return v_.index() == 0; }
  explicit operator bool() const noexcept { return has_value(); }

  T& value() & { return std::get<0>(v_); }
  const T& value() const& { return std::get<0>(v_); }
  T&& value() && { return std::get<0>(std::move(v_)); }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }

  const E& error() const& { return std::get<1>(v_); }
  E&& error() && { return std::get<1>(std::move(v_)); }

 private:
  std::variant<T, E> v_;
};

template <class E>
class [[nodiscard]] Expected<void, E> {
 public:
  Expected() = default;
  Expected(Unexpected<E> u) : err_(std::move(u.error)), ok_(false) {}  // NOLINT

  bool has_value() const noexcept { return ok_; }
  explicit operator bool() const noexcept { return ok_; }
  const E& error() const& { return err_; }

 private:
  E err_{};
  bool ok_ = true;
};

using Status = Expected<void, Error>;

}  // namespace capuchin
