// Module bookkeeping, Linear/ReLU/Sequential, functional losses, grad clipping.
#include <cmath>
#include <limits>

#include "kiln/autograd.h"
#include "kiln/nn.h"
#include "kiln/ops.h"

namespace kiln::nn {

static void check_name(const std::string &name, const char *what) {
  KILN_CHECK(!name.empty() && name.find('.') == std::string::npos, what, ": name '", name,
             "' must be non-empty and contain no '.'");
}

Tensor &Module::register_parameter(const std::string &name, Tensor t, bool requires_grad) {
  check_name(name, "register_parameter");
  for (auto &p : params_)
    KILN_CHECK(p.first != name, "register_parameter: a parameter named '", name, "' already exists");
  KILN_CHECK(t.defined(), "register_parameter: parameter '", name, "' is undefined");
  if (t.requires_grad() != requires_grad) t.requires_grad_(requires_grad);
  params_.emplace_back(name, t);
  return params_.back().second;
}

void Module::add_child(const std::string &name, std::shared_ptr<Module> m) {
  check_name(name, "register_module");
  KILN_CHECK(m != nullptr, "register_module: module '", name, "' is null");
  for (auto &c : children_)
    KILN_CHECK(c.first != name, "register_module: a submodule named '", name, "' already exists");
  children_.emplace_back(name, std::move(m));
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

// ---- Linear / ReLU / Sequential ------------------------------------------------

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

Sequential::Sequential(std::initializer_list<std::shared_ptr<Module>> modules) {
  for (auto &m : modules) push_back(m);
}

void Sequential::push_back(std::shared_ptr<Module> m) { register_module(std::to_string(size()), std::move(m)); }

Tensor Sequential::forward(const Tensor &input) {
  Tensor x = input;
  for (auto &c : named_children()) x = c.second->forward(x);
  return x;
}

// ---- functional ------------------------------------------------------------------

namespace functional {

Tensor linear(const Tensor &x, const Tensor &weight, const Tensor &bias) {
  KILN_CHECK(weight.defined() && weight.dim() == 2, "linear: weight must be 2-D [out, in], got ",
             weight.defined() ? shape_str(weight.sizes()) : std::string("undefined"));
  Tensor y = x.matmul(weight.t());
  return bias.defined() ? y + bias : y;
}

Tensor log_softmax(const Tensor &x, int64_t dim) {
  KILN_CHECK(x.defined() && x.is_floating_point(), "log_softmax: expected a floating point tensor, got ",
             x.defined() ? dtype_name(x.dtype()) : "undefined");
  // The max shift is a constant for the gradient (log_softmax is shift
  // invariant), so it is taken from a detached copy.
  Tensor shifted = x - x.detach().amax({dim}, /*keepdim=*/true);
  return shifted - shifted.exp().sum({dim}, /*keepdim=*/true).log();
}

Tensor nll_loss(const Tensor &log_probs, const Tensor &target) {
  KILN_CHECK(log_probs.defined() && log_probs.dim() == 2, "nll_loss: expected log_probs of shape [N, C], got ",
             log_probs.defined() ? shape_str(log_probs.sizes()) : std::string("undefined"));
  KILN_CHECK(target.defined() && target.dtype() == kInt64, "nll_loss: expected target of dtype int64, got ",
             target.defined() ? dtype_name(target.dtype()) : "undefined");
  KILN_CHECK(target.dim() == 1 && target.size(0) == log_probs.size(0), "nll_loss: expected target of shape [",
             log_probs.size(0), "], got ", shape_str(target.sizes()));
  const int64_t n = log_probs.size(0), c = log_probs.size(1);
  KILN_CHECK(n > 0, "nll_loss: empty batch (N = 0)");
  for (int64_t v : target.to_vector<int64_t>())
    KILN_CHECK(v >= 0 && v < c, "nll_loss: target ", v, " is out of bounds for ", c, " classes");
  // one_hot[i, j] = (j == target[i]); loss = -sum(one_hot * log_probs) / N.
  Tensor one_hot = eq(arange(c).unsqueeze(0), target.unsqueeze(1)).to(log_probs.dtype());
  return -(one_hot * log_probs).sum() / static_cast<double>(n);
}

Tensor cross_entropy(const Tensor &logits, const Tensor &target) {
  KILN_CHECK(logits.defined() && logits.dim() == 2, "cross_entropy: expected logits of shape [N, C], got ",
             logits.defined() ? shape_str(logits.sizes()) : std::string("undefined"));
  return nll_loss(log_softmax(logits, 1), target);
}

}  // namespace functional

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
