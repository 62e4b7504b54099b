// onnx/graph_to_onnx.cpp - ir::Graph -> onnx::ModelProto, one emit function
// per op family. Operator semantics: ONNX 1.12 docs/Operators.md at opset 17.
#include "onnx/graph_to_onnx.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <set>
#include <sstream>

#include "kiln/error.h"
#include "kiln/onnx.h"
#include "onnx/checker.h"
#include "onnx/shape_inference/implementation.h"

namespace kiln::onnx::detail {

using ::onnx::AttributeProto;
using ::onnx::NodeProto;
using ::onnx::TensorProto;

int onnx_data_type(ir::ElementType type) {
  switch (type) {
  case ir::ElementType::F32: return TensorProto::FLOAT;
  case ir::ElementType::F16: return TensorProto::FLOAT16;
  case ir::ElementType::BF16: return TensorProto::BFLOAT16;
  case ir::ElementType::I64: return TensorProto::INT64;
  case ir::ElementType::Bool: return TensorProto::BOOL;
  case ir::ElementType::F64: return TensorProto::DOUBLE;
  case ir::ElementType::I32: return TensorProto::INT32;
  }
  throw Error("onnx::export_model: unknown element type");
}

namespace {

bool is_float(ir::ElementType t) {
  return t == ir::ElementType::F32 || t == ir::ElementType::F16 || t == ir::ElementType::BF16 ||
         t == ir::ElementType::F64;
}

/// Little-endian bytes of `value` converted to `type` (one element).
std::string scalar_bytes(double value, ir::ElementType type) {
  std::string out;
  auto put = [&out](const void *p, size_t n) { out.append(static_cast<const char *>(p), n); };
  switch (type) {
  case ir::ElementType::F32: {
    float f = static_cast<float>(value);
    put(&f, 4);
    break;
  }
  case ir::ElementType::F64: put(&value, 8); break;
  case ir::ElementType::F16: {
    _Float16 h = static_cast<_Float16>(value);
    put(&h, 2);
    break;
  }
  case ir::ElementType::BF16: {  // round to nearest even, as Kiln's conversion
    float f = static_cast<float>(value);
    uint32_t bits;
    std::memcpy(&bits, &f, 4);
    uint16_t b = std::isnan(f) ? uint16_t(0x7fc0) : uint16_t((bits + 0x7fff + ((bits >> 16) & 1)) >> 16);
    put(&b, 2);
    break;
  }
  case ir::ElementType::I64: {
    int64_t i = static_cast<int64_t>(value);
    put(&i, 8);
    break;
  }
  case ir::ElementType::I32: {
    int32_t i = static_cast<int32_t>(value);
    put(&i, 4);
    break;
  }
  case ir::ElementType::Bool: {
    uint8_t b = value != 0.0;
    put(&b, 1);
    break;
  }
  }
  return out;
}

/// Builds one GraphProto node by node.
class Emitter {
public:
  explicit Emitter(const GraphSpec &spec) : spec_(spec), g_(*spec.graph), names_(g_.values.size()) {}

  ::onnx::ModelProto run();

private:
  // ---- names and helpers -------------------------------------------------------
  /// A name no graph input, output or initializer has (those are the user's).
  std::string unique(std::string name) {
    while (reserved_.count(name)) name += "_";
    return name;
  }
  std::string fresh(const std::string &hint) { return unique("_" + hint + "_" + std::to_string(counter_++)); }
  const std::string &name(int value) const { return names_.at(value); }
  std::string result_name(int value) {
    return names_[value].empty() ? (names_[value] = unique("v" + std::to_string(value))) : names_[value];
  }
  const ir::Value &val(int value) const { return g_.values.at(value); }

  NodeProto *node(const std::string &op, std::vector<std::string> inputs, std::vector<std::string> outputs) {
    NodeProto *n = graph_->add_node();
    n->set_op_type(op);
    n->set_name(op + "_" + std::to_string(graph_->node_size() - 1));
    for (auto &i : inputs) n->add_input(i);
    for (auto &o : outputs) n->add_output(o);
    return n;
  }
  /// A node with one fresh output; returns that output's name.
  std::string tmp(const std::string &op, std::vector<std::string> inputs, NodeProto **out = nullptr) {
    std::string r = fresh(op);
    NodeProto *n = node(op, std::move(inputs), {r});
    if (out) *out = n;
    return r;
  }
  static void attr_int(NodeProto *n, const char *key, int64_t v) {
    AttributeProto *a = n->add_attribute();
    a->set_name(key);
    a->set_type(AttributeProto::INT);
    a->set_i(v);
  }
  static void attr_ints(NodeProto *n, const char *key, const std::vector<int64_t> &v) {
    AttributeProto *a = n->add_attribute();
    a->set_name(key);
    a->set_type(AttributeProto::INTS);
    for (int64_t x : v) a->add_ints(x);
  }
  static void attr_string(NodeProto *n, const char *key, const std::string &v) {
    AttributeProto *a = n->add_attribute();
    a->set_name(key);
    a->set_type(AttributeProto::STRING);
    a->set_s(v);
  }

