// Reduction kernels: every fusion whose reductions (reduce_sum / max / min,
// argmax / argmin) reduce the same dims D of one space S, so each output
// row (a point of the kept dims) is an independent problem: row fusions
// (softmax, log_softmax, layer_norm and their backwards: the per-row values
// broadcast back inside the same kernel), reductions with prologues and
// epilogues, column and full reductions. A warp per row when the row is
// short (kWarpRowLimit), else a block per row with warp shuffles and a
// shared-memory step (prelude kiln_block_allreduce). Values of S are
// recomputed from the operands in each loop over the row (the row is
// re-read, from L1/L2 for short rows); per-row values live in registers.
// Deterministic: no atomics, the combine order depends only on the launch.
#include "CudaText.h"

#include "GeneralizeKernel.h"

#include "mlir/IR/BuiltinTypes.h"

namespace kiln::codegen::cuda::detail {

using namespace mlir;

namespace {

/// Threads of a warp-per-row block (8 rows per block).
constexpr int64_t kWarpRowsBlock = 256;
/// Threads of a block-per-row block: rows longer than kWarpRowLimit.
constexpr int64_t kBlockRowsBlock = 512;

struct RowPlan {
  std::vector<Expr> space;        ///< S
  std::vector<int64_t> reduced;   ///< D
  std::vector<int64_t> kept;      ///< the other dims, in order
  KernelKind kind = KernelKind::WarpRows;
  std::string lane, stride, leader; ///< the thread's position in its row group, the group's size, "lane 0"
};

bool sameShape(const std::vector<Expr> &a, const std::vector<Expr> &b) {
  if (a.size() != b.size())
    return false;
  for (size_t i = 0; i < a.size(); ++i)
    if (a[i].str() != b[i].str())
      return false;
  return true;
}

/// The space and dims every reduction shares, or failure.
LogicalResult planRows(const KernelContext &k, RowPlan &plan, std::string *error) {
  bool first = true;
  for (Operation *op : k.bodyOps) {
    if (!ir::isReductionOp(op))
      continue;
    std::vector<Expr> space = k.shapeOf(op->getOperand(0));
    std::vector<int64_t> dims(ir::reductionDims(op).begin(), ir::reductionDims(op).end());
    std::sort(dims.begin(), dims.end());
    if (first) {
      plan.space = space;
      plan.reduced = dims;
      first = false;
    } else if (!sameShape(space, plan.space) || dims != plan.reduced) {
      *error = "cuda emitter: " + op->getName().getStringRef().str() +
               " reduces other dims than the first reduction of its fusion (not supported yet)";
      return failure();
    }
  }
  for (int64_t d = 0; d < static_cast<int64_t>(plan.space.size()); ++d)
    if (!llvm::is_contained(plan.reduced, d))
      plan.kept.push_back(d);
  const Expr row = extentOf(plan.space, plan.reduced);
  plan.kind = row.value && *row.value <= kWarpRowLimit ? KernelKind::WarpRows : KernelKind::BlockRows;
  if (plan.kind == KernelKind::WarpRows) {
    plan.lane = "lane";
    plan.stride = "32";
    plan.leader = "lane == 0";
  } else {
    plan.lane = "threadIdx.x";
    plan.stride = "blockDim.x";
    plan.leader = "threadIdx.x == 0";
  }
  return success();
}

/// Coordinates of an outer-level tensor of rank `rank` (a reduced shape
/// drops D; a row shape [R.., 1..] keeps the kept dims first; rank(S):
/// aligned with S, size 1 on D).
std::vector<std::string> outerCoords(const RowPlan &plan, size_t rank) {
  std::vector<std::string> coords(rank);
  if (rank == plan.space.size()) {
    for (int64_t d : plan.kept)
      coords[d] = "c" + std::to_string(d);
    return coords;
  }
  for (size_t i = 0; i < plan.kept.size() && i < rank; ++i)
    coords[i] = "c" + std::to_string(plan.kept[i]);
  return coords;
}

/// The combine of reduction `op` and its identity, in compute type `type`.
struct Combine {
  std::string accType, identity, step, groupOp;
};

Combine combineOf(Operation *op, Type element, const std::string &x) {
  const std::string t = computeType(element);
  const bool isFloat = isa<FloatType>(element);
  const std::string lowest = isFloat ? literal(-INFINITY, element) : "(-9223372036854775807LL - 1)";
  const std::string highest = isFloat ? literal(INFINITY, element) : "9223372036854775807LL";
  if (isa<ir::ReduceSumOp>(op))
    return {t, literal(0.0, element), "acc += " + x + ";", "kiln_sum()"};
  if (isa<ir::ReduceMaxOp>(op))
    return {t, lowest, "acc = kiln_maximum(acc, " + x + ");", "kiln_max()"};
  if (isa<ir::ReduceMinOp>(op))
    return {t, highest, "acc = kiln_minimum(acc, " + x + ");", "kiln_min()"};
  const bool isMax = isa<ir::ArgMaxOp>(op);
  const std::string arg = "kiln_arg<" + t + ">", argOp = std::string("kiln_arg_op<") + (isMax ? "true" : "false") + ">()";
  const std::string c = "c" + std::to_string(ir::reductionDims(op)[0]);
  return {arg, arg + "{" + (isMax ? lowest : highest) + ", 0x7fffffffffffffffLL}",
          "acc = " + argOp + "(acc, " + arg + "{" + x + ", (long long)" + c + "});", argOp};
}

class RowEmitter {
public:
  RowEmitter(KernelContext &k, RowPlan &plan, Writer &w) : k(k), plan(plan), w(w), row(k, w) {
    row.kind = plan.kind;
    row.loadArgument = [this](unsigned i) {
      const TensorRef &t = this->k.inputs[i];
      return "kiln_load(" + t.ptr + "[" + offsetAt(t, outerCoords(this->plan, t.shape.size())) + "])";
    };
  }

