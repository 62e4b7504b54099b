// kiln-opt: mlir-opt with the kiln dialect and passes, for lit tests and
// pass development. Registers kiln + func, arith, tensor, linalg, the kiln
// passes and MLIR's generic transforms (canonicalize, cse, ...).
#include "kiln/ir/KilnDialect.h"
#include "kiln/passes/Passes.h"

#include "mlir/IR/DialectRegistry.h"
#include "mlir/Tools/mlir-opt/MlirOptMain.h"
#include "mlir/Transforms/Passes.h"

int main(int argc, char **argv) {
  mlir::DialectRegistry registry;
  kiln::ir::registerKilnDialect(registry);
  kiln::passes::registerKilnPasses();
  mlir::registerTransformsPasses();
  return mlir::asMainReturnCode(mlir::MlirOptMain(argc, argv, "Kiln optimizer driver\n", registry));
}
