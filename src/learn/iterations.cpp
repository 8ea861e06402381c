// Iteration boundaries from the launch-signature sequence. The longest repeated suffix
// (Z-algorithm on the reversed sequence: z[P] = how far the sequence matches itself shifted
// by P, counted back from the end) gives the period; the cut inside a period goes after a
// host sync when the period has one (the loss read), else after the trailing frees of the
// previous iteration at its lowest-memory gap. A first iteration that differs (optimizer
// state created in step 1) or a warm-up is found where the steady iteration's opening
// kernels first appear.
#include <algorithm>
#include <functional>

#include "capuchin/learn.hpp"

namespace capuchin::learn {

using trace::kNone;
using trace::Op;

namespace {

// z[i] = longest common prefix of s and s[i..]; z[0] = n.
std::vector<std::uint32_t> z_function(const std::vector<std::uint64_t>& s) {
  const std::size_t n = s.size();
  std::vector<std::uint32_t> z(n, 0);
  if (n == 0) return z;
  z[0] = static_cast<std::uint32_t>(n);
  std::size_t l = 0, r = 0;
  for (std::size_t i = 1; i < n; ++i) {
    std::size_t k = i < r ? std::min<std::size_t>(r - i, z[i - l]) : 0;
    while (i + k < n && s[k] == s[i + k]) ++k;
    z[i] = static_cast<std::uint32_t>(k);
    if (i + k > r) l = i, r = i + k;
  }
  return z;
}

}  // namespace

Period find_period(const std::vector<std::uint64_t>& sigs, std::uint32_t min_period) {
  Period r;
  const std::size_t n = sigs.size();
  if (n < 2 * static_cast<std::size_t>(std::max<std::uint32_t>(min_period, 1))) return r;
  const std::vector<std::uint64_t> rev(sigs.rbegin(), sigs.rend());
  const auto z = z_function(rev);
  for (std::uint32_t p = std::max<std::uint32_t>(min_period, 1); p <= n / 2; ++p)
    if (z[p] >= p && z[p] > r.repeat) r.found = true, r.period = p, r.repeat = z[p];
  return r;
}

std::uint64_t kernel_signature(const trace::Trace& t, std::uint32_t event) {
  const trace::Event& e = t.events[event];
  std::uint64_t h = std::hash<std::string>{}(t.names[e.name]);
  h = mix_signature(h, e.reads_end - e.access_begin);
  h = mix_signature(h, e.writes_end - e.reads_end);
  for (std::uint32_t a = e.access_begin; a < e.access_end; ++a) h = mix_signature(h, t.tensors[t.accesses[a].tensor].bytes);
  return h;
}

IterationSplit detect_iterations(const trace::Trace& t) {
  IterationSplit r;
  std::vector<std::uint32_t> kev;  // event index of each kernel
  std::vector<std::uint64_t> sig;
  for (std::uint32_t i = 0; i < t.events.size(); ++i)
    if (t.events[i].op == Op::Kernel) kev.push_back(i), sig.push_back(kernel_signature(t, i));
  const std::size_t k = sig.size();
  if (k < 4) {
    r.reason = "fewer than 4 kernels";
    return r;
  }

  // Period: the shift P (>= 1) whose repeated suffix is longest, with at least one full
  // repetition (z >= P). Ties go to the smaller P.
  const Period per = find_period(sig, 1);
  const std::uint32_t period = per.period, best = per.repeat;
  if (!per.found) {
    r.reason = "the launch sequence does not repeat";
    return r;
  }
  // The steady region: kernels [k - best - period, k) repeat with the period.
  const std::size_t steady_begin = k - best - period;

  // Live bytes after each event, for choosing the cut.
  const trace::Liveness live = trace::compute_liveness(t);
  // The gap before kernel c: events (kev[c-1], kev[c]). Cut after its last sync; else after
  // its trailing frees. Score: a sync wins; then lower live bytes.
  auto cut_event = [&](std::size_t c, bool& has_sync) -> std::uint32_t {
    const std::uint32_t lo = c == 0 ? 0 : kev[c - 1] + 1, hi = kev[c];
    has_sync = false;
    std::uint32_t cut = lo;
    for (std::uint32_t e = lo; e < hi; ++e)
      if (t.events[e].op == Op::Sync) has_sync = true, cut = e + 1;
    if (has_sync) return cut;
    while (cut < hi && (t.events[cut].op == Op::Free || t.events[cut].op == Op::Iter)) ++cut;
    return cut;
  };
  std::size_t best_c = k - period;
  bool best_sync = false;
  std::uint64_t best_live = ~0ull;
  for (std::size_t c = k - period; c < k; ++c) {
    bool sync = false;
    const std::uint32_t e = cut_event(c, sync);
    const std::uint64_t lb = e == 0 ? 0 : live.live_after[e - 1];
    if ((sync && !best_sync) || (sync == best_sync && lb < best_live)) best_c = c, best_sync = sync, best_live = lb;
  }
  // Boundaries (kernel index) going back one period at a time through the steady region.
  std::vector<std::size_t> starts;
  for (std::size_t c = best_c;; c -= period) {
    starts.push_back(c);
    if (c < steady_begin + period) break;
  }
  std::reverse(starts.begin(), starts.end());

  // A first iteration (or warm-up) before the steady ones: where the steady iteration's
  // opening kernels appear earliest, matching longest.
  const std::size_t first = starts.front();
  if (first > 0) {
    const std::size_t m = std::min<std::size_t>(period, k - first);
    std::vector<std::uint64_t> cat(sig.begin() + static_cast<std::ptrdiff_t>(first),
                                   sig.begin() + static_cast<std::ptrdiff_t>(first + m));
    cat.push_back(0x5eb0c0deull);  // separator no signature equals (in practice)
    cat.insert(cat.end(), sig.begin(), sig.begin() + static_cast<std::ptrdiff_t>(first));
    const auto zz = z_function(cat);
    std::size_t at = 0;
    std::uint32_t len = 0;
    for (std::size_t j = 0; j < first; ++j)
      if (zz[m + 1 + j] > len) len = zz[m + 1 + j], at = j;
    // Accept when a real stretch of the iteration's opening matches (a quarter of it, or all
    // of the prefix when that is shorter).
    if (len >= std::max<std::size_t>(2, std::min<std::size_t>(m / 4, first - at))) starts.insert(starts.begin(), at);
  }

  r.found = true;
  r.period_kernels = period;
  r.repeats = static_cast<std::uint32_t>(best / period + 1);
  std::uint64_t n = 0;
  for (std::size_t i = 0; i < starts.size(); ++i) {
    bool sync = false;
    std::uint32_t b = cut_event(starts[i], sync);
    if (i == 0 && starts[i] == 0) b = 0;
    const std::uint32_t e = i + 1 < starts.size() ? cut_event(starts[i + 1], sync) : static_cast<std::uint32_t>(t.events.size());
    r.iterations.push_back({++n, b, e});
  }
  return r;
}

std::optional<trace::Trace> with_learned_iterations(const trace::Trace& t, std::size_t* found) {
  if (!t.iterations.empty()) return std::nullopt;
  const IterationSplit split = detect_iterations(t);
  if (!split.found || split.iterations.size() < 2) return std::nullopt;
  trace::TraceAppender out(t.name, t.header);
  trace::Trace::ViewScratch scratch;
  std::vector<std::uint32_t> reads, writes, touch;
  auto indices = [&](std::vector<std::uint32_t>& v, std::uint32_t b, std::uint32_t e) {
    v.clear();
    for (std::uint32_t i = b; i < e; ++i) v.push_back(t.accesses[i].tensor);
  };
  std::size_t next = 0;
  for (std::uint32_t i = 0; i < t.events.size(); ++i) {
    if (next < split.iterations.size() && split.iterations[next].begin == i) {
      trace::EventView marker;
      marker.op = trace::Op::Iter;
      marker.n = ++next;
      out.append(marker);
    }
    trace::EventView v = t.view(i, scratch);
    if (v.op == trace::Op::Kernel) {  // the appender reads dense indices (view gives ids)
      const trace::Event& e = t.events[i];
      indices(reads, e.access_begin, e.reads_end);
      indices(writes, e.reads_end, e.writes_end);
      indices(touch, e.writes_end, e.access_end);
      v.read_index = reads;
      v.write_index = writes;
      v.touch_index = touch;
    }
    out.append(v);
  }
  if (found != nullptr) *found = split.iterations.size();
  return out.finish();
}

}  // namespace capuchin::learn