  bool isInner(Value v) const { return sameShape(k.shapeOf(v), plan.space); }

  /// One row: outer values in program order, reductions as loops, then the stores.
  LogicalResult emitRow(std::string *error) {
    emitCoords(w, k, "row", plan.space, plan.kept);
    for (BlockArgument arg : k.fusion.getBodyBlock().getArguments())
      if (!isInner(arg) && !arg.use_empty() && failed(row.value(arg, error)))
        return failure();
    for (Operation *op : k.bodyOps) {
      if (ir::isReductionOp(op)) {
        if (failed(emitReduction(op, error)))
          return failure();
      } else if (!isInner(op->getResult(0)) && failed(row.value(op->getResult(0), error))) {
        return failure();
      }
    }
    return emitStores(error);
  }

  /// Shared scratch arrays of the block all-reduces, one per accumulator type.
  std::vector<std::pair<std::string, std::string>> scratch; // (type, array), first use order

private:
  /// for (e = lane; e < C; e += stride) { coords; `body` }
  template <class F> LogicalResult overRow(F body) {
    w.open("for (" + k.index + " e = " + plan.lane + "; e < " + extentOf(plan.space, plan.reduced).str() +
           "; e += " + plan.stride + ")");
    emitCoords(w, k, "e", plan.space, plan.reduced);
    BodyEmitter inner(k, w);
    inner.kind = plan.kind;
    inner.outer = &row.names;
    inner.coords = coordNames(plan.space.size());
    inner.loadArgument = [this](unsigned i) {
      const TensorRef &t = k.inputs[i];
      return "kiln_load(" + t.ptr + "[" + offsetAt(t, coordNames(plan.space.size())) + "])";
    };
    if (failed(body(inner)))
      return failure();
    w.close();
    return success();
  }

  /// The shared array of accumulator type `type` (one per type).
  std::string scratchFor(const std::string &type) {
    for (auto &[t, array] : scratch)
      if (t == type)
        return array;
    scratch.push_back({type, "kiln_scratch" + std::to_string(scratch.size())});
    return scratch.back().second;
  }

  LogicalResult emitReduction(Operation *op, std::string *error) {
    if (isa<ir::CumsumOp>(op)) {
      *error = k.unsupported(op, plan.kind);
      return failure();
    }
    const std::string name = valueName(k, op->getResult(0));
    Type element = cast<RankedTensorType>(op->getOperand(0).getType()).getElementType();
    Combine combine = combineOf(op, element, "x");
    w.open("");
    w.line(combine.accType + " acc = " + combine.identity + ";");
    LogicalResult loop = overRow([&](BodyEmitter &inner) -> LogicalResult {
      FailureOr<std::string> x = inner.value(op->getOperand(0), error);
      if (failed(x))
        return failure();
      w.line("const " + computeType(element) + " x = " + *x + ";");
      w.line(combine.step);
      return success();
    });
    if (failed(loop))
      return failure();
    if (plan.kind == KernelKind::WarpRows) {
      w.line("acc = kiln_warp_allreduce(acc, " + combine.groupOp + ");");
    } else {
      w.line("acc = kiln_block_allreduce(acc, " + combine.groupOp + ", " + scratchFor(combine.accType) + ");");
    }
    const bool arg = isa<ir::ArgMaxOp, ir::ArgMinOp>(op);
    Type result = cast<RankedTensorType>(op->getResult(0).getType()).getElementType();
    w.line(name + "_row = acc" + (arg ? ".i" : "") + ";");
    w.close();
    // Declared before the block above so it outlives it.
    pendingDecls.push_back(computeType(result) + " " + name + "_row;");
    row.names[op->getResult(0)] = name + "_row";
    return success();
  }

