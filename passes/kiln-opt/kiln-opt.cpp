// kiln-opt: mlir-opt with the kiln dialect and passes, for lit tests and
// pass development. Registers kiln + func, arith, tensor, linalg, the kiln
// passes (passes/), the kiln-pipeline pass pipeline (kiln::compile's stages:
// `kiln-opt --kiln-pipeline="memory-budget=0.5" 00-input.mlir` replays a
// KILN_DUMP_IR input), the CPU target's kiln-cpu-* passes and dialects
// (codegen/), and MLIR's generic transforms (canonicalize, cse, ...).
#include "kiln/codegen/Passes.h"
#include "kiln/codegen/Target.h"
#include "kiln/ir/KilnDialect.h"
#include "kiln/passes/Passes.h"
#include "kiln/passes/Pipeline.h"

#include "mlir/IR/DialectRegistry.h"
#include "mlir/Tools/mlir-opt/MlirOptMain.h"
#include "mlir/Transforms/Passes.h"

int main(int argc, char **argv) {
  mlir::DialectRegistry registry;
  kiln::ir::registerKilnDialect(registry);
  kiln::codegen::cpuTarget()->registerDialects(registry);
  kiln::passes::registerKilnPasses();
  kiln::passes::registerKilnPipeline();
  kiln::codegen::registerKilnCodegenPasses();
  mlir::registerTransformsPasses();
  return mlir::asMainReturnCode(mlir::MlirOptMain(argc, argv, "Kiln optimizer driver\n", registry));
}
