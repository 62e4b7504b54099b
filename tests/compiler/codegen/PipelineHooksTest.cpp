// Pass developers' hooks into the compile pipeline: an out-of-tree pass
// joins it at a named stage (CompileOptions::custom_passes, as
// kiln::CustomPass passes them), and the kiln-pipeline replay
// (passes::buildPipeline, kiln-opt --kiln-pipeline) runs on a KILN_DUMP_IR
// input exactly what compile ran.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "GraphTestUtils.h"
#include "kiln/codegen/Target.h"
#include "kiln/ir/KilnDialect.h"
#include "kiln/passes/Pipeline.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/Parser/Parser.h"
#include "mlir/Pass/PassManager.h"
#include "mlir/Pass/Pass.h"
#include "mlir/Pass/PassRegistry.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"

namespace kiln::codegen {
namespace {

using namespace kiln::codegen_test;
using ir::ElementType;
using ir::OpKind;

/// What the out-of-tree pass saw, per run: the module's function names.
std::vector<std::string> &seen() {
  static std::vector<std::string> runs;
  return runs;
}

/// A pass a user writes in their own program: it records the functions of
/// the module it runs on.
struct RecordFunctionsPass : mlir::PassWrapper<RecordFunctionsPass, mlir::OperationPass<mlir::ModuleOp>> {
  MLIR_DEFINE_EXPLICIT_INTERNAL_INLINE_TYPE_ID(RecordFunctionsPass)
  llvm::StringRef getArgument() const final { return "test-record-functions"; }
  llvm::StringRef getDescription() const final { return "records the module's functions (test)"; }
  void runOnOperation() override {
    std::string names;
    for (auto func : getOperation().getOps<mlir::func::FuncOp>())
      names += (names.empty() ? "" : ",") + func.getSymName().str();
    seen().push_back(names);
  }
};

void registerOnce() {
  static bool done = [] {
    mlir::PassRegistration<RecordFunctionsPass>();
    return true;
  }();
  (void)done;
}

/// exp(x) * w with a gradient for x: a joint graph (forward + backward).
ir::Graph jointGraph() {
  GraphMaker m;
  int x = m.input({4, 8});
  int w = m.input({4, 8});
  int t = m.input({4, 8}, ir::InputRole::Tangent);
  int e = m.same(OpKind::Exp, {x});
  int y = m.same(OpKind::Mul, {e, w});
  int gx = m.same(OpKind::Mul, {m.same(OpKind::Mul, {t, w}), e});
  return m.done({y, gx}, 1);
}

bool compileWith(std::vector<CompileOptions::CustomPass> custom, std::string *error) {
  registerOnce();
  CompileOptions options;
  options.kernel_cache_dir = "";
  options.custom_passes = std::move(custom);
  CompiledGraph compiled;
  return compileGraph(jointGraph(), options, &compiled, error);
}

TEST(PipelineHooksTest, CustomPassRunsBeforePartition) {
  seen().clear();
  std::string error;
  ASSERT_TRUE(compileWith({{"partition", /*after=*/false, "test-record-functions"}}, &error)) << error;
  ASSERT_EQ(seen().size(), 1u);
  EXPECT_EQ(seen()[0], "joint");  // not yet split into forward and backward
}

TEST(PipelineHooksTest, CustomPassRunsAfterPartition) {
  seen().clear();
  std::string error;
  ASSERT_TRUE(compileWith({{"partition", /*after=*/true, "test-record-functions"}}, &error)) << error;
  ASSERT_EQ(seen().size(), 1u);
  EXPECT_EQ(seen()[0], "forward,backward");
}

TEST(PipelineHooksTest, CustomPassesRunInOrderAtEveryPoint) {
  seen().clear();
  std::string error;
  ASSERT_TRUE(compileWith({{"fuse", true, "test-record-functions"}, {"canonicalize", false, "test-record-functions"}},
                          &error))
      << error;
  ASSERT_EQ(seen().size(), 2u);
  EXPECT_EQ(seen()[0], "joint");            // before canonicalize: the first stage
  EXPECT_EQ(seen()[1], "forward,backward"); // after fuse: the last
}

TEST(PipelineHooksTest, UnknownStageIsAnError) {
  std::string error;
  EXPECT_FALSE(compileWith({{"lowering", true, "test-record-functions"}}, &error));
  EXPECT_NE(error.find("names stage 'lowering', which is not one of: canonicalize, cse, autocast, remat, partition, "
                       "fuse"),
            std::string::npos)
      << error;
}

TEST(PipelineHooksTest, UnregisteredPassIsAnError) {
  std::string error;
  EXPECT_FALSE(compileWith({{"fuse", true, "no-such-pass"}}, &error));
  EXPECT_NE(error.find("custom pass 'no-such-pass' after stage 'fuse'"), std::string::npos) << error;
}

std::string readFile(const std::filesystem::path &path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

/// The dumped input, replayed through buildPipeline in one pass manager,
/// prints exactly what compile's last stage dumped.
TEST(PipelineHooksTest, ReplayOfDumpedInputMatchesCompile) {
  const std::filesystem::path dir = std::filesystem::temp_directory_path() / "kiln-pipeline-replay-test";
  std::filesystem::remove_all(dir);
  CompileOptions options;
  options.kernel_cache_dir = "";
  options.dump_ir_dir = dir.string();
  options.memory_budget = 0.5;
  CompiledGraph compiled;
  std::string error;
  ASSERT_TRUE(compileGraph(jointGraph(), options, &compiled, &error)) << error;
  const std::vector<std::string> stages = passes::pipelineStageNames();
  char last[32];
  std::snprintf(last, sizeof(last), "%02zu-%s.mlir", stages.size(), stages.back().c_str());
  const std::string expected = readFile(dir / last);
  ASSERT_FALSE(expected.empty()) << "no dump " << (dir / last);

  mlir::DialectRegistry registry;
  ir::registerKilnDialect(registry);
  cpuTarget()->registerDialects(registry);
  mlir::MLIRContext context(registry);
  ir::loadKilnDialects(context);
  mlir::OwningOpRef<mlir::ModuleOp> module =
      mlir::parseSourceFile<mlir::ModuleOp>((dir / "00-input.mlir").string(), &context);
  ASSERT_TRUE(module);
  mlir::PassManager pm(&context);
  passes::PipelineOptions pipeline;
  pipeline.memory_budget = 0.5;
  ASSERT_TRUE(mlir::succeeded(passes::buildPipeline(pm, pipeline, &error))) << error;
  ASSERT_TRUE(mlir::succeeded(pm.run(*module)));
  std::string replayed;
  llvm::raw_string_ostream os(replayed);
  module->print(os);
  EXPECT_EQ(replayed, expected);
}

} // namespace
} // namespace kiln::codegen
