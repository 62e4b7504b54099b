// GraphBuilder: kiln::ir::Graph -> `func.func @joint` in the kiln dialect.
#include "kiln/ir/GraphBuilder.h"

#include "kiln/ir/KilnDialect.h"
#include "kiln/ir/KilnOps.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinTypes.h"
#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/Verifier.h"
#include "llvm/Support/raw_ostream.h"

namespace kiln::ir {

namespace {

/// Builds the module; every check failure records a message and returns
/// false so that buildModule can return nullptr.
class GraphBuilder {
public:
  GraphBuilder(mlir::MLIRContext &context, const Graph &graph) : context_(context), graph_(graph), builder_(&context) {}

  mlir::OwningOpRef<mlir::ModuleOp> build(std::string *error);

private:
  bool fail(const llvm::Twine &message) {
    if (message_.empty())
      message_ = message.str();
    return false;
  }
  mlir::Type elementType(ElementType type);
  bool tensorType(int value, mlir::RankedTensorType *out);
  bool lookup(int nodeIndex, int value, mlir::Value *out);
  bool emitNode(int nodeIndex, const Node &node);
  bool emitConvOrPool(const std::string &where, const Node &node, mlir::Location loc,
                      mlir::RankedTensorType resultType, llvm::ArrayRef<mlir::Value> operands, mlir::Value *result);
  mlir::Value emitReduction(const Node &node, mlir::Location loc, mlir::ValueRange operands,
                            mlir::RankedTensorType resultType);
  mlir::Location nodeLoc(int nodeIndex, const Node &node);

