// Adam (L2 weight decay, amsgrad) and AdamW (decoupled weight decay): one
// fused float32 kernel per parameter (the "adam step" table, looked up by the
// parameter's device), as torch.optim's single-tensor path.
#include <cmath>

#include "kiln/autograd.h"
#include "kiln/ops.h"
#include "kiln/optim.h"
#include "ops/dispatch.h"
#include "optim/update_utils.h"

namespace kiln::optim {

namespace {

/// Hyperparameters of one Adam-family update.
struct AdamStep {
  double lr, beta1, beta2, eps, weight_decay;
  bool amsgrad, decoupled;  ///< decoupled: AdamW's p *= 1 - lr*wd, else L2 into g
};

void check_adam(const char *name, double lr, double b1, double b2, double eps, double wd) {
  KILN_CHECK(lr >= 0.0, name, ": invalid learning rate ", lr, " (expected >= 0)");
  KILN_CHECK(eps >= 0.0, name, ": invalid eps ", eps, " (expected >= 0)");
  KILN_CHECK(b1 >= 0 && b1 < 1 && b2 >= 0 && b2 < 1, name, ": betas must be in [0, 1), got (", b1, ", ", b2, ")");
  KILN_CHECK(wd >= 0.0, name, ": invalid weight_decay ", wd, " (expected >= 0)");
}

Tensor &state_tensor(std::map<std::string, Tensor> &st, const char *name, const Tensor &p) {
  Tensor &t = st[name];
  if (!t.defined()) t = zeros(p.sizes(), kFloat32, p.device());
  return t;
}

/// One Adam step at step count `step` on the contiguous float32 p (in place)
/// with gradient `grad` and state m, v (and vmax when h.amsgrad; else undefined).
using AdamKernel = void(const AdamStep &h, double step, const Tensor &p, const Tensor &grad, const Tensor &m_t,
                        const Tensor &v_t, const Tensor &vmax_t);
dispatch::DispatchStub<AdamKernel> adam_stub("adam step");

void adam_cpu(const AdamStep &h, double step, const Tensor &p, const Tensor &grad, const Tensor &m_t,
              const Tensor &v_t, const Tensor &vmax_t) {
  float *m = m_t.data_ptr<float>();
  float *v = v_t.data_ptr<float>();
  float *vmax = vmax_t.defined() ? vmax_t.data_ptr<float>() : nullptr;
  const double bias1 = 1.0 - std::pow(h.beta1, step);
  const double bias2_sqrt = std::sqrt(1.0 - std::pow(h.beta2, step));
  const float step_size = static_cast<float>(h.lr / bias1), bc2 = static_cast<float>(bias2_sqrt);
  // 1 - beta is taken in double and then rounded, as PyTorch passes it to
  // its float kernels (1 - 0.999f differs from float(1 - 0.999) by 1e-5 relative).
  const float b1 = static_cast<float>(h.beta1), b2 = static_cast<float>(h.beta2);
  const float one_minus_b1 = static_cast<float>(1.0 - h.beta1), one_minus_b2 = static_cast<float>(1.0 - h.beta2);
  const float eps = static_cast<float>(h.eps), wd = static_cast<float>(h.weight_decay);
  const float decay = static_cast<float>(1.0 - h.lr * h.weight_decay);
  float *w = p.data_ptr<float>();
  const float *gp = grad.data_ptr<float>();
  for (int64_t j = 0, n = p.numel(); j < n; ++j) {
    float g = gp[j];
    if (h.decoupled) w[j] *= decay;
    else g += wd * w[j];
    m[j] = b1 * m[j] + one_minus_b1 * g;
    v[j] = b2 * v[j] + one_minus_b2 * g * g;
    float second = v[j];
    if (vmax) second = vmax[j] = std::max(vmax[j], v[j]);
    const float denom = std::sqrt(second) / bc2 + eps;
    w[j] -= step_size * (m[j] / denom);
  }
}
const dispatch::KernelRegistrar<AdamKernel> adam_cpu_reg(adam_stub, DeviceType::CPU, adam_cpu);

/// CUDA: adam_cpu's float32 arithmetic, in its order, as one generated
/// kernel that updates p, m, v (and vmax) in place.
void adam_cuda(const AdamStep &h, double step, const Tensor &p, const Tensor &grad, const Tensor &m_t,
               const Tensor &v_t, const Tensor &vmax_t) {
  using ir::OpKind;
  const double bias1 = 1.0 - std::pow(h.beta1, step);
  const double bias2_sqrt = std::sqrt(1.0 - std::pow(h.beta2, step));
  dispatch::GraphMaker g;
  const int w = g.input(p), gr = g.input(grad), m = g.input(m_t), v = g.input(v_t);
  const int vmax = vmax_t.defined() ? g.input(vmax_t) : -1;
  auto c = [&](double value) { return g.constant(value, w); };
  auto mul = [&](int a, int b) { return g.binary(OpKind::Mul, a, b); };
  auto add = [&](int a, int b) { return g.binary(OpKind::Add, a, b); };
  const int gd = h.decoupled ? gr : add(gr, mul(c(h.weight_decay), w));
  const int w1 = h.decoupled ? mul(w, c(1.0 - h.lr * h.weight_decay)) : w;
  const int m1 = add(mul(c(h.beta1), m), mul(c(1.0 - h.beta1), gd));
  const int v1 = add(mul(c(h.beta2), v), mul(mul(c(1.0 - h.beta2), gd), gd));
  const int second = vmax >= 0 ? g.binary(OpKind::Maximum, vmax, v1) : v1;
  const int denom = add(g.binary(OpKind::Div, g.unary(OpKind::Sqrt, second), c(bias2_sqrt)), c(h.eps));
  const int w2 = g.binary(OpKind::Sub, w1, mul(c(h.lr / bias1), g.binary(OpKind::Div, m1, denom)));
  g.output(w2);
  g.output(m1);
  g.output(v1);
  std::vector<Tensor> inputs{p, grad, m_t, v_t}, outputs{p, m_t, v_t};
  if (vmax >= 0) {
    g.output(second);
    inputs.push_back(vmax_t);
    outputs.push_back(vmax_t);
  }
  g.run("adam step", inputs, outputs);
}
const dispatch::KernelRegistrar<AdamKernel> adam_cuda_reg(adam_stub, DeviceType::CUDA, adam_cuda);

void adam_update(Tensor &p, const Tensor &grad, std::map<std::string, Tensor> &st, const AdamStep &h) {
  const double step = increment_step(st);
  const Tensor &m = state_tensor(st, "exp_avg", p);
  const Tensor &v = state_tensor(st, "exp_avg_sq", p);
  const Tensor vmax = h.amsgrad ? state_tensor(st, "max_exp_avg_sq", p) : Tensor();
  dispatch::common_device("Adam", {&p, &grad, &m, &v, &vmax});
  adam_stub("Adam", p.device().type, h, step, p, grad, m, v, vmax);
}

}  // namespace

// ---- Adam ----------------------------------------------------------------------------

std::vector<OptimizerOptions::Field> AdamOptions::fields() {
  return {{"lr", &lr_},   {"beta1", &beta1_}, {"beta2", &beta2_}, {"eps", &eps_}, {"weight_decay", &weight_decay_},
          {"amsgrad", nullptr, &amsgrad_}};
}

Adam::Adam(std::vector<Tensor> params, AdamOptions options) : Adam({ParamGroup(std::move(params), options)}) {}

Adam::Adam(std::vector<ParamGroup> groups) : Optimizer(std::move(groups), "Adam") { mark_constructed(); }

void Adam::check_options(const OptimizerOptions &options) const {
  const auto &o = dynamic_cast<const AdamOptions &>(options);
  check_adam("Adam", o.lr_, o.beta1_, o.beta2_, o.eps_, o.weight_decay_);
}

std::vector<std::string> Adam::state_names() const { return {"exp_avg", "exp_avg_sq", "max_exp_avg_sq"}; }

void Adam::step() {
  NoGradGuard no_grad;
  size_t index = 0;
  for (ParamGroup &group : param_groups()) {
    const auto &o = group.options_as<AdamOptions>();
    const AdamStep h{o.lr_, o.beta1_, o.beta2_, o.eps_, o.weight_decay_, o.amsgrad_, /*decoupled=*/false};
    for (Tensor &p : group.params) {
      std::map<std::string, Tensor> &st = state(index++);
      if (p.grad().defined()) adam_update(p, dense_grad(p), st, h);
    }
  }
}

// ---- AdamW ---------------------------------------------------------------------------

std::vector<OptimizerOptions::Field> AdamWOptions::fields() {
  return {{"lr", &lr_},   {"beta1", &beta1_}, {"beta2", &beta2_}, {"eps", &eps_}, {"weight_decay", &weight_decay_},
          {"amsgrad", nullptr, &amsgrad_}};
}

AdamW::AdamW(std::vector<Tensor> params, AdamWOptions options) : AdamW({ParamGroup(std::move(params), options)}) {}

AdamW::AdamW(std::vector<ParamGroup> groups) : Optimizer(std::move(groups), "AdamW") { mark_constructed(); }

void AdamW::check_options(const OptimizerOptions &options) const {
  const auto &o = dynamic_cast<const AdamWOptions &>(options);
  check_adam("AdamW", o.lr_, o.beta1_, o.beta2_, o.eps_, o.weight_decay_);
}

std::vector<std::string> AdamW::state_names() const { return {"exp_avg", "exp_avg_sq", "max_exp_avg_sq"}; }

void AdamW::step() {
  NoGradGuard no_grad;
  size_t index = 0;
  for (ParamGroup &group : param_groups()) {
    const auto &o = group.options_as<AdamWOptions>();
    const AdamStep h{o.lr_, o.beta1_, o.beta2_, o.eps_, o.weight_decay_, o.amsgrad_, /*decoupled=*/true};
    for (Tensor &p : group.params) {
      std::map<std::string, Tensor> &st = state(index++);
      if (p.grad().defined()) adam_update(p, dense_grad(p), st, h);
    }
  }
}

}  // namespace kiln::optim
