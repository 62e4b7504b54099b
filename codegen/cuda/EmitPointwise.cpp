// Pointwise kernels (elementwise fusions, gathers fused into them, several
// results): a grid-stride loop over the iteration space, a thread per
// element; 16-byte vector loads and stores (kiln_vec) when every tensor is
// contiguous in that space and the pointers are aligned at run time, with a
// scalar tail. Also the index checks' status words (gather, scatter_add).
#include "CudaText.h"

#include "GeneralizeKernel.h"

#include "mlir/IR/BuiltinTypes.h"

namespace kiln::codegen::cuda::detail {

using namespace mlir;

namespace {

/// Threads per block of pointwise, scan and scatter kernels.
constexpr int64_t kBlockThreads = 256;
/// Bytes one vector access moves (LDG.128).
constexpr int64_t kVectorBytes = 16;

/// Elements per vector access when every tensor is row-major in `space` and
/// there is no gather (its table is read at data-dependent positions);
/// 1 when not vectorized. Static kernels only.
int64_t vectorWidth(const KernelContext &k, const std::vector<Expr> &space, Expr count) {
  if (k.generic || !count.value)
    return 1;
  int64_t widest = 1;
  for (const auto *list : {&k.inputs, &k.results})
    for (const TensorRef &t : *list) {
      if (!isRowMajor(t, space))
        return 1;
      widest = std::max(widest, storageBytes(t.element));
    }
  for (Operation *op : k.bodyOps)
    if (isa<ir::GatherOp>(op))
      return 1;
  const int64_t width = kVectorBytes / widest;
  return width >= 2 && *count.value >= width ? width : 1;
}

/// The loop body for one element: the yielded values stored at `offset`
/// (or, vectorized, into element `lane` of each result's vector).
LogicalResult emitElement(Writer &w, KernelContext &k, const std::function<std::string(unsigned)> &load,
                          const std::vector<std::string> &coords,
                          const std::function<std::string(unsigned)> &storeTarget, std::string *error) {
  BodyEmitter body(k, w);
  body.loadArgument = load;
  body.coords = coords;
  for (auto [j, yielded] : llvm::enumerate(k.fusion.getYield()->getOperands())) {
    FailureOr<std::string> v = body.value(yielded, error);
    if (failed(v))
      return failure();
    w.line("kiln_store(" + storeTarget(j) + ", " + *v + ");");
  }
  return success();
}

std::string vecType(const TensorRef &t, int64_t width) {
  return "kiln_vec<" + storageType(t.element) + ", " + std::to_string(width) + ">";
}

/// The vector loop over [0, n / width), then the tail starts after it.
LogicalResult emitVectorLoop(Writer &w, KernelContext &k, int64_t width, std::string *error) {
  const std::string idx = k.index, n = std::to_string(width);
  std::string aligned;
  for (const auto *list : {&k.inputs, &k.results})
    for (const TensorRef &t : *list)
      aligned += std::string(aligned.empty() ? "" : " && ") + "(unsigned long long)" + t.ptr + " % " +
                 std::to_string(width * storageBytes(t.element)) + " == 0";
  w.line("const " + idx + " nvec = n / " + n + ";");
  w.line("const bool aligned = " + aligned + ";");
  w.line(idx + " tail = first;");
  w.open("if (aligned)");
  w.open("for (" + idx + " j = first; j < nvec; j += step)");
  for (const TensorRef &t : k.inputs)
    w.line("const " + vecType(t, width) + " l" + t.ptr.substr(2) + " = ((const " + vecType(t, width) + " *)" + t.ptr +
           ")[j];");
  for (const TensorRef &t : k.results)
    w.line(vecType(t, width) + " s" + t.ptr.substr(3) + ";");
  w.line("#pragma unroll");
  w.open("for (int lane = 0; lane < " + n + "; ++lane)");
  auto load = [](unsigned i) { return "kiln_load(l" + std::to_string(i) + ".v[lane])"; };
  auto store = [](unsigned j) { return "&s" + std::to_string(j) + ".v[lane]"; };
  if (failed(emitElement(w, k, load, {}, store, error)))
    return failure();
  w.close();
  for (const TensorRef &t : k.results)
    w.line("((" + vecType(t, width) + " *)" + t.ptr + ")[j] = s" + t.ptr.substr(3) + ";");
  w.close();
  w.line("tail = nvec * " + n + " + first;");
  w.close();
  return success();
}

/// The launch rule of a grid-stride kernel over `space` (`perItem`
/// elements per work item).
LaunchRule gridStrideRule(const KernelContext &k, KernelKind kind, const std::vector<Expr> &space,
                          const std::vector<int> *classes, int64_t perItem) {
  LaunchRule rule;
  rule.kind = kind;
  rule.block_threads = kBlockThreads;
  rule.work_per_block = kBlockThreads;
  for (size_t d = 0; d < space.size(); ++d) {
    if (space[d].value)
      rule.static_work *= *space[d].value;
    else
      rule.work_classes.push_back((*classes)[d]);
  }
  rule.static_work = (rule.static_work + perItem - 1) / perItem;
  (void)k;
  return rule;
}

} // namespace

FailureOr<EmittedKernel> emitPointwise(KernelContext &k, llvm::StringRef name, std::string *error) {
  if (k.results.empty()) {
    *error = "cuda emitter: " + k.fusion.getKernel().str() + " has no results";
    return failure();
  }
  const std::vector<Expr> space = k.results[0].shape;
  const int64_t rank = space.size();
  std::vector<int64_t> dims;
  for (int64_t d = 0; d < rank; ++d)
    dims.push_back(d);
  const Expr count = extentOf(space, dims);
  const int64_t width = vectorWidth(k, space, count);
  Writer w;
  w.open(signature(k, name));
  if (failed(emitIndexChecks(w, k, error)))
    return failure();
  const std::string idx = k.index;
  w.line("const " + idx + " n = " + count.str() + ";");
  w.line("const " + idx + " step = (" + idx + ")gridDim.x * blockDim.x;");
  w.line("const " + idx + " first = (" + idx + ")blockIdx.x * blockDim.x + threadIdx.x;");
  if (width > 1 && failed(emitVectorLoop(w, k, width, error)))
    return failure();
  w.open("for (" + idx + " i = " + (width > 1 ? "tail" : "first") + "; i < n; i += step)");
  emitCoords(w, k, "i", space, dims);
  const std::vector<std::string> coords = coordNames(rank);
  auto load = [&](unsigned i) {
    const TensorRef &t = k.inputs[i];
    return "kiln_load(" + t.ptr + "[" + (isRowMajor(t, space) ? std::string("i") : offsetAt(t, coords)) + "])";
  };
  auto store = [&](unsigned j) { return k.results[j].ptr + " + i"; };
  if (failed(emitElement(w, k, load, coords, store, error)))
    return failure();
  w.close();
  w.close();
  return finishKernel(k, name, w.text(),
                      gridStrideRule(k, KernelKind::Pointwise, space, k.generic ? &k.generic->results[0] : nullptr, width));
}

LogicalResult emitIndexChecks(Writer &w, KernelContext &k, std::string *error) {
  if (k.statuses.empty())
    return success();
  w.line("__shared__ long long kiln_check_scratch[32];");
  unsigned check = 0;
  for (Operation *op : k.bodyOps) {
    if (!ir::isIndexingOp(op))
      continue;
    Value index = op->getOperand(1);
    const int64_t dim = isa<ir::GatherOp>(op) ? cast<ir::GatherOp>(op).getDim() : cast<ir::ScatterAddOp>(op).getDim();
    const int64_t limit = isa<ir::GatherOp>(op) ? cast<RankedTensorType>(op->getOperand(0).getType()).getDimSize(dim)
                                                : cast<RankedTensorType>(op->getResult(0).getType()).getDimSize(dim);
    std::vector<Expr> shape = k.shapeOf(index);
    std::vector<int64_t> dims;
    for (size_t d = 0; d < shape.size(); ++d)
      dims.push_back(d);
    const std::vector<std::string> coords = coordNames(shape.size());
    // The index at the current coordinates: operands of the index's chain
    // have the index's shape (a gather's space), read at those coordinates.
    auto load = [&](unsigned i) { return "kiln_load(" + k.inputs[i].ptr + "[" + offsetAt(k.inputs[i], coords) + "])"; };
    // The index at position p of the index tensor (coordinates, then its chain).
    auto indexAt = [&]() -> FailureOr<std::string> {
      emitCoords(w, k, "p", shape, dims);
      BodyEmitter body(k, w);
      body.loadArgument = load;
      body.coords = coords;
      return body.value(index, error);
    };
    const std::string status = k.statuses[check++];
    w.open("if (blockIdx.x == 0)");
    w.line("long long bad = 0x7fffffffffffffffLL;");
    w.open("for (long long p = threadIdx.x; p < " + extentOf(shape, dims).str() + "; p += blockDim.x)");
    FailureOr<std::string> value = indexAt();
    if (failed(value))
      return failure();
    w.line("if ((" + *value + " < 0 || " + *value + " >= " + std::to_string(limit) + "LL) && p < bad) bad = p;");
    w.close();
    w.line("bad = kiln_block_allreduce(bad, kiln_min(), kiln_check_scratch);");
    w.open("if (threadIdx.x == 0)");
    w.line(status + "[0] = bad != 0x7fffffffffffffffLL ? 1 : 0;");
    w.line(status + "[1] = 0;");
    w.open("if (bad != 0x7fffffffffffffffLL)");
    w.line("const long long p = bad;");
    FailureOr<std::string> badValue = indexAt();
    if (failed(badValue))
      return failure();
    w.line(status + "[1] = " + *badValue + ";");
    w.close();
    w.close();
    w.close();
  }
  return success();
}

} // namespace kiln::codegen::cuda::detail
