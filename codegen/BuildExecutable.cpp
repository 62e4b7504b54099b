// func @forward / @backward -> runtime::LaunchExecutable.
#include "BuildExecutable.h"

#include "GemmEpilogue.h"
#include "GeneralizeKernel.h"
#include "KernelAbi.h"
#include "kiln/passes/FlopCount.h"

#include <cstring>
#include <type_traits>

#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/DenseSet.h"
#include "llvm/ADT/TypeSwitch.h"
#include "llvm/Support/raw_ostream.h"

namespace kiln::codegen {

using namespace mlir;

namespace {

std::string opName(Operation *op) { return op->getName().getStringRef().str(); }

std::string typeString(Type type) {
  std::string s;
  llvm::raw_string_ostream os(s);
  os << type;
  return os.str();
}

/// FLOPs of a kiln.fusion's body (kiln/passes/FlopCount.h, op by op).
int64_t bodyFlops(ir::FusionOp fusion) {
  int64_t flops = 0;
  for (Operation &op : fusion.getBodyBlock().without_terminator())
    flops += passes::opFlops(&op);
  return flops;
}

/// "gemm MxNxK" (a batched matmul: "gemm BxMxNxK") of a kiln.matmul.
std::string gemmName(ir::MatmulOp matmul) {
  auto lhs = cast<RankedTensorType>(matmul.getLhs().getType()).getShape();
  auto out = cast<RankedTensorType>(matmul.getType()).getShape();
  int64_t batch = 1;
  for (size_t d = 0; d + 2 < out.size(); ++d)
    batch *= out[d];
  std::string name = "gemm ";
  if (out.size() > 2)
    name += std::to_string(batch) + "x";
  return name + std::to_string(out[out.size() - 2]) + "x" + std::to_string(out.back()) + "x" +
         std::to_string(lhs.back());
}

/// A launch record of `op` (operand and result bytes, its FLOPs).
LaunchInfo launchOf(LaunchInfo::Kind kind, std::string name, Operation *op, bool backward) {
  LaunchInfo info;
  info.kind = kind;
  info.name = std::move(name);
  info.backward = backward;
  for (Value v : op->getOperands())
    info.bytes_read += passes::valueBytes(v);
  for (Value v : op->getResults())
    info.bytes_written += passes::valueBytes(v);
  info.flops = passes::opFlops(op);
  if (auto tensor = dyn_cast<RankedTensorType>(op->getResult(0).getType()))
    if (auto dtype = dtypeOf(tensor.getElementType()); succeeded(dtype))
      info.dtype = *dtype;
  return info;
}

/// The `saved` arguments of @backward whose buffer belongs to them alone:
/// the matching @forward result (kiln.num_forward_outputs + the saved
/// index) is made by an op of @forward that is not a view (a fresh
/// contiguous buffer), or is a reshape of one, and no other result of
/// @forward is it or a view of it. Only these may be donated; empty for any other function or without
/// @forward.
llvm::DenseSet<unsigned> privateSavedArguments(func::FuncOp func) {
  llvm::DenseSet<unsigned> result;
  auto module = func->getParentOfType<ModuleOp>();
  auto forward = module ? module.lookupSymbol<func::FuncOp>("forward") : func::FuncOp();
  auto numOutputs = forward ? forward->getAttrOfType<IntegerAttr>("kiln.num_forward_outputs") : IntegerAttr();
  if (func.getSymName() != "backward" || !numOutputs || forward.getBody().empty())
    return result;
  auto ret = dyn_cast<func::ReturnOp>(forward.getBody().front().getTerminator());
  if (!ret)
    return result;
  llvm::DenseMap<Value, int> uses; // memory root -> how many forward results use it
  for (Value v : ret.getOperands())
    ++uses[memoryRoot(v)];
  int64_t saved = 0;
  for (BlockArgument arg : func.getArguments()) {
    auto role = func.getArgAttrOfType<StringAttr>(arg.getArgNumber(), "kiln.role");
    if (!role || role.getValue() != "saved")
      continue;
    const int64_t index = numOutputs.getInt() + saved++;
    if (index >= static_cast<int64_t>(ret.getNumOperands()))
      return {};
    Value value = ret.getOperand(index), root = memoryRoot(value);
    // Reshapes of a fresh buffer are contiguous views of all of it.
    while (auto reshape = value.getDefiningOp<ir::ReshapeOp>())
      value = reshape->getOperand(0);
    if (value == root && root.getDefiningOp() && uses.lookup(root) == 1)
      result.insert(arg.getArgNumber());
  }
  return result;
}

/// Walks one function and records its launches in a Builder.
class ExecutableBuilder {
public:
  ExecutableBuilder(const KernelBinder &bind, std::string *error) : bind(bind), error(error) {}

