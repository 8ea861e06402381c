// repeat_last_iteration (include/capuchin/trace_repeat.hpp) on hand-written traces whose
// expected output is worked out in the comments: the preamble, ids unique and never reused,
// every access between its tensor's alloc and free, the inherited/kept pairing, the unpaired
// kept tensors freed between repetitions, the error cases, N = 1; and on a real trace: the
// result reads back through the trace reader unchanged and every repetition after the first
// has the same memory peak.
#include <gtest/gtest.h>

#include <set>
#include <string>

#include "capuchin/trace_model.hpp"
#include "capuchin/trace_repeat.hpp"

namespace capuchin::trace {
namespace {

// Set-up: 0 (param), 5 (a scratch tensor iteration 1 frees).
// Iteration 1: frees 5; makes 10 (optimizer state, kept for ever) and 11 (a gradient the next
// iteration frees); makes and frees 12.
// Iteration 2 (the steady one, S): frees 11 (inherited, freed within); makes 20 (a gradient,
// kept: paired with 11, same size), 21 (an activation freed within), 22 (kept, no partner).
const char* kTrace = R"({"format":"capuchin-trace","version":1,"model":"hand","iterations":2}
{"op":"alloc","id":0,"bytes":100,"role":"param"}
{"op":"alloc","id":5,"bytes":64}
{"op":"iter","n":1}
{"op":"free","id":5}
{"op":"alloc","id":10,"bytes":100,"role":"optim"}
{"op":"alloc","id":11,"bytes":100,"role":"grad"}
{"op":"alloc","id":12,"bytes":300}
{"op":"kernel","name":"fwd","reads":[0],"writes":[12]}
{"op":"kernel","name":"bwd","reads":[12],"writes":[11]}
{"op":"free","id":12}
{"op":"kernel","name":"step","reads":[11],"writes":[0,10]}
{"op":"iter","n":2}
{"op":"kernel","name":"clip","reads":[11],"writes":[11]}
{"op":"free","id":11}
{"op":"alloc","id":21,"bytes":300,"role":"activation"}
{"op":"kernel","name":"fwd","reads":[0],"writes":[21]}
{"op":"alloc","id":20,"bytes":100,"role":"grad"}
{"op":"kernel","name":"bwd","reads":[21],"writes":[20]}
{"op":"free","id":21}
{"op":"alloc","id":22,"bytes":8}
{"op":"kernel","name":"step","touch":[20,0,10,22]}
{"op":"copy","dir":"d2h","bytes":4,"src":22}
{"op":"sync"}
)";
// S is events 11..22 (12 events: iter, clip, free 11, alloc 21, fwd, alloc 20, bwd, free 21,
// alloc 22, step, copy, sync). Set-up is events 0-1; the preamble is free 5, alloc 10,
// alloc 11 (3 events). Each repetition but the last ends with a free of 22's copy.
constexpr std::uint32_t kSetup = 2, kPreamble = 3, kSteady = 12;

Trace parse(const char* text) {
  auto t = parse_trace(text, "hand.jsonl");
  EXPECT_TRUE(t) << t.error().message();
  return std::move(*t);
}

// The events' text, through the writer's formatter (ids, not indices).
std::vector<std::string> texts(const Trace& t) {
  std::vector<std::string> out;
  Trace::ViewScratch s;
  for (std::uint32_t i = 0; i < t.events.size(); ++i) out.push_back(format_event(t.view(i, s)));
  return out;
}

// Writes `t` as text and reads it back: the reader checks every rule of the format (ids
// unique, accessed only between alloc and free, iterations 1, 2, ...), and what it builds
// must be what repeat_last_iteration built, derived fields included.
void expect_reads_back(const Trace& t) {
  std::string text = format_header(t.header) + "\n";
  for (const std::string& line : texts(t)) text += line + "\n";
  auto back = parse_trace(text, "repeated");
  ASSERT_TRUE(back) << back.error().message();
  ASSERT_EQ(back->events.size(), t.events.size());
  EXPECT_EQ(texts(*back), texts(t));
  ASSERT_EQ(back->tensors.size(), t.tensors.size());
  for (std::size_t x = 0; x < t.tensors.size(); ++x) {
    const Tensor &a = back->tensors[x], &b = t.tensors[x];
    EXPECT_EQ(a.id, b.id) << x;
    EXPECT_EQ(a.bytes, b.bytes) << x;
    EXPECT_EQ(a.role, b.role) << x;
    EXPECT_EQ(a.alloc_event, b.alloc_event) << x;
    EXPECT_EQ(a.free_event, b.free_event) << x;
    EXPECT_EQ(a.first_access, b.first_access) << x;
    EXPECT_EQ(a.last_access, b.last_access) << x;
    EXPECT_EQ(a.access_count, b.access_count) << x;
  }
  ASSERT_EQ(back->accesses.size(), t.accesses.size());
  for (std::size_t i = 0; i < t.accesses.size(); ++i) {
    EXPECT_EQ(back->accesses[i].event, t.accesses[i].event);
    EXPECT_EQ(back->accesses[i].tensor, t.accesses[i].tensor);
    EXPECT_EQ(back->accesses[i].mode, t.accesses[i].mode);
  }
  for (std::uint32_t i = 0; i < t.events.size(); ++i) {
    const Event &a = back->events[i], &b = t.events[i];
    EXPECT_EQ(a.access_begin, b.access_begin) << i;
    EXPECT_EQ(a.reads_end, b.reads_end) << i;
    EXPECT_EQ(a.writes_end, b.writes_end) << i;
    EXPECT_EQ(a.access_end, b.access_end) << i;
    EXPECT_EQ(a.tensor, b.tensor) << i;
    EXPECT_EQ(a.tensor2, b.tensor2) << i;
  }
  ASSERT_EQ(back->iterations.size(), t.iterations.size());
  for (std::size_t k = 0; k < t.iterations.size(); ++k) {
    EXPECT_EQ(back->iterations[k].n, t.iterations[k].n);
    EXPECT_EQ(back->iterations[k].begin, t.iterations[k].begin);
    EXPECT_EQ(back->iterations[k].end, t.iterations[k].end);
  }
  EXPECT_EQ(back->setup_end, t.setup_end);
  EXPECT_EQ(back->names, t.names);
}

// The output tensor an event of repetition r (1-based) at S's event `k` (0 = its iter) names.
std::uint32_t tensor_at(const Trace& u, unsigned r, std::uint32_t k) {
  return u.events[u.iterations[r - 1].begin + k].tensor;
}

TEST(Repeat, LayoutPreambleAndMarkers) {
  const Trace t = parse(kTrace);
  auto u = repeat_last_iteration(t, 3);
  ASSERT_TRUE(u) << u.error().message;
  // set-up + preamble + 3 repetitions + a free of 22's copy after repetitions 1 and 2
  ASSERT_EQ(u->events.size(), kSetup + kPreamble + 3 * kSteady + 2);
  EXPECT_EQ(u->setup_end, kSetup + kPreamble);
  ASSERT_EQ(u->iterations.size(), 3u);
  for (unsigned r = 1; r <= 3; ++r) {
    const Iteration& it = u->iterations[r - 1];
    EXPECT_EQ(it.n, r);
    EXPECT_EQ(u->events[it.begin].op, Op::Iter);
    EXPECT_EQ(u->events[it.begin].n, r);
    EXPECT_EQ(it.end - it.begin, kSteady + (r < 3 ? 1u : 0u));
  }
  EXPECT_EQ(u->header.iterations, 3);
  EXPECT_EQ(u->name, "hand.jsonl");
  const auto lines = texts(*u);
  EXPECT_EQ(lines[0], R"({"op":"alloc","id":0,"bytes":100,"role":"param"})");
  EXPECT_EQ(lines[2], R"({"op":"free","id":5})");
  EXPECT_EQ(lines[3], R"({"op":"alloc","id":10,"bytes":100,"role":"optim"})");
  EXPECT_EQ(lines[4], R"({"op":"alloc","id":11,"bytes":100,"role":"grad"})");
  // Repetition 1 is S with T's ids (its marker renumbered).
  const auto original = texts(t);
  EXPECT_EQ(lines[u->iterations[0].begin], R"({"op":"iter","n":1})");
  for (std::uint32_t k = 1; k < kSteady; ++k)
    EXPECT_EQ(lines[u->iterations[0].begin + k], original[t.iterations.back().begin + k]) << k;
  expect_reads_back(*u);
}

TEST(Repeat, IdsUniqueFreshAndNeverReused) {
  const Trace t = parse(kTrace);
  auto u = repeat_last_iteration(t, 4);
  ASSERT_TRUE(u) << u.error().message;
  std::set<std::uint64_t> ids, original;
  for (const Tensor& x : t.tensors) original.insert(x.id);
  for (const Tensor& x : u->tensors) EXPECT_TRUE(ids.insert(x.id).second) << "id " << x.id << " allocated twice";
  // S makes 3 tensors: 3 per repetition, 2 + 2 before (set-up and preamble).
  EXPECT_EQ(u->tensors.size(), 4u + 3 * 4);
  for (const Tensor& x : u->tensors) {
    const bool first_repetition = x.alloc_event < u->iterations[1].begin;
    if (first_repetition) EXPECT_TRUE(original.count(x.id)) << x.id;
    else EXPECT_GT(x.id, 22u) << "repetitions 2.. take ids above every id of the trace";
  }
  expect_reads_back(*u);
}

TEST(Repeat, EveryAccessBetweenAllocAndFree) {
  const Trace t = parse(kTrace);
  auto u = repeat_last_iteration(t, 5);
  ASSERT_TRUE(u) << u.error().message;
  ASSERT_FALSE(u->accesses.empty());
  for (const TensorAccess& a : u->accesses) {
    const Tensor& x = u->tensors[a.tensor];
    EXPECT_LT(x.alloc_event, a.event) << "id " << x.id;
    EXPECT_TRUE(x.free_event == kNone || a.event < x.free_event) << "id " << x.id << " at event " << a.event;
  }
  for (const Event& e : u->events)
    if (e.op == Op::Free) EXPECT_EQ(u->tensors[e.tensor].free_event, &e - u->events.data());
}

TEST(Repeat, InheritedTensorIsThePreviousRepetitionsKeptOne) {
  const Trace t = parse(kTrace);
  auto u = repeat_last_iteration(t, 3);
  ASSERT_TRUE(u) << u.error().message;
  // In S: 1 clip reads/writes 11, 2 frees 11, 5 allocs 20 (its partner), 9 step touches 20.
  const std::uint32_t preamble_11 = u->events[4].tensor;
  EXPECT_EQ(u->tensors[preamble_11].id, 11u);
  EXPECT_EQ(tensor_at(*u, 1, 2), preamble_11) << "repetition 1 frees the preamble's 11";
  for (unsigned r = 2; r <= 3; ++r) {
    const std::uint32_t prev_kept = tensor_at(*u, r - 1, 5);
    EXPECT_EQ(u->events[u->iterations[r - 2].begin + 5].op, Op::Alloc);
    EXPECT_EQ(tensor_at(*u, r, 2), prev_kept) << "repetition " << r << " frees the kept gradient of " << r - 1;
    const Event& clip = u->events[u->iterations[r - 1].begin + 1];
    EXPECT_EQ(u->accesses[clip.access_begin].tensor, prev_kept);
    EXPECT_EQ(u->tensors[prev_kept].free_event, u->iterations[r - 1].begin + 2);
  }
  // The last repetition's kept gradient lives to the end; so do 0 and 10, the same tensors throughout.
  EXPECT_EQ(u->tensors[tensor_at(*u, 3, 5)].free_event, kNone);
  for (unsigned r = 1; r <= 3; ++r) {
    const Event& fwd = u->events[u->iterations[r - 1].begin + 4];
    EXPECT_EQ(u->tensors[u->accesses[fwd.access_begin].tensor].id, 0u);
    const Event& step = u->events[u->iterations[r - 1].begin + 9];
    EXPECT_EQ(u->tensors[u->accesses[step.access_begin + 2].tensor].id, 10u);
  }
}

TEST(Repeat, UnpairedKeptTensorFreedAfterEachRepetitionButTheLast) {
  const Trace t = parse(kTrace);
  auto u = repeat_last_iteration(t, 3);
  ASSERT_TRUE(u) << u.error().message;
  for (unsigned r = 1; r <= 3; ++r) {
    const std::uint32_t x = tensor_at(*u, r, 8);  // alloc 22
    const Iteration& it = u->iterations[r - 1];
    if (r < 3) {
      EXPECT_EQ(u->tensors[x].free_event, it.end - 1) << "repetition " << r;
      EXPECT_EQ(u->events[it.end - 1].op, Op::Free);
    } else {
      EXPECT_EQ(u->tensors[x].free_event, kNone);
    }
  }
  // Live bytes at every repetition's end but the last: 0, 10 and the kept gradient (300).
  const auto l = compute_liveness(*u);
  EXPECT_EQ(l.live_after[u->iterations[0].end - 1], 300u);
  EXPECT_EQ(l.live_after[u->iterations[1].end - 1], 300u);
  EXPECT_EQ(l.persistent_bytes, 308u);
}

TEST(Repeat, EachEventNamesTheTraceEventItCopies) {
  // Set-up events 0-1 are T's 0-1; the preamble's free 5, alloc 10, alloc 11 are T's 3, 4, 5;
  // each repetition is T's 11..22 in order, and each but the last ends with a free T does not
  // have (kNone).
  const Trace t = parse(kTrace);
  std::vector<std::uint32_t> source;
  auto u = repeat_last_iteration(t, 3, &source);
  ASSERT_TRUE(u) << u.error().message;
  ASSERT_EQ(source.size(), u->events.size());
  std::vector<std::uint32_t> want = {0, 1, 3, 4, 5};
  for (unsigned r = 1; r <= 3; ++r) {
    for (std::uint32_t e = 11; e <= 22; ++e) want.push_back(e);
    if (r < 3) want.push_back(kNone);
  }
  EXPECT_EQ(source, want);
  for (std::uint32_t k = 0; k < source.size(); ++k)
    if (source[k] != kNone) EXPECT_EQ(u->events[k].op, t.events[source[k]].op) << "event " << k;
  // Asked for nothing, it says nothing; the trace is the same.
  auto plain = repeat_last_iteration(t, 3);
  ASSERT_TRUE(plain) << plain.error().message;
  EXPECT_EQ(texts(*plain), texts(*u));
}

TEST(Repeat, OneRepetitionIsSetUpPreambleAndTheLastIteration) {
  const Trace t = parse(kTrace);
  auto u = repeat_last_iteration(t, 1);
  ASSERT_TRUE(u) << u.error().message;
  ASSERT_EQ(u->events.size(), kSetup + kPreamble + kSteady);
  ASSERT_EQ(u->iterations.size(), 1u);
  EXPECT_EQ(u->iterations[0].n, 1u);
  EXPECT_EQ(u->tensors.size(), 4u + 3);
  EXPECT_EQ(compute_liveness(*u).persistent_bytes, 308u);  // 0, 10, 20, 22
  expect_reads_back(*u);
}

TEST(Repeat, SingleIterationTraceRepeatsItsOnlyIteration) {
  // No earlier iteration: nothing is inherited but the set-up; the kept tensor 2 is unpaired.
  const Trace t = parse(R"({"format":"capuchin-trace","version":1}
{"op":"alloc","id":0,"bytes":8192}
{"op":"iter","n":1}
{"op":"alloc","id":1,"bytes":4096}
{"op":"kernel","name":"k","reads":[0],"writes":[1]}
{"op":"alloc","id":2,"bytes":16}
{"op":"kernel","name":"k","reads":[1],"writes":[2]}
{"op":"free","id":1}
)");
  auto u = repeat_last_iteration(t, 3);
  ASSERT_TRUE(u) << u.error().message;
  EXPECT_EQ(u->events.size(), 1u + 3 * 6 + 2);
  EXPECT_EQ(compute_liveness(*u).peak_bytes, 8192u + 4096 + 16);
  expect_reads_back(*u);
}

TEST(Repeat, FreedInheritedWithoutAKeptPartnerIsAnError) {
  // S frees 1 (made by iteration 1) and keeps nothing.
  const Trace t = parse(R"({"format":"capuchin-trace","version":1}
{"op":"alloc","id":0,"bytes":64}
{"op":"iter","n":1}
{"op":"alloc","id":1,"bytes":64}
{"op":"iter","n":2}
{"op":"kernel","name":"k","reads":[1],"writes":[0]}
{"op":"free","id":1}
)");
  auto u = repeat_last_iteration(t, 2);
  ASSERT_FALSE(u);
  EXPECT_EQ(u.error().message,
            "hand.jsonl: the last iteration frees 1 tensors an earlier iteration made, and does not make and keep one "
            "of the same size for each (in order): it cannot be repeated");
}

TEST(Repeat, KeptPartnerOfAnotherSizeIsAnError) {
  const Trace t = parse(R"({"format":"capuchin-trace","version":1}
{"op":"alloc","id":0,"bytes":64}
{"op":"iter","n":1}
{"op":"alloc","id":1,"bytes":64}
{"op":"iter","n":2}
{"op":"free","id":1}
{"op":"alloc","id":2,"bytes":128}
{"op":"kernel","name":"k","reads":[0],"writes":[2]}
)");
  auto u = repeat_last_iteration(t, 2);
  ASSERT_FALSE(u);
  EXPECT_NE(u.error().message.find("frees 1 tensors"), std::string::npos) << u.error().message;
  EXPECT_NE(u.error().message.find("cannot be repeated"), std::string::npos) << u.error().message;
}

TEST(Repeat, NoIterationOrZeroRepetitionsIsAnError) {
  const Trace none = parse(R"({"format":"capuchin-trace","version":1}
{"op":"alloc","id":0,"bytes":64}
)");
  auto u = repeat_last_iteration(none, 2);
  ASSERT_FALSE(u);
  EXPECT_EQ(u.error().message, "hand.jsonl has no `iter` event: nothing to repeat");
  auto z = repeat_last_iteration(parse(kTrace), 0);
  ASSERT_FALSE(z);
  EXPECT_NE(z.error().message.find("0 times"), std::string::npos) << z.error().message;
}

TEST(Repeat, RealTraceReadsBackAndRepeatsItsPeak) {
  auto t = load_trace(std::string(CAPUCHIN_TEST_DATA) + "/resnet18-b16.jsonl.gz");
  ASSERT_TRUE(t) << t.error().message();
  auto u = repeat_last_iteration(*t, 5);
  ASSERT_TRUE(u) << u.error().message;
  expect_reads_back(*u);
  const auto lt = compute_liveness(*t);
  const auto lu = compute_liveness(*u);
  ASSERT_EQ(lu.iteration_peak_bytes.size(), 5u);
  // The steady state: the trace's last iteration reaches the trace's peak, and so does every
  // repetition (the first inherits exactly what the last iteration inherited).
  for (std::uint64_t p : lu.iteration_peak_bytes) EXPECT_EQ(p, lt.iteration_peak_bytes.back());
  EXPECT_EQ(lu.persistent_bytes, lt.persistent_bytes);
  const auto st = compute_stats(*t, lt), su = compute_stats(*u, lu);
  for (double f : su.iteration_flops) EXPECT_EQ(f, st.iteration_flops.back());
}

}  // namespace
}  // namespace capuchin::trace
