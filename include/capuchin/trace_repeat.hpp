// repeat_last_iteration: a trace turned into the steady run a training job settles into, so
// that the replay on simcuda (tests/workloads/sim_trace_replay.cpp) and the simulator
// (`capuchin sim --iters N`) run the SAME sequence of events: the trace's set-up, then its
// last iteration N times.
//
// Contract. For a trace T whose last iteration is S (events [S.begin, S.end)) the result is:
//   1. T's set-up events (before its first `iter`), unchanged (same tensors, same ids);
//   2. a preamble, still set-up: a `free` (T's own free event) of every set-up tensor an
//      iteration before S freed, in T's order; then an `alloc` (T's own alloc event) of every
//      tensor an iteration before S made that is still alive when S begins (optimizer state
//      made in iteration 1, gradients the next zero_grad frees), in allocation order;
//   3. N repetitions of S, each starting with `iter` n = 1..N, every event as in S except:
//      - a tensor S makes gets a new tensor in every repetition: repetition 1 keeps T's id,
//        repetitions 2..N take fresh ids (above every id of T, in allocation order), so an id
//        is never reused;
//      - "inherited" tensors (made before S, alive when it begins) that S frees are paired
//        with "kept" tensors (made by S, not freed by it): the inherited ones sorted by their
//        free event, the kept ones in allocation order, the i-th with the i-th, which must
//        have the same size. In repetition r > 1 an access to (or the free of) the i-th
//        inherited tensor is one of the i-th kept tensor of repetition r - 1;
//      - after repetition r < N, a `free` of each kept tensor that no inherited one was
//        paired with (what a repetition makes and keeps is not the next one's); in the last
//        repetition every kept tensor lives to the end of the trace.
//   Every other inherited tensor (parameters, optimizer state) is the same tensor in every
//   repetition. The header says `iterations: N`; the name (used in messages) is T's.
// Errors (as values, never thrown): N == 0; T without an `iter` ("... has no `iter` event:
// nothing to repeat"); S frees more inherited tensors than it keeps, or a pair differs in size
// ("... it cannot be repeated"); fresh ids past 2^64 - 1.
// The result passes every rule of the trace reader (docs/TRACE_FORMAT.md); event indices,
// hence the "line" of a simulator message, are the result's own (index + 2).
#pragma once

#include <cstdint>
#include <vector>

#include "capuchin/expected.hpp"
#include "capuchin/trace_model.hpp"

namespace capuchin::trace {

// source_event, when given, receives for each event of the result the index of T's event it
// copies (kNone for the frees added after a repetition): what a message about the result's
// event k can say of T's own lines (source_event[k] + 2).
Expected<Trace> repeat_last_iteration(const Trace& t, unsigned iterations,
                                      std::vector<std::uint32_t>* source_event = nullptr);

}  // namespace capuchin::trace
