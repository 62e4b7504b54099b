// kiln.cumsum (a kernel alone) and kiln.scatter_add (a fusion of its own),
// both deterministic without atomics:
// - cumsum: a block per line; each thread sums a contiguous chunk, thread 0
//   turns the chunk sums into offsets in thread order, each thread rescans
//   its chunk from its offset. Floats accumulate in double (as the CPU
//   target's cpu/EmitArgScan.cpp), integers in long long.
// - scatter_add: a thread per destination element, which adds the sources
//   whose index points at it in increasing index position (the CPU's
//   sequential row-major order restricted to that element: bit-identical).
#include "CudaText.h"

#include "mlir/IR/BuiltinTypes.h"

namespace kiln::codegen::cuda::detail {

using namespace mlir;

namespace {

/// Threads per block of scan and scatter kernels; the scan's chunk offsets
/// are kScanBlock doubles of static shared memory (2 KiB).
constexpr int64_t kScanBlock = 256;

std::vector<int64_t> allDims(size_t rank) {
  std::vector<int64_t> dims;
  for (size_t d = 0; d < rank; ++d)
    dims.push_back(d);
  return dims;
}

/// The only compute op of the body (constants aside), or null.
Operation *soleOp(const KernelContext &k) {
  Operation *sole = nullptr;
  for (Operation *op : k.bodyOps) {
    if (isa<ir::ConstantOp>(op))
      continue;
    if (sole)
      return nullptr;
    sole = op;
  }
  return sole;
}

/// A kernel's launch: a block of kScanBlock per `work` items of `per`.
LaunchRule blockRule(KernelKind kind, const std::vector<Expr> &shape, llvm::ArrayRef<int64_t> dims, int64_t per) {
  LaunchRule rule;
  rule.kind = kind;
  rule.block_threads = kScanBlock;
  rule.work_per_block = per;
  for (int64_t d : dims) {
    if (shape[d].value)
      rule.static_work *= *shape[d].value;
    else
      rule.work_classes.push_back(std::stoi(shape[d].text.substr(4))); // "size<c>"
  }
  return rule;
}

/// The C expression of operand `v` (a block argument or a constant) at `coords`.
FailureOr<std::string> operandAt(KernelContext &k, Value v, const std::vector<std::string> &coords, Operation *user,
                                 KernelKind kind, std::string *error) {
  if (auto arg = dyn_cast<BlockArgument>(v)) {
    const TensorRef &t = k.inputs[arg.getArgNumber()];
    return "kiln_load(" + t.ptr + "[" + offsetAt(t, coords) + "])";
  }
  if (auto c = dyn_cast<ir::ConstantOp>(v.getDefiningOp())) {
    auto it = k.scalarArgs.find(c);
    Type element = cast<RankedTensorType>(v.getType()).getElementType();
    return it != k.scalarArgs.end() ? it->second : literal(c.getValue().convertToDouble(), element);
  }
  *error = k.unsupported(user, kind) + " (an operand computed inside the fusion)";
  return failure();
}

} // namespace

FailureOr<EmittedKernel> emitScan(KernelContext &k, llvm::StringRef name, std::string *error) {
  auto scan = dyn_cast_or_null<ir::CumsumOp>(soleOp(k));
  if (!scan || k.fusion.getNumResults() != 1 || k.fusion.getYield()->getOperand(0) != scan.getResult()) {
    *error = "cuda emitter: kiln.cumsum in a scan fusion with other ops is not supported yet";
    return failure();
  }
  const std::vector<Expr> shape = k.shapeOf(scan.getInput());
  const int64_t dim = scan.getDims()[0];
  std::vector<int64_t> lines;
  for (int64_t d = 0; d < static_cast<int64_t>(shape.size()); ++d)
    if (d != dim)
      lines.push_back(d);
  Type element = cast<RankedTensorType>(scan.getType()).getElementType();
  const std::string acc = isa<FloatType>(element) ? "double" : "long long";
  const std::string idx = k.index, length = shape[dim].str(), c = "c" + std::to_string(dim);
  std::vector<std::string> coords = coordNames(shape.size());
  FailureOr<std::string> x = operandAt(k, scan.getInput(), coords, scan, KernelKind::Scan, error);
  if (failed(x))
    return failure();
  const TensorRef &out = k.results[0];
  Writer w;
  w.open(signature(k, name));
  w.line("__shared__ " + acc + " kiln_chunk[" + std::to_string(kScanBlock) + "];");
  w.line("const " + idx + " chunk = (" + length + " + blockDim.x - 1) / blockDim.x;");
  w.line("const " + idx + " begin = threadIdx.x * chunk;");
  w.line("const " + idx + " end = begin + chunk < " + length + " ? begin + chunk : " + length + ";");
  w.open("for (" + idx + " line = blockIdx.x; line < " + extentOf(shape, lines).str() + "; line += gridDim.x)");
  emitCoords(w, k, "line", shape, lines);
  w.line(acc + " sum = 0;");
  w.open("for (" + idx + " " + c + " = begin; " + c + " < end; ++" + c + ")");
  w.line("sum += " + *x + ";");
  w.close();
  w.line("kiln_chunk[threadIdx.x] = sum;");
  w.line("__syncthreads();");
  w.open("if (threadIdx.x == 0)");
  w.line(acc + " run = 0;");
  w.open("for (unsigned t = 0; t < blockDim.x; ++t)");
  w.line("const " + acc + " s = kiln_chunk[t];");
  w.line("kiln_chunk[t] = run;");
  w.line("run += s;");
  w.close();
  w.close();
  w.line("__syncthreads();");
  w.line(acc + " run = kiln_chunk[threadIdx.x];");
  w.open("for (" + idx + " " + c + " = begin; " + c + " < end; ++" + c + ")");
  w.line("run += " + *x + ";");
  w.line("kiln_store(" + out.ptr + " + " + offsetAt(out, coords) + ", (" + computeType(element) + ")run);");
  w.close();
  w.line("__syncthreads();  // kiln_chunk is rewritten for the next line");
  w.close();
  w.close();
  return finishKernel(k, name, w.text(), blockRule(KernelKind::Scan, shape, lines, 1));
}

FailureOr<EmittedKernel> emitScatterAdd(KernelContext &k, llvm::StringRef name, std::string *error) {
  auto scatter = dyn_cast_or_null<ir::ScatterAddOp>(soleOp(k));
  if (!scatter || k.fusion.getNumResults() != 1 || k.fusion.getYield()->getOperand(0) != scatter.getResult()) {
    *error = "cuda emitter: kiln.scatter_add in a scatter-add fusion with other ops is not supported yet";
    return failure();
  }
  const std::vector<Expr> shape = k.shapeOf(scatter.getResult());
  const std::vector<Expr> indexShape = k.shapeOf(scatter.getIndex());
  const int64_t dim = scatter.getDim(), rank = shape.size();
  Type element = cast<RankedTensorType>(scatter.getType()).getElementType();
  const std::string idx = k.index;
  const std::vector<std::string> coords = coordNames(rank);
  // The index and source are read at (c.., p, c..): p runs along `dim`.
  std::vector<std::string> at = coords;
  at[dim] = "p";
  FailureOr<std::string> base = operandAt(k, scatter.getInput(), coords, scatter, KernelKind::ScatterAdd, error);
  FailureOr<std::string> index = operandAt(k, scatter.getIndex(), at, scatter, KernelKind::ScatterAdd, error);
  FailureOr<std::string> src = operandAt(k, scatter.getSrc(), at, scatter, KernelKind::ScatterAdd, error);
  if (failed(base) || failed(index) || failed(src))
    return failure();
  Writer w;
  w.open(signature(k, name));
  if (failed(emitIndexChecks(w, k, error)))
    return failure();
  const Expr count = extentOf(shape, allDims(rank));
  w.open("for (" + idx + " i = (" + idx + ")blockIdx.x * blockDim.x + threadIdx.x; i < " + count.str() + "; i += (" +
         idx + ")gridDim.x * blockDim.x)");
  emitCoords(w, k, "i", shape, allDims(rank));
  w.line(computeType(element) + " acc = " + *base + ";");
  std::string inside;
  for (int64_t d = 0; d < rank; ++d)
    if (d != dim)
      inside += " && c" + std::to_string(d) + " < " + indexShape[d].str();
  w.open("if (true" + inside + ")");
  w.open("for (" + idx + " p = 0; p < " + indexShape[dim].str() + "; ++p)");
  w.line("if (" + *index + " == (long long)c" + std::to_string(dim) + ") acc += " + *src + ";");
  w.close();
  w.close();
  w.line("kiln_store(" + k.results[0].ptr + " + i, acc);");
  w.close();
  w.close();
  return finishKernel(k, name, w.text(), blockRule(KernelKind::ScatterAdd, shape, allDims(rank), kScanBlock));
}

} // namespace kiln::codegen::cuda::detail