  mlir::MLIRContext &context_;
  const Graph &graph_;
  mlir::OpBuilder builder_;
  std::vector<mlir::Value> values_; // Graph value index -> SSA value
  std::string message_;
};

mlir::Type GraphBuilder::elementType(ElementType type) {
  switch (type) {
  case ElementType::F32:
    return builder_.getF32Type();
  case ElementType::F16:
    return builder_.getF16Type();
  case ElementType::BF16:
    return builder_.getBF16Type();
  case ElementType::I64:
    return builder_.getI64Type();
  case ElementType::Bool:
    return builder_.getI1Type();
  case ElementType::F64:
    return builder_.getF64Type();
  case ElementType::I32:
    return builder_.getI32Type();
  }
  return nullptr;
}

bool GraphBuilder::tensorType(int value, mlir::RankedTensorType *out) {
  if (value < 0 || value >= static_cast<int>(graph_.values.size()))
    return fail("unknown value index " + llvm::Twine(value) + " (graph has " + llvm::Twine(graph_.values.size()) +
                " values)");
  const Value &v = graph_.values[value];
  for (int64_t dim : v.shape)
    if (dim < 0)
      return fail("value %" + llvm::Twine(value) + " has a negative dimension");
  mlir::Type element = elementType(v.type);
  if (!element)
    return fail("value %" + llvm::Twine(value) + " has an unknown element type");
  *out = mlir::RankedTensorType::get(v.shape, element);
  return true;
}

bool GraphBuilder::lookup(int nodeIndex, int value, mlir::Value *out) {
  if (value < 0 || value >= static_cast<int>(values_.size()))
    return fail("node #" + llvm::Twine(nodeIndex) + ": unknown value index " + llvm::Twine(value) + " (graph has " +
                llvm::Twine(graph_.values.size()) + " values)");
  if (!values_[value])
    return fail("node #" + llvm::Twine(nodeIndex) + ": value %" + llvm::Twine(value) +
                " is used before it is defined (not an input or an earlier "
                "node's result)");
  *out = values_[value];
  return true;
}

mlir::Location GraphBuilder::nodeLoc(int nodeIndex, const Node &node) {
  std::string name = "node #" + std::to_string(nodeIndex) + " " + toString(node.kind);
  return mlir::NameLoc::get(builder_.getStringAttr(name));
}

static size_t expectedOperandCount(OpKind kind) { return static_cast<size_t>(opNumOperands(kind)); }

/// Marks the op defining `result` (and, for a keepdim reduction, the reduce
/// op under its reshape) kiln.autocast_fp32: kiln-autocast runs it in f32.
static void markFloat32Scope(const Node &node, mlir::Value result) {
  mlir::Operation *op = result.getDefiningOp();
  auto unit = mlir::UnitAttr::get(op->getContext());
  op->setAttr(kAutocastFp32Attr, unit);
  const bool keepdimReduce =
      node.keepdim && opCategory(node.kind) == OpCategory::Reduction && node.kind != OpKind::Cumsum;
  if (keepdimReduce)
    op->getOperand(0).getDefiningOp()->setAttr(kAutocastFp32Attr, unit);
}

static ComparePredicate toComparePredicate(Predicate predicate) {
  switch (predicate) {
  case Predicate::EQ:
    return ComparePredicate::eq;
  case Predicate::NE:
    return ComparePredicate::ne;
  case Predicate::LT:
    return ComparePredicate::lt;
  case Predicate::LE:
    return ComparePredicate::le;
  case Predicate::GT:
    return ComparePredicate::gt;
  case Predicate::GE:
    return ComparePredicate::ge;
  }
  return ComparePredicate::eq;
}

/// A reduction node (reduce_sum/max/min, argmax/argmin over `node.ints`):
/// the reduce op drops the dims; with keepdim a reshape restores them as
/// size 1.
mlir::Value GraphBuilder::emitReduction(const Node &node, mlir::Location loc, mlir::ValueRange operands,
                                        mlir::RankedTensorType resultType) {
  mlir::NamedAttribute dims = builder_.getNamedAttr("dims", builder_.getDenseI64ArrayAttr(node.ints));
  mlir::Type reducedType = resultType;
  if (node.keepdim) {
    auto in = mlir::cast<mlir::RankedTensorType>(operands[0].getType());
    llvm::SmallVector<int64_t> shape;
    for (int64_t i = 0; i < in.getRank(); ++i)
      if (!llvm::is_contained(node.ints, i))
        shape.push_back(in.getDimSize(i));
    reducedType = mlir::RankedTensorType::get(shape, resultType.getElementType());
  }
  mlir::TypeRange types(reducedType);
  mlir::Operation *reduce = nullptr;
  switch (node.kind) {
  case OpKind::ReduceSum:
    reduce = builder_.create<ReduceSumOp>(loc, types, operands, dims);
    break;
  case OpKind::ReduceMax:
    reduce = builder_.create<ReduceMaxOp>(loc, types, operands, dims);
    break;
  case OpKind::ReduceMin:
    reduce = builder_.create<ReduceMinOp>(loc, types, operands, dims);
    break;
  case OpKind::ArgMax:
    reduce = builder_.create<ArgMaxOp>(loc, types, operands, dims);
    break;
  default:
    reduce = builder_.create<ArgMinOp>(loc, types, operands, dims);
    break;
  }
  mlir::Value result = reduce->getResult(0);
  if (node.keepdim)
    result = builder_.create<ReshapeOp>(loc, resultType, result);
  return result;
}

/// The attributes of a conv / max pool node from Node::ints (Ops.def:
/// conv [stride 2, padding 2, dilation 2, groups], pool [kernel 2, stride
/// 2, padding 2]) and its op.
bool GraphBuilder::emitConvOrPool(const std::string &where, const Node &node, mlir::Location loc,
                                  mlir::RankedTensorType resultType, llvm::ArrayRef<mlir::Value> operands,
                                  mlir::Value *result) {
  const bool conv = node.kind == OpKind::Conv2d || node.kind == OpKind::Conv2dInputGrad ||
                    node.kind == OpKind::Conv2dWeightGrad;
  const size_t expected = conv ? 7 : 6;
  if (node.ints.size() != expected)
    return fail(where + ": expected " + llvm::Twine(expected) + " ints (" +
                (conv ? "stride, padding, dilation, groups" : "kernel, stride, padding") + "), got " +
                llvm::Twine(node.ints.size()));
  llvm::ArrayRef<int64_t> ints(node.ints);
  auto pair = [&](size_t at) { return builder_.getDenseI64ArrayAttr(ints.slice(at, 2)); };
  auto make = [&](auto tag, llvm::ArrayRef<mlir::NamedAttribute> attrs) {
    using OpT = decltype(tag);
    return builder_.create<OpT>(loc, mlir::TypeRange(resultType), operands, attrs)->getResult(0);
  };
  if (conv) {
    llvm::SmallVector<mlir::NamedAttribute> attrs{
        builder_.getNamedAttr("stride", pair(0)), builder_.getNamedAttr("padding", pair(2)),
        builder_.getNamedAttr("dilation", pair(4)), builder_.getNamedAttr("groups", builder_.getI64IntegerAttr(ints[6]))};
    if (node.kind == OpKind::Conv2d)
      *result = make(Conv2dOp(), attrs);
    else if (node.kind == OpKind::Conv2dInputGrad)
      *result = make(Conv2dInputGradOp(), attrs);
    else
      *result = make(Conv2dWeightGradOp(), attrs);
    return true;
  }
  llvm::SmallVector<mlir::NamedAttribute> attrs{builder_.getNamedAttr("kernel", pair(0)),
                                                builder_.getNamedAttr("stride", pair(2)),
                                                builder_.getNamedAttr("padding", pair(4))};
  *result = node.kind == OpKind::MaxPool2d ? make(MaxPool2dOp(), attrs) : make(MaxPool2dIndicesOp(), attrs);
  return true;
}

bool GraphBuilder::emitNode(int nodeIndex, const Node &node) {
  std::string where = "node #" + std::to_string(nodeIndex) + " (" + toString(node.kind) + ")";
  if (node.operands.size() != expectedOperandCount(node.kind))
    return fail(where + " has " + llvm::Twine(node.operands.size()) + " operands, expected " +
                llvm::Twine(expectedOperandCount(node.kind)));
  llvm::SmallVector<mlir::Value> operands;
  for (int operand : node.operands) {
    mlir::Value value;
    if (!lookup(nodeIndex, operand, &value))
      return false;
    operands.push_back(value);
  }
  mlir::RankedTensorType resultType;
  if (!tensorType(node.result, &resultType))
    return fail(where + ": bad result: " + message_);
  if (values_[node.result])
    return fail(where + ": value %" + llvm::Twine(node.result) + " is defined twice");

  mlir::Location loc = nodeLoc(nodeIndex, node);
  mlir::TypeRange types(resultType);
  mlir::Value result;
  auto create = [&](auto tag, llvm::ArrayRef<mlir::NamedAttribute> attrs = {}) {
    using OpT = decltype(tag);
    return builder_.create<OpT>(loc, types, operands, attrs)->getResult(0);
  };
  switch (node.kind) {
    // The Generic rows of Ops.def: the op class from operands and result type.
#define KILN_OP_BUILD_Generic(Kind, OpClass)                                                                       \
  case OpKind::Kind:                                                                                               \
    result = create(OpClass());                                                                                    \
    break;
#define KILN_OP_BUILD_Custom(Kind, OpClass)
#define KILN_OP(Kind, OpClass, mnemonic, operands, category, flops, autocast, build)                              \
  KILN_OP_BUILD_##build(Kind, OpClass)
#include "kiln/ir/Ops.def"
#undef KILN_OP_BUILD_Generic
#undef KILN_OP_BUILD_Custom
    // The Custom rows: ops with attributes.
  case OpKind::Pow:
    result = create(PowOp(), {builder_.getNamedAttr("exponent", builder_.getF64FloatAttr(node.scalar))});
    break;
  case OpKind::Compare:
    result = create(
        CompareOp(),
        {builder_.getNamedAttr("predicate", ComparePredicateAttr::get(&context_, toComparePredicate(node.predicate)))});
    break;
  case OpKind::Constant:
    result = builder_.create<ConstantOp>(loc, resultType, node.scalar);
    break;
  case OpKind::Transpose:
    result = create(TransposeOp(), {builder_.getNamedAttr("permutation", builder_.getDenseI64ArrayAttr(node.ints))});
    break;
  case OpKind::Gather: {
    if (node.ints.size() != 2 || node.ints[1] < 0 || node.ints[1] > static_cast<int64_t>(IndexSource::Embedding))
      return fail(where + ": expected ints {dim, source}");
    const char *source = toString(static_cast<IndexSource>(node.ints[1]));
    result = create(GatherOp(), {builder_.getNamedAttr("dim", builder_.getI64IntegerAttr(node.ints[0])),
                                 builder_.getNamedAttr("source", builder_.getStringAttr(source))});
    break;
  }
  case OpKind::ScatterAdd:
    if (node.ints.size() != 1)
      return fail(where + ": expected ints {dim}");
    result = create(ScatterAddOp(), {builder_.getNamedAttr("dim", builder_.getI64IntegerAttr(node.ints[0]))});
    break;
  case OpKind::ReduceSum:
  case OpKind::ReduceMax:
  case OpKind::ReduceMin:
  case OpKind::ArgMax:
  case OpKind::ArgMin:
    result = emitReduction(node, loc, operands, resultType);
    break;
  case OpKind::Cumsum:
    result = create(CumsumOp(), {builder_.getNamedAttr("dims", builder_.getDenseI64ArrayAttr(node.ints))});
    break;
  case OpKind::Conv2d:
  case OpKind::Conv2dInputGrad:
  case OpKind::Conv2dWeightGrad:
  case OpKind::MaxPool2d:
  case OpKind::MaxPool2dIndices:
    if (!emitConvOrPool(where, node, loc, resultType, operands, &result))
      return false;
    break;
  }
  if (!result)
    return fail(where + ": unsupported op kind");
  if (node.float32_scope)
    markFloat32Scope(node, result);
  values_[node.result] = result;
  return true;
}

mlir::OwningOpRef<mlir::ModuleOp> GraphBuilder::build(std::string *error) {
  auto report = [&]() -> mlir::OwningOpRef<mlir::ModuleOp> {
    if (error)
      *error = "kiln GraphBuilder: " + message_;
    return nullptr;
  };
  loadKilnDialects(context_);
  mlir::Location loc = builder_.getUnknownLoc();
  mlir::OwningOpRef<mlir::ModuleOp> module = mlir::ModuleOp::create(loc);

  if (!graph_.input_roles.empty() && graph_.input_roles.size() != graph_.inputs.size()) {
    fail("graph has " + llvm::Twine(graph_.inputs.size()) + " inputs but " + llvm::Twine(graph_.input_roles.size()) +
         " input roles");
    return report();
  }
  if (graph_.num_forward_outputs < 0 || graph_.num_forward_outputs > static_cast<int>(graph_.outputs.size())) {
    fail("num_forward_outputs " + llvm::Twine(graph_.num_forward_outputs) + " is outside [0, " +
         llvm::Twine(graph_.outputs.size()) + "]");
    return report();
  }

  llvm::SmallVector<mlir::Type> inputTypes, outputTypes;
  for (int input : graph_.inputs) {
    mlir::RankedTensorType type;
    if (!tensorType(input, &type)) {
      message_ = "graph input: " + message_;
      return report();
    }
    inputTypes.push_back(type);
  }
  for (int output : graph_.outputs) {
    mlir::RankedTensorType type;
    if (!tensorType(output, &type)) {
      message_ = "graph output: " + message_;
      return report();
    }
    outputTypes.push_back(type);
  }

  builder_.setInsertionPointToEnd(module->getBody());
  auto func = builder_.create<mlir::func::FuncOp>(loc, "joint", builder_.getFunctionType(inputTypes, outputTypes));
  func->setAttr("kiln.num_forward_outputs", builder_.getI64IntegerAttr(graph_.num_forward_outputs));
  mlir::Block *entry = func.addEntryBlock();
  values_.assign(graph_.values.size(), mlir::Value());
  for (auto [index, input] : llvm::enumerate(graph_.inputs)) {
    bool tangent = !graph_.input_roles.empty() && graph_.input_roles[index] == InputRole::Tangent;
    func.setArgAttr(index, "kiln.role", builder_.getStringAttr(tangent ? "tangent" : "primal"));
    if (values_[input]) {
      fail("value %" + llvm::Twine(input) + " is listed twice as an input");
      return report();
    }
    values_[input] = entry->getArgument(index);
  }

  builder_.setInsertionPointToEnd(entry);
  for (auto [index, node] : llvm::enumerate(graph_.nodes))
    if (!emitNode(static_cast<int>(index), node))
      return report();

  llvm::SmallVector<mlir::Value> results;
  for (int output : graph_.outputs) {
    mlir::Value value;
    if (!lookup(static_cast<int>(graph_.nodes.size()), output, &value)) {
      message_ = "graph output: " + message_;
      return report();
    }
    results.push_back(value);
  }
  builder_.create<mlir::func::ReturnOp>(loc, results);

  // Shape and type errors are the verifier's: return its diagnostics.
  std::string diagnostics;
  {
    mlir::ScopedDiagnosticHandler handler(&context_, [&](mlir::Diagnostic &diag) {
      llvm::raw_string_ostream os(diagnostics);
      if (!diagnostics.empty())
        os << "\n";
      os << diag.getLocation() << ": " << diag.str();
      for (const mlir::Diagnostic &note : diag.getNotes())
        os << "\n  note: " << note.str();
      return mlir::success();
    });
    if (mlir::failed(mlir::verify(*module))) {
      message_ = "invalid graph: " + diagnostics;
      return report();
    }
  }
  return module;
}

} // namespace

mlir::OwningOpRef<mlir::ModuleOp> buildModule(mlir::MLIRContext &context, const Graph &graph, std::string *error) {
  GraphBuilder builder(context, graph);
  return builder.build(error);
}

} // namespace kiln::ir
