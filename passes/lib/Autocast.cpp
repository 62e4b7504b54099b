// kiln-autocast: mixed precision by the autocast policy table.
//
// Recipe (per func.func, ops in program order): look up the op's policy in
// kiln::ir::autocastPolicy (ir/AutocastPolicy.h, the table eager autocast
// uses too); pick the element type it computes in (the autocast dtype, f32,
// or the widest of its strong float operands); convert the float operands
// that differ (one cached kiln.convert per value and type, pushed through
// layout ops to their source; splat constants are re-created in the new
// type); retype its float results. func.return converts back to the
// function's result types. Then redundant converts are removed and the
// module is tagged with `kiln.autocast` for reports. Layout ops and
// constants left without uses (their casts were cloned) are erased.
//
// The semantics follow PyTorch's autocast (torch/amp, "CPU Ops that can
// autocast to bfloat16" / "to float32" / promotion): GEMMs run in the lower
// precision, numerically sensitive ops in f32, and mixing types promotes.
#include "kiln/ir/AutocastPolicy.h"
#include "kiln/ir/KilnOps.h"
#include "kiln/passes/Passes.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinAttributes.h"
#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/MapVector.h"
#include "llvm/Support/Debug.h"

#define DEBUG_TYPE "kiln-autocast"

namespace kiln::passes {
#define GEN_PASS_DEF_KILNAUTOCASTPASS
#include "kiln/passes/Passes.h.inc"
} // namespace kiln::passes

namespace kiln::passes {
namespace {

using namespace mlir;

Type elementOf(Value v) { return cast<RankedTensorType>(v.getType()).getElementType(); }

bool isLowFloat(Type t) { return t.isBF16() || t.isF16(); }

/// The type both float types convert to exactly: the wider one; f16 and bf16
/// (neither holds the other) meet in f32, as in PyTorch's type promotion.
Type promote(Type a, Type b) {
  if (!a)
    return b;
  if (a == b)
    return a;
  unsigned wa = a.getIntOrFloatBitWidth(), wb = b.getIntOrFloatBitWidth();
  if (wa != wb)
    return wa > wb ? a : b;
  return Float32Type::get(a.getContext());
}

/// `from -> to` keeps every value exactly (so a convert back is the identity).
bool isExactWidening(Type from, Type to) { return isLowFloat(from) && to.isF32(); }

/// Autocasts one function body in place.
class Autocaster {
public:
  Autocaster(func::FuncOp func, Type low) : func_(func), low_(low), f32_(Float32Type::get(func.getContext())) {}

  LogicalResult run() {
    Block &body = func_.getBody().front();
    SmallVector<Operation *> ops;
    for (Operation &op : body)
      ops.push_back(&op);
    for (Operation *op : ops) {
      if (auto ret = dyn_cast<func::ReturnOp>(op)) {
        // Outputs and gradients keep their types.
        for (auto [i, want] : llvm::enumerate(func_.getFunctionType().getResults()))
          if (ret.getOperand(i).getType() != want)
            ret.setOperand(i, castTo(ret.getOperand(i), cast<RankedTensorType>(want).getElementType()));
        continue;
      }
      if (isa<ir::FusionOp>(op))
        return op->emitOpError("kiln-autocast must run before kiln-fuse (it casts the ops of @joint)");
      if (op->getNumResults() == 0 || isa<ir::ConstantOp, ir::ConvertOp>(op))
        continue;
      autocastOp(op);
    }
    // The float32 marks are consumed here (later passes and kernels never see them).
    body.walk([](Operation *op) { op->removeAttr(ir::kAutocastFp32Attr); });
    // Layout ops and constants whose uses all moved to their cast clones.
    for (Operation &op : llvm::make_early_inc_range(llvm::reverse(body)))
      if ((isa<ir::ConstantOp>(op) || ir::isLayoutOp(&op)) && op.use_empty())
        op.erase();
    return success();
  }

private:
  /// Casts `op`'s float operands to the type its policy asks for and
  /// retypes its float results.
  void autocastOp(Operation *op) {
    SmallVector<unsigned> floats;
    for (auto [i, operand] : llvm::enumerate(op->getOperands()))
      if (isa<FloatType>(elementOf(operand)))
        floats.push_back(i);
    if (floats.empty())
      return;
    StringRef name = op->getName().stripDialect();
    ir::CastPolicy policy = ir::autocastPolicy(std::string_view(name.data(), name.size()));
    // Inside an op eager autocast runs in float32 (softmax's x - max, a
    // layer norm's centring, their backwards, gradient sums): float32 too.
    if (op->hasAttr(ir::kAutocastFp32Attr) && policy != ir::CastPolicy::LowerPrecision)
      policy = ir::CastPolicy::Float32;
    Type target;
    switch (policy) {
    case ir::CastPolicy::LowerPrecision:
      target = low_;
      break;
    case ir::CastPolicy::Float32:
      target = f32_;
      break;
    case ir::CastPolicy::Promote:
    case ir::CastPolicy::None: {
      // Weak (constant) operands follow the strong ones, like Python scalars.
      Type strong, any;
      for (unsigned i : floats) {
        Value v = op->getOperand(i);
        any = promote(any, elementOf(v));
        if (!isWeak(v))
          strong = promote(strong, elementOf(v));
      }
      target = strong ? strong : any;
      break;
    }
    }
    for (unsigned i : floats)
      op->setOperand(i, castTo(op->getOperand(i), target));
    for (OpResult r : op->getResults())
      if (isa<FloatType>(elementOf(r)))
        r.setType(cast<RankedTensorType>(r.getType()).clone(target));
  }