  /// The fusions of `func` that `target` runs as one GEMM with an epilogue.
  void findGemmEpilogues(func::FuncOp func, const Target &target, std::vector<std::string> *folded) {
    folded_ = folded;
    func.walk([&](ir::FusionOp fusion) {
      FailureOr<GemmEpilogueMatch> match = matchGemmEpilogue(fusion);
      if (failed(match))
        return;
      const int64_t n = cast<RankedTensorType>(match->matmul.getType()).getDimSize(1);
      runtime::KernelHandle kernel = target.gemmEpilogueKernel(match->kind, n);
      if (!kernel)
        return;
      epilogues_[fusion.getOperation()] = {*match, kernel};
      deferred_.insert(match->matmul.getOperation());
    });
  }

  std::shared_ptr<runtime::LaunchExecutable> build(func::FuncOp func) {
    backward_ = func.getName() == "backward";
    Block &entry = func.getBody().front();
    llvm::DenseSet<unsigned> donatable = privateSavedArguments(func);
    for (BlockArgument arg : entry.getArguments()) {
      auto type = slotType(arg.getType(), func);
      if (failed(type))
        return nullptr;
      // Saved activations are read only by @backward: a caller that frees
      // them after the call may donate their memory (run_donating), when
      // the buffer is theirs alone.
      slots[arg] = builder.addInput(type->sizes, type->dtype, donatable.contains(arg.getArgNumber()));
    }
    for (Operation &op : entry) {
      if (failed(addOp(&op)))
        return nullptr;
    }
    std::string message;
    auto exe = builder.finish(&message);
    if (!exe) {
      report(func, "building the launch list failed: " + message);
      return nullptr;
    }
    if (launches_)
      addCopyLaunches(*exe);
    return exe;
  }

  void setDevice(Device device) { builder.setDevice(device); }
  void recordLaunches(std::vector<LaunchInfo> *launches) {
    launches_ = launches;
    firstLaunch_ = launches ? launches->size() : 0;
  }
  void keepAlive(std::shared_ptr<const void> owner) { builder.keepAlive(std::move(owner)); }

private:
  /// Keeps the first error: "codegen @forward: kiln.foo: message".
  void report(Operation *op, const std::string &message) {
    if (!error || !error->empty())
      return;
    auto func = dyn_cast<func::FuncOp>(op);
    if (!func)
      func = op->getParentOfType<func::FuncOp>();
    *error = "codegen @" + (func ? func.getName().str() : std::string("?")) + ": " + opName(op) + ": " + message;
  }
  LogicalResult fail(Operation *op, const std::string &message) {
    report(op, message);
    return failure();
  }

  FailureOr<runtime::SlotType> slotType(Type type, Operation *where) {
    auto tensor = dyn_cast<RankedTensorType>(type);
    if (!tensor || !tensor.hasStaticShape())
      return report(where, "expected a statically shaped tensor, got " + typeString(type)), failure();
    auto dtype = dtypeOf(tensor.getElementType());
    if (failed(dtype))
      return report(where, "unsupported element type " + typeString(tensor.getElementType())), failure();
    return runtime::SlotType{std::vector<int64_t>(tensor.getShape().begin(), tensor.getShape().end()), *dtype};
  }

