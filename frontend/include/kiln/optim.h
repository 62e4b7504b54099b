// kiln/optim.h - optimizers (PyTorch's torch.optim names, defaults and update
// formulas), parameter groups, optimizer state dicts and clip_grad_value_.
//
// An optimizer owns a list of ParamGroups; each group is a list of parameters
// plus its own options (lr, weight_decay, ...). Parameters are numbered across
// groups in order (group 0's first parameter is 0); that index names the
// per-parameter state in state_dict(). Per-parameter state is created lazily
// on the first step() that sees a gradient for the parameter, as in PyTorch.
// Updates are fused loops over the float32 data, run without autograd.
//
// Learning-rate schedulers (kiln/lr_scheduler.h) read and write the lr of each
// group through param_groups().
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "kiln/tensor.h"

namespace kiln::optim {

/// What every optimizer's options have in common: the learning rate and a
/// name -> number view of all hyperparameters (for state dicts and JSON).
/// Concrete options (SGDOptions, ...) have chained setters named as PyTorch's
/// keyword arguments and public fields with a trailing underscore.
struct OptimizerOptions {
  explicit OptimizerOptions(double lr) : lr_(lr) {}
  virtual ~OptimizerOptions() = default;
  virtual std::unique_ptr<OptimizerOptions> clone() const = 0;
  /// The optimizer these options configure: "SGD", "Adam", "AdamW", "RMSprop".
  virtual const char *optimizer_name() const = 0;

  double get_lr() const { return lr_; }
  void set_lr(double lr) { lr_ = lr; }
  /// The momentum OneCycleLR cycles: `momentum` for SGD/RMSprop, beta1 for
  /// Adam/AdamW (PyTorch's 'momentum' / betas[0]).
  virtual double get_momentum() const = 0;
  virtual void set_momentum(double momentum) = 0;

  /// Every hyperparameter by name ("lr", "momentum", "beta1", "nesterov", ...);
  /// booleans are 0 or 1.
  std::map<std::string, double> to_map() const;
  /// Sets every hyperparameter from a to_map() result. Throws kiln::Error
  /// naming a missing or unknown key (e.g. "amsgrad"); nothing changes then.
  void from_map(const std::map<std::string, double> &values);

  double lr_;  ///< learning rate (units of the parameter per unit of update)

protected:
  /// One named hyperparameter: points at a double or at a bool field.
  struct Field {
    const char *name;
    double *number = nullptr;
    bool *flag = nullptr;
  };
  /// The fields to_map/from_map read and write, "lr" included.
  virtual std::vector<Field> fields() = 0;
};

/// One parameter group: parameters that share options, as a dict in
/// torch.optim's `param_groups`. Built from any concrete options type:
/// `ParamGroup{model.parameters(), AdamWOptions(1e-3).weight_decay(0)}`.
class ParamGroup {
public:
  template <class Options, std::enable_if_t<std::is_base_of_v<OptimizerOptions, Options>, int> = 0>
  ParamGroup(std::vector<Tensor> params, const Options &options)
      : params(std::move(params)), options_(options.clone()) {}
  ParamGroup(const ParamGroup &other);
  ParamGroup &operator=(const ParamGroup &other);
  ParamGroup(ParamGroup &&) = default;
  ParamGroup &operator=(ParamGroup &&) = default;

  double lr() const { return options_->lr_; }
  void set_lr(double lr) { options_->lr_ = lr; }
  OptimizerOptions &options() { return *options_; }
  const OptimizerOptions &options() const { return *options_; }
  /// The options as their concrete type; throws kiln::Error if the group
  /// holds options of another optimizer.
  template <class Options> Options &options_as() {
    auto *o = dynamic_cast<Options *>(options_.get());
    if (!o) throw_wrong_options(Options(0.0).optimizer_name());
    return *o;
  }
  template <class Options> const Options &options_as() const {
    return const_cast<ParamGroup *>(this)->options_as<Options>();
  }

