// The CUDA C emitter's entry point and shared pieces (EmitCuda.h,
// CudaText.h): the kernel's tensors and parameters, index math, the body
// emitter (one kiln op, one C statement), and the choice of kernel kind.
#include "CudaText.h"

#include "GeneralizeKernel.h"
#include "KernelAbi.h"

#include "mlir/IR/BuiltinTypes.h"

namespace kiln::codegen::cuda {

using namespace mlir;
using namespace detail;

const char *kindName(KernelKind kind) {
  switch (kind) {
  case KernelKind::Pointwise:
    return "pointwise";
  case KernelKind::WarpRows:
    return "warp-rows";
  case KernelKind::BlockRows:
    return "block-rows";
  case KernelKind::Scan:
    return "scan";
  case KernelKind::ScatterAdd:
    return "scatter-add";
  }
  return "?";
}

int64_t LaunchRule::workItems(const std::vector<int64_t> &class_sizes) const {
  int64_t work = static_work;
  for (int c : work_classes)
    work *= c < static_cast<int>(class_sizes.size()) ? class_sizes[static_cast<size_t>(c)] : 1;
  return work;
}

int64_t LaunchRule::gridBlocks(const std::vector<int64_t> &class_sizes) const {
  const int64_t work = workItems(class_sizes);
  const int64_t blocks = (work + work_per_block - 1) / work_per_block;
  return std::max<int64_t>(1, std::min(blocks, max_blocks));
}

namespace detail {

// ---- index math and text ----

std::string Expr::str() const { return value ? std::to_string(*value) : text; }

Expr operator*(const Expr &a, const Expr &b) {
  if (a.value && b.value)
    return Expr::constant(*a.value * *b.value);
  if (a.is(1))
    return b;
  if (b.is(1))
    return a;
  return Expr::symbol("(" + a.str() + " * " + b.str() + ")");
}

Expr operator+(const Expr &a, const Expr &b) {
  if (a.value && b.value)
    return Expr::constant(*a.value + *b.value);
  if (a.is(0))
    return b;
  if (b.is(0))
    return a;
  return Expr::symbol("(" + a.str() + " + " + b.str() + ")");
}

void Writer::line(const std::string &text) {
  out_.append(2 * depth_, ' ');
  out_ += text;
  out_ += '\n';
}

void Writer::open(const std::string &header) {
  line(header.empty() ? "{" : header + " {");
  ++depth_;
}

void Writer::close(const std::string &tail) {
  --depth_;
  line("}" + tail);
}

Expr extentOf(const std::vector<Expr> &shape, llvm::ArrayRef<int64_t> dims) {
  Expr e = Expr::constant(1);
  for (int64_t d : dims)
    e = e * shape[d];
  return e;
}

std::vector<std::string> coordNames(int64_t rank) {
  std::vector<std::string> names;
  for (int64_t d = 0; d < rank; ++d)
    names.push_back("c" + std::to_string(d));
  return names;
}

void emitCoords(Writer &w, const KernelContext &k, const std::string &linear, const std::vector<Expr> &shape,
                llvm::ArrayRef<int64_t> dims) {
  std::vector<int64_t> live;
  for (int64_t d : dims) {
    if (shape[d].is(1))
      w.line("const " + k.index + " c" + std::to_string(d) + " = 0;");
    else
      live.push_back(d);
  }
  std::string rest = linear;
  for (size_t i = live.size(); i-- > 0;) {
    const int64_t d = live[i];
    const std::string c = "c" + std::to_string(d);
    if (i == 0) {
      w.line("const " + k.index + " " + c + " = " + rest + ";");
      break;
    }
    w.line("const " + k.index + " " + c + " = " + rest + " % " + shape[d].str() + ";");
    const std::string next = linear + "_" + std::to_string(d);
    w.line("const " + k.index + " " + next + " = " + rest + " / " + shape[d].str() + ";");
    rest = next;
  }
}

std::string offsetAt(const TensorRef &t, const std::vector<std::string> &coords) {
  std::string s;
  for (size_t d = 0; d < t.shape.size() && d < coords.size(); ++d) {
    if (coords[d].empty() || t.shape[d].is(1) || t.strides[d].is(0))
      continue;
    std::string term = t.strides[d].is(1) ? coords[d] : coords[d] + " * " + t.strides[d].str();
    s += (s.empty() ? "" : " + ") + term;
  }
  return s.empty() ? "0" : s;
}

bool isRowMajor(const TensorRef &t, const std::vector<Expr> &shape) {
  if (t.shape.size() != shape.size())
    return false;
  Expr expected = Expr::constant(1);
  for (size_t i = shape.size(); i-- > 0;) {
    if (t.shape[i].str() != shape[i].str())
      return false;
    if (!shape[i].is(1) && t.strides[i].str() != expected.str())
      return false;
    expected = expected * shape[i];
  }
  return true;
}

std::string valueName(const KernelContext &k, Value v) {
  if (auto arg = dyn_cast<BlockArgument>(v))
    return "a" + std::to_string(arg.getArgNumber());
  return "v" + std::to_string(k.position.lookup(v.getDefiningOp()));
}

// ---- the kernel's tensors and parameters ----

std::vector<Expr> KernelContext::shapeOf(Value v) const {
  auto type = cast<RankedTensorType>(v.getType());
  std::vector<Expr> shape;
  const std::vector<int> *classes = nullptr;
  if (generic) {
    if (auto arg = dyn_cast<BlockArgument>(v))
      classes = &generic->inputs[arg.getArgNumber()];
    else
      classes = &generic->body[position.lookup(v.getDefiningOp())];
  }
  for (int64_t d = 0; d < type.getRank(); ++d) {
    if (classes && (*classes)[d] >= 0)
      shape.push_back(Expr::symbol("size" + std::to_string((*classes)[d])));
    else
      shape.push_back(Expr::constant(type.getDimSize(d)));
  }
  return shape;
}

std::string KernelContext::unsupported(Operation *op, KernelKind kind) const {
  return "cuda emitter: " + op->getName().getStringRef().str() + " in a " + kindName(kind) +
         " fusion is not supported yet";
}

namespace {

/// The shape of a fusion operand or result with a generic kernel's classes.
std::vector<Expr> shapeWith(RankedTensorType type, const std::vector<int> *classes) {
  std::vector<Expr> shape;
  for (int64_t d = 0; d < type.getRank(); ++d) {
    if (classes && (*classes)[d] >= 0)
      shape.push_back(Expr::symbol("size" + std::to_string((*classes)[d])));
    else
      shape.push_back(Expr::constant(type.getDimSize(d)));
  }
  return shape;
}

std::vector<Expr> rowMajor(const std::vector<Expr> &shape) {
  std::vector<Expr> strides(shape.size(), Expr::constant(1));
  Expr s = Expr::constant(1);
  for (size_t i = shape.size(); i-- > 0;) {
    strides[i] = s;
    s = s * shape[i];
  }
  return strides;
}

void addParam(KernelContext &k, KernelParam::Role role, int index, int dim, std::string ctype, std::string name) {
  k.params.push_back(KernelParam{role, index, dim, std::move(ctype), std::move(name)});
}

/// Largest element offset + 1 and extent of a static tensor (index-width check).
int64_t span(const TensorRef &t) {
  int64_t last = 0, count = 1;
  for (size_t d = 0; d < t.shape.size(); ++d) {
    last += (*t.shape[d].value - 1) * std::abs(*t.strides[d].value);
    count *= *t.shape[d].value;
  }
  return std::max(last + 1, count);
}

/// 32-bit index math when every offset, every extent and a grid-stride
/// step past the end fit in an int (kMaxGridThreads: the launch cap).
bool fitsInt32(const KernelContext &k) {
  constexpr int64_t kMaxGridThreads = int64_t(65536) * 1024;
  constexpr int64_t kLimit = (int64_t(1) << 31) - 1 - kMaxGridThreads;
  for (const auto *list : {&k.inputs, &k.results})
    for (const TensorRef &t : *list)
      if (span(t) >= kLimit)
        return false;
  return true;
}

} // namespace

LogicalResult prepareContext(KernelContext &k, std::string *error) {
  ir::FusionOp fusion = k.fusion;
  for (Operation &op : fusion.getBodyBlock().without_terminator()) {
    k.position[&op] = k.bodyOps.size();
    k.bodyOps.push_back(&op);
  }
  const std::vector<std::vector<int64_t>> strides =
      k.generic ? k.generic->inputStrides : operandStrides(fusion);
  std::vector<std::pair<int, int>> dynamicStrides;
  for (auto [i, operand] : llvm::enumerate(fusion.getInputs())) {
    auto type = dyn_cast<RankedTensorType>(operand.getType());
    if (!type || !type.hasStaticShape() || storageType(type.getElementType()).empty()) {
      *error = "cuda emitter: operand " + std::to_string(i) + " of " + fusion.getKernel().str() +
               " is not a statically shaped tensor of f32, f64, f16, bf16, i64, i32 or i1";
      return failure();
    }
    TensorRef t{"in" + std::to_string(i), type.getElementType(),
                shapeWith(type, k.generic ? &k.generic->inputs[i] : nullptr), {}};
    for (auto [d, s] : llvm::enumerate(strides[i])) {
      if (s == ShapedType::kDynamic) {
        t.strides.push_back(Expr::symbol("stride" + std::to_string(i) + "_" + std::to_string(d)));
        dynamicStrides.push_back({static_cast<int>(i), static_cast<int>(d)});
      } else {
        t.strides.push_back(Expr::constant(s));
      }
    }
    addParam(k, KernelParam::Role::Operand, i, 0, "const " + storageType(t.element) + " *__restrict__", t.ptr);
    k.inputs.push_back(std::move(t));
  }
  for (auto [j, result] : llvm::enumerate(fusion.getResults())) {
    auto type = cast<RankedTensorType>(result.getType());
    if (storageType(type.getElementType()).empty()) {
      *error = "cuda emitter: result " + std::to_string(j) + " of " + fusion.getKernel().str() + " has no storage type";
      return failure();
    }
    std::vector<Expr> shape = shapeWith(type, k.generic ? &k.generic->results[j] : nullptr);
    TensorRef t{"out" + std::to_string(j), type.getElementType(), shape, rowMajor(shape)};
    addParam(k, KernelParam::Role::Result, j, 0, storageType(t.element) + " *__restrict__", t.ptr);
    k.results.push_back(std::move(t));
  }
  for (size_t s = 0; s < indexChecks(fusion).size(); ++s) {
    k.statuses.push_back("status" + std::to_string(s));
    addParam(k, KernelParam::Role::IndexStatus, s, 0, "long long *__restrict__", k.statuses.back());
  }
  if (k.generic) {
    for (size_t c = 0; c < k.generic->sources.size(); ++c)
      addParam(k, KernelParam::Role::Size, c, 0, "long long", "size" + std::to_string(c));
    for (auto [i, d] : dynamicStrides)
      addParam(k, KernelParam::Role::Stride, i, d, "long long", "stride" + std::to_string(i) + "_" + std::to_string(d));
    for (auto [s, pos] : llvm::enumerate(k.generic->scalarConstants)) {
      Operation *op = k.bodyOps[pos];
      Type element = cast<RankedTensorType>(op->getResult(0).getType()).getElementType();
      k.scalarArgs[op] = "scalar" + std::to_string(s);
      addParam(k, KernelParam::Role::Scalar, s, 0, computeType(element), k.scalarArgs[op]);
    }
  }
  k.index = !k.generic && fitsInt32(k) ? "int" : "long long";
  return success();
}

EmittedKernel finishKernel(const KernelContext &k, llvm::StringRef name, std::string source, LaunchRule launch) {
  EmittedKernel kernel;
  kernel.name = name.str();
  kernel.source = std::move(source);
  kernel.params = k.params;
  kernel.launch = std::move(launch);
  return kernel;
}

std::string signature(const KernelContext &k, llvm::StringRef name) {
  std::string s = "extern \"C\" __global__ void " + name.str() + "(";
  for (size_t i = 0; i < k.params.size(); ++i)
    s += (i ? ", " : "") + k.params[i].ctype + " " + k.params[i].name;
  return s + ")";
}

// ---- the body emitter ----

FailureOr<std::string> BodyEmitter::value(Value v, std::string *error) {
  if (outer)
    if (auto it = outer->find(v); it != outer->end())
      return it->second;
  if (auto it = names.find(v); it != names.end())
    return it->second;
  const std::string name = valueName(k, v);
  Type element = cast<RankedTensorType>(v.getType()).getElementType();
  const std::string decl = "const " + computeType(element) + " " + name + " = ";
  if (auto arg = dyn_cast<BlockArgument>(v)) {
    w.line(decl + loadArgument(arg.getArgNumber()) + ";");
    return names[v] = name;
  }
  Operation *op = v.getDefiningOp();
  if (isa<ir::ReshapeOp, ir::BroadcastOp>(op)) { // the same per-row value
    FailureOr<std::string> in = value(op->getOperand(0), error);
    if (failed(in))
      return failure();
    return names[v] = *in;
  }
  if (auto c = dyn_cast<ir::ConstantOp>(op)) {
    auto it = k.scalarArgs.find(op);
    w.line(decl + (it != k.scalarArgs.end() ? it->second : literal(c.getValue().convertToDouble(), element)) + ";");
    return names[v] = name;
  }
  if (ir::isReductionOp(op) || isa<ir::ScatterAddOp>(op) || !(ir::isElementwiseOp(op) || isa<ir::GatherOp>(op))) {
    *error = k.unsupported(op, kind);
    return failure();
  }
  std::vector<std::string> args;
  for (Value operand : op->getOperands()) {
    if (isa<ir::GatherOp>(op) && operand == op->getOperand(0))
      continue; // the table is read at the gathered position
    FailureOr<std::string> a = value(operand, error);
    if (failed(a))
      return failure();
    args.push_back(*a);
  }
  FailureOr<std::string> expr =
      isa<ir::GatherOp>(op) ? gather(cast<ir::GatherOp>(op), args[0], error) : scalarExpr(op, args, error);
  if (failed(expr))
    return failure();
  w.line(decl + *expr + ";");
  return names[v] = name;
}

FailureOr<std::string> BodyEmitter::gather(ir::GatherOp g, const std::string &index, std::string *error) {
  auto table = dyn_cast<BlockArgument>(g.getInput());
  if (!table) {
    *error = "cuda emitter: kiln.gather reads a table computed inside its fusion (kiln-fuse never makes one)";
    return failure();
  }
  const TensorRef &t = k.inputs[table.getArgNumber()];
  const int64_t dim = g.getDim();
  auto type = cast<RankedTensorType>(g.getInput().getType());
  if (type.getDimSize(dim) == 0)
    return literal(0.0, type.getElementType()); // every index is bad: the status word reports it
  // Clamped into range, so a bad index never reads outside the table.
  const std::string j = "j" + std::to_string(k.position.lookup(g.getOperation()));
  w.line("const long long " + j + " = " + index + " < 0 ? 0 : (" + index + " > " +
         std::to_string(type.getDimSize(dim) - 1) + " ? " + std::to_string(type.getDimSize(dim) - 1) + " : " + index +
         ");");
  std::vector<std::string> at = coords;
  at[dim] = j;
  return "kiln_load(" + t.ptr + "[" + offsetAt(t, at) + "])";
}

} // namespace detail

FailureOr<EmittedKernel> emitCudaKernel(ir::FusionOp fusion, const KernelGeneralization *generic, StringRef name,
                                        std::string *error) {
  KernelContext k;
  k.fusion = fusion;
  k.generic = generic;
  if (failed(prepareContext(k, error)))
    return failure();
  const StringRef symbol = name.empty() ? fusion.getKernel() : name;
  bool scatter = false, scan = false, reduction = false;
  for (Operation *op : k.bodyOps) {
    scatter |= isa<ir::ScatterAddOp>(op);
    scan |= isa<ir::CumsumOp>(op);
    reduction |= ir::isReductionOp(op);
  }
  if (scatter)
    return emitScatterAdd(k, symbol, error);
  if (scan)
    return emitScan(k, symbol, error);
  if (reduction)
    return emitRows(k, symbol, error);
  return emitPointwise(k, symbol, error);
}

} // namespace kiln::codegen::cuda