  FailureOr<int> slotOf(Value v, Operation *user) {
    auto it = slots.find(v);
    if (it == slots.end())
      return report(user, "operand defined by an unsupported op"), failure();
    return it->second;
  }

  LogicalResult addOp(Operation *op) {
    return TypeSwitch<Operation *, LogicalResult>(op)
        .Case([&](ir::FusionOp fusion) { return addFusion(fusion); })
        .Case([&](ir::MatmulOp matmul) -> LogicalResult {
          auto type = cast<RankedTensorType>(matmul.getType());
          Type element = type.getElementType();
          if (!element.isF32() && !element.isF64() && !element.isBF16() && !element.isF16())
            return fail(op, "only f32, f64, bf16 and f16 matmuls run (got " + typeString(type) + ")");
          auto a = slotOf(matmul.getLhs(), op), b = slotOf(matmul.getRhs(), op);
          if (failed(a) || failed(b))
            return failure();
          // Folded into its epilogue's GEMM launch (addFusion), when the
          // GEMM library can read both operands as they are laid out.
          if (deferred_.contains(op) && gemmReadable(*a) && gemmReadable(*b))
            return success();
          deferred_.erase(op);
          note(launchOf(LaunchInfo::Kind::Gemm, gemmName(matmul), op, backward_));
          return record(matmul.getResult(), builder.addGemm(*a, *b), op);
        })
        .Case<ir::Conv2dOp, ir::Conv2dInputGradOp, ir::Conv2dWeightGradOp>([&](auto conv) { return addConv(conv); })
        .Case<ir::MaxPool2dOp, ir::MaxPool2dIndicesOp, ir::MaxPool2dBackwardOp, ir::MaxPool2dGatherOp>(
            [&](auto pool) { return addMaxPool(pool); })
        .Case([&](ir::TransposeOp t) -> LogicalResult {
          auto in = slotOf(t.getInput(), op);
          if (failed(in))
            return failure();
          ArrayRef<int64_t> perm = t.getPermutation();
          return record(t.getResult(), builder.addTranspose(*in, {perm.begin(), perm.end()}), op);
        })
        .Case([&](ir::BroadcastOp bc) -> LogicalResult {
          auto in = slotOf(bc.getInput(), op);
          if (failed(in))
            return failure();
          ArrayRef<int64_t> shape = bc.getType().getShape();
          return record(bc.getResult(), builder.addBroadcast(*in, {shape.begin(), shape.end()}), op);
        })
        .Case([&](ir::ReshapeOp r) -> LogicalResult {
          auto in = slotOf(r.getInput(), op);
          if (failed(in))
            return failure();
          ArrayRef<int64_t> shape = r.getType().getShape();
          return record(r.getResult(), builder.addReshape(*in, {shape.begin(), shape.end()}), op);
        })
        .Case([&](func::ReturnOp ret) -> LogicalResult {
          std::vector<int> outs;
          for (Value v : ret.getOperands()) {
            auto s = slotOf(v, op);
            if (failed(s))
              return failure();
            outs.push_back(*s);
          }
          builder.setOutputs(std::move(outs));
          return success();
        })
        .Default([&](Operation *) { return fail(op, "not supported outside a kiln.fusion by the executable builder"); });
  }

