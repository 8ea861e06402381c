// trace_import.hpp: other tools' operator logs turned into capuchin traces
// (../shared/TRACE_FORMAT.md), so the simulator and the planners run on workloads recorded
// by others on real GPUs.
//
// import_simrd: the operator logs of Dynamic Tensor Rematerialization (Kirisame et al., ICLR
// 2021), recorded from PyTorch training steps on an NVIDIA Titan V (public repository
// uwsampl/dtr-prototype, simrd/logs.zip; simrd/simrd/parse/parse.py is the reader this follows).
// One JSON object per line; what each INSTRUCTION becomes:
//   ANNOTATE START      the step begins; lines before it are skipped (as parse.py does).
//   CONSTANT n + MEMORY a tensor that exists before the step (parameters, inputs): an
//                       allocation of MEMORY bytes. Constants the step never frees are
//                       allocated in the set-up (role param); the others (the batch, freed
//                       by the step) inside the iteration where they appear (role input), so
//                       the iteration can be repeated (`capuchin sim --iters N`).
//   CALL                one operator: RESULT names, ARGS names, TIME = its measured duration
//                       in ns; followed, per result, by MEMORY (its bytes) and ALIAS (-1: a new
//                       storage; k: a view of ARGS[k]'s storage, no new memory). A kernel that
//                       reads the arguments' storages and writes the new ones (allocated just
//                       before it), dur_ns = TIME.
//   MUTATE              an in-place operator (add_, an optimizer step): a kernel reading ARGS
//                       and writing the storages of ARGS[i] for i in MUTATE, dur_ns = TIME.
//                       (parse.py gives each mutated tensor a new version of the same size and
//                       releases the old one, for DTR's rematerialisation; in memory it is the
//                       same storage written in place, which is what a trace records.)
//   COPY dst src        a new name for src's storage.
//   COPY_FROM dst src   dst now names src's storage; dst's old storage loses that name.
//   RELEASE n           the framework dropped the name n (one of an undefined name is
//                       counted and ignored, as parse.py does by default). The name is gone: a
//                       later use of it is an error here (parse.py keeps it mapped; no log in
//                       ../shared/external does that).
//   ANNOTATE BACKWARD   noted only.
// A storage is freed when its last name is released; storages still named at the end of the
// log (outputs, parameters, gradients) live to the end of the trace, unread after their last
// use (parse.py pins them at the end for DTR's simulator; here a policy may shed them once
// dead, as the simulator does for any trace's final tensors). Zero-byte results get
// no allocation (an access to them is no access). The trace is one iteration (`iter` 1 before
// the first operator) of kernels with measured durations: `capuchin sim` charges them as
// measured whatever the profile, and only copies and recomputations by the profile.
//
// Errors (as values): "NAME:LINE: reason" for a line that is not a JSON object, an unknown
// INSTRUCTION, a missing or mistyped field, a CALL not followed by its MEMORY/ALIAS lines, a
// name used before any line defined it or defined twice, an ALIAS index outside ARGS, a log
// with no START or no operator. Nothing is emitted unless the whole log converts.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>

#include "capuchin/expected.hpp"
#include "capuchin/trace.hpp"

namespace capuchin::trace {

struct SimrdSummary {
  std::uint64_t lines = 0;               // lines read, the skipped ones included
  std::uint64_t skipped_before_start = 0;
  std::uint64_t calls = 0, mutates = 0;  // operators (kernels emitted)
  std::uint64_t constants = 0, setup_constants = 0;
  std::uint64_t storages = 0, frees = 0;  // allocations emitted, and their frees
  std::uint64_t aliases = 0;              // results that are views of an argument
  std::uint64_t zero_byte_results = 0;
  std::uint64_t undefined_releases = 0;
  std::uint64_t operator_ns = 0;          // sum of TIME over CALL and MUTATE
  std::uint64_t peak_bytes = 0;           // most bytes allocated at once
  std::uint64_t events = 0;               // trace events emitted (header not counted)
};

// Converts the log text `log` (`name` is what error messages call it) and hands every event
// of the resulting trace, in order, to `emit` (the header is the caller's to write). Stops
// at, and returns, emit's first error.
Expected<SimrdSummary> import_simrd(std::string_view log, std::string_view name,
                                    const std::function<Status(const EventView&)>& emit);

// The same from a file (plain or gzip) to the trace file `out` (gzip when it ends in .gz),
// with a header naming `model` and the source. `out` is written whole or not at all: it is
// written beside itself and renamed into place once complete; an existing file of that name
// is left as it was on any error.
Expected<SimrdSummary> import_simrd_file(const std::string& in, const std::string& out, const std::string& model);

}  // namespace capuchin::trace
