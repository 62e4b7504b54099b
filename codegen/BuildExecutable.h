// codegen/BuildExecutable.h - func @forward / @backward ->
// runtime::LaunchExecutable (private to codegen/; target-neutral: kernels
// come from a KernelLibrary through a KernelBinder).
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "mlir/Dialect/Func/IR/FuncOps.h"

#include "kiln/codegen/Compiler.h"
#include "kiln/codegen/Target.h"
#include "kiln/ir/KilnOps.h"
#include "kiln/runtime/LaunchExecutable.h"

namespace kiln::codegen {

/// Builds the launch list of `func` (after the pipeline: only kiln.fusion,
/// kiln.matmul, the conv and max pool ops, kiln.transpose/broadcast/reshape,
/// func.return) for `device`:
/// the executable allocates from that device's backend and launches there.
/// Kernels come from `library`, which the executable keeps alive. Null and
/// `*error` for an op it cannot run.
std::shared_ptr<runtime::LaunchExecutable> buildExecutable(mlir::func::FuncOp func,
                                                           std::shared_ptr<const KernelLibrary> library,
                                                           Device device, std::string *error);

/// Which compiled kernel runs a kiln.fusion, and the runtime scalars
/// appended to its operands (shape-generic kernels of a target whose
/// library does not bind them, KernelLibrary::bindsScalars); a null
/// `kernel` with `*error` set when there is none.
struct KernelBinding {
  runtime::KernelHandle kernel;
  std::vector<std::pair<DType, double>> scalars;
  /// The operand strides the kernel was compiled for (kDynamic: any); empty:
  /// operandStrides(fusion).
  std::vector<std::vector<int64_t>> strides;
  /// The kernel may run with results over operands (inPlacePairs).
  std::vector<runtime::InPlace> inPlace;
  /// The kernel's function in its library (dedup: fusions may share one);
  /// recorded for exported artifacts (Builder::setKernelSymbol). Empty: the
  /// fusion's kernel name.
  std::string symbol;
};
using KernelBinder = std::function<KernelBinding(kiln::ir::FusionOp, std::string *error)>;

/// buildExecutable with kernels chosen by `bind` instead of by name.
/// `target` (optional): a kiln.fusion that is a GEMM epilogue of its
/// kiln.matmul (matchGemmEpilogue) runs as the target's GEMM-with-epilogue
/// launch (Target::gemmEpilogueKernel) instead of a GEMM and a kernel; each
/// such fold is appended to `folded` as "<fusion>: <epilogue>". `launches`
/// (optional) receives a LaunchInfo per launch (kernels, GEMMs, convs,
/// pooling), in order.
std::shared_ptr<runtime::LaunchExecutable> buildExecutable(mlir::func::FuncOp func, const KernelBinder &bind,
                                                           std::shared_ptr<const void> keepAlive, Device device,
                                                           std::string *error, const Target *target = nullptr,
                                                           std::vector<std::string> *folded = nullptr,
                                                           std::vector<LaunchInfo> *launches = nullptr);

} // namespace kiln::codegen
