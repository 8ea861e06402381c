// replayable.hpp: whether re-running a trace's kernel reproduces what it wrote, the fact
// recomputation rests on (issue 15). A trace says it per kernel (`"replay": false|true`,
// docs/TRACE_FORMAT.md: the capture script marks every op from its schema and tags; the
// interposer knows it from its probations); for a kernel that does not say, the simulator and
// the planner go by what its name says when it is a PyTorch operator known not to be replayable,
// so traces captured before the field existed stop promising what the executor cannot do.
//
// Contract: pure, no allocation; the table is of ATen operator names as PyTorch's dispatcher
// gives them ("aten::native_batch_norm"), matched exactly after the "aten::" prefix and an
// optional ".overload" suffix; any other name is not known (nullptr).
#pragma once

#include <string_view>

#include "capuchin/trace_model.hpp"

namespace capuchin::trace {

// Why an operator of this name cannot be replayed ("random", "side-effect", "atomics"), or
// nullptr when nothing is known against it.
const char* known_not_replayable(std::string_view kernel_name);

// Whether the kernel event `e` of `t` may be re-run to recompute what it wrote: its own
// `replay` field when it has one, else not when its name is known_not_replayable.
bool replayable(const Trace& t, const Event& e);

}  // namespace capuchin::trace
