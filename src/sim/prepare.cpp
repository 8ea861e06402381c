// The per-trace facts every simulation run shares (durations, per-tensor access and write
// lists, when a dropped tensor can still be recomputed, where backward starts), and the
// SimState queries policies use. See include/capuchin/sim.hpp.
#include <algorithm>
#include <cctype>
#include <limits>

#include "capuchin/replayable.hpp"
#include "capuchin/sim.hpp"

namespace capuchin::sim {

using trace::AccessMode;
using trace::kNone;
using trace::Op;

namespace {

bool name_has_backward(std::string_view name) {
  static constexpr std::string_view kWord = "backward";
  if (name.size() < kWord.size()) return false;
  for (std::size_t i = 0; i + kWord.size() <= name.size(); ++i) {
    std::size_t k = 0;
    while (k < kWord.size() && std::tolower(static_cast<unsigned char>(name[i + k])) == kWord[k]) ++k;
    if (k == kWord.size()) return true;
  }
  return false;
}

// CSR lists of the distinct events per tensor that satisfy `keep`.
template <class Keep>
void build_lists(const trace::Trace& t, Keep keep, std::vector<std::uint32_t>& offset, std::vector<std::uint32_t>& ev) {
  const std::size_t n = t.tensors.size();
  std::vector<std::uint32_t> last(n, kNone);
  offset.assign(n + 1, 0);
  for (const auto& a : t.accesses)
    if (keep(a) && last[a.tensor] != a.event) last[a.tensor] = a.event, ++offset[a.tensor + 1];
  for (std::size_t i = 0; i < n; ++i) offset[i + 1] += offset[i];
  ev.resize(offset[n]);
  std::vector<std::uint32_t> fill(offset.begin(), offset.end() - 1);
  std::fill(last.begin(), last.end(), kNone);
  for (const auto& a : t.accesses)
    if (keep(a) && last[a.tensor] != a.event) last[a.tensor] = a.event, ev[fill[a.tensor]++] = a.event;
}

}  // namespace

Expected<PreparedTrace> prepare(const trace::Trace& t, const GpuProfile& gpu, const Efficiency& eff) {
  if (t.events.size() >= kNone) return make_error("trace has too many events for the simulator");
  PreparedTrace p;
  p.trace = &t;
  p.gpu = gpu;
  p.eff = eff;
  p.liveness = trace::compute_liveness(t);
  p.duration_s = event_durations(t, gpu, eff);
  build_lists(t, [](const trace::TensorAccess&) { return true; }, p.access_offset, p.access_event);
  build_lists(t, [](const trace::TensorAccess& a) { return a.mode != AccessMode::Read; }, p.write_offset,
              p.write_event);

  auto next_write_after = [&](std::uint32_t tensor, std::uint32_t event) -> std::uint32_t {
    auto b = p.write_event.begin() + p.write_offset[tensor], e = p.write_event.begin() + p.write_offset[tensor + 1];
    auto it = std::upper_bound(b, e, event);
    return it == e ? kNone : *it;
  };
  auto writes_at = [&](std::uint32_t tensor, std::uint32_t event) {
    auto b = p.write_event.begin() + p.write_offset[tensor], e = p.write_event.begin() + p.write_offset[tensor + 1];
    return std::binary_search(b, e, event);
  };

  // Re-running T's writers W1..Wk (in order) reproduces T for a later access `a` only while
  // every other input R of each Wj is still allocated and unchanged: a < free(R) and
  // a <= next write of R after Wj. A writer that also writes another input, or a copy
  // (data from the host), makes T not recomputable; so does having no writer (parameters), or
  // a writer that cannot be replayed (trace::replayable: random, running statistics, atomics).
  p.recompute_valid_until.assign(p.access_event.size(), 0);
  p.recompute_cost_s.assign(p.access_event.size(), 0.0);
  for (std::uint32_t ti = 0; ti < t.tensors.size(); ++ti) {
    std::uint32_t valid = 0;
    bool has_writer = false;
    double cost = 0;
    for (std::uint32_t k = p.access_offset[ti]; k < p.access_offset[ti + 1]; ++k) {
      const std::uint32_t ev = p.access_event[k];
      if (writes_at(ti, ev)) {
        const trace::Event& e = t.events[ev];
        std::uint32_t v = kNone;
        if (!trace::replayable(t, e)) {  // a copy, or a kernel a replay would not reproduce
          v = 0;
        } else {
          for (std::uint32_t a = e.access_begin; a < e.access_end && v != 0; ++a) {
            const auto& acc = t.accesses[a];
            if (acc.tensor == ti || acc.mode == AccessMode::Write) continue;
            if (writes_at(acc.tensor, ev)) {
              v = 0;
              break;
            }
            // valid while a < free(R) and a <= next write of R (that kernel reads T first).
            const std::uint32_t nw = next_write_after(acc.tensor, ev);
            v = std::min({v, t.tensors[acc.tensor].free_event, nw == kNone ? kNone : nw + 1});
          }
        }
        valid = has_writer ? std::min(valid, v) : v;
        has_writer = true;
        cost += p.duration_s[ev];
      }
      p.recompute_valid_until[k] = has_writer ? valid : 0;
      p.recompute_cost_s[k] = cost;
    }
  }

  p.backward_begin.reserve(t.iterations.size());
  for (std::size_t i = 0; i < t.iterations.size(); ++i) {
    const auto& it = t.iterations[i];
    std::uint32_t at = p.liveness.iteration_peak_event[i];
    for (std::uint32_t ev = it.begin; ev < it.end; ++ev)
      if (t.events[ev].op == Op::Kernel && name_has_backward(t.names[t.events[ev].name])) {
        at = ev;
        break;
      }
    p.backward_begin.push_back(at);
  }
  return p;
}

std::uint32_t SimState::next_access(std::uint32_t t) const {
  return cursor[t] < prep->access_offset[t + 1] ? prep->access_event[cursor[t]] : kNone;
}

std::uint32_t SimState::last_access(std::uint32_t t) const {
  return cursor[t] > prep->access_offset[t] ? prep->access_event[cursor[t] - 1] : kNone;
}

bool SimState::can_recompute(std::uint32_t t) const {
  if (cursor[t] == prep->access_offset[t]) return false;  // never written yet
  const std::uint32_t next = next_access(t);
  if (next == kNone) return true;  // never needed again
  return next < prep->recompute_valid_until[cursor[t] - 1];
}

double SimState::recompute_cost_s(std::uint32_t t) const {
  return cursor[t] == prep->access_offset[t] ? 0.0 : prep->recompute_cost_s[cursor[t] - 1];
}

}  // namespace capuchin::sim
