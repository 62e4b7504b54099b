// The Kiln compile pipeline: one table of named stages, run in order.
#include "kiln/passes/Pipeline.h"

#include "kiln/ir/KilnDialect.h"
#include "kiln/passes/Passes.h"

#include "mlir/IR/Diagnostics.h"
#include "mlir/Pass/PassManager.h"
#include "mlir/Pass/PassRegistry.h"
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
         pm.addPass(createKilnRematPass(
             KilnRematPassOptions{options.memory_budget, options.bytes_per_second, options.flops_per_second}));
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

/// Adds the custom passes placed `after` (or before) `stage` to `pm`.
bool addCustomPasses(mlir::OpPassManager &pm, const PipelineOptions &options, const char *stage, bool after,
                     std::string *error) {
  for (const CustomPassSpec &custom : options.custom_passes) {
    if (custom.stage != stage || custom.after != after)
      continue;
    std::string parseErrors;
    llvm::raw_string_ostream os(parseErrors);
    if (mlir::failed(mlir::parsePassPipeline(custom.pipeline, pm, os))) {
      *error = "custom pass '" + custom.pipeline + "' " + (after ? "after" : "before") + " stage '" + stage +
               "': " + os.str();
      return false;
    }
  }
  return true;
}

/// Fails when a custom pass names no stage of kStages.
bool checkCustomStages(const PipelineOptions &options, std::string *error) {
  for (const CustomPassSpec &custom : options.custom_passes) {
    bool known = false;
    std::string names;
    for (const Stage &stage : kStages) {
      known |= custom.stage == stage.name;
      names += std::string(names.empty() ? "" : ", ") + stage.name;
    }
    if (!known) {
      *error = "custom pass '" + custom.pipeline + "' names stage '" + custom.stage + "', which is not one of: " + names;
      return false;
    }
  }
  return true;
}

/// One stage's passes with its custom passes around them; a disabled stage
/// adds only its custom passes.
bool addStage(mlir::OpPassManager &pm, const Stage &stage, const PipelineOptions &options, std::string *error) {
  if (!addCustomPasses(pm, options, stage.name, /*after=*/false, error))
    return false;
  if (stageEnabled(stage, options))
    stage.addPasses(pm, options);
  return addCustomPasses(pm, options, stage.name, /*after=*/true, error);
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
  if (!checkCustomStages(options, &message))
    return fail(message);
  int index = 1;
  for (const Stage &stage : kStages) {
    mlir::PassManager pm(module.getContext());
    if (!addStage(pm, stage, options, &message))
      return fail(message);
    if (pm.size() == 0)
      continue;
    if (mlir::failed(pm.run(module)))
      return fail(std::string("stage '") + stage.name + "' failed");
    if (!stageEnabled(stage, options))
      continue;
    if (dump && !dumpModule(module, options.dump_ir_dir, index, stage.name, &message))
      return fail(message);
    ++index;
  }
  return mlir::success();
}

mlir::LogicalResult buildPipeline(mlir::OpPassManager &pm, const PipelineOptions &options, std::string *error) {
  std::string message;
  if (!checkCustomStages(options, &message)) {
    *error = message;
    return mlir::failure();
  }
  for (const Stage &stage : kStages)
    if (!addStage(pm, stage, options, &message)) {
      *error = message;
      return mlir::failure();
    }
  return mlir::success();
}

namespace {

/// kiln-opt's --kiln-pipeline options: PipelineOptions without dumps.
struct KilnPipelineCliOptions : public mlir::PassPipelineOptions<KilnPipelineCliOptions> {
  Option<double> memoryBudget{*this, "memory-budget", llvm::cl::desc("kiln-remat's memory budget in [0, 1]"),
                              llvm::cl::init(1.0)};
  Option<bool> remat{*this, "remat", llvm::cl::desc("run kiln-remat"), llvm::cl::init(true)};
  Option<std::string> autocast{*this, "autocast", llvm::cl::desc("bf16 or f16: run kiln-autocast (empty: off)"),
                               llvm::cl::init("")};
  Option<double> bytesPerSecond{*this, "bytes-per-second", llvm::cl::desc("kiln-remat's cost model"),
                                llvm::cl::init(26e9)};
  Option<double> flopsPerSecond{*this, "flops-per-second", llvm::cl::desc("kiln-remat's cost model"),
                                llvm::cl::init(130e9)};
};

} // namespace

void registerKilnPipeline() {
  mlir::PassPipelineRegistration<KilnPipelineCliOptions>(
      "kiln-pipeline", "kiln::compile's pipeline (canonicalize, cse, [autocast], remat, partition, fuse)",
      [](mlir::OpPassManager &pm, const KilnPipelineCliOptions &cli) {
        PipelineOptions options;
        options.memory_budget = cli.memoryBudget;
        options.remat = cli.remat;
        options.autocast = cli.autocast;
        options.bytes_per_second = cli.bytesPerSecond;
        options.flops_per_second = cli.flopsPerSecond;
        std::string error;
        (void)buildPipeline(pm, options, &error); // no custom passes: cannot fail
      });
}

} // namespace kiln::passes
