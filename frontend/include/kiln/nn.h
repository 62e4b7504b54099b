// kiln/nn.h - modules and functional layers (PyTorch's torch.nn names).
//
// A Module is one class (no Impl/holder split). Children are registered with
// register_module and may be owned by the parent (shared_ptr) or be plain
// members of it (reference; the parent must outlive the registration).
#pragma once

#include <functional>
#include <initializer_list>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "kiln/tensor.h"

namespace kiln::nn {

class Module {
public:
  virtual ~Module() = default;
  /// The computation. Single tensor in, single tensor out.
  virtual Tensor forward(const Tensor &input) = 0;
  Tensor operator()(const Tensor &input) { return forward(input); }
  /// Class name for printing ("Linear", "Sequential", ...).
  virtual std::string name() const = 0;

  /// Parameters of this module and (recurse) its children, registration order.
  std::vector<Tensor> parameters(bool recurse = true) const;
  /// Same with dotted names: "0.weight", "encoder.fc.bias".
  std::vector<std::pair<std::string, Tensor>> named_parameters(bool recurse = true) const;
  std::vector<std::pair<std::string, std::shared_ptr<Module>>> named_children() const { return children_; }

  /// Sets training mode here and in all children (dropout/batch-norm behave differently).
  virtual void train(bool on = true);
  void eval() { train(false); }
  bool is_training() const { return training_; }
  /// Calls fn on every module (children first, then this one), as torch's apply.
  void apply(const std::function<void(Module &)> &fn);
  /// Clears (set_to_none) or zeroes the .grad of every parameter.
  void zero_grad(bool set_to_none = true);

protected:
  /// Registers `t` as parameter `name` (a leaf; requires_grad set as given).
  /// Throws kiln::Error on a duplicate or dotted name.
  Tensor &register_parameter(const std::string &name, Tensor t, bool requires_grad = true);
  /// Registers an owned child.
  template <class M> std::shared_ptr<M> register_module(const std::string &name, std::shared_ptr<M> m) {
    add_child(name, m);
    return m;
  }
  /// Registers a child that is a member of this module (not owned).
  template <class M> M &register_module(const std::string &name, M &m) {
    add_child(name, std::shared_ptr<Module>(std::shared_ptr<Module>(), &m));
    return m;
  }

private:
  void add_child(const std::string &name, std::shared_ptr<Module> m);
  std::vector<std::pair<std::string, Tensor>> params_;
  std::vector<std::pair<std::string, std::shared_ptr<Module>>> children_;
  bool training_ = true;
};

/// y = x W^T + b. x: [N, in_features] (or [in_features]) -> [N, out_features].
/// Init as PyTorch: W, b ~ U(-1/sqrt(in), 1/sqrt(in)) (kaiming_uniform with
/// a = sqrt(5), He et al. 2015), drawn from the default generator.
class Linear : public Module {
public:
  Linear(int64_t in_features, int64_t out_features, bool bias = true);
  Tensor forward(const Tensor &input) override;
  std::string name() const override { return "Linear"; }
  Tensor weight;  ///< [out_features, in_features]
  Tensor bias;    ///< [out_features] (undefined without bias)
  int64_t in_features, out_features;
};

/// max(x, 0) elementwise; any shape.
class ReLU : public Module {
public:
  Tensor forward(const Tensor &input) override;
  std::string name() const override { return "ReLU"; }
};

/// Runs children in order; children named "0", "1", ...
class Sequential : public Module {
public:
  Sequential() = default;
  Sequential(std::initializer_list<std::shared_ptr<Module>> modules);
  void push_back(std::shared_ptr<Module> m);
  Tensor forward(const Tensor &input) override;
  std::string name() const override { return "Sequential"; }
  size_t size() const { return named_children().size(); }
};

namespace functional {
/// x W^T + b; x [N, in], W [out, in], b [out] (optional) -> [N, out].
Tensor linear(const Tensor &x, const Tensor &weight, const Tensor &bias = Tensor());
/// log(softmax(x)) along `dim`, computed as x - max - log(sum(exp(x - max)))
/// for stability. Any shape; float.
Tensor log_softmax(const Tensor &x, int64_t dim);
/// Mean negative log-likelihood. log_probs [N, C] float, target [N] int64 in
/// [0, C). Throws on shape/dtype mismatch or an out-of-range class index.
Tensor nll_loss(const Tensor &log_probs, const Tensor &target);
/// nll_loss(log_softmax(logits, 1), target). logits [N, C], target [N] int64.
Tensor cross_entropy(const Tensor &logits, const Tensor &target);
}  // namespace functional

namespace utils {
/// Scales gradients in place so their total L2 norm is at most max_norm;
/// returns the total norm before clipping (torch.nn.utils.clip_grad_norm_).
/// Pass max_norm = infinity to only measure.
double clip_grad_norm_(const std::vector<Tensor> &parameters, double max_norm);
}  // namespace utils

}  // namespace kiln::nn