  /// An initializer holding `data` of `type` and `dims`.
  std::string initializer(const std::string &name, ir::ElementType type, const std::vector<int64_t> &dims,
                          std::string data) {
    TensorProto *t = graph_->add_initializer();
    t->set_name(name);
    t->set_data_type(onnx_data_type(type));
    for (int64_t d : dims) t->add_dims(d);
    t->set_raw_data(std::move(data));
    return name;
  }
  /// A 1-D int64 constant (shapes, axes), shared by equal contents.
  std::string ints_constant(const std::vector<int64_t> &v) {
    auto it = ints_cache_.find(v);
    if (it != ints_cache_.end()) return it->second;
    std::string data(reinterpret_cast<const char *>(v.data()), v.size() * sizeof(int64_t));
    return ints_cache_[v] = initializer(fresh("ints"), ir::ElementType::I64, {static_cast<int64_t>(v.size())}, data);
  }
  /// A 0-d constant `value` of `type`, shared by equal contents.
  std::string scalar_constant(double value, ir::ElementType type) {
    std::string bytes = scalar_bytes(value, type);
    auto key = std::make_pair(static_cast<int>(type), bytes);
    auto it = scalar_cache_.find(key);
    if (it != scalar_cache_.end()) return it->second;
    return scalar_cache_[key] = initializer(fresh("scalar"), type, {}, bytes);
  }

  bool dynamic(int value) const { return spec_.symbolic && spec_.symbolic->isDynamic(value); }
  /// The symbol s as an int64 [1] tensor, read once from an input's shape.
  std::string symbol_tensor();
  /// An int64 1-D tensor holding the shape of `value` (computed from the
  /// symbol when the value's shape depends on it).
  std::string shape_tensor(int value);

  // ---- ops -------------------------------------------------------------------------
  void emit(size_t index, const ir::Node &n);
  void emit_pointwise(const ir::Node &n);
  void emit_division(const ir::Node &n);
  void emit_reduction(const ir::Node &n);
  void emit_conv_pool(const ir::Node &n);
  [[noreturn]] void unsupported(const ir::Node &n, const std::string &why) const;

  void add_io(::onnx::ValueInfoProto *info, const std::string &name, int value);

