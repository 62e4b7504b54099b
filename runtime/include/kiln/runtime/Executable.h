// kiln/runtime/Executable.h - a compiled function: a list of launches over
// planned buffers.
//
// An Executable is what codegen produces for one compiled MLIR function (the
// forward or the backward of a graph). It holds:
//   - value slots (one per SSA value of the function),
//   - a list of Launches in program order (JIT kernel, GEMM, view, copy),
//   - a memory plan: every intermediate that does not escape the function
//     gets an offset in one arena (reuse by liveness); function results (and
//     everything they alias) get their own Buffers so they outlive the run.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "kiln/runtime/KernelHandle.h"
#include "kiln/runtime/RunHooks.h"
#include "kiln/runtime/TensorView.h"

namespace kiln::runtime {

class Executable {
public:
  virtual ~Executable() = default;
  /// Runs the function. `inputs` follow the function's argument order and
  /// must match the compiled shapes and dtypes (the caller's guard ensures it;
  /// a mismatch returns an error via `error` and an empty vector).
  /// Results follow the function's result order; they own (or share) their
  /// memory and may alias inputs (e.g. a transposed parameter).
  /// `hooks` (optional) observe the run (RunHooks.h).
  virtual std::vector<TensorView> run(const std::vector<TensorView> &inputs, std::string *error = nullptr,
                                      const RunHooks *hooks = nullptr) const = 0;
  /// run() where the caller donates the inputs the executable marked
  /// donatable: `inputs` holds the only reference to their buffers, so the
  /// executable may reuse that memory for intermediates after their last
  /// use. Same results as run(); the default ignores the donation.
  virtual std::vector<TensorView> run_donating(const std::vector<TensorView> &inputs, std::string *error = nullptr,
                                               const RunHooks *hooks = nullptr) const {
    return run(inputs, error, hooks);
  }
  /// Bytes of the intermediate arena one run allocates (the memory plan).
  virtual int64_t arena_bytes() const = 0;
  /// Bytes of the arena one run_donating() allocates.
  virtual int64_t donating_arena_bytes() const { return arena_bytes(); }
  /// Number of launches (kernels + GEMMs + copies) per run.
  virtual int num_launches() const = 0;
};

}  // namespace kiln::runtime
