// Shape-generic kernels (CpuBackend.h, KernelGeneralization): which dims of
// a kiln.fusion's kernel are dynamic (`?`) and which constants become
// runtime scalar arguments — for automatic dynamic shapes (generalizeKernel:
// a fusion compared with the same fusion at another size) and for row-split
// kernels (dim 0 only). EmitKernel.cpp emits the kernel from it.
#include "GeneralizeKernel.h"

#include "KernelAbi.h"

#include <map>

#include "mlir/IR/BuiltinTypes.h"

namespace kiln::codegen {

using namespace mlir;

bool isRowSplittable(ir::FusionOp fusion) {
  int64_t n = -1;
  auto sameDim0 = [&](Type type) {
    auto t = dyn_cast<RankedTensorType>(type);
    if (!t || t.getRank() < 1 || !t.hasStaticShape())
      return false;
    if (n < 0)
      n = t.getDimSize(0);
    return t.getDimSize(0) == n;
  };
  for (Value v : fusion.getInputs())
    if (!sameDim0(v.getType()))
      return false;
  for (Value v : fusion.getResults())
    if (!sameDim0(v.getType()))
      return false;
  for (Operation &op : fusion.getBodyBlock().without_terminator()) {
    if (op.getNumResults() != 1 || !sameDim0(op.getResult(0).getType()) || ir::isIndexingOp(&op))
      return false;
    if (llvm::is_contained(ir::reductionDims(&op), 0))
      return false;
  }
  return n >= 2;
}

KernelGeneralization rowSplitGeneralization(ir::FusionOp fusion) {
  auto dim0 = [](Type type) {
    std::vector<int> classes(cast<RankedTensorType>(type).getRank(), -1);
    classes[0] = 0;
    return classes;
  };
  KernelGeneralization g;
  for (Value v : fusion.getInputs())
    g.inputs.push_back(dim0(v.getType()));
  for (Value v : fusion.getResults())
    g.results.push_back(dim0(v.getType()));
  for (Operation &op : fusion.getBodyBlock().without_terminator())
    g.body.push_back(dim0(op.getResult(0).getType()));
  g.inputStrides = operandStrides(fusion);
  g.sources = {{0, 0}};
  return g;
}

/// The size of the dim an indexing op (kiln.gather, kiln.scatter_add)
/// indexes: its index check's static range.
static int64_t indexedSize(Operation *op) {
  const int64_t dim = isa<ir::GatherOp>(op) ? cast<ir::GatherOp>(op).getDim() : cast<ir::ScatterAddOp>(op).getDim();
  return cast<RankedTensorType>(op->getOperand(0).getType()).getDimSize(dim);
}

FailureOr<KernelGeneralization> generalizeKernel(ir::FusionOp fusion, ir::FusionOp reference, std::string *why) {
  auto fail = [&](const std::string &message) -> FailureOr<KernelGeneralization> {
    if (why)
      *why = "kernel " + fusion.getKernel().str() + ": " + message;
    return failure();
  };
  KernelGeneralization g;
  std::map<std::pair<int64_t, int64_t>, int> classOf;
  // Per dim: -1 if both sizes agree, else the class of the (size, size) pair.
  auto classes = [&](Type a, Type r, std::vector<int> *out) {
    auto ta = dyn_cast<RankedTensorType>(a), tr = dyn_cast<RankedTensorType>(r);
    if (!ta || !tr || ta.getRank() != tr.getRank() || ta.getElementType() != tr.getElementType())
      return false;
    for (int64_t d = 0; d < ta.getRank(); ++d) {
      if (ta.getDimSize(d) == tr.getDimSize(d)) {
        out->push_back(-1);
        continue;
      }
      auto key = std::make_pair(ta.getDimSize(d), tr.getDimSize(d));
      auto it = classOf.try_emplace(key, static_cast<int>(classOf.size())).first;
      out->push_back(it->second);
    }
    return true;
  };
  if (fusion.getInputs().size() != reference.getInputs().size() ||
      fusion.getNumResults() != reference.getNumResults())
    return fail("a different number of operands or results at the other size");
  for (auto [a, r] : llvm::zip(fusion.getInputs(), reference.getInputs())) {
    g.inputs.emplace_back();
    if (!classes(a.getType(), r.getType(), &g.inputs.back()))
      return fail("an operand type differs in more than its sizes");
  }
  {
    std::vector<std::vector<int64_t>> mine = operandStrides(fusion), theirs = operandStrides(reference);
    for (size_t i = 0; i < mine.size(); ++i) {
      for (size_t d = 0; d < mine[i].size(); ++d)
        if (mine[i][d] != theirs[i][d])
          mine[i][d] = ShapedType::kDynamic;
      g.inputStrides.push_back(mine[i]);
    }
  }
  for (auto [a, r] : llvm::zip(fusion.getResults(), reference.getResults())) {
    g.results.emplace_back();
    if (!classes(a.getType(), r.getType(), &g.results.back()))
      return fail("a result type differs in more than its sizes");
  }
  // The body: the same ops with the same attributes, except float constants.
  auto &ops = fusion.getBodyBlock().getOperations(), &refOps = reference.getBodyBlock().getOperations();
  if (ops.size() != refOps.size())
    return fail("a different body at the other size");
  // Operands are compared by position: block argument number or body index.
  llvm::DenseMap<Value, int> where, refWhere;
  for (BlockArgument arg : fusion.getBodyBlock().getArguments())
    where[arg] = -1 - static_cast<int>(arg.getArgNumber());
  for (BlockArgument arg : reference.getBodyBlock().getArguments())
    refWhere[arg] = -1 - static_cast<int>(arg.getArgNumber());
  int position = 0;
  for (auto [a, r] : llvm::zip(ops, refOps)) {
    if (a.getName() != r.getName() || a.getNumOperands() != r.getNumOperands() ||
        a.getNumResults() != r.getNumResults())
      return fail("a different body at the other size");
    for (auto [x, y] : llvm::zip(a.getOperands(), r.getOperands()))
      if (where.lookup(x) != refWhere.lookup(y))
        return fail("a different body at the other size");
    if (a.getNumResults() == 1) {
      where[a.getResult(0)] = position;
      refWhere[r.getResult(0)] = position;
    }
    if (isa<ir::YieldOp>(a))
      break;
    if (ir::isIndexingOp(&a) && indexedSize(&a) != indexedSize(&r))
      return fail("the indexed dim of '" + a.getName().getStringRef().str() +
                  "' differs at the other size (its index check is static)");
    g.body.emplace_back();
    if (!classes(a.getResult(0).getType(), r.getResult(0).getType(), &g.body.back()))
      return fail("a body value differs in more than its sizes");
    if (a.getAttrDictionary() != r.getAttrDictionary()) {
      auto c = dyn_cast<ir::ConstantOp>(a);
      Type element = c ? cast<RankedTensorType>(c.getType()).getElementType() : Type();
      if (!c || !(element.isF32() || element.isF64()))
        return fail("op " + a.getName().getStringRef().str() + " has different attributes at the other size");
      g.scalarConstants.push_back(position);
    }
    ++position;
  }
  // Every size class must be readable from an argument.
  g.sources.assign(classOf.size(), {-1, -1});
  auto offer = [&](const std::vector<int> &dims, int arg) {
    for (auto [d, c] : llvm::enumerate(dims))
      if (c >= 0 && g.sources[c].first < 0)
        g.sources[c] = {arg, static_cast<int>(d)};
  };
  for (auto [i, dims] : llvm::enumerate(g.inputs))
    offer(dims, static_cast<int>(i));
  for (auto [j, dims] : llvm::enumerate(g.results))
    offer(dims, static_cast<int>(g.inputs.size() + j));
  for (auto [c, source] : llvm::enumerate(g.sources))
    if (source.first < 0)
      return fail("a dynamic size inside the body is not the size of any kernel argument");
  return g;
}

std::vector<double> scalarArguments(ir::FusionOp fusion, const KernelGeneralization &generic) {
  SmallVector<Operation *> bodyOps;
  for (Operation &op : fusion.getBodyBlock().without_terminator())
    bodyOps.push_back(&op);
  std::vector<double> values;
  for (int k : generic.scalarConstants)
    values.push_back(cast<ir::ConstantOp>(bodyOps[k]).getValue().convertToDouble());
  return values;
}

} // namespace kiln::codegen
