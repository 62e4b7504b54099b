// dispatch.h (internal) - per-op-family kernel tables looked up by device
// (PyTorch's DispatchStub), and the one same-device check every op runs.
//
// An eager op does its checks, type promotion, autograd and trace record,
// then calls the kernel of its op family for the device of its operands:
//
//   // in the op's .cpp (a table per op family, defined once):
//   DispatchStub<BinaryKernel> binary_stub("elementwise binary");
//   static void binary_cpu(Bin op, const Tensor &x, const Tensor &y, const Tensor &out) { ... }
//   static const KernelRegistrar<BinaryKernel> reg(binary_stub, DeviceType::CPU, binary_cpu);
//   // in the op:
//   binary_stub("add", out.device().type, op, x, y, out);
//
// A device type without a kernel in the table throws kiln::Error naming the
// op, the device and what to do. A host-accessible device (memory the host
// reads through plain pointers: a test's checking device, a CUDA simulator)
// can reuse every CPU kernel: register_cpu_kernels_for(type).
#pragma once

#include <cstddef>
#include <functional>
#include <initializer_list>
#include <utility>
#include <vector>

#include "kiln/error.h"
#include "kiln/ir/Graph.h"
#include "kiln/runtime/DeviceBackend.h"
#include "kiln/runtime/TensorView.h"
#include "kiln/tensor.h"