  LogicalResult emitStores(std::string *error) {
    std::vector<std::pair<unsigned, std::string>> outerStores;
    bool anyInner = false;
    for (auto [j, yielded] : llvm::enumerate(k.fusion.getYield()->getOperands())) {
      if (isInner(yielded)) {
        anyInner = true;
        continue;
      }
      FailureOr<std::string> v = row.value(yielded, error);
      if (failed(v))
        return failure();
      outerStores.push_back({static_cast<unsigned>(j), *v});
    }
    if (!outerStores.empty()) {
      w.open("if (" + plan.leader + ")");
      for (auto &[j, v] : outerStores) {
        const TensorRef &t = k.results[j];
        w.line("kiln_store(" + t.ptr + " + " + offsetAt(t, outerCoords(plan, t.shape.size())) + ", " + v + ");");
      }
      w.close();
    }
    if (!anyInner)
      return success();
    return overRow([&](BodyEmitter &inner) -> LogicalResult {
      for (auto [j, yielded] : llvm::enumerate(k.fusion.getYield()->getOperands())) {
        if (!isInner(yielded))
          continue;
        FailureOr<std::string> v = inner.value(yielded, error);
        if (failed(v))
          return failure();
        const TensorRef &t = k.results[j];
        w.line("kiln_store(" + t.ptr + " + " + offsetAt(t, coordNames(plan.space.size())) + ", " + *v + ");");
      }
      return success();
    });
  }

  KernelContext &k;
  RowPlan &plan;
  Writer &w;
  BodyEmitter row;

public:
  std::vector<std::string> pendingDecls;
};

LaunchRule rowRule(const KernelContext &k, const RowPlan &plan) {
  LaunchRule rule;
  rule.kind = plan.kind;
  rule.block_threads = plan.kind == KernelKind::WarpRows ? kWarpRowsBlock : kBlockRowsBlock;
  rule.work_per_block = plan.kind == KernelKind::WarpRows ? kWarpRowsBlock / 32 : 1;
  for (int64_t d : plan.kept) {
    if (plan.space[d].value)
      rule.static_work *= *plan.space[d].value;
    else
      rule.work_classes.push_back(std::stoi(plan.space[d].text.substr(4))); // "size<c>"
  }
  return rule;
}

} // namespace

FailureOr<EmittedKernel> emitRows(KernelContext &k, llvm::StringRef name, std::string *error) {
  RowPlan plan;
  if (failed(planRows(k, plan, error)))
    return failure();
  // The row body first (its shared scratch and per-row declarations are
  // known after it), then the kernel around it.
  Writer body;
  RowEmitter rows(k, plan, body);
  if (failed(rows.emitRow(error)))
    return failure();
  Writer w;
  w.open(signature(k, name));
  if (failed(emitIndexChecks(w, k, error)))
    return failure();
  for (auto &[type, array] : rows.scratch)
    w.line("__shared__ " + type + " " + array + "[32];");
  const std::string idx = k.index, rowsTotal = extentOf(plan.space, plan.kept).str();
  if (plan.kind == KernelKind::WarpRows) {
    w.line("const int lane = threadIdx.x & 31;");
    w.line("const " + idx + " warps = blockDim.x >> 5;");
    w.open("for (" + idx + " row = (" + idx + ")blockIdx.x * warps + (threadIdx.x >> 5); row < " + rowsTotal +
           "; row += (" + idx + ")gridDim.x * warps)");
  } else {
    w.open("for (" + idx + " row = blockIdx.x; row < " + rowsTotal + "; row += gridDim.x)");
  }
  for (const std::string &decl : rows.pendingDecls)
    w.line(decl);
  std::string text = w.text();
  // Indent the row body one level inside the row loop.
  std::string indented;
  size_t start = 0;
  const std::string &b = body.text();
  while (start < b.size()) {
    size_t end = b.find('\n', start);
    indented += "    " + b.substr(start, end - start + 1);
    start = end + 1;
  }
  return finishKernel(k, name, text + indented + "  }\n}\n", rowRule(k, plan));
}

} // namespace kiln::codegen::cuda::detail
