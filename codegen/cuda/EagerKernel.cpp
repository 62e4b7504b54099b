// One eager op as a shape-generic CUDA kernel (kiln/codegen/EagerCuda.h):
// buildModule + kiln-fuse at two sizes, generalizeKernel, emitCudaKernel, and
// the map from the kernel's parameters back to the graph's inputs and outputs.
#include "kiln/codegen/EagerCuda.h"

#include <algorithm>

#include "EmitCuda.h"
#include "GeneralizeKernel.h"
#include "KernelAbi.h"

#include "kiln/ir/GraphBuilder.h"
#include "kiln/ir/KilnDialect.h"
#include "kiln/passes/Passes.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/Pass/PassManager.h"

namespace kiln::codegen {

using namespace mlir;

namespace {

/// A graph built and fused: its module, the one fusion, and per fusion
/// operand the graph input, per fusion result the graph output.
struct FusedGraph {
  OwningOpRef<ModuleOp> module;
  ir::FusionOp fusion;
  std::vector<int> inputOf;  ///< fusion operand i -> graph input
  std::vector<int> outputOf; ///< fusion result j -> graph output
};

bool fuseGraph(MLIRContext &context, const ir::Graph &graph, FusedGraph *out, std::string *error) {
  out->module = ir::buildModule(context, graph, error);
  if (!out->module)
    return false;
  PassManager pm(&context);
  pm.addPass(passes::createKilnFusePass());
  if (failed(pm.run(*out->module))) {
    *error = "kiln-fuse failed";
    return false;
  }
  func::FuncOp func;
  out->module->walk([&](func::FuncOp f) { func = f; });
  int fusions = 0;
  func.walk([&](ir::FusionOp f) {
    out->fusion = f;
    ++fusions;
  });
  if (fusions != 1) {
    *error = "the op's dialect form is " + std::to_string(fusions) + " kernels, expected one";
    return false;
  }
  for (Value operand : out->fusion.getInputs()) {
    auto arg = dyn_cast<BlockArgument>(operand);
    if (!arg || arg.getOwner()->getParentOp() != func.getOperation()) {
      *error = "a kernel operand is not a graph input (a view before the kernel)";
      return false;
    }
    out->inputOf.push_back(static_cast<int>(arg.getArgNumber()));
  }
  out->outputOf.assign(out->fusion.getNumResults(), -1);
  auto ret = cast<func::ReturnOp>(func.getBody().front().getTerminator());
  for (auto [k, value] : llvm::enumerate(ret.getOperands())) {
    // A keepdim reduction returns a reshape of the kernel's result: the
    // same row-major memory with unit dims added.
    while (auto reshape = value.getDefiningOp<ir::ReshapeOp>())
      value = reshape.getOperand();
    auto result = dyn_cast<OpResult>(value);
    if (!result || result.getOwner() != out->fusion.getOperation()) {
      *error = "graph output " + std::to_string(k) + " is not a kernel result";
      return false;
    }
    out->outputOf[result.getResultNumber()] = static_cast<int>(k);
  }
  if (std::count(out->outputOf.begin(), out->outputOf.end(), -1) != 0) {
    *error = "a kernel result is not a graph output";
    return false;
  }
  return true;
}

} // namespace

bool emitEagerCudaKernel(const ir::Graph &graph, const ir::Graph &reference, const std::string &name,
                         EagerCudaKernel *out, std::string *error) {
  MLIRContext context(MLIRContext::Threading::DISABLED);
  ir::loadKilnDialects(context);
  std::string diagnostics;
  ScopedDiagnosticHandler handler(&context, [&](Diagnostic &diag) {
    if (diag.getSeverity() == DiagnosticSeverity::Error)
      diagnostics += (diagnostics.empty() ? "" : "; ") + diag.str();
    return success();
  });
  auto fail = [&](const std::string &message) {
    *error = "eager cuda kernel " + name + ": " + message + (diagnostics.empty() ? "" : " (" + diagnostics + ")");
    return false;
  };
  FusedGraph self, ref;
  std::string why;
  if (!fuseGraph(context, graph, &self, &why))
    return fail(why);
  if (!fuseGraph(context, reference, &ref, &why))
    return fail("(reference size) " + why);
  if (self.inputOf != ref.inputOf || self.outputOf != ref.outputOf)
    return fail("the two sizes give different kernels");
  FailureOr<KernelGeneralization> generic = generalizeKernel(self.fusion, ref.fusion, &why);
  if (failed(generic))
    return fail(why);
  // Every stride is a parameter: eager operands are any strided view.
  for (std::vector<int64_t> &strides : generic->inputStrides)
    std::fill(strides.begin(), strides.end(), ShapedType::kDynamic);
  FailureOr<cuda::EmittedKernel> kernel = cuda::emitCudaKernel(self.fusion, &*generic, name, &why);
  if (failed(kernel))
    return fail(why);

  // Scalar parameter k is the k-th constant of the fusion body, whose order
  // kiln-fuse chose; the graph's Constant nodes are told apart by value.
  std::vector<double> constants;
  for (const ir::Node &n : graph.nodes)
    if (n.kind == ir::OpKind::Constant) constants.push_back(n.scalar);
  std::vector<int> constantOfScalar;
  for (double value : scalarArguments(self.fusion, *generic)) {
    auto it = std::find(constants.begin(), constants.end(), value);
    if (it == constants.end() || std::count(constants.begin(), constants.end(), value) != 1)
      return fail("the graph's Constant nodes must have distinct values (they name the scalar parameters)");
    constantOfScalar.push_back(static_cast<int>(it - constants.begin()));
  }

  EagerCudaKernel k;
  k.name = kernel->name;
  k.source = cuda::cudaPrelude() + kernel->source;
  k.body_offset = cuda::cudaPrelude().size();
  const int operands = static_cast<int>(self.inputOf.size());
  for (const cuda::KernelParam &p : kernel->params) {
    EagerCudaParam q;
    q.ctype = p.ctype;
    q.dim = p.dim;
    switch (p.role) {
    case cuda::KernelParam::Role::Operand:
      q.kind = EagerCudaParam::Kind::Input;
      q.index = self.inputOf[static_cast<size_t>(p.index)];
      break;
    case cuda::KernelParam::Role::Result:
      q.kind = EagerCudaParam::Kind::Output;
      q.index = self.outputOf[static_cast<size_t>(p.index)];
      break;
    case cuda::KernelParam::Role::IndexStatus:
      q.kind = EagerCudaParam::Kind::Status;
      q.index = p.index;
      break;
    case cuda::KernelParam::Role::Size:
      q.kind = EagerCudaParam::Kind::Size;
      q.index = p.index;
      break;
    case cuda::KernelParam::Role::Stride:
      q.kind = EagerCudaParam::Kind::Stride;
      q.index = self.inputOf[static_cast<size_t>(p.index)];
      break;
    case cuda::KernelParam::Role::Scalar:
      q.kind = EagerCudaParam::Kind::Scalar;
      q.index = constantOfScalar[static_cast<size_t>(p.index)];
      break;
    }
    k.params.push_back(q);
  }
  for (auto [arg, dim] : generic->sources) {
    EagerSizeSource s;
    s.output = arg >= operands;
    s.index = s.output ? self.outputOf[static_cast<size_t>(arg - operands)] : self.inputOf[static_cast<size_t>(arg)];
    s.dim = dim;
    if (s.output) {
      auto type = cast<RankedTensorType>(self.fusion.getResult(static_cast<unsigned>(arg - operands)).getType());
      const int out = graph.outputs[static_cast<size_t>(s.index)];
      if (static_cast<int64_t>(graph.values[static_cast<size_t>(out)].shape.size()) != type.getRank())
        return fail("a size is read from a kernel result the graph returns reshaped");
    }
    k.sizeOf.push_back(s);
  }
  k.checks = indexChecks(self.fusion);
  k.launch = kernel->launch;
  if (k.launch.workspace_bytes != 0)
    return fail("the kernel needs a workspace, which eager launches do not pass yet");
  *out = std::move(k);
  return true;
}

} // namespace kiln::codegen
