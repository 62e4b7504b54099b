// RMSprop (alpha, eps, L2 weight decay, momentum, centered) as
// torch.optim.RMSprop's single-tensor path, fused into one float32 loop.
#include <cmath>

#include "kiln/autograd.h"
#include "kiln/ops.h"
#include "kiln/optim.h"
#include "ops/dispatch.h"
#include "optim/update_utils.h"

namespace kiln::optim {

std::vector<OptimizerOptions::Field> RMSpropOptions::fields() {
  return {{"lr", &lr_},
          {"alpha", &alpha_},
          {"eps", &eps_},
          {"weight_decay", &weight_decay_},
          {"momentum", &momentum_},
          {"centered", nullptr, &centered_}};
}

RMSprop::RMSprop(std::vector<Tensor> params, RMSpropOptions options)
    : RMSprop({ParamGroup(std::move(params), options)}) {}

RMSprop::RMSprop(std::vector<ParamGroup> groups) : Optimizer(std::move(groups), "RMSprop") { mark_constructed(); }

void RMSprop::check_options(const OptimizerOptions &options) const {
  const auto &o = dynamic_cast<const RMSpropOptions &>(options);
  KILN_CHECK(o.lr_ >= 0.0, "RMSprop: invalid learning rate ", o.lr_, " (expected >= 0)");
  KILN_CHECK(o.eps_ >= 0.0, "RMSprop: invalid eps ", o.eps_, " (expected >= 0)");
  KILN_CHECK(o.momentum_ >= 0.0, "RMSprop: invalid momentum ", o.momentum_, " (expected >= 0)");
  KILN_CHECK(o.weight_decay_ >= 0.0, "RMSprop: invalid weight_decay ", o.weight_decay_, " (expected >= 0)");
  KILN_CHECK(o.alpha_ >= 0.0, "RMSprop: invalid alpha ", o.alpha_, " (expected >= 0)");
}

std::vector<std::string> RMSprop::state_names() const {
  return {"square_avg", "momentum_buffer", "grad_avg"};
}

static Tensor state_data(std::map<std::string, Tensor> &st, const char *name, const Tensor &p) {
  Tensor &t = st[name];
  if (!t.defined()) t = zeros(p.sizes(), kFloat32, p.device());
  return t;
}

namespace {

/// Hyperparameters of one RMSprop update (float32, as the kernel computes).
struct RmspropStep {
  float lr, alpha, eps, wd, mom, one_minus_alpha;
};

/// One RMSprop step on the contiguous float32 p (in place) with gradient
/// `grad`; avg_g (centered) and buf (momentum) may be undefined.
using RmspropKernel = void(const RmspropStep &h, const Tensor &p, const Tensor &grad, const Tensor &sq_t,
                           const Tensor &avg_t, const Tensor &buf_t);
dispatch::DispatchStub<RmspropKernel> rmsprop_stub("rmsprop step");

void rmsprop_cpu(const RmspropStep &h, const Tensor &p, const Tensor &grad, const Tensor &sq_t, const Tensor &avg_t,
                 const Tensor &buf_t) {
  const float lr = h.lr, alpha = h.alpha, eps = h.eps, wd = h.wd, mom = h.mom, one_minus_alpha = h.one_minus_alpha;
  float *sq = sq_t.data_ptr<float>();
  float *avg_g = avg_t.defined() ? avg_t.data_ptr<float>() : nullptr;
  float *buf = buf_t.defined() ? buf_t.data_ptr<float>() : nullptr;
  float *w = p.data_ptr<float>();
  const float *gp = grad.data_ptr<float>();
  for (int64_t j = 0, n = p.numel(); j < n; ++j) {
    const float g = gp[j] + wd * w[j];
    sq[j] = alpha * sq[j] + one_minus_alpha * g * g;
    float var = sq[j];
    if (avg_g) {
      avg_g[j] = alpha * avg_g[j] + one_minus_alpha * g;
      var -= avg_g[j] * avg_g[j];
    }
    const float denom = std::sqrt(var) + eps;
    if (buf) {
      buf[j] = mom * buf[j] + g / denom;
      w[j] -= lr * buf[j];
    } else {
      w[j] -= lr * (g / denom);
    }
  }
}
const dispatch::KernelRegistrar<RmspropKernel> rmsprop_cpu_reg(rmsprop_stub, DeviceType::CPU, rmsprop_cpu);

}  // namespace

void RMSprop::step() {
  NoGradGuard no_grad;
  size_t index = 0;
  for (ParamGroup &group : param_groups()) {
    const auto &o = group.options_as<RMSpropOptions>();
    const RmspropStep h{static_cast<float>(o.lr_),  static_cast<float>(o.alpha_),
                        static_cast<float>(o.eps_), static_cast<float>(o.weight_decay_),
                        static_cast<float>(o.momentum_), static_cast<float>(1.0 - o.alpha_)};
    for (Tensor &p : group.params) {
      std::map<std::string, Tensor> &st = state(index++);
      if (!p.grad().defined()) continue;
      Tensor grad = dense_grad(p);
      increment_step(st);
      Tensor sq = state_data(st, "square_avg", p);
      Tensor avg_g = o.centered_ ? state_data(st, "grad_avg", p) : Tensor();
      Tensor buf = h.mom > 0.0f ? state_data(st, "momentum_buffer", p) : Tensor();
      dispatch::common_device("RMSprop", {&p, &grad, &sq, &avg_g, &buf});
      rmsprop_stub("RMSprop", p.device().type, h, p, grad, sq, avg_g, buf);
    }
  }
}

}  // namespace kiln::optim
