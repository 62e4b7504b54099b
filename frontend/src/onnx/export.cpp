// onnx/export.cpp - kiln::onnx::export_model: trace the eval forward (the
// tracer kiln::compile uses), fit the dynamic axis from a second trace, name
// inputs/outputs/initializers, convert (graph_to_onnx.cpp), check, write.
#include <algorithm>
#include <fstream>
#include <set>

#include "compile/tracer.h"
#include "kiln/autograd.h"
#include "kiln/onnx.h"
#include "kiln/ops.h"
#include "kiln/random.h"
#include "onnx/graph_to_onnx.h"

namespace kiln::onnx {

namespace {

/// One trace of the forward: the graph and the captured tensors.
struct Traced {
  ir::Graph graph;
  std::vector<Tensor> captured;
};

/// Traces model.forward(inputs) (eval mode and NoGradGuard are the caller's).
Traced trace_forward(nn::Module &model, const std::vector<Tensor> &inputs) {
  const Generator generator_before = default_generator();
  trace::Tracer tracer;
  std::vector<Tensor> outputs;
  try {
    trace::TracingScope scope(&tracer);
    std::vector<Tensor> traced;
    for (const Tensor &x : inputs) {
      traced.push_back(x.detach());
      tracer.add_user_input(traced.back());
    }
    outputs = model.forward(traced);
  } catch (const trace::GraphBreakError &e) {
    default_generator() = generator_before;
    throw Error("onnx::export_model: op '" + e.op + "' in " + model.name() +
                ".forward has no ONNX form: it cannot be captured in a graph (under kiln::compile it is a graph "
                "break: a host read such as item(), a random draw, a cat of non-float tensors or a device copy); "
                "expected only capturable tensor ops");
  }
  default_generator() = generator_before;
  KILN_CHECK(!outputs.empty(), "onnx::export_model: ", model.name(), ".forward returned no tensors");
  for (size_t k = 0; k < outputs.size(); ++k)
    KILN_CHECK(outputs[k].defined(), "onnx::export_model: ", model.name(), ".forward returned an undefined output ", k);
  KILN_CHECK(tracer.random_draws().empty(), "onnx::export_model: ", model.name(),
             ".forward draws random numbers in eval mode (op 'dropout'-like random_input); expected a "
             "deterministic inference forward");
  KILN_CHECK(tracer.mutated().empty(), "onnx::export_model: ", model.name(),
             ".forward updates a buffer in place in eval mode (op 'copy_' on a captured tensor); expected an "
             "inference forward without state updates");
  Traced t;
  t.graph = tracer.finish(outputs, {});
  t.captured = tracer.captured();
  return t;
}

/// `x` with one more slice along `dim` (a copy of slice 0): the second trace's input.
Tensor grow(const Tensor &x, int64_t dim) {
  std::vector<int64_t> rows(static_cast<size_t>(x.size(dim)));
  for (size_t i = 0; i < rows.size(); ++i) rows[i] = static_cast<int64_t>(i);
  rows.push_back(0);
  return index_select(x, dim, tensor(rows, {static_cast<int64_t>(rows.size())}));
}

std::vector<std::string> default_names(const char *base, size_t n) {
  if (n == 1) return {base};
  std::vector<std::string> out;
  for (size_t i = 0; i < n; ++i) out.push_back(std::string(base) + "_" + std::to_string(i));
  return out;
}

void check_names(const std::vector<std::string> &names, size_t expected, const char *what) {
  KILN_CHECK(names.size() == expected, "onnx::export_model: ", names.size(), " ", what, " names given for ", expected,
             " ", what, "s; expected one name per ", what);
  std::set<std::string> seen;
  for (const auto &n : names) {
    KILN_CHECK(!n.empty(), "onnx::export_model: an empty ", what, " name; expected a non-empty name");
    KILN_CHECK(seen.insert(n).second, "onnx::export_model: the ", what, " name '", n,
               "' is used twice; expected unique names");
  }
}

/// Initializer names: the state_dict key of each captured parameter/buffer.
std::vector<std::string> initializer_names(const nn::Module &model, const std::vector<Tensor> &captured,
                                           const std::set<std::string> &taken) {
  std::vector<std::pair<std::string, Tensor>> named = model.named_parameters();
  for (auto &b : model.named_buffers()) named.push_back(b);
  std::vector<std::string> out;
  std::set<std::string> used = taken;
  int constants = 0;
  for (const Tensor &t : captured) {
    std::string name;
    for (const auto &[key, p] : named)
      if (p.impl() == t.impl() && !used.count(key)) {
        name = key;
        break;
      }
    while (name.empty() || used.count(name)) name = "_const_" + std::to_string(constants++);
    used.insert(name);
    out.push_back(name);
  }
  return out;
}

/// Restores a module's training flag on scope exit.
struct TrainingModeRestore {
  nn::Module &m;
  bool was;
  ~TrainingModeRestore() { m.train(was); }
};

}  // namespace

ExportInfo export_model(nn::Module &model, const std::vector<Tensor> &example_inputs, const std::string &path,
                        const ExportOptions &options) {
  // kiln::compile's result runs compiled code that records no eager ops:
  // export the module it wraps.
  if (&model.eager_module() != &model) return export_model(model.eager_module(), example_inputs, path, options);
  KILN_CHECK(!example_inputs.empty(), "onnx::export_model: no example inputs; expected one tensor per forward input");
  for (size_t i = 0; i < example_inputs.size(); ++i) {
    KILN_CHECK(example_inputs[i].defined(), "onnx::export_model: example input ", i, " is undefined");
    KILN_CHECK(example_inputs[i].device() == kCPU, "onnx::export_model: example input ", i, " is on ",
               example_inputs[i].device().str(), "; expected a cpu tensor");
  }
  ExportInfo info;
  info.input_names =
      options.input_names().empty() ? default_names("input", example_inputs.size()) : options.input_names();
  check_names(info.input_names, example_inputs.size(), "input");

  TrainingModeRestore restore{model, model.is_training()};
  model.eval();
  NoGradGuard no_grad;
  Traced first = trace_forward(model, example_inputs);
  const size_t num_outputs = first.graph.outputs.size();
  info.output_names = options.output_names().empty() ? default_names("output", num_outputs) : options.output_names();
  check_names(info.output_names, num_outputs, "output");

  // Dynamic axes: one symbol; the inputs' dims grow by one for the second trace.
  std::vector<Tensor> grown = example_inputs;
  for (const auto &[name, dims] : options.dynamic_axes()) {
    auto in = std::find(info.input_names.begin(), info.input_names.end(), name);
    auto out = std::find(info.output_names.begin(), info.output_names.end(), name);
    KILN_CHECK(in != info.input_names.end() || out != info.output_names.end(),
               "onnx::export_model: dynamic_axes names '", name,
               "', which is neither an input nor an output; expected one of the input/output names");
    for (const auto &[dim, symbol] : dims) {
      KILN_CHECK(info.dynamic_symbol.empty() || info.dynamic_symbol == symbol, "onnx::export_model: dynamic axis '",
                 symbol, "' of '", name, "' is a second symbol (first: '", info.dynamic_symbol,
                 "'); expected every dynamic axis to name the same symbol");
      info.dynamic_symbol = symbol;
      if (in == info.input_names.end()) continue;  // outputs: names only, checked by the fit
      const size_t i = static_cast<size_t>(in - info.input_names.begin());
      const int64_t rank = example_inputs[i].dim();
      KILN_CHECK(dim >= 0 && dim < rank, "onnx::export_model: dynamic axis ", dim, " of input '", name, "' (rank ",
                 rank, "); expected a dim in [0, ", rank, ")");
      KILN_CHECK(example_inputs[i].size(dim) >= 2, "onnx::export_model: dynamic axis ", dim, " of input '", name,
                 "' has example size ", example_inputs[i].size(dim),
                 "; expected >= 2 (sizes 0 and 1 broadcast differently, as in kiln::compile)");
      grown[i] = grow(example_inputs[i], dim);
    }
  }
  ir::SymbolicGraph symbolic;
  const bool is_dynamic = !info.dynamic_symbol.empty();
  int64_t size = 0;
  if (is_dynamic) {
    for (size_t i = 0; i < grown.size(); ++i)
      for (int64_t d = 0; d < grown[i].dim(); ++d)
        if (grown[i].size(d) != example_inputs[i].size(d)) size = example_inputs[i].size(d);
    KILN_CHECK(size > 0, "onnx::export_model: dynamic axis '", info.dynamic_symbol,
               "' is given for outputs only; expected it on an input dim (the outputs' follow from the inputs')");
    Traced second = trace_forward(model, grown);
    std::string why;
    KILN_CHECK(ir::fitSymbolicGraph(first.graph, size, second.graph, size + 1, &symbolic, &why),
               "onnx::export_model: the graph of ", model.name(), " is not the same function of '",
               info.dynamic_symbol, "' at sizes ", size, " and ", size + 1, ": ", why,
               "; expected shapes that are multiples of the dynamic dim (or export without dynamic_axes)");
    for (const auto &[name, dims] : options.dynamic_axes()) {
      auto out = std::find(info.output_names.begin(), info.output_names.end(), name);
      if (out == info.output_names.end()) continue;
      const int v = first.graph.outputs[out - info.output_names.begin()];
      for (const auto &[dim, symbol] : dims)
        KILN_CHECK(dim >= 0 && dim < static_cast<int64_t>(first.graph.values[v].shape.size()) &&
                       !symbolic.dims[v][dim].isStatic(),
                   "onnx::export_model: output '", name, "' dim ", dim, " is listed in dynamic_axes but does not ",
                   "depend on '", info.dynamic_symbol, "' (output shape ", shape_str(first.graph.values[v].shape),
                   "); expected a dim that follows the dynamic input dim");
    }
  }

  detail::GraphSpec spec;
  spec.graph = is_dynamic ? &symbolic.graph : &first.graph;
  spec.symbolic = is_dynamic ? &symbolic : nullptr;
  spec.symbol = info.dynamic_symbol;
  spec.num_user_inputs = static_cast<int>(example_inputs.size());
  spec.input_names = info.input_names;
  spec.output_names = info.output_names;
  std::set<std::string> taken(info.input_names.begin(), info.input_names.end());
  taken.insert(info.output_names.begin(), info.output_names.end());
  spec.initializer_names = initializer_names(model, first.captured, taken);
  spec.initializers = first.captured;
  for (const auto &[name, dims] : options.dynamic_axes()) spec.dim_names[name] = dims;
  spec.producer_name = options.producer_name();
  spec.doc_string = options.doc_string();
  ::onnx::ModelProto proto = detail::graph_to_onnx(spec);
  detail::check(proto);

  std::ofstream file(path, std::ios::binary | std::ios::trunc);
  KILN_CHECK(file.good(), "onnx::export_model: cannot open '", path, "' for writing");
  KILN_CHECK(proto.SerializeToOstream(&file) && file.flush().good(), "onnx::export_model: writing '", path,
             "' failed (disk full?)");
  info.num_nodes = proto.graph().node_size();
  for (const auto &n : proto.graph().node()) ++info.op_counts[n.op_type()];
  info.num_initializers = proto.graph().initializer_size();
  for (const auto &t : proto.graph().initializer()) info.initializer_bytes += static_cast<int64_t>(t.raw_data().size());
  return info;
}

}  // namespace kiln::onnx
