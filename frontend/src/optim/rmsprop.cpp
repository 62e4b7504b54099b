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

/// CUDA: rmsprop_cpu's float32 arithmetic, in its order, as one generated
/// kernel that updates p and the state in place.
void rmsprop_cuda(const RmspropStep &h, const Tensor &p, const Tensor &grad, const Tensor &sq_t, const Tensor &avg_t,
                  const Tensor &buf_t) {
  using ir::OpKind;
  dispatch::GraphMaker g;
  const int w = g.input(p), gr = g.input(grad), sq = g.input(sq_t);
  const int avg = avg_t.defined() ? g.input(avg_t) : -1, buf = buf_t.defined() ? g.input(buf_t) : -1;
  auto c = [&](float value) { return g.constant(value, w); };
  auto mul = [&](int a, int b) { return g.binary(OpKind::Mul, a, b); };
  auto add = [&](int a, int b) { return g.binary(OpKind::Add, a, b); };
  const int gd = add(gr, mul(c(h.wd), w));
  const int sq1 = add(mul(c(h.alpha), sq), mul(mul(c(h.one_minus_alpha), gd), gd));
  int var = sq1, avg1 = -1;
  if (avg >= 0) {
    avg1 = add(mul(c(h.alpha), avg), mul(c(h.one_minus_alpha), gd));
    var = g.binary(OpKind::Sub, sq1, mul(avg1, avg1));
  }
  const int denom = add(g.unary(OpKind::Sqrt, var), c(h.eps));
  int buf1 = -1, w1;
  if (buf >= 0) {
    buf1 = add(mul(c(h.mom), buf), g.binary(OpKind::Div, gd, denom));
    w1 = g.binary(OpKind::Sub, w, mul(c(h.lr), buf1));
  } else {
    w1 = g.binary(OpKind::Sub, w, mul(c(h.lr), g.binary(OpKind::Div, gd, denom)));
  }
  std::vector<Tensor> inputs{p, grad, sq_t}, outputs{p, sq_t};
  g.output(w1);
  g.output(sq1);
  if (avg >= 0) g.output(avg1), inputs.push_back(avg_t), outputs.push_back(avg_t);
  if (buf >= 0) g.output(buf1), inputs.push_back(buf_t), outputs.push_back(buf_t);
  g.run("rmsprop step", inputs, outputs);
}
const dispatch::KernelRegistrar<RmspropKernel> rmsprop_cuda_reg(rmsprop_stub, DeviceType::CUDA, rmsprop_cuda);

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
