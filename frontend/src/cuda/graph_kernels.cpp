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
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "kiln/codegen/CudaTarget.h"
#include "kiln/codegen/EagerCuda.h"
#include "kiln/runtime/IndexCheck.h"
#include "kiln/runtime/cuda/CudaBackend.h"
#include "kiln/runtime/cuda/CurrentStream.h"
#include "kiln/tensor.h"

#include "ops/dispatch.h"
#include "ops/kernels.h"

namespace kiln::cuda_eager {
namespace {

using codegen::EagerCudaKernel;
using codegen::EagerCudaParam;

/// Reductions whose rows are longer than this get the emitter's block-rows kernel.
using codegen::cuda::kWarpRowLimit;

/// Per graph value, per dim: the size class (>= 0; dims of equal size share
/// one; classes numbered by increasing size), or -size for a dim whose size is static in the kernel: size 1, and
/// the indexed dim of a gather or scatter_add (its index check is static).
struct SizePattern {
  std::vector<std::vector<int64_t>> classes;
};

SizePattern size_pattern(const ir::Graph &g) {
  std::vector<std::vector<bool>> fixed(g.values.size());
  for (size_t v = 0; v < g.values.size(); ++v) fixed[v].assign(g.values[v].shape.size(), false);
  for (const ir::Node &n : g.nodes)
    if ((n.kind == ir::OpKind::Gather || n.kind == ir::OpKind::ScatterAdd) && !n.operands.empty() && !n.ints.empty())
    {
      fixed[static_cast<size_t>(n.operands[0])][static_cast<size_t>(n.ints[0])] = true;
      if (n.kind == ir::OpKind::ScatterAdd)  // the result has the input's shape
        fixed[static_cast<size_t>(n.result)][static_cast<size_t>(n.ints[0])] = true;
    }
  // Classes are numbered in the order of their sizes, so canonical sizes
  // that grow with the class keep every size relation an op's verifier
  // checks (a gather's index no larger than its input).
  std::map<int64_t, int64_t> class_of;
  for (size_t v = 0; v < g.values.size(); ++v)
    for (size_t d = 0; d < g.values[v].shape.size(); ++d)
      if (g.values[v].shape[d] != 1 && !fixed[v][d]) class_of[g.values[v].shape[d]] = 0;
  int64_t next = 0;
  for (auto &[size, cls] : class_of) cls = next++;
  SizePattern p;
  for (size_t v = 0; v < g.values.size(); ++v) {
    std::vector<int64_t> c;
    for (size_t d = 0; d < g.values[v].shape.size(); ++d) {
      const int64_t s = g.values[v].shape[d];
      c.push_back(s == 1 || fixed[v][d] ? -s : class_of.at(s));
    }
    p.classes.push_back(std::move(c));
  }
  return p;
}

bool is_reduction(ir::OpKind kind) {
  return kind == ir::OpKind::ReduceSum || kind == ir::OpKind::ReduceMax || kind == ir::OpKind::ReduceMin ||
         kind == ir::OpKind::ArgMax || kind == ir::OpKind::ArgMin;
}

/// True if a reduction of `g` reduces more than kWarpRowLimit elements per result.
bool has_long_rows(const ir::Graph &g) {
  for (const ir::Node &n : g.nodes) {
    if (!is_reduction(n.kind) || n.operands.empty()) continue;
    const std::vector<int64_t> &shape = g.values[static_cast<size_t>(n.operands[0])].shape;
    int64_t extent = 1;
    for (int64_t d : n.ints) extent *= shape[static_cast<size_t>(d < 0 ? d + static_cast<int64_t>(shape.size()) : d)];
    if (extent > kWarpRowLimit) return true;
  }
  return false;
}

std::string cache_key(const ir::Graph &g, const SizePattern &p, bool long_rows) {
  std::string key = long_rows ? "long" : "short";
  for (size_t v = 0; v < g.values.size(); ++v) {
    key += std::string("|v") + ir::toString(g.values[v].type) + ":";
    for (int64_t c : p.classes[v]) key += std::to_string(c) + ".";
  }
  for (const ir::Node &n : g.nodes) {
    key += std::string("|") + ir::toString(n.kind) + "(";
    for (int o : n.operands) key += std::to_string(o) + ",";
    key += ")" + std::to_string(n.result) + "[";
    for (int64_t i : n.ints) key += std::to_string(i) + ",";
    uint64_t bits = 0;
    if (n.kind != ir::OpKind::Constant) std::memcpy(&bits, &n.scalar, sizeof bits);  // constants are parameters
    key += "]k" + std::to_string(n.keepdim) + "s" + std::to_string(bits) + "p" +
           std::to_string(static_cast<int>(n.predicate));
  }
  key += "|in";
  for (int i : g.inputs) key += std::to_string(i) + ",";
  key += "|out";
  for (int o : g.outputs) key += std::to_string(o) + ",";
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

/// `g` at the sizes `size_of(class)`; the k-th Constant node gets `first + k`
/// (distinct, never a value a folder treats specially such as 0 or 1, and
/// different at the two sizes, so the generalization makes each a scalar
/// parameter).
ir::Graph canonical_graph(const ir::Graph &g, const SizePattern &p, const std::vector<int64_t> &size_of,
                          double first) {
  ir::Graph c = g;
  for (size_t v = 0; v < c.values.size(); ++v)
    for (size_t d = 0; d < c.values[v].shape.size(); ++d) {
      const int64_t cls = p.classes[v][d];
      c.values[v].shape[d] = cls < 0 ? -cls : size_of[static_cast<size_t>(cls)];
    }
  double k = 0;
  for (ir::Node &n : c.nodes)
    if (n.kind == ir::OpKind::Constant) n.scalar = first + k++;
  if (c.input_roles.size() != c.inputs.size()) c.input_roles.assign(c.inputs.size(), ir::InputRole::Primal);
  c.num_forward_outputs = static_cast<int>(c.outputs.size());
  return c;
}

/// A compiled kernel: the emitted text and, per device index, its loaded function.
struct Entry {
  EagerCudaKernel kernel;
  std::map<int, runtime::cuda::KernelFunction> loaded;
};

std::mutex g_mu;
std::map<std::string, std::shared_ptr<Entry>> g_kernels;

std::shared_ptr<Entry> find_or_emit(const char *op, const ir::Graph &g) {
  const SizePattern p = size_pattern(g);
  const bool long_rows = has_long_rows(g);
  const std::string key = cache_key(g, p, long_rows);
  std::lock_guard<std::mutex> lock(g_mu);
  auto found = g_kernels.find(key);
  if (found != g_kernels.end()) return found->second;
  // Canonical sizes: class c is 2 + c (distinct, never 1), 1024 more for the
  // long rows of a reduction, and more again at the reference size. The
  // kernel does not depend on them beyond the kind they choose.
  size_t classes = 0;
  for (const std::vector<int64_t> &v : p.classes)
    for (int64_t c : v)
      if (c >= 0) classes = std::max(classes, static_cast<size_t>(c + 1));
  std::vector<int64_t> self(classes), ref(classes);
  for (size_t c = 0; c < classes; ++c) {
    self[c] = 2 + static_cast<int64_t>(c) + (long_rows ? kWarpRowLimit : 0);
    ref[c] = self[c] + 1 + static_cast<int64_t>(classes);
  }
  std::string error;
  auto entry = std::make_shared<Entry>();
  const bool ok = codegen::emitEagerCudaKernel(canonical_graph(g, p, self, 1.375), canonical_graph(g, p, ref, 1.625),
                                               kernel_name(key), &entry->kernel, &error);
  KILN_CHECK(ok, op, ": no CUDA kernel for this op yet: ", error);
  if (const char *print = std::getenv("KILN_PRINT_CUDA"); print && std::string(print) == "1")
    std::fprintf(stderr, "// %s: eager CUDA kernel %s (%s) for %s\n%s\n", op, entry->kernel.name.c_str(),
                 entry->kernel.kind(), key.c_str(), entry->kernel.source.substr(entry->kernel.body_offset).c_str());
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
    KILN_CHECK(false, op, ": compiling CUDA kernel ", entry.kernel.name, " (", entry.kernel.kind(), ") failed: ", e.what());
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

/// The one-node graph of `node` over `inputs` into `outputs` (their shapes and dtypes).
ir::Graph one_node_graph(const ir::Node &node, const std::vector<Tensor> &inputs, const std::vector<Tensor> &outputs) {
  ir::Graph g;
  ir::Node n = node;
  n.operands.clear();
  for (const Tensor &x : inputs) {
    n.operands.push_back(g.addValue(x.sizes(), dispatch::element_type(x.dtype())));
    g.inputs.push_back(n.operands.back());
  }
  for (const Tensor &x : outputs) {
    n.result = g.addValue(x.sizes(), dispatch::element_type(x.dtype()));
    g.outputs.push_back(n.result);
  }
  g.nodes.push_back(std::move(n));
  return g;
}

void run_graph(const char *op, const ir::Graph &g, const std::vector<Tensor> &inputs,
               const std::vector<Tensor> &outputs, const std::vector<double> &scalars) {
  KILN_CHECK(g.inputs.size() == inputs.size() && g.outputs.size() == outputs.size(), op, ": a graph kernel of ",
             g.inputs.size(), " inputs and ", g.outputs.size(), " outputs got ", inputs.size(), " and ", outputs.size());
  for (size_t i = 0; i < inputs.size(); ++i)
    KILN_CHECK(inputs[i].sizes() == g.values[static_cast<size_t>(g.inputs[i])].shape, op, ": graph input ", i,
               " has shape ", shape_str(g.values[static_cast<size_t>(g.inputs[i])].shape), ", the tensor ",
               shape_str(inputs[i].sizes()));
  for (size_t i = 0; i < outputs.size(); ++i)
    KILN_CHECK(outputs[i].sizes() == g.values[static_cast<size_t>(g.outputs[i])].shape, op, ": graph output ", i,
               " has shape ", shape_str(g.values[static_cast<size_t>(g.outputs[i])].shape), ", the tensor ",
               shape_str(outputs[i].sizes()));
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
  std::shared_ptr<Entry> entry = find_or_emit(op, g);
  const EagerCudaKernel &k = entry->kernel;
  const runtime::cuda::KernelFunction &fn = loaded_on(op, *entry, device, *api);

  std::vector<int64_t> class_sizes;
  for (const codegen::EagerSizeSource &s : k.sizeOf)
    class_sizes.push_back((s.output ? outputs : inputs)[static_cast<size_t>(s.index)].size(s.dim));
  // One int64 [2] status word per index check, read after the launch
  // (runtime/IndexCheck.h; it synchronizes, as the CPU's check would). No
  // fill first: thread 0 of block 0 writes both words on every launch
  // (codegen/cuda/EmitPointwise.cpp, emitIndexChecks).
  std::vector<Tensor> statuses;
  for (size_t c = 0; c < k.checks.size(); ++c)
    statuses.push_back(Tensor::empty({runtime::kIndexStatusElements}, kInt64, outputs[0].device()));
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
    case EagerCudaParam::Kind::Status: v.ptr = statuses[static_cast<size_t>(q.index)].raw_data(); break;
    }
    args[i] = &v;
  }
  const runtime::cuda::Dim3 grid{static_cast<uint32_t>(k.launch.gridBlocks(class_sizes)), 1, 1};
  const runtime::cuda::Dim3 block{static_cast<uint32_t>(k.launch.block_threads), 1, 1};
  try {
    api->launch_kernel(fn, grid, block, static_cast<size_t>(k.launch.dynamic_shared_bytes),
                       runtime::cuda::current_stream(device), args.data());
  } catch (const Error &) {
    throw;
  } catch (const std::exception &e) {
    KILN_CHECK(false, op, ": CUDA kernel ", k.name, " (", k.kind(), ") failed: ", e.what());
  }
  for (size_t c = 0; c < statuses.size(); ++c) {
    // A plain byte copy (no trace record): under kiln::compile's trace a
    // Tensor::cpu() here would be a graph break in every gather.
    const std::vector<int64_t> word = kernels::device_to_host(statuses[c]).to_vector<int64_t>();
    if (word[0] != 0) throw Error(runtime::index_error(k.checks[c], word[1]));
  }
}

void run(const char *op, const ir::Node &node, const std::vector<Tensor> &inputs, const std::vector<Tensor> &outputs,
         const std::vector<double> &scalars) {
  run_graph(op, one_node_graph(node, inputs, outputs), inputs, outputs, scalars);
}

// Eager CUDA ops run graph kernels; kiln::compile on CUDA uses the CUDA target.
const bool registered = (dispatch::set_graph_kernel_runner(DeviceType::CUDA, run, run_graph),
                         codegen::registerCudaTarget(), true);

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
  for (const auto &[key, entry] : g_kernels) out.push_back({entry->kernel.name, entry->kernel.source, entry->kernel.kind()});
  return out;
}

}  // namespace kiln::cuda_eager
