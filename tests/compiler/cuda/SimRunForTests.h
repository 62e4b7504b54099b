// tests/compiler/cuda/SimRunForTests.h - TEST-ONLY: runs an emitted CUDA
// kernel on the CUDA-on-CPU simulator (runtime/src/sim) and the same
// kiln.fusion through the CPU target, and compares them with the fuzzer's
// rule (tests/fuzz/Oracle.h).
//
//   auto f = kiln::test::fuse(text);
//   std::vector<HostTensor> args = kiln::test::defaultArgs(f->fusions[0]);
//   SimOutcome sim = kiln::test::runOnSim(kernel, f->fusions[0], args);   // sim::allocate'd, LaunchRule's grid
//   SimOutcome cpu = kiln::test::runOnCpu(f->fusions[0], args);           // cpuTarget()->emitKernel + JIT
//
// Operands are given per argument of the function around the fusion (each
// operand's memory root must be one): the kernel reads the root's memory
// with the strides codegen's operandStrides gives (KernelAbi.h), as the
// executable would hand them over.
#pragma once

#include <array>
#include <cstdint>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "EmitCuda.h"

#include "kiln/ir/KilnOps.h"
#include "kiln/runtime/DType.h"

namespace kiln::test {

/// One tensor in host memory: dtype, shape and row-major bytes.
struct HostTensor {
  DType dtype = DType::Float32;
  std::vector<int64_t> shape;
  std::vector<unsigned char> bytes;

  int64_t numel() const;
  /// Element i as a double (f16/bf16 widened, integers converted).
  double at(int64_t i) const;
  /// Sets element i from a double (rounded to f16/bf16 to nearest even,
  /// truncated for integers).
  void set(int64_t i, double value);
  /// The raw elements as T (sizeof(T) must be the dtype's itemsize).
  template <class T> std::vector<T> as() const {
    std::vector<T> out(bytes.size() / sizeof(T));
    std::memcpy(out.data(), bytes.data(), bytes.size());
    return out;
  }
};

/// A zero tensor of `dtype` and `shape`.
HostTensor zeros(DType dtype, std::vector<int64_t> shape);
/// A tensor whose element i is fn(i).
HostTensor filled(DType dtype, std::vector<int64_t> shape, const std::function<double(int64_t)> &fn);

/// Deterministic inputs for every argument of the function around `fusion`:
/// floats in [-2, 2) (none exactly 0), integers in [0, 8), booleans
/// alternating; seeded by `seed` and the argument number.
std::vector<HostTensor> defaultArgs(ir::FusionOp fusion, uint32_t seed = 1);

/// What one run produced: the fusion's results, then the status words
/// ({found, first bad index}) of its index checks.
struct SimOutcome {
  std::vector<HostTensor> results;
  std::vector<std::array<long long, 2>> statuses;
  std::string error; ///< non-empty: the run failed (the simulator's KernelError, a compile error)
};

/// Compiles cudaPrelude() + kernel.source with sim::load_module, copies
/// `args` into sim::allocate'd memory (results and status words too, so an
/// out-of-bounds access faults), packs the parameters in kernel.params
/// order, and launches with kernel.launch's grid and block. A shape-generic
/// kernel (emitted with `generic`, from this or another size's fusion) gets
/// its size classes, dynamic strides and scalar constants from `fusion`.
/// Status words start as {-1, -1}: the kernel must write them.
/// `grid` > 0 replaces the rule's grid (every kernel is grid-stride, so any
/// grid must give the same result).
SimOutcome runOnSim(const codegen::cuda::EmittedKernel &kernel, ir::FusionOp fusion,
                    const std::vector<HostTensor> &args, const codegen::KernelGeneralization *generic = nullptr,
                    uint32_t grid = 0);

/// Runs `fusion` through the CPU target (emitKernel, compileKernels, the
/// CPU backend's launch_kernel) on `args`. The fusion's context gets the
/// CPU target's dialects.
SimOutcome runOnCpu(ir::FusionOp fusion, const std::vector<HostTensor> &args);

/// The fuzzer's verdict for one float result (tests/fuzz/Oracle.h, after
/// torch._dynamo's same()): "" when allclose(sim, cpu, tol, tol); else ""
/// when rmse(ref, sim) <= m * rmse(ref, cpu) + tol / 10 with the float64
/// result `ref` (null: none, so a failure); tol = 1e-4 (1e-2 for 16-bit),
/// m = 3 for 16-bit or fewer than 1000 elements, else 2. NaN/Inf must sit at
/// the same places. Integer and boolean results must be equal.
std::string compareLikeFuzzer(const HostTensor &sim, const HostTensor &cpu, const HostTensor *ref);
/// "" when the two tensors have the same bytes, else the first difference.
std::string compareBits(const HostTensor &sim, const HostTensor &cpu);

/// One simulator-vs-CPU case (runSimCase).
struct SimCase {
  size_t fusion = 0; ///< which fusion of the fused text
  bool bits = false; ///< every result must match bit for bit (else the fuzzer's rule; integers always exactly)
  bool generic = false; ///< emit the row-split generalization (GeneralizeKernel.h) instead of the static kernel
  /// Non-empty (with generic): emit the kernel from this text's fusion (the
  /// same kernel at another size), run it on `text`'s.
  std::string kernel_text;
  uint32_t seed = 1; ///< defaultArgs' seed
  /// > 0: when the rule's grid is larger, also launch with this many blocks
  /// (the grid-stride loops then take several steps) and require the same
  /// bits as on the rule's grid.
  uint32_t small_grid = 1;
  /// Adjusts the default inputs (index tensors, special values).
  std::function<void(std::vector<HostTensor> &)> edit;

  SimCase &exact() {
    bits = true;
    return *this;
  }
  SimCase &alsoOnGrid(uint32_t blocks) {
    small_grid = blocks;
    return *this;
  }
  SimCase &at(size_t index) {
    fusion = index;
    return *this;
  }
  SimCase &inputs(std::function<void(std::vector<HostTensor> &)> fn) {
    edit = std::move(fn);
    return *this;
  }
  /// The row-split kernel, emitted from `from` (empty: this case's text).
  SimCase &rowSplit(std::string from = "") {
    generic = true;
    kernel_text = std::move(from);
    return *this;
  }
};

/// What a case ran: the kernel, the inputs and both outcomes.
struct SimCaseRun {
  codegen::cuda::EmittedKernel kernel;
  std::vector<HostTensor> args;
  SimOutcome sim, cpu;
};

/// Fuses `text`, emits fusion c.fusion, runs it on the simulator and the
/// CPU target with the same inputs, and EXPECTs every result to match (bits
/// or compareLikeFuzzer, with the float64 reference from toFloat64(text)
/// when allclose fails) and the status words to be equal.
SimCaseRun runSimCase(const std::string &text, const SimCase &c = {});

/// `text` with every "@NAME@" replaced by its value.
std::string substitute(std::string text, const std::vector<std::pair<std::string, std::string>> &values);

/// `text` with every f32/f16/bf16 tensor type made f64 (the float64 oracle
/// of the fuzzer's rule).
std::string toFloat64(const std::string &text);
/// `args` with every floating tensor converted to f64.
std::vector<HostTensor> argsToFloat64(const std::vector<HostTensor> &args);

} // namespace kiln::test
