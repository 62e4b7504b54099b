// Module bookkeeping, Linear, ReLU, grad-norm clipping (other layers: layers.cpp,
// containers: containers.cpp).
#include <cmath>
#include <limits>

#include "kiln/autograd.h"
#include "kiln/nn.h"
#include "kiln/ops.h"
#include "backend.h"
#include "nn/module_registry.h"

namespace kiln::nn {

static void check_name(const std::string &name, const char *what) {
  KILN_CHECK(!name.empty() && name.find('.') == std::string::npos, what, ": name '", name,
             "' must be non-empty and contain no '.'");
}

Module::Module() { registry::module_created(this); }

Module::Module(const Module &other)
    : params_(other.params_), buffers_(other.buffers_), children_(other.children_), training_(other.training_) {
  registry::module_created(this);
}

Module &Module::operator=(const Module &other) {
  params_ = other.params_;
  buffers_ = other.buffers_;
  children_ = other.children_;
  training_ = other.training_;
  return *this;
}

Module::~Module() {
  std::vector<Tensor> own;
  for (auto &p : params_) own.push_back(p.second);
  for (auto &b : buffers_) own.push_back(b.second);
  registry::module_destroyed(this, own);
}

Tensor Module::forward(const Tensor &input) {
  throw Error(name() + ".forward(const Tensor &) is not defined: this module takes its inputs as a vector; "
              "call forward({...}) (or override forward(const Tensor &) for a one-input module)");
}

std::vector<Tensor> Module::forward(const std::vector<Tensor> &inputs) {
  KILN_CHECK(inputs.size() == 1, name(), ".forward: expected 1 input tensor, got ", inputs.size(),
             " (override forward(const std::vector<Tensor> &) for a module with several inputs)");
  return {forward(inputs[0])};
}

Tensor &Module::register_parameter(const std::string &name, Tensor t, bool requires_grad) {
  check_name(name, "register_parameter");
  for (auto &p : params_)
    KILN_CHECK(p.first != name, "register_parameter: a parameter named '", name, "' already exists");
  KILN_CHECK(t.defined(), "register_parameter: parameter '", name, "' is undefined");
  if (t.requires_grad() != requires_grad) t.requires_grad_(requires_grad);
  params_.emplace_back(name, t);
  registry::tensor_registered(this, t);
  return params_.back().second;
}

Tensor &Module::register_buffer(const std::string &name, Tensor t) {
  check_name(name, "register_buffer");
  for (auto &b : buffers_)
    KILN_CHECK(b.first != name, "register_buffer: a buffer named '", name, "' already exists");
  for (auto &p : params_)
    KILN_CHECK(p.first != name, "register_buffer: '", name, "' is already a parameter");
  KILN_CHECK(t.defined(), "register_buffer: buffer '", name, "' is undefined");
  buffers_.emplace_back(name, t);
  registry::tensor_registered(this, t);
  return buffers_.back().second;
}

std::vector<std::pair<std::string, Tensor>> Module::named_buffers(bool recurse) const {
  std::vector<std::pair<std::string, Tensor>> out(buffers_.begin(), buffers_.end());
  if (recurse)
    for (auto &[cname, child] : children_)
      for (auto &[bname, b] : child->named_buffers(true)) out.emplace_back(cname + "." + bname, b);
  return out;
}

std::vector<Tensor> Module::buffers(bool recurse) const {
  std::vector<Tensor> out;
  for (auto &nb : named_buffers(recurse)) out.push_back(nb.second);
  return out;
}

std::vector<std::pair<std::string, Tensor>> Module::state_dict() const {
  std::vector<std::pair<std::string, Tensor>> out;
  for (auto &[n, p] : params_) out.emplace_back(n, p.detach());
  for (auto &[n, b] : buffers_) out.emplace_back(n, b.detach());
  for (auto &[cname, child] : children_)
    for (auto &[n, t] : child->state_dict()) out.emplace_back(cname + "." + n, t);
  return out;
}

Module::LoadResult Module::load_state_dict(const std::vector<std::pair<std::string, Tensor>> &state, bool strict) {
  auto own = state_dict();
  LoadResult result;
  std::vector<bool> used(state.size(), false);
  std::vector<std::pair<Tensor, Tensor>> copies;  // (destination, source), applied after all checks
  for (auto &[name, dst] : own) {
    size_t i = 0;
    while (i < state.size() && state[i].first != name) ++i;
    if (i == state.size()) {
      result.missing_keys.push_back(name);
      continue;
    }
    used[i] = true;
    const Tensor &src = state[i].second;
    KILN_CHECK(src.defined() && src.sizes() == dst.sizes(), "load_state_dict: size mismatch for ", name,
               ": copying a param with shape ", src.defined() ? shape_str(src.sizes()) : std::string("undefined"),
               ", the shape in the current model is ", shape_str(dst.sizes()));
    copies.emplace_back(dst, src);
  }
  for (size_t i = 0; i < state.size(); ++i)
    if (!used[i]) result.unexpected_keys.push_back(state[i].first);
  if (strict && (!result.missing_keys.empty() || !result.unexpected_keys.empty())) {
    std::string msg = "load_state_dict: error(s) in loading state_dict for " + name() + ":";
    if (!result.missing_keys.empty()) {
      msg += " missing key(s):";
      for (auto &k : result.missing_keys) msg += " \"" + k + "\"";
      msg += ".";
    }
    if (!result.unexpected_keys.empty()) {
      msg += " unexpected key(s):";
      for (auto &k : result.unexpected_keys) msg += " \"" + k + "\"";
      msg += ".";
    }
    throw Error(msg + " Pass strict=false to load the matching keys only");
  }
  NoGradGuard no_grad;
  for (auto &[dst, src] : copies) dst.copy_(src);
  return result;
}

void Module::to(DType dtype) {
  KILN_CHECK(is_floating_point(dtype), "Module.to: expected a floating point dtype, got ", dtype_name(dtype));
  NoGradGuard no_grad;
  auto convert = [dtype](Tensor &t) {
    if (!t.is_floating_point() || t.dtype() == dtype) return;
    t.set_data(t.detach().to(dtype));
    t.set_grad(Tensor());
  };
  for (auto &p : params_) convert(p.second);
  for (auto &b : buffers_) convert(b.second);
  for (auto &c : children_) c.second->to(dtype);
}

void Module::to(Device device) {
  backend_of(device, "Module.to");  // throws naming the device when it has no backend
  NoGradGuard no_grad;
  // As torch's Module._apply: parameters and buffers keep their identity
  // (set_data) and move; a parameter's gradient moves with it.
  auto move = [device](Tensor &t) {
    if (t.device() == device) return;
    Tensor g = t.grad();
    t.set_data(t.detach().to(device));
    if (g.defined()) t.set_grad(g.to(device));
  };
  for (auto &p : params_) move(p.second);
  for (auto &b : buffers_) move(b.second);
  for (auto &c : children_) c.second->to(device);
}

void Module::add_child(const std::string &name, std::shared_ptr<Module> m) {
  check_name(name, "register_module");
  KILN_CHECK(m != nullptr, "register_module: module '", name, "' is null");
  for (auto &c : children_)
    KILN_CHECK(c.first != name, "register_module: a submodule named '", name, "' already exists");
  registry::child_registered(this, m.get());
  children_.emplace_back(name, std::move(m));
}

void Module::replace_module(const std::string &name, std::shared_ptr<Module> m) {
  KILN_CHECK(m != nullptr, "replace_module: module '", name, "' is null");
  for (auto &c : children_)
    if (c.first == name) {
      registry::child_registered(this, m.get());
      c.second = std::move(m);
      return;
    }
  throw Error("replace_module: no submodule named '" + name + "'");
}

std::string IntPair::str() const {
  return "(" + std::to_string((*this)[0]) + ", " + std::to_string((*this)[1]) + ")";
}

std::vector<std::pair<std::string, Tensor>> Module::named_parameters(bool recurse) const {
  std::vector<std::pair<std::string, Tensor>> out(params_.begin(), params_.end());
  if (recurse)
    for (auto &[cname, child] : children_)
      for (auto &[pname, p] : child->named_parameters(true)) out.emplace_back(cname + "." + pname, p);
  return out;
}

std::vector<Tensor> Module::parameters(bool recurse) const {
  std::vector<Tensor> out;
  for (auto &np : named_parameters(recurse)) out.push_back(np.second);
  return out;
}

void Module::train(bool on) {
  training_ = on;
  for (auto &c : children_) c.second->train(on);
}

void Module::apply(const std::function<void(Module &)> &fn) {
  for (auto &c : children_) c.second->apply(fn);
  fn(*this);
}

void Module::zero_grad(bool set_to_none) {
  NoGradGuard no_grad;
  for (Tensor &p : parameters()) {
    if (set_to_none) p.set_grad(Tensor());
    else if (p.grad().defined()) p.grad().zero_();
  }
}

// ---- Linear / ReLU (Sequential: containers.cpp) ------------------------------------------------

Linear::Linear(int64_t in, int64_t out, bool has_bias) : in_features(in), out_features(out) {
  KILN_CHECK(in > 0 && out > 0, "Linear: in_features and out_features must be positive, got ", in, " and ", out);
  const double bound = 1.0 / std::sqrt(static_cast<double>(in));
  weight = register_parameter("weight", uniform({out, in}, -bound, bound));
  if (has_bias) bias = register_parameter("bias", uniform({out}, -bound, bound));
}

Tensor Linear::forward(const Tensor &input) {
  KILN_CHECK(input.defined() && input.dim() >= 1 && input.size(-1) == in_features, "Linear: expected input [N, ",
             in_features, "], got ", input.defined() ? shape_str(input.sizes()) : std::string("undefined"));
  return functional::linear(input, weight, bias);
}

Tensor ReLU::forward(const Tensor &input) { return relu(input); }



namespace utils {

double clip_grad_norm_(const std::vector<Tensor> &parameters, double max_norm) {
  KILN_CHECK(max_norm > 0, "clip_grad_norm_: max_norm must be positive, got ", max_norm);
  double total = 0.0;
  for (const Tensor &p : parameters) {
    Tensor g = p.grad();
    if (!g.defined()) continue;
    for (double v : g.to_vector<double>()) total += v * v;
  }
  total = std::sqrt(total);
  const double coef = max_norm / (total + 1e-6);
  if (coef < 1.0) {
    NoGradGuard no_grad;
    for (const Tensor &p : parameters)
      if (p.grad().defined()) p.grad().mul_(coef);
  }
  return total;
}

}  // namespace utils

}  // namespace kiln::nn
