// kiln/runtime/RunHooks.h - callbacks that observe one Executable run.
//
// The seam for work that should start before a run ends: a data-parallel
// reducer starts a gradient bucket's all-reduce as soon as backward has
// produced its gradients (PyTorch DDP's Reducer::mark_variable_ready).
#pragma once

#include <functional>

#include "kiln/runtime/TensorView.h"

namespace kiln::runtime {

struct RunHooks {
  /// Called once per function result i (result order) with its value, on
  /// the thread that runs, right after the last launch its value depends on
  /// (the one writing its memory, and the view launches that shape it) has
  /// been enqueued on the run's stream (the CPU: has finished). `value` is
  /// what run() will return as result i: read it on the run's stream, and
  /// only during the call unless the buffer is kept (run() returns the same
  /// buffer). Results that are inputs or constants (and views of them made
  /// by no launch) are reported before the first launch. Calls come in
  /// launch order (ties: result order), all before run() returns; an output
  /// listed twice is reported twice (once per index). Not called when the
  /// run fails before its launches (bad inputs); a launch that fails stops
  /// the calls.
  std::function<void(int output_index, const TensorView &value)> on_output_ready;
};

} // namespace kiln::runtime
