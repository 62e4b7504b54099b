// The CUDA graph-kernel runner (dispatch::run_graph_kernel, ops/dispatch.h):
// an eager op on CUDA tensors is its one-node dialect form, emitted once as
// a shape-generic CUDA C kernel (kiln/codegen/EagerCuda.h), compiled by the
// device (NVRTC on a GPU, the host compiler on the simulator; both cache on
// disk by source hash) and launched with the call's pointers, sizes and
// strides on the device's current stream.
//
// A kernel is keyed by the op and its attributes, each tensor's dtype, rank
// and size pattern: which dims are 1 (static) and which dims have equal sizes
// (one size class, one `long long` parameter), plus whether a reduction's
// rows are long (a block per row instead of a warp). Every other size and
// every stride is a parameter, so one compiled kernel serves all shapes of a
// pattern.
#include <array>
#include <cstdint>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "kiln/codegen/EagerCuda.h"
#include "kiln/runtime/cuda/CudaBackend.h"
#include "kiln/runtime/cuda/CurrentStream.h"
#include "kiln/tensor.h"

#include "ops/dispatch.h"

namespace kiln::cuda_eager {
namespace {

using codegen::EagerCudaKernel;
using codegen::EagerCudaParam;

/// Reductions whose rows are longer than this get the emitter's block-rows
/// kernel (codegen/cuda's kWarpRowLimit).
constexpr int64_t kWarpRowLimit = 1024;

ir::ElementType element_type(DType t) {
  switch (t) {
  case DType::Float32: return ir::ElementType::F32;
  case DType::Float16: return ir::ElementType::F16;
  case DType::BFloat16: return ir::ElementType::BF16;
  case DType::Int64: return ir::ElementType::I64;
  case DType::Bool: return ir::ElementType::Bool;
  case DType::Float64: return ir::ElementType::F64;
  case DType::Int32: return ir::ElementType::I32;
  }
  return ir::ElementType::F32;
}

/// Per tensor (inputs, then outputs), per dim: -1 for a size-1 dim, else
/// the size class (dims of equal size share one).
struct SizePattern {
  std::vector<std::vector<int>> classes;
  std::vector<int64_t> class_size;  ///< this call's size of each class
};

SizePattern size_pattern(const std::vector<Tensor> &inputs, const std::vector<Tensor> &outputs) {
  SizePattern p;
  std::map<int64_t, int> class_of;
  auto add = [&](const Tensor &t) {
    std::vector<int> c;
    for (int64_t s : t.sizes()) {
      if (s == 1) {
        c.push_back(-1);
        continue;
      }
      auto [it, fresh] = class_of.try_emplace(s, static_cast<int>(p.class_size.size()));
      if (fresh) p.class_size.push_back(s);
      c.push_back(it->second);
    }
    p.classes.push_back(std::move(c));
  };
  for (const Tensor &t : inputs) add(t);
  for (const Tensor &t : outputs) add(t);
  return p;
}

bool is_reduction(ir::OpKind kind) {
  return kind == ir::OpKind::ReduceSum || kind == ir::OpKind::ReduceMax || kind == ir::OpKind::ReduceMin ||
         kind == ir::OpKind::ArgMax || kind == ir::OpKind::ArgMin;
}

/// The reduced extent of a reduction node over `input` (1 for other ops).
int64_t reduced_extent(const ir::Node &node, const Tensor &input) {
  if (!is_reduction(node.kind)) return 1;
  int64_t n = 1;
  for (int64_t d : node.ints) n *= input.size(d);
  return n;
}

std::string cache_key(const ir::Node &node, const std::vector<Tensor> &inputs, const std::vector<Tensor> &outputs,
                      const SizePattern &p, bool long_rows, size_t scalars) {
  std::string key = ir::toString(node.kind);
  for (int64_t i : node.ints) key += "," + std::to_string(i);
  uint64_t bits;
  std::memcpy(&bits, &node.scalar, sizeof bits);
  key += "|k" + std::to_string(node.keepdim) + "|s" + std::to_string(bits) + "|p" +
         std::to_string(static_cast<int>(node.predicate)) + "|n" + std::to_string(scalars) + (long_rows ? "|long" : "");
  size_t t = 0;
  for (const std::vector<Tensor> *list : {&inputs, &outputs})
    for (const Tensor &x : *list) {
      key += std::string("|") + dtype_name(x.dtype()) + ":";
      for (int c : p.classes[t]) key += std::to_string(c) + ".";
      ++t;
    }
  return key;
}

/// FNV-1a of the key: a stable kernel name (the on-disk caches key on the
/// source, which contains the name).
std::string kernel_name(const std::string &key) {
  uint64_t h = 1469598103934665603ull;
  for (unsigned char c : key) h = (h ^ c) * 1099511628211ull;
  static const char *hex = "0123456789abcdef";
  std::string name = "kiln_eager_";
  for (int i = 15; i >= 0; --i) name += hex[(h >> (4 * i)) & 15];
  return name;
}

/// The one-node graph at the sizes `size_of(class)`; Constant nodes get the
/// value `constant` (different at the two sizes, so the generalization makes
/// it a scalar parameter).
ir::Graph build_graph(const ir::Node &node, const std::vector<Tensor> &inputs, const std::vector<Tensor> &outputs,
                      const SizePattern &p, const std::vector<int64_t> &size_of, double constant) {
  ir::Graph g;
  size_t t = 0;
  auto shape = [&](const Tensor &x) {
    std::vector<int64_t> s;
    for (int c : p.classes[t]) s.push_back(c < 0 ? 1 : size_of[static_cast<size_t>(c)]);
    ++t;
    return g.addValue(std::move(s), element_type(x.dtype()));
  };
  ir::Node n = node;
  n.operands.clear();
  for (const Tensor &x : inputs) {
    const int v = shape(x);
    g.inputs.push_back(v);
    g.input_roles.push_back(ir::InputRole::Primal);
    n.operands.push_back(v);
  }
  for (const Tensor &x : outputs) {
    n.result = shape(x);
    g.outputs.push_back(n.result);
  }
  if (n.kind == ir::OpKind::Constant) n.scalar = constant;
  g.nodes.push_back(n);
  g.num_forward_outputs = static_cast<int>(g.outputs.size());
  return g;
}

/// A compiled kernel: the emitted text and, per device index, its loaded function.
struct Entry {
  EagerCudaKernel kernel;
  std::map<int, runtime::cuda::KernelFunction> loaded;
};

std::mutex g_mu;
std::map<std::string, std::shared_ptr<Entry>> g_kernels;

std::shared_ptr<Entry> find_or_emit(const char *op, const ir::Node &node, const std::vector<Tensor> &inputs,
                                    const std::vector<Tensor> &outputs, const SizePattern &p, size_t scalars) {
  const bool long_rows = !inputs.empty() && reduced_extent(node, inputs[0]) > kWarpRowLimit;
  const std::string key = cache_key(node, inputs, outputs, p, long_rows, scalars);
  std::lock_guard<std::mutex> lock(g_mu);
  auto found = g_kernels.find(key);
  if (found != g_kernels.end()) return found->second;
  // Canonical sizes: class c is 2 + c (distinct, never 1), 1024 more for the
  // long rows of a reduction, and 1 + that at the reference size. The
  // kernel does not depend on them beyond the kind they choose.
  std::vector<int64_t> self(p.class_size.size()), ref(p.class_size.size());
  for (size_t c = 0; c < self.size(); ++c) {
    self[c] = 2 + static_cast<int64_t>(c) + (long_rows ? kWarpRowLimit : 0);
    ref[c] = self[c] + 1 + static_cast<int64_t>(self.size());
  }
  std::string error;
  auto entry = std::make_shared<Entry>();
  const bool ok = codegen::emitEagerCudaKernel(build_graph(node, inputs, outputs, p, self, 1.0),
                                               build_graph(node, inputs, outputs, p, ref, 2.0), kernel_name(key),
                                               &entry->kernel, &error);
  KILN_CHECK(ok, op, ": no CUDA kernel for this op yet: ", error);
  for (const EagerCudaParam &q : entry->kernel.params)
    KILN_CHECK(q.kind != EagerCudaParam::Kind::Status, op,
               ": eager CUDA kernels with index checks are not launched yet (", entry->kernel.name, ")");
  g_kernels.emplace(key, entry);
  return entry;
}

const runtime::cuda::KernelFunction &loaded_on(const char *op, Entry &entry, int device,
                                                runtime::cuda::DeviceApi &api) {
  std::lock_guard<std::mutex> lock(g_mu);
  auto it = entry.loaded.find(device);
  if (it != entry.loaded.end()) return it->second;
  try {
    std::vector<runtime::cuda::KernelFunction> fns = api.load_kernels(entry.kernel.source, {entry.kernel.name});
    return entry.loaded.emplace(device, fns.at(0)).first->second;
  } catch (const std::exception &e) {
    KILN_CHECK(false, op, ": compiling CUDA kernel ", entry.kernel.name, " (", entry.kernel.kind, ") failed: ", e.what());
  }
  throw Error("unreachable");
}

/// One argument value of any parameter type, kept alive for the launch.
union ArgValue {
  const void *ptr;
  long long i64;
  float f32;
  double f64;
};

void run(const char *op, const ir::Node &node, const std::vector<Tensor> &inputs, const std::vector<Tensor> &outputs,
         const std::vector<double> &scalars) {
  for (const Tensor &t : outputs)
    KILN_CHECK(t.is_contiguous(), op, ": a generated CUDA kernel writes row-major outputs, got strides ",
               shape_str(t.strides()));
  bool empty = false;
  for (const Tensor &t : outputs) empty |= t.numel() == 0;
  for (const Tensor &t : inputs) empty |= t.numel() == 0;
  if (empty) return;
  const int device = outputs[0].device().index;
  runtime::cuda::DeviceApi *api = runtime::cuda::device_api(device);
  KILN_CHECK(api != nullptr, op, ": cuda:", device, " is not a CUDA device of a CudaBackend");
  const SizePattern p = size_pattern(inputs, outputs);
  std::shared_ptr<Entry> entry = find_or_emit(op, node, inputs, outputs, p, scalars.size());
  const EagerCudaKernel &k = entry->kernel;
  const runtime::cuda::KernelFunction &fn = loaded_on(op, *entry, device, *api);

  std::vector<int64_t> class_sizes;
  for (const codegen::EagerSizeSource &s : k.sizeOf)
    class_sizes.push_back((s.output ? outputs : inputs)[static_cast<size_t>(s.index)].size(s.dim));
  std::vector<ArgValue> values(k.params.size());
  std::vector<void *> args(k.params.size());
  for (size_t i = 0; i < k.params.size(); ++i) {
    const EagerCudaParam &q = k.params[i];
    ArgValue &v = values[i];
    switch (q.kind) {
    case EagerCudaParam::Kind::Input: v.ptr = inputs[static_cast<size_t>(q.index)].raw_data(); break;
    case EagerCudaParam::Kind::Output: v.ptr = outputs[static_cast<size_t>(q.index)].raw_data(); break;
    case EagerCudaParam::Kind::Size: v.i64 = class_sizes[static_cast<size_t>(q.index)]; break;
    case EagerCudaParam::Kind::Stride: v.i64 = inputs[static_cast<size_t>(q.index)].stride(q.dim); break;
    case EagerCudaParam::Kind::Scalar: {
      KILN_CHECK(static_cast<size_t>(q.index) < scalars.size(), op, ": kernel ", k.name, " wants scalar ", q.index,
                 ", got ", scalars.size());
      const double s = scalars[static_cast<size_t>(q.index)];
      if (q.ctype == "float") v.f32 = static_cast<float>(s);
      else if (q.ctype == "double") v.f64 = s;
      else v.i64 = static_cast<long long>(s);
      break;
    }
    case EagerCudaParam::Kind::Status: break;  // refused in find_or_emit
    }
    args[i] = &v;
  }
  const runtime::cuda::Dim3 grid{static_cast<uint32_t>(k.gridBlocks(class_sizes)), 1, 1};
  const runtime::cuda::Dim3 block{static_cast<uint32_t>(k.block_threads), 1, 1};
  try {
    api->launch_kernel(fn, grid, block, static_cast<size_t>(k.dynamic_shared_bytes),
                       runtime::cuda::current_stream(device), args.data());
  } catch (const Error &) {
    throw;
  } catch (const std::exception &e) {
    KILN_CHECK(false, op, ": CUDA kernel ", k.name, " (", k.kind, ") failed: ", e.what());
  }
}

const bool registered = (dispatch::set_graph_kernel_runner(DeviceType::CUDA, run), true);

}  // namespace

/// The number of distinct eager CUDA kernels emitted in this process (tests:
/// one kernel serves every shape of a size pattern).
size_t emitted_kernel_count() {
  std::lock_guard<std::mutex> lock(g_mu);
  return g_kernels.size();
}

/// (name, whole source, kind) of every eager CUDA kernel emitted so far, in
/// key order (tests compile each with NVRTC).
std::vector<std::array<std::string, 3>> emitted_kernels() {
  std::lock_guard<std::mutex> lock(g_mu);
  std::vector<std::array<std::string, 3>> out;
  for (const auto &[key, entry] : g_kernels) out.push_back({entry->kernel.name, entry->kernel.source, entry->kernel.kind});
  return out;
}

}  // namespace kiln::cuda_eager
