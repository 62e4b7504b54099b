// codegen/cuda/CudaText.h - the pieces every CUDA kernel kind is printed
// from (private to codegen/cuda): index expressions, a line writer, the
// kernel's tensors and parameters, and the body emitter that prints one
// kiln op as one C statement.
#pragma once

#include "EmitCuda.h"

#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "llvm/ADT/DenseMap.h"
#include "mlir/IR/Value.h"

namespace kiln::codegen::cuda::detail {

/// An extent, stride or offset of index math: a constant when the kernel is
/// static in it, else a C expression (a size or stride parameter).
struct Expr {
  std::optional<int64_t> value;
  std::string text;

  static Expr constant(int64_t v) { return Expr{v, {}}; }
  static Expr symbol(std::string s) { return Expr{std::nullopt, std::move(s)}; }
  bool is(int64_t v) const { return value && *value == v; }
  std::string str() const;
};
Expr operator*(const Expr &a, const Expr &b);
Expr operator+(const Expr &a, const Expr &b);

/// Indented lines of C.
class Writer {
public:
  void line(const std::string &text);
  /// Prints `header {` and indents.
  void open(const std::string &header);
  /// Unindents and prints `}` (plus `tail`).
  void close(const std::string &tail = "");
  const std::string &text() const { return out_; }

private:
  std::string out_;
  int depth_ = 0;
};

/// A tensor the kernel reads or writes through a pointer parameter.
struct TensorRef {
  std::string ptr;
  mlir::Type element;
  std::vector<Expr> shape, strides; ///< elements
};

/// C storage type of a kiln element type (kiln_half, kiln_bf16, float,
/// double, long long, int, unsigned char for i1), or "" if none.
std::string storageType(mlir::Type element);
/// C type a value of `element` is computed in (float for f16/bf16, bool for i1).
std::string computeType(mlir::Type element);
/// `value` as a C literal of computeType(element), rounded to f16/bf16 first.
std::string literal(double value, mlir::Type element);
/// Bytes of one stored element.
int64_t storageBytes(mlir::Type element);

/// The C expression of elementwise op `op` over the compute-type operand
/// expressions `args` (ScalarOps.cpp): PyTorch's semantics, as the CPU
/// target's EmitKernel.cpp / EmitScalarMath.cpp. Fails with `*error` for an
/// op that is not elementwise.
mlir::FailureOr<std::string> scalarExpr(mlir::Operation *op, llvm::ArrayRef<std::string> args, std::string *error);

/// What every kind of kernel shares: its tensors and parameters.
struct KernelContext {
  ir::FusionOp fusion;
  const KernelGeneralization *generic = nullptr;
  std::vector<TensorRef> inputs, results;
  std::vector<std::string> statuses;     ///< status word pointers (KernelAbi's indexChecks)
  std::vector<KernelParam> params;
  llvm::DenseMap<mlir::Operation *, std::string> scalarArgs; ///< constants passed by value
  std::vector<mlir::Operation *> bodyOps;
  llvm::DenseMap<mlir::Operation *, unsigned> position; ///< body order
  std::string index = "int"; ///< the index type: "int" when every extent and offset fits, else "long long"

  /// The shape of body value `v` (size parameters for a generic kernel's dims).
  std::vector<Expr> shapeOf(mlir::Value v) const;
  /// The error every unsupported case returns.
  std::string unsupported(mlir::Operation *op, KernelKind kind) const;
};

/// Fills the context's tensors and parameters (EmitCuda.cpp).
mlir::LogicalResult prepareContext(KernelContext &k, std::string *error);
/// `extern "C" __global__ void <name>(<params>)`.
std::string signature(const KernelContext &k, llvm::StringRef name);
/// The kernel `name` with `source` (what follows the prelude), the
/// context's parameters and `launch`.
EmittedKernel finishKernel(const KernelContext &k, llvm::StringRef name, std::string source, LaunchRule launch);
/// Decomposes the linear index `linear` over `dims` of `shape` (row-major
/// among them) into `c<d>` variables.
void emitCoords(Writer &w, const KernelContext &k, const std::string &linear, const std::vector<Expr> &shape,
                llvm::ArrayRef<int64_t> dims);
/// The element offset of `t` where its dim d is at coordinate `coords[d]`
/// (a C name; "" is 0): sum of coords[d] * stride[d], dims of extent 1 and
/// stride 0 left out; "0" if nothing is left.
std::string offsetAt(const TensorRef &t, const std::vector<std::string> &coords);
/// Coordinate names c<d> of dims [0, rank).
std::vector<std::string> coordNames(int64_t rank);
/// True if `t` has `shape` and row-major strides.
bool isRowMajor(const TensorRef &t, const std::vector<Expr> &shape);
/// The product of `shape` over `dims`.
Expr extentOf(const std::vector<Expr> &shape, llvm::ArrayRef<int64_t> dims);

/// Prints body values as C statements in one scope (a loop body): each
/// value once, on first use, as `const T vN = ...;`. Values of an enclosing
/// scope (`outer`) are read by name.
class BodyEmitter {
public:
  BodyEmitter(KernelContext &k, Writer &w) : k(k), w(w) {}

  /// How block argument `i` is read in this scope (a C expression of its compute type).
  std::function<std::string(unsigned i)> loadArgument;
  /// Coordinates of the current element (c<d> names) for kiln.gather.
  std::vector<std::string> coords;
  const llvm::DenseMap<mlir::Value, std::string> *outer = nullptr;
  /// Set when `value` reaches an op of another kind (a reduction): its error.
  KernelKind kind = KernelKind::Pointwise;

  /// The name of `v`, printing its statement (and its operands') first.
  mlir::FailureOr<std::string> value(mlir::Value v, std::string *error);
  llvm::DenseMap<mlir::Value, std::string> names;

private:
  mlir::FailureOr<std::string> gather(ir::GatherOp g, const std::string &index, std::string *error);
  KernelContext &k;
  Writer &w;
};

/// The body position name `v<pos>` of an op result, `a<i>` of a block argument.
std::string valueName(const KernelContext &k, mlir::Value v);

/// Kernel kinds (one file each).
mlir::FailureOr<EmittedKernel> emitPointwise(KernelContext &k, llvm::StringRef name, std::string *error);
mlir::FailureOr<EmittedKernel> emitRows(KernelContext &k, llvm::StringRef name, std::string *error);
mlir::FailureOr<EmittedKernel> emitScan(KernelContext &k, llvm::StringRef name, std::string *error);
mlir::FailureOr<EmittedKernel> emitScatterAdd(KernelContext &k, llvm::StringRef name, std::string *error);

/// The index checks' status words: block 0 scans each check's index tensor
/// for the first bad index (row-major) with a block reduction, then thread 0
/// writes {found, value} (runtime/IndexCheck.h). Has barriers.
mlir::LogicalResult emitIndexChecks(Writer &w, KernelContext &k, std::string *error);

} // namespace kiln::codegen::cuda::detail