  const GraphSpec &spec_;
  const ir::Graph &g_;
  ::onnx::GraphProto *graph_ = nullptr;
  std::vector<std::string> names_;
  std::map<std::vector<int64_t>, std::string> ints_cache_;
  std::map<std::pair<int, std::string>, std::string> scalar_cache_;
  std::map<std::vector<std::pair<double, int>>, std::string> shape_cache_;
  std::string symbol_;
  std::set<std::string> reserved_;
  int counter_ = 0;
};

void Emitter::unsupported(const ir::Node &n, const std::string &why) const {
  std::ostringstream os;
  os << "onnx::export_model: op '" << ir::opMnemonic(n.kind) << "' (result " << ir::toString(val(n.result).type)
     << shape_str(val(n.result).shape) << ") has no ONNX form at opset " << kOpsetVersion << ": " << why;
  throw Error(os.str());
}

std::string Emitter::symbol_tensor() {
  if (!symbol_.empty()) return symbol_;
  for (int i = 0; i < spec_.num_user_inputs; ++i) {
    const int v = g_.inputs[i];
    const auto &dims = spec_.symbolic->dims[v];
    for (size_t d = 0; d < dims.size(); ++d)
      if (dims[d].power == 1 && dims[d].coeff == 1.0) {
        NodeProto *n;
        symbol_ = tmp("Shape", {name(v)}, &n);
        attr_int(n, "start", static_cast<int64_t>(d));
        attr_int(n, "end", static_cast<int64_t>(d) + 1);
        return symbol_;
      }
  }
  throw Error("onnx::export_model: no graph input has a dim equal to the dynamic symbol '" + spec_.symbol + "'");
}

std::string Emitter::shape_tensor(int value) {
  if (!dynamic(value)) return ints_constant(val(value).shape);
  std::vector<std::pair<double, int>> key;  // values of one symbolic shape share its tensor
  for (const ir::SymbolicNumber &d : spec_.symbolic->dims[value]) key.emplace_back(d.coeff, d.power);
  auto it = shape_cache_.find(key);
  if (it != shape_cache_.end()) return it->second;
  std::vector<std::string> pieces;
  std::vector<int64_t> run;  // consecutive static dims, one constant
  auto flush = [&] {
    if (!run.empty()) pieces.push_back(ints_constant(run));
    run.clear();
  };
  const auto &dims = spec_.symbolic->dims[value];
  for (const ir::SymbolicNumber &d : dims) {
    if (d.isStatic()) {
      run.push_back(static_cast<int64_t>(d.coeff));
      continue;
    }
    flush();
    const int64_t c = static_cast<int64_t>(d.coeff);
    if (static_cast<double>(c) != d.coeff || d.power < 1)
      throw Error("onnx::export_model: a shape dim " + std::to_string(d.coeff) + "*" + spec_.symbol + "^" +
                  std::to_string(d.power) + " is not an integer multiple of a power of the dynamic symbol");
    std::string piece = symbol_tensor();
    for (int p = 1; p < d.power; ++p) piece = tmp("Mul", {piece, symbol_tensor()});
    if (c != 1) piece = tmp("Mul", {piece, ints_constant({c})});
    pieces.push_back(piece);
  }
  flush();
  NodeProto *n;
  std::string shape = pieces.size() == 1 ? pieces[0] : tmp("Concat", pieces, &n);
  if (pieces.size() != 1) attr_int(n, "axis", 0);
  return shape_cache_[key] = shape;
}

// Elementwise ops with a direct or short ONNX form.
void Emitter::emit_pointwise(const ir::Node &n) {
  const std::string out = result_name(n.result);
  std::vector<std::string> in;
  for (int o : n.operands) in.push_back(name(o));
  const ir::ElementType type = val(n.operands.empty() ? n.result : n.operands[0]).type;
  auto direct = [&](const char *op) { node(op, in, {out}); };
  switch (n.kind) {
  case ir::OpKind::Add: return direct("Add");
  case ir::OpKind::Sub: return direct("Sub");
  case ir::OpKind::Mul: return direct("Mul");
  case ir::OpKind::Neg: return direct("Neg");
  case ir::OpKind::Exp: return direct("Exp");
  case ir::OpKind::Log: return direct("Log");
  case ir::OpKind::Relu: return direct("Relu");
  case ir::OpKind::Sqrt: return direct("Sqrt");
  case ir::OpKind::Tanh: return direct("Tanh");
  case ir::OpKind::Abs: return direct("Abs");
  case ir::OpKind::Sin: return direct("Sin");
  case ir::OpKind::Cos: return direct("Cos");
  case ir::OpKind::Erf: return direct("Erf");
  case ir::OpKind::Maximum: return direct("Max");
  case ir::OpKind::Minimum: return direct("Min");
  case ir::OpKind::Select: return direct("Where");
  case ir::OpKind::Matmul: return direct("MatMul");
  case ir::OpKind::Rsqrt: node("Reciprocal", {tmp("Sqrt", in)}, {out}); return;
  case ir::OpKind::Floor:
  case ir::OpKind::Ceil:
  case ir::OpKind::Round:
  case ir::OpKind::Trunc:
    if (!is_float(type)) {  // identity on integers (Ops.def)
      node("Identity", in, {out});
    } else if (n.kind == ir::OpKind::Trunc) {  // toward zero
      std::string negative = tmp("Less", {in[0], scalar_constant(0.0, type)});
      node("Where", {negative, tmp("Ceil", in), tmp("Floor", in)}, {out});
    } else {
      static const std::map<ir::OpKind, const char *> rounding = {
          {ir::OpKind::Floor, "Floor"}, {ir::OpKind::Ceil, "Ceil"}, {ir::OpKind::Round, "Round"}};  // Round: half to even
      direct(rounding.at(n.kind));
    }
    return;
  case ir::OpKind::Pow: node("Pow", {in[0], scalar_constant(n.scalar, type)}, {out}); return;
  case ir::OpKind::Compare: {
    static const char *ops[] = {"Equal", "Equal", "Less", "LessOrEqual", "Greater", "GreaterOrEqual"};
    if (n.predicate == ir::Predicate::NE)
      node("Not", {tmp("Equal", in)}, {out});
    else
      node(ops[static_cast<int>(n.predicate)], in, {out});
    return;
  }
  case ir::OpKind::Convert: {
    NodeProto *c = node("Cast", in, {out});
    attr_int(c, "to", onnx_data_type(val(n.result).type));
    return;
  }
  case ir::OpKind::Constant:
    node("Expand", {scalar_constant(n.scalar, val(n.result).type), shape_tensor(n.result)}, {out});
    return;
  default: break;
  }
  unsupported(n, "not a pointwise op (internal error)");
}

// div, floor_div, remainder, fmod: integer and float forms differ.
void Emitter::emit_division(const ir::Node &n) {
  const std::string out = result_name(n.result);
  const std::string a = name(n.operands[0]), b = name(n.operands[1]);
  const bool fl = is_float(val(n.operands[0]).type);
  NodeProto *mod = nullptr;
  switch (n.kind) {
  case ir::OpKind::Div: node("Div", {a, b}, {out}); return;  // integers: truncating, as Kiln's C division
  case ir::OpKind::Fmod:
    mod = node("Mod", {a, b}, {out});
    attr_int(mod, "fmod", 1);  // sign of the dividend (C fmod)
    return;
  case ir::OpKind::Remainder:
    if (fl) {  // a - floor(a / b) * b (Python's %, torch.remainder)
      node("Sub", {a, tmp("Mul", {tmp("Floor", {tmp("Div", {a, b})}), b})}, {out});
    } else {
      mod = node("Mod", {a, b}, {out});
      attr_int(mod, "fmod", 0);  // sign of the divisor
    }
    return;
  case ir::OpKind::FloorDiv:
    if (fl) {
      node("Floor", {tmp("Div", {a, b})}, {out});
    } else {  // (a - a mod b) / b is exact, so truncation = floor
      std::string r = tmp("Mod", {a, b}, &mod);
      attr_int(mod, "fmod", 0);
      node("Div", {tmp("Sub", {a, r}), b}, {out});
    }
    return;
  default: break;
  }
  unsupported(n, "not a division (internal error)");
}

void Emitter::emit_reduction(const ir::Node &n) {
  const std::string out = result_name(n.result), x = name(n.operands[0]);
  NodeProto *r = nullptr;
  switch (n.kind) {
  case ir::OpKind::ReduceSum:  // opset 13: axes is an input
    r = node("ReduceSum", {x, ints_constant(n.ints)}, {out});
    attr_int(r, "keepdims", n.keepdim);
    attr_int(r, "noop_with_empty_axes", 1);
    return;
  case ir::OpKind::ReduceMax:
  case ir::OpKind::ReduceMin:  // opset 17: axes is an attribute
    if (n.ints.empty()) {
      node("Identity", {x}, {out});
      return;
    }
    r = node(n.kind == ir::OpKind::ReduceMax ? "ReduceMax" : "ReduceMin", {x}, {out});
    attr_ints(r, "axes", n.ints);
    attr_int(r, "keepdims", n.keepdim);
    return;
  case ir::OpKind::ArgMax:
  case ir::OpKind::ArgMin:  // the first index of the extreme, as Kiln
    r = node(n.kind == ir::OpKind::ArgMax ? "ArgMax" : "ArgMin", {x}, {out});
    attr_int(r, "axis", n.ints.at(0));
    attr_int(r, "keepdims", n.keepdim);
    attr_int(r, "select_last_index", 0);
    return;
  case ir::OpKind::Cumsum:  // axis: a 0-d int64 input
    node("CumSum", {x, scalar_constant(static_cast<double>(n.ints.at(0)), ir::ElementType::I64)}, {out});
    return;
  default: break;
  }
  unsupported(n, "not a reduction (internal error)");
}

// conv2d ints: [stride h, w, padding h, w, dilation h, w, groups];
// max pool: [kernel h, w, stride h, w, padding h, w] (Ops.def).
void Emitter::emit_conv_pool(const ir::Node &n) {
  const std::string out = result_name(n.result), x = name(n.operands[0]);
  const std::vector<int64_t> &v = n.ints;
  if (n.kind == ir::OpKind::Conv2d) {
    const auto &w = val(n.operands[1]).shape;  // [C_out, C_in / groups, kH, kW]
    NodeProto *c = node("Conv", {x, name(n.operands[1])}, {out});
    attr_ints(c, "kernel_shape", {w.at(2), w.at(3)});
    attr_ints(c, "strides", {v.at(0), v.at(1)});
    attr_ints(c, "pads", {v.at(2), v.at(3), v.at(2), v.at(3)});
    attr_ints(c, "dilations", {v.at(4), v.at(5)});
    attr_int(c, "group", v.at(6));
    return;
  }
  NodeProto *p = node("MaxPool", {x}, {out});
  attr_ints(p, "kernel_shape", {v.at(0), v.at(1)});
  attr_ints(p, "strides", {v.at(2), v.at(3)});
  attr_ints(p, "pads", {v.at(4), v.at(5), v.at(4), v.at(5)});
}

void Emitter::emit(size_t index, const ir::Node &n) {
  if (spec_.symbolic && !spec_.symbolic->scalars[index].isStatic() &&
      (n.kind == ir::OpKind::Constant || n.kind == ir::OpKind::Pow)) {
    std::ostringstream os;
    os << "onnx::export_model: op '" << ir::opMnemonic(n.kind) << "' has the constant " << n.scalar
       << ", which depends on the dynamic symbol '" << spec_.symbol
       << "' (e.g. a mean over the dynamic dim); expected a constant independent of it: export with that dim static";
    throw Error(os.str());
  }
  switch (n.kind) {
  case ir::OpKind::Div:
  case ir::OpKind::FloorDiv:
  case ir::OpKind::Remainder:
  case ir::OpKind::Fmod: return emit_division(n);
  case ir::OpKind::ReduceSum:
  case ir::OpKind::ReduceMax:
  case ir::OpKind::ReduceMin:
  case ir::OpKind::ArgMax:
  case ir::OpKind::ArgMin:
  case ir::OpKind::Cumsum: return emit_reduction(n);
  case ir::OpKind::Conv2d:
  case ir::OpKind::MaxPool2d: return emit_conv_pool(n);
  case ir::OpKind::Transpose: {
    NodeProto *t = node("Transpose", {name(n.operands[0])}, {result_name(n.result)});
    attr_ints(t, "perm", n.ints);
    return;
  }
  case ir::OpKind::Broadcast:
    node("Expand", {name(n.operands[0]), shape_tensor(n.result)}, {result_name(n.result)});
    return;
  case ir::OpKind::Reshape: {
    NodeProto *r = node("Reshape", {name(n.operands[0]), shape_tensor(n.result)}, {result_name(n.result)});
    const auto &s = val(n.result).shape;
    if (std::find(s.begin(), s.end(), 0) != s.end()) attr_int(r, "allowzero", 1);  // 0 is a size, not "copy"
    return;
  }
  case ir::OpKind::Gather: {  // torch.gather: index of the input's rank
    NodeProto *gth = node("GatherElements", {name(n.operands[0]), name(n.operands[1])}, {result_name(n.result)});
    attr_int(gth, "axis", n.ints.at(0));
    return;
  }
  case ir::OpKind::ScatterAdd: {  // (input, index, src)
    NodeProto *s = node("ScatterElements", {name(n.operands[0]), name(n.operands[1]), name(n.operands[2])},
                        {result_name(n.result)});
    attr_int(s, "axis", n.ints.at(0));
    attr_string(s, "reduction", "add");
    return;
  }
  case ir::OpKind::Conv2dInputGrad:
  case ir::OpKind::Conv2dWeightGrad:
  case ir::OpKind::MaxPool2dBackward:
  case ir::OpKind::MaxPool2dGather:
    unsupported(n, "it is a backward-only op (an inference export traces the forward under no_grad)");
  case ir::OpKind::MaxPool2dIndices:
    unsupported(n, "Kiln's indices are positions within each H x W plane, ONNX MaxPool's are flattened over "
                   "N x C x H x W; export the values only");
  default: return emit_pointwise(n);
  }
}

void Emitter::add_io(::onnx::ValueInfoProto *info, const std::string &name, int value) {
  info->set_name(name);
  auto *tensor = info->mutable_type()->mutable_tensor_type();
  tensor->set_elem_type(onnx_data_type(val(value).type));
  auto *shape = tensor->mutable_shape();
  const auto named = spec_.dim_names.find(name);
  for (size_t d = 0; d < val(value).shape.size(); ++d) {
    auto *dim = shape->add_dim();
    if (!dynamic(value) || spec_.symbolic->dims[value][d].isStatic()) {
      dim->set_dim_value(val(value).shape[d]);
      continue;
    }
    if (named != spec_.dim_names.end() && named->second.count(static_cast<int64_t>(d))) {
      dim->set_dim_param(named->second.at(static_cast<int64_t>(d)));
      continue;
    }
    const ir::SymbolicNumber &s = spec_.symbolic->dims[value][d];
    std::string p = s.power == 1 ? spec_.symbol : spec_.symbol + "^" + std::to_string(s.power);
    if (s.coeff != 1.0) p = std::to_string(static_cast<int64_t>(s.coeff)) + "*" + p;
    dim->set_dim_param(p);
  }
}

::onnx::ModelProto Emitter::run() {
  ::onnx::ModelProto model;
  model.set_ir_version(kIrVersion);
  model.set_producer_name(spec_.producer_name);
  model.set_producer_version("0.1");
  if (!spec_.doc_string.empty()) model.set_doc_string(spec_.doc_string);
  auto *opset = model.add_opset_import();
  opset->set_domain("");
  opset->set_version(kOpsetVersion);
  graph_ = model.mutable_graph();
  graph_->set_name("kiln_forward");
  reserved_.insert(spec_.input_names.begin(), spec_.input_names.end());
  reserved_.insert(spec_.output_names.begin(), spec_.output_names.end());
  reserved_.insert(spec_.initializer_names.begin(), spec_.initializer_names.end());

  // Inputs and initializers keep their names; outputs produced by a node get
  // the output name directly, the rest an Identity at the end.
  for (int i = 0; i < spec_.num_user_inputs; ++i) {
    names_[g_.inputs[i]] = spec_.input_names.at(i);
    add_io(graph_->add_input(), spec_.input_names[i], g_.inputs[i]);
  }
  for (size_t k = 0; k < spec_.initializers.size(); ++k) {
    const int v = g_.inputs[spec_.num_user_inputs + k];
    if (dynamic(v))
      throw Error("onnx::export_model: the captured tensor '" + spec_.initializer_names[k] + "' " +
                  shape_str(val(v).shape) + " has a shape that depends on the dynamic symbol '" + spec_.symbol +
                  "' (a tensor made inside forward from the input's size); expected a fixed-shape weight");
    const Tensor t = spec_.initializers[k].contiguous();
    const size_t bytes = static_cast<size_t>(t.numel()) * itemsize(t.dtype());
    names_[v] = initializer(spec_.initializer_names[k], val(v).type, val(v).shape,
                            std::string(static_cast<const char *>(t.raw_data()), bytes));
  }
  std::vector<bool> produced(g_.values.size(), false);
  for (const ir::Node &n : g_.nodes) produced[n.result] = true;
  std::vector<bool> direct(g_.outputs.size(), false);
  for (size_t k = 0; k < g_.outputs.size(); ++k) {
    const int v = g_.outputs[k];
    if (produced[v] && names_[v].empty()) {
      names_[v] = spec_.output_names.at(k);
      direct[k] = true;
    }
  }
  for (size_t i = 0; i < g_.nodes.size(); ++i) emit(i, g_.nodes[i]);
  for (size_t k = 0; k < g_.outputs.size(); ++k) {
    if (!direct[k]) node("Identity", {name(g_.outputs[k])}, {spec_.output_names[k]});
    add_io(graph_->add_output(), spec_.output_names[k], g_.outputs[k]);
  }
  return model;
}

}  // namespace

::onnx::ModelProto graph_to_onnx(const GraphSpec &spec) { return Emitter(spec).run(); }

void check(const ::onnx::ModelProto &model) {
  try {
    ::onnx::checker::check_model(model);
    ::onnx::ModelProto copy = model;
    ::onnx::ShapeInferenceOptions strict(/*check_type=*/true, /*error_mode=*/1, /*data_propagation=*/false);
    ::onnx::shape_inference::InferShapes(copy, ::onnx::OpSchemaRegistry::Instance(), strict);
  } catch (const std::exception &e) {
    throw Error(std::string("onnx::export_model: the ONNX checker (libonnx ") + "1.12" +
                ") rejected the exported model: " + e.what());
  }
}

}  // namespace kiln::onnx::detail
