// SGD (momentum, nesterov, weight decay) and AdamW. Updates are fused loops
// over each parameter's float32 data, run without autograd.
#include <cmath>

#include "kiln/autograd.h"
#include "kiln/ops.h"
#include "kiln/optim.h"

namespace kiln::optim {

Optimizer::Optimizer(std::vector<Tensor> params, double lr, const char *name) : params_(std::move(params)), lr_(lr) {
  KILN_CHECK(!params_.empty(), name, ": got an empty parameter list");
  KILN_CHECK(lr >= 0.0, name, ": invalid learning rate ", lr, " (expected >= 0)");
  for (size_t i = 0; i < params_.size(); ++i) {
    KILN_CHECK(params_[i].defined() && params_[i].requires_grad() && params_[i].is_leaf(), name,
               ": parameter ", i, " is not a leaf tensor that requires grad");
    KILN_CHECK(params_[i].dtype() == kFloat32 && params_[i].is_contiguous(), name, ": parameter ", i,
               " must be a contiguous float32 tensor, got ", dtype_name(params_[i].dtype()));
  }
}

void Optimizer::zero_grad(bool set_to_none) {
  NoGradGuard no_grad;
  for (Tensor &p : params_) {
    if (set_to_none) p.set_grad(Tensor());
    else if (p.grad().defined()) p.grad().zero_();
  }
}

/// Contiguous float32 copy of p's gradient (gradients may be strided views).
static Tensor dense_grad(const Tensor &p) {
  Tensor g = p.grad();
  KILN_CHECK(g.sizes() == p.sizes(), "optimizer: gradient shape ", shape_str(g.sizes()),
             " does not match parameter shape ", shape_str(p.sizes()));
  return g.to(kFloat32).contiguous();
}

SGD::SGD(std::vector<Tensor> params, SGDOptions options) : Optimizer(std::move(params), options.lr_, "SGD"), opt_(options) {
  KILN_CHECK(opt_.momentum_ >= 0.0, "SGD: invalid momentum ", opt_.momentum_);
  KILN_CHECK(!opt_.nesterov_ || (opt_.momentum_ > 0 && opt_.dampening_ == 0),
             "SGD: nesterov momentum requires a momentum and zero dampening");
  momentum_buffers_.resize(params_.size());
}

void SGD::step() {
  NoGradGuard no_grad;
  for (size_t i = 0; i < params_.size(); ++i) {
    Tensor &p = params_[i];
    if (!p.grad().defined()) continue;
    Tensor g = dense_grad(p);
    float *w = p.data_ptr<float>();
    const float *gp = g.data_ptr<float>();
    const int64_t n = p.numel();
    const float lr = static_cast<float>(lr_), wd = static_cast<float>(opt_.weight_decay_);
    const float mom = static_cast<float>(opt_.momentum_), damp = static_cast<float>(opt_.dampening_);
    if (mom == 0.0f) {
      for (int64_t j = 0; j < n; ++j) w[j] -= lr * (gp[j] + wd * w[j]);
      continue;
    }
    bool first = !momentum_buffers_[i].defined();
    if (first) momentum_buffers_[i] = zeros(p.sizes());
    float *buf = momentum_buffers_[i].data_ptr<float>();
    for (int64_t j = 0; j < n; ++j) {
      float d = gp[j] + wd * w[j];
      buf[j] = first ? d : mom * buf[j] + (1.0f - damp) * d;
      float update = opt_.nesterov_ ? d + mom * buf[j] : buf[j];
      w[j] -= lr * update;
    }
  }
}

AdamW::AdamW(std::vector<Tensor> params, AdamWOptions options)
    : Optimizer(std::move(params), options.lr_, "AdamW"), opt_(options) {
  KILN_CHECK(opt_.beta1_ >= 0 && opt_.beta1_ < 1 && opt_.beta2_ >= 0 && opt_.beta2_ < 1,
             "AdamW: betas must be in [0, 1), got (", opt_.beta1_, ", ", opt_.beta2_, ")");
  KILN_CHECK(opt_.eps_ >= 0, "AdamW: invalid eps ", opt_.eps_);
  for (const Tensor &p : params_) {
    exp_avg_.push_back(zeros(p.sizes()));
    exp_avg_sq_.push_back(zeros(p.sizes()));
  }
}

void AdamW::step() {
  NoGradGuard no_grad;
  ++step_count_;
  const double b1 = opt_.beta1_, b2 = opt_.beta2_;
  const double bias1 = 1.0 - std::pow(b1, static_cast<double>(step_count_));
  const double bias2 = 1.0 - std::pow(b2, static_cast<double>(step_count_));
  const float step_size = static_cast<float>(lr_ / bias1);
  const float inv_sqrt_bias2 = static_cast<float>(1.0 / std::sqrt(bias2));
  const float decay = static_cast<float>(1.0 - lr_ * opt_.weight_decay_);
  const float fb1 = static_cast<float>(b1), fb2 = static_cast<float>(b2), eps = static_cast<float>(opt_.eps_);
  for (size_t i = 0; i < params_.size(); ++i) {
    Tensor &p = params_[i];
    if (!p.grad().defined()) continue;
    Tensor g = dense_grad(p);
    float *w = p.data_ptr<float>();
    const float *gp = g.data_ptr<float>();
    float *m = exp_avg_[i].data_ptr<float>();
    float *v = exp_avg_sq_[i].data_ptr<float>();
    for (int64_t j = 0, n = p.numel(); j < n; ++j) {
      w[j] *= decay;
      m[j] = fb1 * m[j] + (1.0f - fb1) * gp[j];
      v[j] = fb2 * v[j] + (1.0f - fb2) * gp[j] * gp[j];
      w[j] -= step_size * m[j] / (std::sqrt(v[j]) * inv_sqrt_bias2 + eps);
    }
  }
}

}  // namespace kiln::optim