  /// A conv op: one backend convolution step (runtime/src/cpu/Conv.cpp).
  template <class ConvOp> LogicalResult addConv(ConvOp conv) {
    runtime::ConvOp kind = runtime::ConvOp::Forward;
    if constexpr (std::is_same_v<ConvOp, ir::Conv2dInputGradOp>)
      kind = runtime::ConvOp::InputGrad;
    if constexpr (std::is_same_v<ConvOp, ir::Conv2dWeightGradOp>)
      kind = runtime::ConvOp::WeightGrad;
    runtime::Conv2dParams p;
    ArrayRef<int64_t> stride = conv.getStride(), padding = conv.getPadding(), dilation = conv.getDilation();
    p.stride = {stride[0], stride[1]};
    p.padding = {padding[0], padding[1]};
    p.dilation = {dilation[0], dilation[1]};
    p.groups = conv.getGroups();
    auto a = slotOf(conv.getLhs(), conv), b = slotOf(conv.getRhs(), conv);
    auto type = slotType(conv.getType(), conv);
    if (failed(a) || failed(b) || failed(type))
      return failure();
    note(launchOf(LaunchInfo::Kind::Conv, opName(conv), conv, backward_));
    return record(conv.getResult(), builder.addConv(kind, p, *a, *b, *type), conv);
  }

  /// A max pool op: one backend pooling step (runtime/src/cpu/Pool.cpp); the
  /// backward and gather ops need no window attributes (the indices say where).
  template <class PoolOp> LogicalResult addMaxPool(PoolOp pool) {
    runtime::Pool2dParams p;
    runtime::MaxPoolOp kind = runtime::MaxPoolOp::Forward;
    int indices = -1;
    if constexpr (std::is_same_v<PoolOp, ir::MaxPool2dOp> || std::is_same_v<PoolOp, ir::MaxPool2dIndicesOp>) {
      ArrayRef<int64_t> k = pool.getKernel(), stride = pool.getStride(), padding = pool.getPadding();
      p.kernel = {k[0], k[1]};
      p.stride = {stride[0], stride[1]};
      p.padding = {padding[0], padding[1]};
    } else {
      kind = std::is_same_v<PoolOp, ir::MaxPool2dBackwardOp> ? runtime::MaxPoolOp::Backward : runtime::MaxPoolOp::Gather;
      auto slot = slotOf(pool.getIndices(), pool);
      if (failed(slot))
        return failure();
      indices = *slot;
    }
    auto a = slotOf(pool->getOperand(0), pool);
    auto type = slotType(pool.getType(), pool);
    if (failed(a) || failed(type))
      return failure();
    note(launchOf(LaunchInfo::Kind::Pool, opName(pool), pool, backward_));
    return record(pool.getResult(), builder.addMaxPool(kind, p, *a, indices, *type), pool);
  }

  /// A 2-D slot with a unit stride in one of its dims (cuBLASLt reads it
  /// as a plain or transposed matrix).
  bool gemmReadable(int slot) const {
    const std::vector<int64_t> &st = builder.strides(slot);
    return st.size() == 2 && (st[0] == 1 || st[1] == 1);
  }

