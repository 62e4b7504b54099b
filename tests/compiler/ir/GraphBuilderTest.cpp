// GraphBuilder + pipeline: a linear+relu joint graph goes through
// buildModule and runPipeline; bad graphs come back as nullptr + message.
#include "kiln/ir/GraphBuilder.h"
#include "kiln/ir/Graph.h"
#include "kiln/ir/KilnOps.h"
#include "kiln/passes/Pipeline.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/MLIRContext.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/raw_ostream.h"

#include <gtest/gtest.h>

#include <string>

namespace kiln::ir {
namespace {

/// y = relu(x @ w + b) and its backward: grads of x, w, b from tangent g.
/// Shapes: x [4, 8], w [8, 16], b [16], g [4, 16].
Graph linearReluJoint() {
  Graph g;
  int x = g.addValue({4, 8}, ElementType::F32);
  int w = g.addValue({8, 16}, ElementType::F32);
  int b = g.addValue({16}, ElementType::F32);
  int tangent = g.addValue({4, 16}, ElementType::F32);
  g.inputs = {x, w, b, tangent};
  g.input_roles = {InputRole::Primal, InputRole::Primal, InputRole::Primal, InputRole::Tangent};
  auto add = [&](OpKind kind, std::vector<int> operands, std::vector<int64_t> shape,
                 ElementType type = ElementType::F32) {
    Node node;
    node.kind = kind;
    node.operands = std::move(operands);
    node.result = g.addValue(std::move(shape), type);
    g.nodes.push_back(node);
    return &g.nodes.back();
  };
  int mm = add(OpKind::Matmul, {x, w}, {4, 16})->result;
  int bb = add(OpKind::Broadcast, {b}, {4, 16})->result;
  int h = add(OpKind::Add, {mm, bb}, {4, 16})->result;
  int y = add(OpKind::Relu, {h}, {4, 16})->result;
  // backward
  int zero = add(OpKind::Constant, {}, {4, 16})->result;
  Node *cmp = add(OpKind::Compare, {h, zero}, {4, 16}, ElementType::Bool);
  cmp->predicate = Predicate::GT;
  int mask = cmp->result;
  int gh = add(OpKind::Select, {mask, tangent, zero}, {4, 16})->result;
  Node *xt = add(OpKind::Transpose, {x}, {8, 4});
  xt->ints = {1, 0};
  int gw = add(OpKind::Matmul, {xt->result, gh}, {8, 16})->result;
  Node *gbNode = add(OpKind::ReduceSum, {gh}, {16});
  gbNode->ints = {0};
  int gb = gbNode->result;
  Node *wt = add(OpKind::Transpose, {w}, {16, 8});
  wt->ints = {1, 0};
  int gx = add(OpKind::Matmul, {gh, wt->result}, {4, 8})->result;
  g.outputs = {y, gx, gw, gb};
  g.num_forward_outputs = 1;
  return g;
}

int64_t intAttr(mlir::func::FuncOp func, llvm::StringRef name) {
  auto attr = func->getAttrOfType<mlir::IntegerAttr>(name);
  return attr ? attr.getInt() : -1;
}

int countFusions(mlir::func::FuncOp func) {
  int count = 0;
  func.walk([&](FusionOp) { ++count; });
  return count;
}

std::string print(mlir::ModuleOp module) {
  std::string text;
  llvm::raw_string_ostream os(text);
  module->print(os);
  return text;
}

TEST(ir_GraphBuilder, BuildsJointFunction) {
  mlir::MLIRContext context;
  std::string error;
  auto module = buildModule(context, linearReluJoint(), &error);
  ASSERT_TRUE(module) << error;
  auto joint = module->lookupSymbol<mlir::func::FuncOp>("joint");
  ASSERT_TRUE(joint);
  EXPECT_EQ(joint.getNumArguments(), 4u);
  EXPECT_EQ(joint.getNumResults(), 4u);
  EXPECT_EQ(intAttr(joint, "kiln.num_forward_outputs"), 1);
  auto role = joint.getArgAttrOfType<mlir::StringAttr>(3, "kiln.role");
  ASSERT_TRUE(role);
  EXPECT_EQ(role.getValue(), "tangent");
  EXPECT_EQ(joint.getArgAttrOfType<mlir::StringAttr>(0, "kiln.role").getValue(), "primal");
}

TEST(ir_GraphBuilder, KeepdimReduceEmitsReshape) {
  Graph g;
  int x = g.addValue({4, 8}, ElementType::F32);
  g.inputs = {x};
  Node node;
  node.kind = OpKind::ReduceMax;
  node.operands = {x};
  node.ints = {1};
  node.keepdim = true;
  node.result = g.addValue({4, 1}, ElementType::F32);
  g.nodes.push_back(node);
  g.outputs = {node.result};
  g.num_forward_outputs = 1;
  mlir::MLIRContext context;
  std::string error;
  auto module = buildModule(context, g, &error);
  ASSERT_TRUE(module) << error;
  std::string text = print(*module);
  EXPECT_NE(text.find("kiln.reduce_max %arg0 [1] : tensor<4x8xf32> -> "
                      "tensor<4xf32>"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("kiln.reshape %0 : tensor<4xf32> -> tensor<4x1xf32>"), std::string::npos) << text;
}

TEST(ir_Pipeline, LinearReluJointSplitsAndFuses) {
  mlir::MLIRContext context;
  std::string error;
  auto module = buildModule(context, linearReluJoint(), &error);
  ASSERT_TRUE(module) << error;
  ASSERT_TRUE(mlir::succeeded(passes::runPipeline(*module, passes::PipelineOptions{}, &error))) << error;

  EXPECT_FALSE(module->lookupSymbol("joint"));
  auto forward = module->lookupSymbol<mlir::func::FuncOp>("forward");
  auto backward = module->lookupSymbol<mlir::func::FuncOp>("backward");
  ASSERT_TRUE(forward);
  ASSERT_TRUE(backward);
  // Saved: the pre-activation h (the relu mask needs it). x^T and w^T are
  // re-materialized views, the matmul result is not needed by backward.
  EXPECT_EQ(intAttr(forward, "kiln.num_saved"), 1);
  EXPECT_EQ(intAttr(forward, "kiln.num_forward_outputs"), 1);
  EXPECT_EQ(forward.getNumArguments(), 3u);
  EXPECT_EQ(forward.getNumResults(), 2u);
  // backward(x, w, b, saved h, tangent) -> (gx, gw, gb)
  EXPECT_EQ(backward.getNumArguments(), 5u);
  EXPECT_EQ(backward.getNumResults(), 3u);

  // forward: add (also returned as saved: an extra result) and relu.
  EXPECT_EQ(countFusions(forward), 1);
  // backward: compare+select (constant cloned in) and reduce_sum, yielding
  // the masked gradient for the matmuls too.
  EXPECT_EQ(countFusions(backward), 1);

  // After fuse only fusions, matmuls, views and the return remain.
  for (auto func : {forward, backward})
    for (mlir::Operation &op : func.getBody().front())
      EXPECT_TRUE((mlir::isa<FusionOp, MatmulOp, mlir::func::ReturnOp>(op) || isLayoutOp(&op)))
          << op.getName().getStringRef().str();

  // Kernel names: fusion_0.. in order, forward first.
  std::vector<std::string> names;
  module->walk([&](FusionOp op) { names.push_back(op.getKernel().str()); });
  EXPECT_EQ(names, (std::vector<std::string>{"fusion_0", "fusion_1"}));
}

TEST(ir_Pipeline, IsDeterministic) {
  std::string first, second, error;
  for (std::string *out : {&first, &second}) {
    mlir::MLIRContext context;
    auto module = buildModule(context, linearReluJoint(), &error);
    ASSERT_TRUE(module) << error;
    ASSERT_TRUE(mlir::succeeded(passes::runPipeline(*module, passes::PipelineOptions{}, &error)));
    *out = print(*module);
  }
  EXPECT_EQ(first, second);
}

TEST(ir_Pipeline, ForwardOnlyGraph) {
  Graph g;
  int x = g.addValue({4}, ElementType::F32);
  g.inputs = {x};
  g.input_roles = {InputRole::Primal};
  Node node;
  node.kind = OpKind::Exp;
  node.operands = {x};
  node.result = g.addValue({4}, ElementType::F32);
  g.nodes.push_back(node);
  g.outputs = {node.result};
  g.num_forward_outputs = 1;
  mlir::MLIRContext context;
  std::string error;
  auto module = buildModule(context, g, &error);
  ASSERT_TRUE(module) << error;
  ASSERT_TRUE(mlir::succeeded(passes::runPipeline(*module, passes::PipelineOptions{}, &error))) << error;
  auto forward = module->lookupSymbol<mlir::func::FuncOp>("forward");
  ASSERT_TRUE(forward);
  EXPECT_FALSE(module->lookupSymbol("backward"));
  EXPECT_EQ(intAttr(forward, "kiln.num_saved"), 0);
  EXPECT_EQ(countFusions(forward), 1);
}

TEST(ir_Pipeline, DumpsEachStage) {
  llvm::SmallString<128> dir;
  ASSERT_FALSE(llvm::sys::fs::createUniqueDirectory("kiln-dump", dir));
  mlir::MLIRContext context;
  std::string error;
  auto module = buildModule(context, linearReluJoint(), &error);
  ASSERT_TRUE(module) << error;
  passes::PipelineOptions options;
  options.dump_ir_dir = std::string(dir) + "/ir";
  ASSERT_TRUE(mlir::succeeded(passes::runPipeline(*module, options, &error))) << error;
  std::vector<std::string> stages = passes::pipelineStageNames();
  ASSERT_EQ(stages, (std::vector<std::string>{"canonicalize", "cse", "remat", "partition", "fuse"}));
  EXPECT_TRUE(llvm::sys::fs::exists(options.dump_ir_dir + "/00-input.mlir"));
  for (size_t i = 0; i < stages.size(); ++i) {
    char prefix[8];
    std::snprintf(prefix, sizeof(prefix), "%02zu-", i + 1);
    EXPECT_TRUE(llvm::sys::fs::exists(options.dump_ir_dir + "/" + prefix + stages[i] + ".mlir")) << stages[i];
  }
  llvm::sys::fs::remove_directories(dir);
}

TEST(ir_GraphBuilder, UnknownValueIndexIsAnError) {
  Graph g = linearReluJoint();
  g.nodes[2].operands[1] = 99;
  mlir::MLIRContext context;
  std::string error;
  EXPECT_FALSE(buildModule(context, g, &error));
  EXPECT_NE(error.find("unknown value index 99"), std::string::npos) << error;
  EXPECT_NE(error.find("node #2"), std::string::npos) << error;
}

TEST(ir_GraphBuilder, UndefinedValueIsAnError) {
  Graph g = linearReluJoint();
  g.nodes[2].operands[1] = g.nodes[3].result; // defined later
  mlir::MLIRContext context;
  std::string error;
  EXPECT_FALSE(buildModule(context, g, &error));
  EXPECT_NE(error.find("used before it is defined"), std::string::npos) << error;
}

TEST(ir_GraphBuilder, ShapeMismatchIsAVerifierError) {
  Graph g = linearReluJoint();
  g.values[g.nodes[0].result].shape = {4, 15}; // matmul result is [4, 16]
  mlir::MLIRContext context;
  std::string error;
  EXPECT_FALSE(buildModule(context, g, &error));
  EXPECT_NE(error.find("kiln.matmul"), std::string::npos) << error;
  EXPECT_NE(error.find("[4, 15]"), std::string::npos) << error;
  EXPECT_NE(error.find("node #0"), std::string::npos) << error;
}

TEST(ir_GraphBuilder, ContractionMismatchIsAVerifierError) {
  Graph g;
  int a = g.addValue({4, 8}, ElementType::F32);
  int b = g.addValue({7, 16}, ElementType::F32);
  g.inputs = {a, b};
  Node node;
  node.kind = OpKind::Matmul;
  node.operands = {a, b};
  node.result = g.addValue({4, 16}, ElementType::F32);
  g.nodes.push_back(node);
  g.outputs = {node.result};
  g.num_forward_outputs = 1;
  mlir::MLIRContext context;
  std::string error;
  EXPECT_FALSE(buildModule(context, g, &error));
  EXPECT_NE(error.find("contraction dims differ: [4, 8] x [7, 16]"), std::string::npos) << error;
}

/// x [1, 3, 5, 5] * w [4, 3, 3, 3] (kiln.conv2d with `ints`) -> [1, 4, oh, ow].
Graph convGraph(std::vector<int64_t> ints, int64_t oh, int64_t ow) {
  Graph g;
  int x = g.addValue({1, 3, 5, 5}, ElementType::F32);
  int w = g.addValue({4, 3, 3, 3}, ElementType::F32);
  g.inputs = {x, w};
  Node node;
  node.kind = OpKind::Conv2d;
  node.operands = {x, w};
  node.ints = std::move(ints);
  node.result = g.addValue({1, 4, oh, ow}, ElementType::F32);
  g.nodes.push_back(node);
  g.outputs = {node.result};
  g.num_forward_outputs = 1;
  return g;
}

TEST(ir_GraphBuilder, ConvNodeCarriesItsAttributes) {
  mlir::MLIRContext context;
  std::string error;
  auto module = buildModule(context, convGraph({2, 1, 1, 0, 1, 1, 1}, 3, 3), &error);
  ASSERT_TRUE(module) << error;
  Conv2dOp conv;
  module->walk([&](Conv2dOp op) { conv = op; });
  ASSERT_TRUE(conv);
  EXPECT_EQ(conv.getStride(), llvm::ArrayRef<int64_t>({2, 1}));
  EXPECT_EQ(conv.getPadding(), llvm::ArrayRef<int64_t>({1, 0}));
  EXPECT_EQ(conv.getDilation(), llvm::ArrayRef<int64_t>({1, 1}));
  EXPECT_EQ(conv.getGroups(), 1u);
}

TEST(ir_GraphBuilder, ConvShapeAndAttributeErrorsNameTheOpAndTheExpectedShape) {
  mlir::MLIRContext context;
  std::string error;
  EXPECT_FALSE(buildModule(context, convGraph({1, 1, 0, 0, 1, 1, 1}, 5, 5), &error));
  EXPECT_NE(error.find("'kiln.conv2d' op expects output shape [1, 4, 3, 3]"), std::string::npos) << error;
  error.clear();
  EXPECT_FALSE(buildModule(context, convGraph({1, 1, 0, 0}, 3, 3), &error));
  EXPECT_NE(error.find("(Conv2d): expected 7 ints (stride, padding, dilation, groups), got 4"), std::string::npos)
      << error;
}

TEST(ir_GraphBuilder, WrongOperandCountIsAnError) {
  Graph g = linearReluJoint();
  g.nodes[3].operands.push_back(0); // relu with two operands
  mlir::MLIRContext context;
  std::string error;
  EXPECT_FALSE(buildModule(context, g, &error));
  EXPECT_NE(error.find("node #3 (Relu) has 2 operands, expected 1"), std::string::npos) << error;
}

TEST(ir_GraphBuilder, BadOutputIsAnError) {
  Graph g = linearReluJoint();
  g.outputs.push_back(1234);
  mlir::MLIRContext context;
  std::string error;
  EXPECT_FALSE(buildModule(context, g, &error));
  EXPECT_NE(error.find("1234"), std::string::npos) << error;
}

TEST(ir_Pipeline, AutocastStageRunsOnlyWhenAsked) {
  passes::PipelineOptions options;
  options.autocast = "bf16";
  EXPECT_EQ(passes::pipelineStageNames(options),
            (std::vector<std::string>{"canonicalize", "cse", "autocast", "remat", "partition", "fuse"}));
  mlir::MLIRContext context;
  std::string error;
  auto module = buildModule(context, linearReluJoint(), &error);
  ASSERT_TRUE(module) << error;
  ASSERT_TRUE(mlir::succeeded(passes::runPipeline(*module, options, &error))) << error;
  auto report = (*module)->getAttrOfType<mlir::DictionaryAttr>("kiln.autocast");
  ASSERT_TRUE(report);
  EXPECT_EQ(report.getAs<mlir::StringAttr>("dtype").getValue(), "bf16");
  int bf16Matmuls = 0;
  module->walk([&](MatmulOp m) { bf16Matmuls += m.getType().getElementType().isBF16(); });
  EXPECT_EQ(bf16Matmuls, 3); // forward x W, backward grad_W and grad_x
  options.autocast = "f64";
  module = buildModule(context, linearReluJoint(), &error);
  EXPECT_TRUE(mlir::failed(passes::runPipeline(*module, options, &error)));
  EXPECT_NE(error.find("stage 'autocast' failed"), std::string::npos) << error;
  EXPECT_NE(error.find("dtype must be bf16 or f16, got 'f64'"), std::string::npos) << error;
}

} // namespace
} // namespace kiln::ir
