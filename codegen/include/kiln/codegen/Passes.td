//===- Passes.td - Kiln codegen passes (CPU target) --------*- tablegen -*-===//
//
// The passes of the CPU target's kernel lowering (cpu/LowerToLLVM.cpp runs
// them; kiln-opt registers them). They work on the kernel functions that
// cpu/EmitKernel.cpp makes from kiln.fusion regions (linalg on tensors, then
// memrefs), not on the kiln dialect: hence the `kiln-cpu-` prefix, against
// passes/'s `kiln-` passes on kiln ops (kiln-fuse forms kiln.fusion
// regions; kiln-cpu-fuse-linalg-elementwise fuses linalg ops inside one
// kernel). One file each in cpu/passes/, DEBUG_TYPE equal to the name, a lit
// test in tests/lit/codegen/.
//
//===----------------------------------------------------------------------===//

#ifndef KILN_CODEGEN_PASSES_TD
#define KILN_CODEGEN_PASSES_TD

include "mlir/Pass/PassBase.td"

def KilnCpuFuseLinalgElementwisePass
    : Pass<"kiln-cpu-fuse-linalg-elementwise", "mlir::func::FuncOp"> {
  let summary = "linalg elementwise fusion inside one kernel, with Kiln's control function";
  let description = [{
    MLIR's linalg-fuse-elementwise-ops patterns (producer generics into
    consumer generics, reshapes folded by expansion, constant folding). A
    producer with one data use is fused (a tensor.dim is not a use). In a
    row kernel (`kiln.rows`), a producer read through a broadcasting map is
    fused only if it is a copy (sqrt(var + eps) stays once per row), and one
    read elementwise is fused if it has one use or is cheap (<= 4 arith ops,
    no division or math function: then recomputed in each consumer).
  }];
  let dependentDialects = ["::mlir::linalg::LinalgDialect", "::mlir::tensor::TensorDialect",
                           "::mlir::affine::AffineDialect", "::mlir::arith::ArithDialect"];
}

def KilnCpuMergeGenericsPass : Pass<"kiln-cpu-merge-generics", "mlir::func::FuncOp"> {
  let summary = "Merge elementwise linalg.generic ops over one iteration space into one multi-result generic";
  let description = [{
    After kiln-cpu-fuse-linalg-elementwise. An ordinary kernel whose linalg
    ops are all elementwise generics over one iteration space (values passed
    between them through identity maps) becomes one generic with a result
    per stored value: each element's whole chain is computed in registers,
    a value with several consumers once. In a row kernel, the generics that
    compute stored [R.., C..] results over the largest iteration space are
    merged, so kiln-cpu-tile-rows tiles one root. Otherwise nothing changes.
  }];
  let dependentDialects = ["::mlir::linalg::LinalgDialect"];
}

def KilnCpuCollapseReductionsPass : Pass<"kiln-cpu-collapse-reductions", "mlir::func::FuncOp"> {
  let summary = "Full reductions over contiguous tensors loop over one flat dim";
  let description = [{
    After kiln-cpu-merge-generics. A linalg.generic whose iterators are all
    reductions (rank >= 2), whose inputs are read through identity maps from
    contiguous tensors and whose results are 0-d has its iteration space
    collapsed to one dim (linalg::collapseOpIterationDims): the loop
    vectorizer then keeps many partial sums, not one accumulator.
  }];
  let dependentDialects = ["::mlir::linalg::LinalgDialect", "::mlir::tensor::TensorDialect"];
}

def KilnCpuTileRowsPass : Pass<"kiln-cpu-tile-rows", "mlir::func::FuncOp"> {
  let summary = "Tile row kernels over rows and fuse their producers into the loop";
  let description = [{
    Row kernels (`kiln.rows` = R): the linalg op with the largest iteration
    space is tiled over its row dims (the last one by the largest divisor
    whose tile is at most 8 KiB) and its producers are fused into the loop
    (scf::tileConsumerAndFuseProducersUsingSCF). Other kernels: unchanged.
  }];
  let dependentDialects = ["::mlir::scf::SCFDialect", "::mlir::tensor::TensorDialect",
                           "::mlir::linalg::LinalgDialect"];
}

def KilnCpuHoistTileBuffersPass : Pass<"kiln-cpu-hoist-tile-buffers", "mlir::func::FuncOp"> {
  let summary = "Allocate row tiles' statically shaped buffers once per kernel call";
  let description = [{
    After bufferization, in row kernels: each statically shaped memref.alloc
    without operands inside an scf.for moves to the function's entry block.
  }];
  let dependentDialects = ["::mlir::memref::MemRefDialect"];
}

def KilnCpuInPlaceBranchPass : Pass<"kiln-cpu-in-place-branch", "mlir::func::FuncOp"> {
  let summary = "A branch for kernels the runtime runs with results over operands";
  let description = [{
    After bufferization, kernels tagged `kiln.in_place = [k1, r1, ...]`:
    the body is wrapped in an scf.if on equal aligned pointers of every
    pair; the then-branch reads each operand k through its result r (directly
    when the body is one elementwise loop, else through a copy), the else
    branch is the body as it was. The tag is removed.
  }];
  let dependentDialects = ["::mlir::scf::SCFDialect", "::mlir::memref::MemRefDialect",
                           "::mlir::arith::ArithDialect"];
}

#endif // KILN_CODEGEN_PASSES_TD
