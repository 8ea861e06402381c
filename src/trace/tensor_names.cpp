// tensor_names.cpp: names of a trace's tensors (see include/capuchin/tensor_names.hpp).
#include "capuchin/tensor_names.hpp"

#include <fmt/format.h>

#include "capuchin/units.hpp"

namespace capuchin::trace {
namespace {

std::string ordinal(std::uint32_t n) {
  const std::uint32_t tens = n % 100, ones = n % 10;
  const char* suffix = (tens >= 11 && tens <= 13) ? "th" : ones == 1 ? "st" : ones == 2 ? "nd" : ones == 3 ? "rd" : "th";
  return fmt::format("{}{}", n, suffix);
}

}  // namespace

std::string event_name(const Trace& t, std::uint32_t ev) {
  const Event& e = t.events[ev];
  if (e.op == Op::Kernel && e.name != kNone) return t.names[e.name];
  if (e.op == Op::Copy) return fmt::format("copy {}", to_string(e.dir));
  return std::string(to_string(e.op));
}

TensorNames::TensorNames(const Trace& t) : t_(t), producer_(t.tensors.size(), kNone), range_(t.events.size(), 0) {
  // The producer: the first event that writes the tensor (a kernel's write or touch, a copy's dst).
  for (const auto& a : t.accesses)
    if (a.mode != AccessMode::Read && producer_[a.tensor] == kNone) producer_[a.tensor] = a.event;
  for (std::size_t k = 0; k < t.iterations.size(); ++k)
    for (std::uint32_t e = t.iterations[k].begin; e < t.iterations[k].end && e < t.events.size(); ++e)
      range_[e] = static_cast<std::uint32_t>(k + 1);
  range_allocs_.assign(t.iterations.size() + 1, 0);
  alloc_rank_.assign(t.tensors.size(), 0);
  for (std::uint32_t i = 0; i < t.tensors.size(); ++i) {
    by_id_.emplace(t.tensors[i].id, i);
    const std::uint32_t ev = t.tensors[i].alloc_event;
    alloc_rank_[i] = ++range_allocs_[ev < range_.size() ? range_[ev] : 0];  // tensors are in allocation order
  }
}

std::optional<std::uint32_t> TensorNames::find(std::uint64_t id) const {
  const auto it = by_id_.find(id);
  if (it == by_id_.end()) return std::nullopt;
  return it->second;
}

TensorOrigin TensorNames::origin(std::uint32_t i) const {
  const std::uint32_t first = t_.tensors[i].first_access, producer = producer_[i];
  if (producer != kNone && (first == kNone || producer <= first)) return {producer, false};
  return {first, first != kNone};
}

std::string TensorNames::origin_text(std::uint32_t i) const {
  const TensorOrigin o = origin(i);
  if (o.event == kNone) return "never used";
  return (o.first_use ? "first used by " : "written by ") + event_name(t_, o.event);
}

TensorPosition TensorNames::position(std::uint32_t i) const {
  TensorPosition p;
  const std::uint32_t ev = t_.tensors[i].alloc_event;
  const std::uint32_t r = ev < range_.size() ? range_[ev] : 0;
  p.alloc = alloc_rank_[i];
  p.allocs = range_allocs_[r];
  if (r == 0) {  // set-up (or, in a trace whose iterations leave gaps, counted over the whole trace)
    const bool setup = ev < t_.setup_end;
    p.event = ev + 1;
    p.events = setup ? t_.setup_end : static_cast<std::uint32_t>(t_.events.size());
    return p;
  }
  const Iteration& it = t_.iterations[r - 1];
  p.iteration = it.n;
  p.event = ev - it.begin;  // the `iter` marker is the iteration's event 0
  p.events = it.end - it.begin - 1;
  return p;
}

std::string TensorNames::position_text(std::uint32_t i) const {
  const TensorPosition p = position(i);
  const std::string where = p.iteration ? fmt::format("iteration {}", p.iteration) : std::string("set-up");
  return fmt::format("{}, event {} of {}, its {} allocation of {}", where, p.event, p.events, ordinal(p.alloc), p.allocs);
}

std::string TensorNames::describe(std::uint32_t i) const {
  const Tensor& ts = t_.tensors[i];
  const std::string_view role = to_string(ts.role);
  return fmt::format("{}{}{}, {}; {}", format_bytes(ts.bytes), role.empty() ? "" : " ", role, origin_text(i), position_text(i));
}

}  // namespace capuchin::trace
