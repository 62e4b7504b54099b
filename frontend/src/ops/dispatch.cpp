// The kernel tables' registry and the same-device check (dispatch.h).
#include "dispatch.h"

#include <algorithm>
#include <memory>

#include "../backend.h"
#include "kiln/runtime/DeviceBackend.h"
#include "kiln/runtime/TensorView.h"
#include "kiln/runtime/cuda/CudaBackend.h"
#include "kiln/runtime/cuda/CurrentStream.h"
#include "../trace.h"
#include "../compile/tracer.h"
#include "kernels.h"
#include "kiln/autograd.h"

namespace kiln::dispatch {
namespace {

/// Head of the list of tables that hold at least one kernel (zero-initialized
/// before any registrar runs).
StubBase *g_stubs = nullptr;

size_t slot(DeviceType type) { return static_cast<size_t>(type); }

}  // namespace

void StubBase::set(DeviceType type, AnyFn fn) {
  table_[slot(type)] = fn;
  if (linked_) return;
  linked_ = true;
  next_ = g_stubs;
  g_stubs = this;
}

StubBase::AnyFn StubBase::get(const char *op, DeviceType type) const {
  AnyFn fn = table_[slot(type)];
  KILN_CHECK(fn != nullptr, op, ": no ", device_type_name(type), " kernel for the ", family_,
             " ops; register one for this device type (DispatchStub::register_kernel, frontend/src/ops/dispatch.h, "
             "or register_cpu_kernels_for on a host-accessible device) or move the tensors to cpu with .cpu()");
  return fn;
}

void register_cpu_kernels_for(DeviceType type) {
  KILN_CHECK(type != DeviceType::CPU, "register_cpu_kernels_for: the cpu already has its kernels");
  for (StubBase *s = g_stubs; s != nullptr; s = s->next_) s->table_[slot(type)] = s->table_[slot(DeviceType::CPU)];
}

void clear_kernels_for(DeviceType type) {
  KILN_CHECK(type != DeviceType::CPU, "clear_kernels_for: the cpu kernels cannot be removed");
  for (StubBase *s = g_stubs; s != nullptr; s = s->next_) s->table_[slot(type)] = nullptr;
}

namespace {
GraphKernelRunner g_runners[kNumDeviceTypes] = {};
GraphRunner g_graph_runners[kNumDeviceTypes] = {};

void check_runner(const char *op, DeviceType type, bool have) {
  KILN_CHECK(have, op, ": no kernel generator for ", device_type_name(type), " in this binary (eager ",
             device_type_name(type), " ops are generated from their dialect form by the `kiln` library: link kiln, "
             "not KilnEager alone)");
}
}  // namespace

void set_graph_kernel_runner(DeviceType type, GraphKernelRunner runner, GraphRunner graph_runner) {
  g_runners[slot(type)] = runner;
  g_graph_runners[slot(type)] = graph_runner;
}

void run_graph_kernel(const char *op, const ir::Graph &graph, const std::vector<Tensor> &inputs,
                      const std::vector<Tensor> &outputs, const std::vector<double> &scalars) {
  KILN_CHECK(!outputs.empty(), op, ": a graph kernel needs an output");
  const DeviceType type = outputs[0].device().type;
  check_runner(op, type, g_graph_runners[slot(type)] != nullptr);
  if (trace::skip_compute()) return;
  g_graph_runners[slot(type)](op, graph, inputs, outputs, scalars);
}

void run_graph_kernel(const char *op, const ir::Node &node, const std::vector<Tensor> &inputs,
                      const std::vector<Tensor> &outputs, const std::vector<double> &scalars) {
  KILN_CHECK(!outputs.empty(), op, ": a graph kernel needs an output");
  const DeviceType type = outputs[0].device().type;
  GraphKernelRunner runner = g_runners[slot(type)];
  check_runner(op, type, runner != nullptr);
  if (trace::skip_compute()) return;  // a lazy segment trace: values come from the compiled segment
  runner(op, node, inputs, outputs, scalars);
}

bool device_has_zero(const Tensor &t) {
  const Tensor host = kernels::device_to_host(t);
  const char *base = static_cast<const char *>(host.raw_data());
  for (int64_t i = 0; i < host.numel(); ++i)
    if (kernels::load_as_double(base, host.dtype(), i) == 0.0) return true;
  return false;
}

ir::Node graph_node(ir::OpKind kind, std::vector<int64_t> ints, bool keepdim, double scalar, ir::Predicate predicate) {
  ir::Node n{kind, {}, -1, std::move(ints)};
  n.keepdim = keepdim;
  n.scalar = scalar;
  n.predicate = predicate;
  return n;
}

runtime::TensorView view_of(const Tensor &t) {
  if (!t.defined()) return {};
  const TensorImpl &i = *t.impl();
  return runtime::TensorView{i.storage, i.offset, i.sizes, i.strides, i.dtype};
}

void on_backend(const char *op, const Device &device,
                const std::function<void(runtime::DeviceBackend &, runtime::Stream &)> &fn) {
  if (trace::skip_compute()) return;
  runtime::DeviceBackend *backend = runtime::find_backend(device.type);
  KILN_CHECK(backend != nullptr, op, ": no backend for ", device.str());
  try {
    // CUDA: the thread's current stream, where the eager kernels go (so a
    // GEMM is ordered with them on a side stream, and recorded by a CUDA
    // graph capture; PyTorch's getCurrentCUDAStream).
    const runtime::cuda::StreamHandle current =
        device.is_cuda() ? runtime::cuda::current_stream(device.index) : runtime::cuda::kDefaultStream;
    if (current != runtime::cuda::kDefaultStream) {
      std::unique_ptr<runtime::Stream> stream = runtime::cuda::borrowed_stream(device.index, current);
      fn(*backend, *stream);
    } else {
      fn(*backend, backend->default_stream(device.index));
    }
  } catch (const Error &) {
    throw;
  } catch (const std::exception &e) {
    KILN_CHECK(false, op, " on ", device.str(), " failed: ", e.what());
  }
}

/// `t` itself when its matrices are row-major or column-major with a
/// leading dimension that covers them (what cuBLASLt reads:
/// runtime/src/cuda/CublasLtGemm.h), else a contiguous copy.
static Tensor gemm_operand(const Tensor &t) {
  const size_t r = t.sizes().size();
  const int64_t R = t.sizes()[r - 2], C = t.sizes()[r - 1], s0 = t.strides()[r - 2], s1 = t.strides()[r - 1];
  const bool dense_rows = (s1 == 1 || C == 1) && (s0 >= std::max<int64_t>(C, 1) || R == 1);
  const bool dense_cols = (s0 == 1 || R == 1) && (s1 >= std::max<int64_t>(R, 1) || C == 1);
  return dense_rows || dense_cols ? t : t.contiguous();
}

void device_gemm(const char *op, const Tensor &a, const Tensor &b, const Tensor &out) {
  on_backend(op, out.device(), [&](runtime::DeviceBackend &backend, runtime::Stream &stream) {
    if (backend.host_accessible()) {
      backend.gemm(view_of(a), view_of(b), view_of(out), stream);
      return;
    }
    backend.gemm(view_of(gemm_operand(a)), view_of(gemm_operand(b)), view_of(out), stream);
  });
}

ir::ElementType element_type(DType t) { return trace::element_type(t); }

int GraphMaker::input(const Tensor &t) {
  const int v = graph_.addValue(t.sizes(), element_type(t.dtype()));
  graph_.inputs.push_back(v);
  graph_.input_roles.push_back(ir::InputRole::Primal);
  return v;
}

int GraphMaker::node(ir::Node n, std::vector<int> operands, Shape shape, ir::ElementType type) {
  n.operands = std::move(operands);
  n.result = graph_.addValue(std::move(shape), type);
  graph_.nodes.push_back(std::move(n));
  return graph_.nodes.back().result;
}

int GraphMaker::constant(double value, int like) {
  scalars_.push_back(value);
  const ir::Value &v = graph_.values[static_cast<size_t>(like)];
  return node(graph_node(ir::OpKind::Constant, {}, false, value), {}, v.shape, v.type);
}

int GraphMaker::constant(double value, int like, DType type) {
  return constant(value, graph_.values[static_cast<size_t>(like)].shape, type);
}

int GraphMaker::constant(double value, const Shape &shape, DType type) {
  scalars_.push_back(value);
  return node(graph_node(ir::OpKind::Constant, {}, false, value), {}, shape, element_type(type));
}

int GraphMaker::unary(ir::OpKind kind, int a, double scalar) {
  const ir::Value v = graph_.values[static_cast<size_t>(a)];
  return node(graph_node(kind, {}, false, scalar), {a}, v.shape, v.type);
}

int GraphMaker::binary(ir::OpKind kind, int a, int b) {
  const ir::Value v = graph_.values[static_cast<size_t>(a)];
  return node(graph_node(kind), {a, b}, v.shape, v.type);
}

int GraphMaker::select(int cond, int a, int b) {
  const ir::Value v = graph_.values[static_cast<size_t>(a)];
  return node(graph_node(ir::OpKind::Select), {cond, a, b}, v.shape, v.type);
}

int GraphMaker::compare(ir::Predicate predicate, int a, int b) {
  const ir::Value v = graph_.values[static_cast<size_t>(a)];
  return node(graph_node(ir::OpKind::Compare, {}, false, 0.0, predicate), {a, b}, v.shape, ir::ElementType::Bool);
}

int GraphMaker::convert(int a, DType type) {
  const ir::Value v = graph_.values[static_cast<size_t>(a)];
  if (v.type == element_type(type)) return a;
  return node(graph_node(ir::OpKind::Convert), {a}, v.shape, element_type(type));
}

void GraphMaker::output(int v) { graph_.outputs.push_back(v); }

void GraphMaker::run(const char *op, const std::vector<Tensor> &inputs, const std::vector<Tensor> &outputs) const {
  run_graph_kernel(op, graph_, inputs, outputs, scalars_);
}

static bool is_cpu_scalar(const Tensor &t) { return t.dim() == 0 && t.device().is_cpu(); }

/// Folds `t` into the device found so far: `have` says whether one was,
/// `scalar_only` whether it came from 0-d cpu scalars only (any device wins over those).
static void join_device(const char *op, const Tensor &t, Device *device, bool *have, bool *scalar_only) {
  if (!t.defined()) return;
  const bool scalar = is_cpu_scalar(t);
  if (!*have || (*scalar_only && !scalar)) {
    *device = t.device();
    *have = true;
    *scalar_only = scalar;
    return;
  }
  KILN_CHECK(scalar || t.device() == *device, op, ": expected all tensors on the same device, got ",
             device->str(), " and ", t.device().str());
}

Device common_device(const char *op, std::initializer_list<const Tensor *> tensors) {
  Device device = kCPU;
  bool have = false, scalar_only = false;
  for (const Tensor *t : tensors) join_device(op, *t, &device, &have, &scalar_only);
  return device;
}

Device common_device(const char *op, const std::vector<Tensor> &tensors) {
  Device device = kCPU;
  bool have = false, scalar_only = false;
  for (const Tensor &t : tensors) join_device(op, t, &device, &have, &scalar_only);
  return device;
}

Tensor move_scalar(const Tensor &t, const Device &device) {
  if (!t.defined() || t.device() == device) return t;
  if (autograd::any_requires_grad({t})) return t.to(device);  // the gradient goes back to its device
  // A plain byte copy that a trace sees as the same value: a compiled graph
  // runs on one device, so the move is not a graph break.
  Tensor out = kernels::host_to_device(t, device);
  trace::alias(t, out);
  return out;
}

}  // namespace kiln::dispatch
