// The Kiln compile pipeline: one table of named stages, run in order.
#include "kiln/passes/Pipeline.h"

#include "kiln/ir/KilnDialect.h"
#include "kiln/passes/Passes.h"

#include "mlir/IR/Diagnostics.h"
#include "mlir/Pass/PassManager.h"
#include "mlir/Transforms/Passes.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/raw_ostream.h"

#include <cstdio>

namespace kiln::passes {
namespace {

struct Stage {
  const char *name;
  void (*addPasses)(mlir::OpPassManager &pm, const PipelineOptions &options);
  /// Runs only when this returns true (null: always).
  bool (*enabled)(const PipelineOptions &options) = nullptr;
};

/// THE pipeline. Each stage's IR is dumped under its name.
const Stage kStages[] = {
    {"canonicalize",
     [](mlir::OpPassManager &pm, const PipelineOptions &) { pm.addPass(mlir::createCanonicalizerPass()); }},
    {"cse", [](mlir::OpPassManager &pm, const PipelineOptions &) { pm.addPass(mlir::createCSEPass()); }},
    {"autocast",
     [](mlir::OpPassManager &pm, const PipelineOptions &options) {
       pm.addPass(createKilnAutocastPass(KilnAutocastPassOptions{options.autocast}));
     },
     [](const PipelineOptions &options) { return !options.autocast.empty(); }},
    {"remat",
     [](mlir::OpPassManager &pm, const PipelineOptions &options) {
       if (options.remat)
         pm.addPass(createKilnRematPass(KilnRematPassOptions{options.memory_budget}));
     }},
    {"partition", [](mlir::OpPassManager &pm, const PipelineOptions &) { pm.addPass(createKilnPartitionPass()); }},
    {"fuse", [](mlir::OpPassManager &pm, const PipelineOptions &) { pm.addPass(createKilnFusePass()); }},
};

bool stageEnabled(const Stage &stage, const PipelineOptions &options) {
  return !stage.enabled || stage.enabled(options);
}

/// Writes `module` to `<dir>/<NN>-<name>.mlir`.
bool dumpModule(mlir::ModuleOp module, const std::string &dir, int index, const char *name, std::string *error) {
  if (std::error_code ec = llvm::sys::fs::create_directories(dir)) {
    *error = "cannot create IR dump directory '" + dir + "': " + ec.message();
    return false;
  }
  char prefix[16];
  std::snprintf(prefix, sizeof(prefix), "%02d-", index);
  llvm::SmallString<256> path(dir);
  llvm::sys::path::append(path, std::string(prefix) + name + ".mlir");
  std::error_code ec;
  llvm::raw_fd_ostream os(path, ec);
  if (ec) {
    *error = "cannot write '" + std::string(path) + "': " + ec.message();
    return false;
  }
  module->print(os);
  return true;
}

} // namespace

std::vector<std::string> pipelineStageNames(const PipelineOptions &options) {
  std::vector<std::string> names;
  for (const Stage &stage : kStages)
    if (stageEnabled(stage, options))
      names.push_back(stage.name);
  return names;
}

mlir::LogicalResult runPipeline(mlir::ModuleOp module, const PipelineOptions &options, std::string *error) {
  std::string message, diagnostics;
  mlir::ScopedDiagnosticHandler handler(module.getContext(), [&](mlir::Diagnostic &diag) {
    llvm::raw_string_ostream os(diagnostics);
    os << "\n  " << diag.getLocation() << ": " << diag.str();
    return mlir::success();
  });
  auto fail = [&](const std::string &what) {
    if (error)
      *error = "kiln pipeline: " + what + diagnostics;
    return mlir::failure();
  };
  bool dump = !options.dump_ir_dir.empty();
  if (dump && !dumpModule(module, options.dump_ir_dir, 0, "input", &message))
    return fail(message);
  int index = 1;
  for (const Stage &stage : kStages) {
    if (!stageEnabled(stage, options))
      continue;
    mlir::PassManager pm(module.getContext());
    stage.addPasses(pm, options);
    if (mlir::failed(pm.run(module)))
      return fail(std::string("stage '") + stage.name + "' failed");
    if (dump && !dumpModule(module, options.dump_ir_dir, index, stage.name, &message))
      return fail(message);
    ++index;
  }
  return mlir::success();
}

} // namespace kiln::passes
