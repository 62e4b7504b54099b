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
// same bytes.
//
// A model whose example inputs are on cuda:0 (compiled by the CUDA target,
// kiln::compile's kernels) is exported for CUDA: per translation unit the
// CUBIN of each of ExportOptions::cuda_archs, the PTX and the CUDA C source
// (NVRTC compiles them at export; no GPU needed), with the launch list and
// its CUDA launch rules, memory plan and weights. load_compiled runs it on
// cuda:0: the CUBIN for the GPU's arch, else the PTX through the driver's
// JIT, else an error naming the archs present; on the CUDA-on-CPU simulator
// (KILN_CUDA_SIM=1) the source through its host compiler. The inputs and
// outputs of LoadedModel::run stay host tensors (copied to and from cuda:0).
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "kiln/compile.h"

namespace kiln {

struct ExportOptions {
  /// How the forward is compiled (autocast, custom passes; remat has no
  /// effect without a backward). Default: as kiln::compile's default.
  CompileOptions compile;
  /// CUDA models only (example inputs on cuda:0): the GPU architectures
  /// whose CUBIN (SASS) each translation unit carries, NVRTC's -arch names
  /// ("sm_80", "sm_90", ...). A GPU loads the CUBIN of its own arch.
  std::vector<std::string> cuda_archs = {"sm_90"};
  /// CUDA models only: also store PTX for the lowest of cuda_archs
  /// ("compute_90"), which the driver JITs on a GPU newer than every CUBIN.
  bool cuda_ptx = true;
  /// Dims that may change size (torch.export's Dim): input index -> its
  /// dynamic dims. One dim in all today (the compiler's automatic dynamic
  /// shapes have one symbol s). The artifact holds the shape-generic kernels
  /// (sizes as kernel arguments) and a launch list whose sizes are a + b s;
  /// load_compiled accepts any size >= 2 there (sizes 0 and 1 are
  /// specialized by the compiler, as kiln::compile's dynamic artifacts) and
  /// checks every other dim. Export fails, naming the value, when a size or
  /// a constant of the launch list is not affine in s (e.g. a mean's 1/N
  /// over the dynamic dim), or when the example size is below 2.
  std::map<int, std::vector<int>> dynamic_dims;
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
/// A CompiledModule (kiln::compile's result) is exported as the module it
/// wraps, with `options.compile` (not the options it was compiled with).
/// Throws kiln::Error naming the problem: no inputs, no output that depends
/// on the inputs (a forward computing outside Kiln's ops), inputs on a device other
/// than the CPU or cuda:0 (naming the expected devices), a CUDA export
/// without NVRTC or with a bad arch in cuda_archs,
/// a model that breaks the graph or draws random numbers in eval mode, a
/// compile failure, the kernel cache disabled by KILN_DISABLE_CACHE=1 (the
/// object code comes from it), or a write that fails (naming `path`).
ExportReport export_compiled(std::shared_ptr<nn::Module> model, const std::vector<Tensor> &example_inputs,
                             const std::string &path, const ExportOptions &options = {});

}  // namespace kiln
