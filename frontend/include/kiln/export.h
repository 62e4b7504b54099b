// kiln/export.h - kiln::export_compiled: write a compiled model's inference
// forward as one file that kiln::load_compiled (library kiln_runtime,
// kiln/load_compiled.h) runs without the compiler, MLIR or LLVM.
//
//   auto model = std::make_shared<MyNet>();
//   kiln::export_compiled(model, {torch_like_example_input}, "mynet.kiln");
//   // elsewhere, linking only kiln_runtime:
//   auto m = kiln::load_compiled("mynet.kiln");
//   auto out = m.run({x});   // bit-identical to kiln::compile(model) in eval mode under NoGradGuard
//
// The artifact (runtime/src/artifact/FORMAT.md) holds: the compiled
// forward's kernels as the x86-64 object code the kernel cache stores (for
// this CPU: its features are recorded and checked at load), the launch list
// and memory plan, the weights (safetensors, kiln::save's layout), the guards
// (dtype and static sizes of every input and output), the Kiln version and a
// CRC-32 of the file. The same model, inputs' shapes and options give the
// same bytes. CPU only (CUDA CUBIN/PTX are not exported yet).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "kiln/compile.h"

namespace kiln {

struct ExportOptions {
  /// How the forward is compiled (autocast, custom passes; remat has no
  /// effect without a backward). Default: as kiln::compile's default.
  CompileOptions compile;
};

/// What export_compiled wrote.
struct ExportReport {
  int64_t bytes = 0;         ///< size of the file
  int num_kernels = 0;       ///< distinct kernel functions in its object code
  int num_launches = 0;      ///< kernel + GEMM + copy launches per run
  int64_t weight_bytes = 0;  ///< bytes of the weights section's tensors
};

/// Compiles `model`'s forward for `example_inputs` (their dtypes and shapes
/// become the guards; the values are only used to trace) in eval mode under
/// NoGradGuard (the model's training flag is restored afterwards) and writes
/// the artifact to `path` atomically (a temporary file renamed over it).
/// Throws kiln::Error naming the problem: no inputs, an input not on the CPU,
/// a model that breaks the graph or draws random numbers in eval mode, a
/// compile failure, the kernel cache disabled by KILN_DISABLE_CACHE=1 (the
/// object code comes from it), or a write that fails (naming `path`).
ExportReport export_compiled(std::shared_ptr<nn::Module> model, const std::vector<Tensor> &example_inputs,
                             const std::string &path, const ExportOptions &options = {});

}  // namespace kiln
