// The kiln dialect: registration and constant materialization.
#include "kiln/ir/KilnDialect.h"

#include "kiln/ir/KilnOps.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/Linalg/IR/Linalg.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "mlir/IR/DialectRegistry.h"
#include "mlir/IR/MLIRContext.h"

#include "kiln/ir/KilnDialect.cpp.inc"

namespace kiln::ir {

void KilnDialect::initialize() {
  addOperations<
#define GET_OP_LIST
#include "kiln/ir/KilnOps.cpp.inc"
      >();
}

/// Folders return the splat value as an F64 FloatAttr (or a splat elements
/// attribute); both become a kiln.constant of the folded result's type.
mlir::Operation *KilnDialect::materializeConstant(mlir::OpBuilder &builder, mlir::Attribute value, mlir::Type type,
                                                  mlir::Location loc) {
  auto tensorType = mlir::dyn_cast<mlir::RankedTensorType>(type);
  if (!tensorType || !tensorType.hasStaticShape())
    return nullptr;
  double scalar = 0.0;
  if (auto floatAttr = mlir::dyn_cast<mlir::FloatAttr>(value)) {
    scalar = floatAttr.getValueAsDouble();
  } else if (auto splat = mlir::dyn_cast<mlir::SplatElementsAttr>(value)) {
    mlir::Attribute element = splat.getSplatValue<mlir::Attribute>();
    if (auto f = mlir::dyn_cast<mlir::FloatAttr>(element))
      scalar = f.getValueAsDouble();
    else if (auto i = mlir::dyn_cast<mlir::IntegerAttr>(element))
      scalar =
          static_cast<double>(i.getType().isInteger(1) ? i.getValue().getZExtValue() : i.getValue().getSExtValue());
    else
      return nullptr;
  } else {
    return nullptr;
  }
  return builder.create<ConstantOp>(loc, tensorType, scalar);
}

void registerKilnDialect(mlir::DialectRegistry &registry) {
  registry.insert<KilnDialect, mlir::func::FuncDialect, mlir::arith::ArithDialect, mlir::tensor::TensorDialect,
                  mlir::linalg::LinalgDialect>();
}

void loadKilnDialects(mlir::MLIRContext &context) {
  mlir::DialectRegistry registry;
  registerKilnDialect(registry);
  context.appendDialectRegistry(registry);
  context.loadDialect<KilnDialect, mlir::func::FuncDialect, mlir::arith::ArithDialect, mlir::tensor::TensorDialect,
                      mlir::linalg::LinalgDialect>();
}

} // namespace kiln::ir
