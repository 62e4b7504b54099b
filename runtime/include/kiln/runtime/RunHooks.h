// kiln/runtime/RunHooks.h - callbacks that observe one Executable run.
//
// The seam for work that should start before a run ends: a data-parallel
// reducer starts a gradient bucket's all-reduce as soon as backward has
// produced its gradients (PyTorch DDP's Reducer::mark_variable_ready).
#pragma once

#include <functional>

namespace kiln::runtime {

struct RunHooks {
  /// Called once per function result i (result order), on the thread that
  /// runs, right after the launch that writes result i's memory has been
  /// enqueued on the run's stream (the CPU: has finished). Results that are
  /// inputs, constants or views of them are ready before the first launch
  /// and are reported then. Calls come in launch order (ties: result
  /// order), all before run() returns; an output listed twice is reported
  /// twice (once per index). Not called when the run fails before its
  /// launches (bad inputs); a launch that fails stops the calls.
  std::function<void(int output_index)> on_output_ready;
};

} // namespace kiln::runtime