namespace kiln::dispatch {

using ::kiln::kNumDeviceTypes;  // the table size (kiln/runtime/Device.h)

/// The untyped part of a table: its family name, one slot per device type,
/// and the link in the list of all tables (register_cpu_kernels_for walks it).
class StubBase {
public:
  using AnyFn = void (*)();
  constexpr explicit StubBase(const char *family) : family_(family) {}
  StubBase(const StubBase &) = delete;
  StubBase &operator=(const StubBase &) = delete;
  const char *family() const { return family_; }
  /// Whether `type` has a kernel in this table.
  bool has(DeviceType type) const { return table_[static_cast<size_t>(type)] != nullptr; }

protected:
  /// Stores `fn` for `type` (null clears it) and links this table into the list.
  void set(DeviceType type, AnyFn fn);
  /// The kernel for `type`; throws the no-kernel error naming `op` when unset.
  AnyFn get(const char *op, DeviceType type) const;

private:
  friend void register_cpu_kernels_for(DeviceType type);
  friend void clear_kernels_for(DeviceType type);
  const char *family_;
  AnyFn table_[kNumDeviceTypes] = {};
  StubBase *next_ = nullptr;
  bool linked_ = false;
};

/// One op family's kernel table; `Fn` is the kernel's function type, e.g.
/// `void(Bin, const Tensor &, const Tensor &, const Tensor &)`. Define it as
/// a global (constant-initialized, so registrars in other files may run first).
template <class Fn> class DispatchStub : public StubBase {
public:
  constexpr explicit DispatchStub(const char *family) : StubBase(family) {}
  /// Sets the kernel of `type` (replacing any earlier one).
  void register_kernel(DeviceType type, Fn *fn) { set(type, reinterpret_cast<AnyFn>(fn)); }
  /// Runs the kernel of `type`; `op` names the op in the no-kernel error.
  template <class... Args> decltype(auto) operator()(const char *op, DeviceType type, Args &&...args) const {
    Fn *fn = reinterpret_cast<Fn *>(get(op, type));
    return fn(std::forward<Args>(args)...);
  }
};

/// Registers a kernel at start-up: `static const KernelRegistrar<Fn> r(stub, DeviceType::CPU, fn);`.
template <class Fn> struct KernelRegistrar {
  KernelRegistrar(DispatchStub<Fn> &stub, DeviceType type, Fn *fn) { stub.register_kernel(type, fn); }
};

/// Makes every CPU kernel of every table the kernel of `type` too. Only for
/// host-accessible device types (the CPU kernels read and write memory
/// through host pointers); throws kiln::Error for the CPU itself.
void register_cpu_kernels_for(DeviceType type);

/// Removes every kernel of `type` from every table (tests of the no-kernel
/// error; the CPU cannot be cleared).
void clear_kernels_for(DeviceType type);

/// Kernels generated from an op's dialect form (ARCHITECTURE.md, "the
/// backend boundary"): on CUDA an eager op is not a hand-written kernel but
/// its one-node ir::Graph (the node a trace records; `node.operands` and
/// `node.result` are ignored) run by the device's graph-kernel runner, which
/// emits, compiles and caches one shape-generic kernel per (op, attributes,
/// dtypes, rank, size pattern) (frontend/src/cuda/graph_kernels.cpp, in the
/// `kiln` library). `inputs` may be any strided views of the device;
/// `outputs` are row-major tensors the kernel writes; `scalars` are the
/// values of the graph's Constant nodes in order (a fill value).
using GraphKernelRunner = void (*)(const char *op, const ir::Node &node, const std::vector<Tensor> &inputs,
                                   const std::vector<Tensor> &outputs, const std::vector<double> &scalars);

/// The same for a small graph of several nodes made into one kernel (an
/// optimizer step, an in-place update): `graph`'s values have the call's
/// shapes, its inputs are `inputs` and its outputs `outputs` in order; an
/// output may be the storage of an input it is computed from elementwise
/// (in place). Constant nodes take their values from `scalars` in node order.
using GraphRunner = void (*)(const char *op, const ir::Graph &graph, const std::vector<Tensor> &inputs,
                             const std::vector<Tensor> &outputs, const std::vector<double> &scalars);

/// Sets the runners of `type` (nulls clear them).
void set_graph_kernel_runner(DeviceType type, GraphKernelRunner runner, GraphRunner graph_runner);

/// Runs `node` over `inputs` into `outputs` on their device through its
/// runner. Throws kiln::Error naming `op` when the device has none (a binary
/// linked against KilnEager alone: link `kiln`).
void run_graph_kernel(const char *op, const ir::Node &node, const std::vector<Tensor> &inputs,
                      const std::vector<Tensor> &outputs, const std::vector<double> &scalars = {});

/// True if an element of `t` (any device) is zero: the integer division
/// check of a device whose generated kernels cannot raise (copies `t` to the
/// host, so it synchronizes).
bool device_has_zero(const Tensor &t);

/// Runs `graph` (see GraphRunner) on the device of `outputs`.
void run_graph_kernel(const char *op, const ir::Graph &graph, const std::vector<Tensor> &inputs,
                      const std::vector<Tensor> &outputs, const std::vector<double> &scalars = {});

/// `t` as the runtime's strided view (an empty view, without a buffer, for
/// an undefined tensor): what a DeviceBackend's GEMM, conv and pool take.
runtime::TensorView view_of(const Tensor &t);

/// Runs `fn(backend, stream)` with the backend and default stream of
/// `device`, turning a std::exception from the library into a kiln::Error
/// naming `op` (a lazy segment trace skips it).
void on_backend(const char *op, const Device &device,
                const std::function<void(runtime::DeviceBackend &, runtime::Stream &)> &fn);

/// out = a x b through the GEMM of out's device backend (cuBLASLt on a GPU;
/// the simulator runs the CPU's): [M, K] x [K, N] or batched [B, M, K] x
/// [B, K, N], a and b strided, out contiguous, one dtype. Throws kiln::Error
/// naming `op` when the backend's GEMM fails.
void device_gemm(const char *op, const Tensor &a, const Tensor &b, const Tensor &out);

/// The graph element type of a dtype.
ir::ElementType element_type(DType t);

/// Builds the small graph of one generated kernel, value by value:
///
///   GraphMaker g;
///   int x = g.input(p), c = g.constant(0.5, x);      // a scalar parameter shaped like x
///   g.output(g.binary(ir::OpKind::Mul, x, c));
///   g.run("mul_", {p}, {p});                         // run_graph_kernel with g's constants
class GraphMaker {
public:
  /// A graph input of `t`'s shape and dtype (inputs in call order).
  int input(const Tensor &t);
  /// A Constant node of `like`'s shape and element type (or `type`) whose
  /// value is a kernel parameter (`value` at this call).
  int constant(double value, int like);
  int constant(double value, int like, DType type);
  int constant(double value, const Shape &shape, DType type);
  /// An elementwise node of `a`'s shape and element type.
  int unary(ir::OpKind kind, int a, double scalar = 0.0);
  int binary(ir::OpKind kind, int a, int b);
  /// select(cond, a, b) of a's type; a Compare (bool) of a and b; a Convert of `a` to `type`.
  int select(int cond, int a, int b);
  int compare(ir::Predicate predicate, int a, int b);
  int convert(int a, DType type);
  /// A node with an explicit result shape and type (reductions, broadcasts).
  int node(ir::Node n, std::vector<int> operands, Shape shape, ir::ElementType type);
  /// Marks `v` a graph output (outputs in call order).
  void output(int v);
  const ir::Graph &graph() const { return graph_; }
  /// run_graph_kernel(op, graph(), inputs, outputs, the constants' values).
  void run(const char *op, const std::vector<Tensor> &inputs, const std::vector<Tensor> &outputs) const;

private:
  ir::Graph graph_;
  std::vector<double> scalars_;
};

/// A node of `kind` with the attributes of a trace record (trace::Attrs).
ir::Node graph_node(ir::OpKind kind, std::vector<int64_t> ints = {}, bool keepdim = false, double scalar = 0.0,
                    ir::Predicate predicate = ir::Predicate::EQ);

/// The one device check of every op: all defined tensors in `tensors` are on
/// the same device, which is returned (kCPU when none is defined). A 0-d cpu
/// tensor is a scalar and may join tensors of any device (as in PyTorch);
/// move_scalar() then brings it over. Throws kiln::Error "add: expected all
/// tensors on the same device, got cpu and cuda:0".
Device common_device(const char *op, std::initializer_list<const Tensor *> tensors);
Device common_device(const char *op, const std::vector<Tensor> &tensors);

/// `t` on `device`: a 0-d cpu scalar is copied there (through Tensor::to
/// when it requires grad, so the gradient goes back; else a plain copy that a
/// trace records as the same value, so a compiled graph sees no graph
/// break); any other tensor is returned as it is.
Tensor move_scalar(const Tensor &t, const Device &device);

}  // namespace kiln::dispatch