  /// The fusion of a folded epilogue: one GEMM launch reading the matmul's
  /// operands and the bias (or the aux matrix of a DGELU), writing the
  /// fusion's results (or, when that operand is not contiguous, the GEMM
  /// the matmul deferred and the fusion's own kernel).
  FailureOr<bool> addGemmEpilogue(ir::FusionOp fusion) {
    auto it = epilogues_.find(fusion.getOperation());
    if (it == epilogues_.end())
      return false;
    GemmEpilogueMatch match = it->second.first;
    const runtime::KernelHandle kernel = it->second.second;
    auto a = slotOf(match.matmul.getLhs(), fusion), b = slotOf(match.matmul.getRhs(), fusion);
    auto third = slotOf(match.operand, fusion);
    if (failed(a) || failed(b) || failed(third))
      return failure();
    if (!deferred_.contains(match.matmul.getOperation()))
      return false; // the matmul ran as its own GEMM
    const int64_t n = cast<RankedTensorType>(match.matmul.getType()).getDimSize(1);
    const std::vector<int64_t> dense = readsGemmAux(match.kind) ? std::vector<int64_t>{n, 1} : std::vector<int64_t>{1};
    if (builder.strides(*third) != dense) {
      deferred_.erase(match.matmul.getOperation());
      note(launchOf(LaunchInfo::Kind::Gemm, gemmName(match.matmul), match.matmul, backward_));
      if (failed(record(match.matmul.getResult(), builder.addGemm(*a, *b), match.matmul)))
        return failure();
      return false;
    }
    // Results: the GEMM's D first, then the aux output or the bias gradient.
    std::vector<Value> results{fusion.getResult(match.mainResult)};
    if (fusion.getNumResults() == 2)
      results.push_back(fusion.getResult(1 - match.mainResult));
    std::vector<runtime::SlotType> types;
    for (Value r : results) {
      auto type = slotType(r.getType(), fusion);
      if (failed(type))
        return failure();
      types.push_back(*type);
    }
    const std::string name = fusion.getKernel().str() + " (gemm+" + gemmEpilogueName(match.kind) + ")";
    std::vector<int> out = builder.addKernel(name, kernel, {*a, *b, *third}, std::move(types));
    if (out.size() != results.size()) {
      report(fusion, builder.error());
      return failure();
    }
    for (auto [r, slot] : llvm::zip(results, out))
      slots[r] = slot;
    LaunchInfo gemm = launchOf(LaunchInfo::Kind::Gemm, name, match.matmul, backward_);
    gemm.bytes_read += passes::valueBytes(match.operand);
    gemm.bytes_written = 0;
    for (Value r : results)
      gemm.bytes_written += passes::valueBytes(r);
    gemm.flops += bodyFlops(fusion);
    note(std::move(gemm));
    if (folded_)
      folded_->push_back(fusion.getKernel().str() + ": " + gemmEpilogueName(match.kind));
    return true;
  }

  LogicalResult addFusion(ir::FusionOp fusion) {
    FailureOr<bool> folded = addGemmEpilogue(fusion);
    if (failed(folded))
      return failure();
    if (*folded)
      return success();
    std::string message;
    KernelBinding binding = bind(fusion, &message);
    if (!binding.kernel)
      return fail(fusion, message);
    std::vector<int> operands;
    for (Value v : fusion.getInputs()) {
      auto s = slotOf(v, fusion);
      if (failed(s))
        return failure();
      operands.push_back(*s);
    }
    for (auto [dtype, value] : binding.scalars) {
      // One element of `dtype` holding `value` (float dtypes only).
      alignas(8) unsigned char bytes[8] = {};
      if (dtype == DType::Float64) {
        std::memcpy(bytes, &value, sizeof(double));
      } else if (dtype == DType::Float32) {
        float f = static_cast<float>(value);
        std::memcpy(bytes, &f, sizeof(float));
      } else {
        return fail(fusion, "a runtime scalar argument must be f32 or f64");
      }
      int slot = builder.addConstant(runtime::SlotType{{}, dtype}, bytes);
      if (slot < 0)
        return fail(fusion, builder.error());
      operands.push_back(slot);
    }
    std::vector<runtime::SlotType> results;
    for (Value r : fusion.getResults()) {
      auto t = slotType(r.getType(), fusion);
      if (failed(t))
        return failure();
      results.push_back(*t);
    }
    const std::vector<runtime::IndexCheck> checks = indexChecks(fusion);
    for (size_t k = 0; k < checks.size(); ++k)
      results.push_back(runtime::SlotType{{runtime::kIndexStatusElements}, DType::Int64});
    // The strides the kernel was compiled for (scalar arguments: rank 0).
    std::vector<std::vector<int64_t>> expected = binding.strides.empty() ? operandStrides(fusion) : binding.strides;
    expected.resize(operands.size());
    std::vector<int> out = builder.addKernel(fusion.getKernel().str(), binding.kernel, std::move(operands),
                                             std::move(results), expected, binding.inPlace);
    if (out.size() != fusion.getNumResults() + checks.size())
      return fail(fusion, builder.error());
    if (!binding.symbol.empty())
      builder.setKernelSymbol(binding.symbol);
    LaunchInfo launch = launchOf(LaunchInfo::Kind::Kernel, fusion.getKernel().str(), fusion, backward_);
    launch.flops = bodyFlops(fusion);
    launch.symbol = binding.symbol.empty() ? fusion.getKernel().str() : binding.symbol;
    note(std::move(launch));
    for (auto [r, s] : llvm::zip(fusion.getResults(), out))
      slots[r] = s;
    for (auto [k, check] : llvm::enumerate(checks))
      builder.addIndexCheck(out[fusion.getNumResults() + k], check);
    if (!builder.error().empty())
      return fail(fusion, builder.error());
    return success();
  }

