// kiln/optim.h - optimizers (PyTorch's torch.optim names and defaults).
#pragma once

#include <utility>
#include <vector>

#include "kiln/tensor.h"

namespace kiln::optim {

class Optimizer {
public:
  /// Throws kiln::Error if `params` is empty or holds a tensor that does not
  /// require grad.
  Optimizer(std::vector<Tensor> params, double lr, const char *name);
  virtual ~Optimizer() = default;
  /// Updates every parameter that has a gradient. Runs without autograd.
  virtual void step() = 0;
  /// Clears (set_to_none, the PyTorch 2 default) or zeroes every .grad.
  void zero_grad(bool set_to_none = true);
  double lr() const { return lr_; }
  void set_lr(double lr) { lr_ = lr; }
  const std::vector<Tensor> &params() const { return params_; }

protected:
  std::vector<Tensor> params_;
  double lr_;
};

struct SGDOptions {
  explicit SGDOptions(double lr = 0.01) : lr_(lr) {}
  SGDOptions &lr(double v) { lr_ = v; return *this; }
  SGDOptions &momentum(double v) { momentum_ = v; return *this; }
  SGDOptions &dampening(double v) { dampening_ = v; return *this; }
  SGDOptions &weight_decay(double v) { weight_decay_ = v; return *this; }
  SGDOptions &nesterov(bool v) { nesterov_ = v; return *this; }
  double lr_, momentum_ = 0.0, dampening_ = 0.0, weight_decay_ = 0.0;
  bool nesterov_ = false;
};

/// Stochastic gradient descent with momentum (PyTorch's formulation:
/// buf = momentum*buf + (1-dampening)*g; p -= lr*buf, or with nesterov
/// p -= lr*(g + momentum*buf)). Sutskever et al. 2013.
class SGD : public Optimizer {
public:
  SGD(std::vector<Tensor> params, SGDOptions options);
  void step() override;

private:
  SGDOptions opt_;
  std::vector<Tensor> momentum_buffers_;
};

struct AdamWOptions {
  explicit AdamWOptions(double lr = 1e-3) : lr_(lr) {}
  AdamWOptions &lr(double v) { lr_ = v; return *this; }
  AdamWOptions &betas(double b1, double b2) { beta1_ = b1; beta2_ = b2; return *this; }
  AdamWOptions &eps(double v) { eps_ = v; return *this; }
  AdamWOptions &weight_decay(double v) { weight_decay_ = v; return *this; }
  double lr_, beta1_ = 0.9, beta2_ = 0.999, eps_ = 1e-8, weight_decay_ = 1e-2;
};

/// Adam with decoupled weight decay (Loshchilov & Hutter, ICLR 2019):
/// p *= 1 - lr*wd; m = b1*m + (1-b1)*g; v = b2*v + (1-b2)*g^2;
/// p -= lr * (m/(1-b1^t)) / (sqrt(v/(1-b2^t)) + eps). float32 parameters.
class AdamW : public Optimizer {
public:
  AdamW(std::vector<Tensor> params, AdamWOptions options);
  void step() override;

private:
  AdamWOptions opt_;
  int64_t step_count_ = 0;
  std::vector<Tensor> exp_avg_, exp_avg_sq_;
};

}  // namespace kiln::optim
