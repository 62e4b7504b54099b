// The op table (ir/include/kiln/ir/Ops.def) agrees with the dialect (ODS)
// and keeps the facts other layers read from it.
#include "kiln/ir/AutocastPolicy.h"
#include "kiln/ir/Graph.h"
#include "kiln/ir/KilnDialect.h"
#include "kiln/ir/KilnOps.h"
#include "kiln/ir/OpTable.h"

#include "mlir/IR/MLIRContext.h"

#include <gtest/gtest.h>

#include <set>
#include <string>

namespace kiln::ir {
namespace {

TEST(OpTable, EveryRowNamesItsOdsOp) {
#define KILN_OP(Kind, OpClass, mnemonic, operands, category, flops, autocast, build)                              \
  EXPECT_EQ(std::string("kiln.") + mnemonic, OpClass::getOperationName().str()) << #Kind;                       \
  EXPECT_STREQ(toString(OpKind::Kind), #Kind);                                                                     \
  EXPECT_STREQ(opMnemonic(OpKind::Kind), mnemonic);
#include "kiln/ir/Ops.def"
}

TEST(OpTable, CoversEveryDialectOpButTheFusionRegion) {
  mlir::MLIRContext context;
  loadKilnDialects(context);
  std::set<std::string> inTable;
#define KILN_OP(Kind, OpClass, mnemonic, operands, category, flops, autocast, build)                              \
  inTable.insert(std::string("kiln.") + mnemonic);
#include "kiln/ir/Ops.def"
  EXPECT_EQ(static_cast<int>(inTable.size()), kNumOpKinds);
  std::set<std::string> outside;
  for (mlir::RegisteredOperationName op : context.getRegisteredOperations())
    if (op.getDialectNamespace() == "kiln" && !inTable.count(op.getStringRef().str()))
      outside.insert(op.getStringRef().str());
  EXPECT_EQ(outside, (std::set<std::string>{"kiln.fusion", "kiln.yield"}));
}

TEST(OpTable, CategoriesAndFlopModels) {
  EXPECT_EQ(opCategory(OpKind::Add), OpCategory::Elementwise);
  EXPECT_EQ(opCategory(OpKind::Select), OpCategory::Elementwise);
  EXPECT_EQ(opCategory(OpKind::ReduceMax), OpCategory::Reduction);
  EXPECT_EQ(opCategory(OpKind::Matmul), OpCategory::Contraction);
  EXPECT_EQ(opCategory(OpKind::Reshape), OpCategory::Layout);
  EXPECT_EQ(opCategory(OpKind::Constant), OpCategory::Creation);
  EXPECT_EQ(opCategory(OpKind::Conv2d), OpCategory::Extern);
  EXPECT_EQ(opCategory(OpKind::MaxPool2dBackward), OpCategory::Extern);
  EXPECT_EQ(opFlopModel(OpKind::Conv2dWeightGrad), FlopModel::Conv);
  EXPECT_EQ(opFlopModel(OpKind::MaxPool2d), FlopModel::Operand);
  EXPECT_EQ(opNumOperands(OpKind::Conv2dInputGrad), 2);
  EXPECT_EQ(opFlopModel(OpKind::Matmul), FlopModel::Matmul);
  EXPECT_EQ(opFlopModel(OpKind::ReduceSum), FlopModel::Operand);
  EXPECT_EQ(opFlopModel(OpKind::Exp), FlopModel::Result);
  EXPECT_EQ(opFlopModel(OpKind::Transpose), FlopModel::Free);
  EXPECT_EQ(opNumOperands(OpKind::Select), 3);
  EXPECT_EQ(opNumOperands(OpKind::Constant), 0);
  EXPECT_EQ(opNumOperands(OpKind::Matmul), 2);
}

// The policy of every name the lists held before the table existed
// (PyTorch's autocast op lists, autocast_mode.cpp): moving the dialect
// names into Ops.def changed none of them.
TEST(OpTable, AutocastPolicyOfEagerAndDialectNames) {
  for (const char *n : {"matmul", "mm", "bmm", "addmm", "baddbmm", "linear", "conv1d", "conv2d", "conv3d",
                        "scaled_dot_product_attention", "multi_head_attention"})
    EXPECT_EQ(autocastPolicy(n), CastPolicy::LowerPrecision) << n;
  for (const char *n : {"softmax", "log_softmax", "layer_norm", "batch_norm", "group_norm", "sum", "reduce_sum",
                        "mean", "var", "std", "cumsum", "logsumexp", "exp", "log", "pow", "rsqrt", "sqrt", "norm",
                        "cross_entropy", "nll_loss", "mse_loss", "binary_cross_entropy_with_logits"})
    EXPECT_EQ(autocastPolicy(n), CastPolicy::Float32) << n;
  for (const char *n : {"add", "sub", "mul", "div", "where", "select", "cat", "stack", "masked_fill"})
    EXPECT_EQ(autocastPolicy(n), CastPolicy::Promote) << n;
  for (const char *n : {"relu", "tanh", "neg", "abs", "sin", "cos", "compare", "convert", "constant", "transpose",
                        "broadcast", "reshape", "reduce_max", "gelu", "no_such_op"})
    EXPECT_EQ(autocastPolicy(n), CastPolicy::None) << n;
}

} // namespace
} // namespace kiln::ir