  /// The copies the Builder inserted (strided views made contiguous,
  /// reshapes that copy) into this function's launch records, in run order:
  /// the other counted launches are the records noted so far, in order.
  void addCopyLaunches(const runtime::LaunchExecutable &exe) {
    std::vector<LaunchInfo> mine(launches_->begin() + static_cast<std::ptrdiff_t>(firstLaunch_), launches_->end());
    launches_->resize(firstLaunch_);
    size_t next = 0;
    for (const runtime::LaunchExecutable::CountedLaunch &l : exe.counted_launches()) {
      const bool copy = l.kind == runtime::LaunchKind::Copy || l.kind == runtime::LaunchKind::Reshape;
      if (!copy && next < mine.size()) {
        launches_->push_back(std::move(mine[next++]));
        continue;
      }
      LaunchInfo info;
      info.kind = LaunchInfo::Kind::Copy;
      info.name = l.kind == runtime::LaunchKind::Copy ? "copy" : "reshape copy";
      info.backward = backward_;
      info.bytes_read = info.bytes_written = l.result_bytes;
      launches_->push_back(std::move(info));
    }
    for (; next < mine.size(); ++next)
      launches_->push_back(std::move(mine[next]));
  }

  void note(LaunchInfo launch) {
    if (launches_)
      launches_->push_back(std::move(launch));
  }

  LogicalResult record(Value result, int slot, Operation *op) {
    if (slot < 0)
      return fail(op, builder.error());
    slots[result] = slot;
    return success();
  }

  const KernelBinder &bind;
  std::string *error;
  runtime::LaunchExecutable::Builder builder;
  llvm::DenseMap<Value, int> slots;
  llvm::DenseMap<Operation *, std::pair<GemmEpilogueMatch, runtime::KernelHandle>> epilogues_; ///< fusion -> fold
  llvm::DenseSet<Operation *> deferred_; ///< matmuls whose GEMM is their epilogue's launch
  std::vector<std::string> *folded_ = nullptr;
  std::vector<LaunchInfo> *launches_ = nullptr; ///< the launch report (LaunchInfo), when asked
  size_t firstLaunch_ = 0; ///< this function's first record in *launches_
  bool backward_ = false;
};

} // namespace

std::shared_ptr<runtime::LaunchExecutable> buildExecutable(func::FuncOp func,
                                                           std::shared_ptr<const KernelLibrary> library,
                                                           Device device, std::string *error) {
  KernelBinder byName = [&](ir::FusionOp fusion, std::string *message) {
    return KernelBinding{library->handle(fusion.getKernel().str(), {}, isRowSplittable(fusion), message), {}, {},
                         inPlacePairs(fusion)};
  };
  return buildExecutable(func, byName, library, device, error);
}

std::shared_ptr<runtime::LaunchExecutable> buildExecutable(func::FuncOp func, const KernelBinder &bind,
                                                           std::shared_ptr<const void> keepAlive, Device device,
                                                           std::string *error, const Target *target,
                                                           std::vector<std::string> *folded,
                                                           std::vector<LaunchInfo> *launches) {
  ExecutableBuilder b(bind, error);
  b.recordLaunches(launches);
  if (target)
    b.findGemmEpilogues(func, *target, folded);
  b.setDevice(device);
  b.keepAlive(std::move(keepAlive));
  return b.build(func);
}

} // namespace kiln::codegen