  /// A splat constant, or a layout op of one.
  static bool isWeak(Value v) {
    Operation *def = v.getDefiningOp();
    if (!def)
      return false;
    if (isa<ir::ConstantOp>(def))
      return true;
    return ir::isLayoutOp(def) && isWeak(def->getOperand(0));
  }

  /// `v` with element type `element`: itself, a cached cast, a constant
  /// re-created in `element`, the layout op applied to the cast source, the
  /// source of an exact widening, or a new kiln.convert right after `v`'s
  /// definition (so it dominates every later use).
  Value castTo(Value v, Type element) {
    auto type = cast<RankedTensorType>(v.getType());
    if (type.getElementType() == element || !isa<FloatType>(type.getElementType()))
      return v;
    auto key = std::make_pair(v, element);
    if (Value cached = casts_.lookup(key))
      return cached;
    RankedTensorType newType = type.clone(element);
    OpBuilder b(v.getContext());
    Operation *def = v.getDefiningOp();
    Value result;
    if (auto constant = dyn_cast_or_null<ir::ConstantOp>(def)) {
      b.setInsertionPointAfter(def);
      result = b.create<ir::ConstantOp>(def->getLoc(), newType, constant.getValueAttr());
    } else if (def && ir::isLayoutOp(def)) {
      Value source = castTo(def->getOperand(0), element);
      b.setInsertionPointAfter(def);
      Operation *clone = b.clone(*def);
      clone->setOperand(0, source);
      clone->getResult(0).setType(newType);
      result = clone->getResult(0);
    } else if (auto convert = dyn_cast_or_null<ir::ConvertOp>(def);
               convert && isExactWidening(elementOf(convert.getInput()), type.getElementType())) {
      result = castTo(convert.getInput(), element);
    } else {
      if (def)
        b.setInsertionPointAfter(def);
      else
        b.setInsertionPointToStart(cast<BlockArgument>(v).getOwner());
      result = b.create<ir::ConvertOp>(v.getLoc(), newType, v);
    }
    casts_[key] = result;
    return result;
  }

  func::FuncOp func_;
  Type low_, f32_;
  llvm::DenseMap<std::pair<Value, Type>, Value> casts_;
};

/// Removes converts to the same type and converts of exact widenings
/// (u -> f32 -> t becomes u -> t, or u itself when t is u's type), then
/// unused converts. Returns how many converts were erased.
int64_t removeRedundantCasts(func::FuncOp func) {
  int64_t removed = 0;
  bool changed = true;
  while (changed) {
    changed = false;
    SmallVector<ir::ConvertOp> converts(func.getBody().front().getOps<ir::ConvertOp>());
    for (ir::ConvertOp convert : converts) {
      if (auto inner = convert.getInput().getDefiningOp<ir::ConvertOp>();
          inner && isExactWidening(elementOf(inner.getInput()), elementOf(inner.getResult()))) {
        convert.getInputMutable().assign(inner.getInput());
        changed = true;
      }
      if (convert.getInput().getType() == convert.getType()) {
        convert.getResult().replaceAllUsesWith(convert.getInput());
        changed = true;
      }
      if (convert.getResult().use_empty()) {
        convert.erase();
        ++removed;
        changed = true;
      }
    }
  }
  return removed;
}

class KilnAutocastPass : public impl::KilnAutocastPassBase<KilnAutocastPass> {
public:
  using KilnAutocastPassBase::KilnAutocastPassBase;

  void runOnOperation() override {
    ModuleOp module = getOperation();
    MLIRContext *ctx = module.getContext();
    Type low;
    if (dtype == "bf16")
      low = BFloat16Type::get(ctx);
    else if (dtype == "f16")
      low = Float16Type::get(ctx);
    else {
      module.emitError() << "kiln-autocast: dtype must be bf16 or f16, got '" << dtype << "'";
      return signalPassFailure();
    }
    auto countConverts = [&] {
      int64_t n = 0;
      module.walk([&](ir::ConvertOp) { ++n; });
      return n;
    };
    const int64_t before = countConverts();
    int64_t removed = 0;
    for (auto func : module.getOps<func::FuncOp>()) {
      if (func.isExternal())
        continue;
      if (!func.getBody().hasOneBlock()) {
        func.emitOpError("kiln-autocast expects a single-block function");
        return signalPassFailure();
      }
      if (failed(Autocaster(func, low).run()))
        return signalPassFailure();
      removed += removeRedundantCasts(func);
    }
    const int64_t inserted = countConverts() - before;

    // Ops computing in the low type: kiln ops with float operands, all of
    // the low type. Converts and constants are not counted.
    llvm::MapVector<StringRef, int64_t> lowOps;
    module.walk([&](Operation *op) {
      if (op->getNumResults() == 0 || isa<ir::ConvertOp, ir::ConstantOp>(op) || !isa<ir::KilnDialect>(op->getDialect()))
        return;
      bool anyFloat = false, allLow = true;
      for (Value v : op->getOperands())
        if (isa<FloatType>(elementOf(v))) {
          anyFloat = true;
          allLow &= elementOf(v) == low;
        }
      if (anyFloat && allLow)
        ++lowOps[op->getName().stripDialect()];
    });

    Builder b(ctx);
    SmallVector<NamedAttribute> opCounts;
    for (auto &[name, count] : lowOps)
      opCounts.push_back(b.getNamedAttr(name, b.getI64IntegerAttr(count)));
    module->setAttr("kiln.autocast",
                    b.getDictionaryAttr({b.getNamedAttr("dtype", b.getStringAttr(dtype)),
                                         b.getNamedAttr("casts_inserted", b.getI64IntegerAttr(inserted)),
                                         b.getNamedAttr("casts_removed", b.getI64IntegerAttr(removed)),
                                         b.getNamedAttr("low_precision_ops", b.getDictionaryAttr(opCounts))}));
  }
};

} // namespace
} // namespace kiln::passes