  std::vector<Tensor> params;
  /// The lr a scheduler started from (PyTorch's group['initial_lr']); set by
  /// the first LR scheduler attached to the optimizer.
  std::optional<double> initial_lr;

private:
  [[noreturn]] void throw_wrong_options(const char *wanted) const;
  std::unique_ptr<OptimizerOptions> options_;
};

/// An optimizer's state in a form a checkpoint writer stores as named tensors
/// plus JSON, mirroring torch.optim.Optimizer.state_dict():
/// - `state`: per-parameter tensors named "state.<param_index>.<name>", e.g.
///   "state.0.exp_avg", "state.0.step" (a 0-d float32 step count, as PyTorch);
/// - `param_groups`: per group its hyperparameters (OptimizerOptions::to_map,
///   plus "initial_lr" once a scheduler set it) and its parameter indices.
struct OptimizerStateDict {
  struct Group {
    std::map<std::string, double> options;
    std::vector<int64_t> params;
  };
  std::string optimizer;  ///< "SGD", "Adam", "AdamW", "RMSprop"
  std::map<std::string, Tensor> state;
  std::vector<Group> param_groups;

  /// {"optimizer": ..., "param_groups": [{"lr": ..., "params": [0, 1]}, ...]}
  /// (the tensors are stored separately, under their names).
  std::string to_json() const;
  /// Inverse of to_json(); `state` holds the tensors read back. Throws
  /// kiln::Error on malformed JSON or a missing field.
  static OptimizerStateDict from_json(const std::string &json, std::map<std::string, Tensor> state = {});
};

class Optimizer {
public:
  virtual ~Optimizer() = default;
  /// Updates every parameter that has a gradient. Runs without autograd.
  virtual void step() = 0;
  /// Clears (set_to_none, the PyTorch 2 default) or zeroes every .grad.
  void zero_grad(bool set_to_none = true);

  /// The lr of group 0 / sets the lr of every group.
  double lr() const { return groups_.front().lr(); }
  void set_lr(double lr);
  /// All parameters of all groups, in index order (state_dict's numbering).
  std::vector<Tensor> params() const;
  /// The groups; mutable (schedulers write each group's lr).
  std::vector<ParamGroup> &param_groups() { return groups_; }
  const std::vector<ParamGroup> &param_groups() const { return groups_; }
  /// Appends a group (torch's add_param_group). Throws kiln::Error as the
  /// constructor does.
  void add_param_group(ParamGroup group);
  /// "SGD", "Adam", "AdamW" or "RMSprop".
  const std::string &name() const { return name_; }

