// replayable.hpp: whether re-running a trace's kernel reproduces what it wrote, the fact
// recomputation rests on (issue 15). A trace may say it per kernel (`"replay": false|true`,
// docs/TRACE_FORMAT.md: the capture script writes `false` where an op's schema or tags say so);
// for a kernel that does not say, the simulator, the planner and the bound go by its name when it
// is a PyTorch operator known not to be replayable (the one list, here), so traces captured
// before the field existed stop promising what the executor cannot do. (The interposer's own
// traces list touched tensors only, which are never recomputed.)
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