  /// A deep copy of the state (see OptimizerStateDict).
  OptimizerStateDict state_dict() const;
  /// Restores hyperparameters and per-parameter state (deep copies). Throws
  /// kiln::Error, changing nothing, when the dict is for another optimizer
  /// type, the group or parameter counts differ, a hyperparameter or state
  /// name is unknown, or a state tensor's shape differs from its parameter's.
  void load_state_dict(const OptimizerStateDict &dict);

protected:
  /// Checks every group: params non-empty leaves that require grad,
  /// contiguous float32, no parameter in two groups, options of optimizer
  /// `name`. Throws kiln::Error naming the group and parameter.
  Optimizer(std::vector<ParamGroup> groups, const char *name);
  /// Checks one group's hyperparameters (lr >= 0, betas in [0, 1), ...).
  virtual void check_options(const OptimizerOptions &options) const = 0;
  /// Names of the per-parameter state this optimizer keeps ("exp_avg", ...).
  virtual std::vector<std::string> state_names() const = 0;
  void check_all_options() const;
  /// Derived constructors call this last: checks every group's options and
  /// enables the check in add_param_group.
  void mark_constructed();
  /// Per-parameter state by parameter index (empty until the first step).
  std::map<std::string, Tensor> &state(size_t param_index) { return state_[param_index]; }

private:
  std::string name_;
  std::vector<ParamGroup> groups_;
  std::vector<std::map<std::string, Tensor>> state_;
  bool constructed_ = false;
};

// ---- SGD ---------------------------------------------------------------------

struct SGDOptions : OptimizerOptions {
  explicit SGDOptions(double lr = 0.01) : OptimizerOptions(lr) {}
  SGDOptions &lr(double v) { lr_ = v; return *this; }
  SGDOptions &momentum(double v) { momentum_ = v; return *this; }
  SGDOptions &dampening(double v) { dampening_ = v; return *this; }
  SGDOptions &weight_decay(double v) { weight_decay_ = v; return *this; }
  SGDOptions &nesterov(bool v) { nesterov_ = v; return *this; }
  std::unique_ptr<OptimizerOptions> clone() const override { return std::make_unique<SGDOptions>(*this); }
  const char *optimizer_name() const override { return "SGD"; }
  double get_momentum() const override { return momentum_; }
  void set_momentum(double v) override { momentum_ = v; }
  double momentum_ = 0.0, dampening_ = 0.0, weight_decay_ = 0.0;
  bool nesterov_ = false;

protected:
  std::vector<Field> fields() override;
};

/// Stochastic gradient descent with momentum, PyTorch's formulation
/// (Sutskever et al., "On the importance of initialization and momentum in
/// deep learning", ICML 2013):
///   d = g + weight_decay*p;  buf = d (first step) or momentum*buf + (1-dampening)*d;
///   p -= lr * (nesterov ? d + momentum*buf : buf)   (without momentum: p -= lr*d).
/// State: "momentum_buffer" once momentum > 0. Defaults lr 0.01, rest 0/false.
/// Throws kiln::Error on lr < 0, momentum < 0, weight_decay < 0, or nesterov
/// without momentum > 0 and dampening 0.
class SGD : public Optimizer {
public:
  SGD(std::vector<Tensor> params, SGDOptions options);
  explicit SGD(std::vector<ParamGroup> groups);
  void step() override;

protected:
  void check_options(const OptimizerOptions &options) const override;
  std::vector<std::string> state_names() const override { return {"momentum_buffer"}; }
};

// ---- Adam and AdamW -----------------------------------------------------------

struct AdamOptions : OptimizerOptions {
  explicit AdamOptions(double lr = 1e-3) : OptimizerOptions(lr) {}
  AdamOptions &lr(double v) { lr_ = v; return *this; }
  AdamOptions &betas(double b1, double b2) { beta1_ = b1; beta2_ = b2; return *this; }
  AdamOptions &eps(double v) { eps_ = v; return *this; }
  AdamOptions &weight_decay(double v) { weight_decay_ = v; return *this; }
  AdamOptions &amsgrad(bool v) { amsgrad_ = v; return *this; }
  std::unique_ptr<OptimizerOptions> clone() const override { return std::make_unique<AdamOptions>(*this); }
  const char *optimizer_name() const override { return "Adam"; }
  double get_momentum() const override { return beta1_; }
  void set_momentum(double v) override { beta1_ = v; }
  double beta1_ = 0.9, beta2_ = 0.999, eps_ = 1e-8, weight_decay_ = 0.0;
  bool amsgrad_ = false;

protected:
  std::vector<Field> fields() override;
};

/// Adam (Kingma & Ba, "Adam: A Method for Stochastic Optimization", ICLR 2015)
/// with L2 weight decay folded into the gradient, as torch.optim.Adam:
///   g += weight_decay*p;  m = b1*m + (1-b1)*g;  v = b2*v + (1-b2)*g^2;
///   vmax = max(vmax, v) if amsgrad (Reddi et al., "On the Convergence of
///   Adam and Beyond", ICLR 2018) else v;
///   p -= lr/(1-b1^t) * m / (sqrt(vmax)/sqrt(1-b2^t) + eps).
/// t counts the steps in which this parameter had a gradient.
/// State: "step", "exp_avg", "exp_avg_sq" (+ "max_exp_avg_sq" with amsgrad).
/// Defaults lr 1e-3, betas (0.9, 0.999), eps 1e-8, weight_decay 0.
/// Throws kiln::Error on lr < 0, eps < 0, a beta outside [0, 1), weight_decay < 0.
class Adam : public Optimizer {
public:
  Adam(std::vector<Tensor> params, AdamOptions options);
  explicit Adam(std::vector<ParamGroup> groups);
  void step() override;

protected:
  void check_options(const OptimizerOptions &options) const override;
  std::vector<std::string> state_names() const override;
};

struct AdamWOptions : OptimizerOptions {
  explicit AdamWOptions(double lr = 1e-3) : OptimizerOptions(lr) {}
  AdamWOptions &lr(double v) { lr_ = v; return *this; }
  AdamWOptions &betas(double b1, double b2) { beta1_ = b1; beta2_ = b2; return *this; }
  AdamWOptions &eps(double v) { eps_ = v; return *this; }
  AdamWOptions &weight_decay(double v) { weight_decay_ = v; return *this; }
  AdamWOptions &amsgrad(bool v) { amsgrad_ = v; return *this; }
  std::unique_ptr<OptimizerOptions> clone() const override { return std::make_unique<AdamWOptions>(*this); }
  const char *optimizer_name() const override { return "AdamW"; }
  double get_momentum() const override { return beta1_; }
  void set_momentum(double v) override { beta1_ = v; }
  double beta1_ = 0.9, beta2_ = 0.999, eps_ = 1e-8, weight_decay_ = 1e-2;
  bool amsgrad_ = false;

protected:
  std::vector<Field> fields() override;
};

/// Adam with decoupled weight decay (Loshchilov & Hutter, "Decoupled Weight
/// Decay Regularization", ICLR 2019), as torch.optim.AdamW:
///   p *= 1 - lr*weight_decay; then the Adam update above without the L2 term.
/// State and errors as Adam. Defaults lr 1e-3, betas (0.9, 0.999), eps 1e-8,
/// weight_decay 1e-2.
class AdamW : public Optimizer {
public:
  AdamW(std::vector<Tensor> params, AdamWOptions options);
  explicit AdamW(std::vector<ParamGroup> groups);
  void step() override;

protected:
  void check_options(const OptimizerOptions &options) const override;
  std::vector<std::string> state_names() const override;
};

// ---- RMSprop ---------------------------------------------------------------------

struct RMSpropOptions : OptimizerOptions {
  explicit RMSpropOptions(double lr = 1e-2) : OptimizerOptions(lr) {}
  RMSpropOptions &lr(double v) { lr_ = v; return *this; }
  RMSpropOptions &alpha(double v) { alpha_ = v; return *this; }
  RMSpropOptions &eps(double v) { eps_ = v; return *this; }
  RMSpropOptions &weight_decay(double v) { weight_decay_ = v; return *this; }
  RMSpropOptions &momentum(double v) { momentum_ = v; return *this; }
  RMSpropOptions &centered(bool v) { centered_ = v; return *this; }
  std::unique_ptr<OptimizerOptions> clone() const override { return std::make_unique<RMSpropOptions>(*this); }
  const char *optimizer_name() const override { return "RMSprop"; }
  double get_momentum() const override { return momentum_; }
  void set_momentum(double v) override { momentum_ = v; }
  double alpha_ = 0.99, eps_ = 1e-8, weight_decay_ = 0.0, momentum_ = 0.0;
  bool centered_ = false;

protected:
  std::vector<Field> fields() override;
};

/// RMSprop (Hinton, Coursera "Neural Networks for Machine Learning" lecture
/// 6e; centered variant from Graves, "Generating Sequences With Recurrent
/// Neural Networks", 2013), as torch.optim.RMSprop:
///   g += weight_decay*p;  s = alpha*s + (1-alpha)*g^2;
///   centered: a = alpha*a + (1-alpha)*g, denom = sqrt(s - a^2) + eps,
///   else denom = sqrt(s) + eps;
///   momentum > 0: buf = momentum*buf + g/denom, p -= lr*buf; else p -= lr*g/denom.
/// State: "step", "square_avg" (+ "momentum_buffer" if momentum > 0, +
/// "grad_avg" if centered). Defaults lr 1e-2, alpha 0.99, eps 1e-8, rest 0/false.
/// Throws kiln::Error on lr, alpha, eps, momentum or weight_decay < 0.
class RMSprop : public Optimizer {
public:
  RMSprop(std::vector<Tensor> params, RMSpropOptions options);
  explicit RMSprop(std::vector<ParamGroup> groups);
  void step() override;

protected:
  void check_options(const OptimizerOptions &options) const override;
  std::vector<std::string> state_names() const override;
};

}  // namespace kiln::optim

namespace kiln::nn::utils {
/// Clamps every defined gradient in place to [-clip_value, clip_value]
/// (torch.nn.utils.clip_grad_value_). Parameters without a gradient are
/// skipped. Throws kiln::Error if clip_value is negative or NaN.
/// (clip_grad_norm_ is declared in kiln/nn.h.)
void clip_grad_value_(const std::vector<Tensor> &parameters, double clip_value);
}  // namespace kiln::nn::utils
