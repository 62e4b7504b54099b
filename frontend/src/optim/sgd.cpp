// SGD with momentum, dampening, nesterov and L2 weight decay (torch.optim.SGD).
#include "kiln/autograd.h"
#include "kiln/ops.h"
#include "kiln/optim.h"
#include "ops/dispatch.h"
#include "optim/update_utils.h"

namespace kiln::optim {

std::vector<OptimizerOptions::Field> SGDOptions::fields() {
  return {{"lr", &lr_},
          {"momentum", &momentum_},
          {"dampening", &dampening_},
          {"weight_decay", &weight_decay_},
          {"nesterov", nullptr, &nesterov_}};
}

SGD::SGD(std::vector<Tensor> params, SGDOptions options) : SGD({ParamGroup(std::move(params), options)}) {}

SGD::SGD(std::vector<ParamGroup> groups) : Optimizer(std::move(groups), "SGD") { mark_constructed(); }

void SGD::check_options(const OptimizerOptions &options) const {
  const auto &o = dynamic_cast<const SGDOptions &>(options);
  KILN_CHECK(o.lr_ >= 0.0, "SGD: invalid learning rate ", o.lr_, " (expected >= 0)");
  KILN_CHECK(o.momentum_ >= 0.0, "SGD: invalid momentum ", o.momentum_, " (expected >= 0)");
  KILN_CHECK(o.weight_decay_ >= 0.0, "SGD: invalid weight_decay ", o.weight_decay_, " (expected >= 0)");
  KILN_CHECK(!o.nesterov_ || (o.momentum_ > 0 && o.dampening_ == 0),
             "SGD: nesterov momentum requires a momentum and zero dampening, got momentum ", o.momentum_,
             " and dampening ", o.dampening_);
}

namespace {

/// Hyperparameters of one SGD update (float32, as the kernel computes).
struct SgdStep {
  float lr, wd, mom, one_minus_damp;
  bool nesterov;
};

/// One SGD step on the contiguous float32 p (in place) with gradient g; with
/// momentum, `buffer` is the momentum buffer (`first`: this step creates it).
using SgdKernel = void(const SgdStep &h, const Tensor &p, const Tensor &g, const Tensor &buffer, bool first);
dispatch::DispatchStub<SgdKernel> sgd_stub("sgd step");

void sgd_cpu(const SgdStep &h, const Tensor &p, const Tensor &g, const Tensor &buffer, bool first) {
  float *w = p.data_ptr<float>();
  const float *gp = g.data_ptr<float>();
  const int64_t n = p.numel();
  const float lr = h.lr, wd = h.wd, mom = h.mom, one_minus_damp = h.one_minus_damp;
  if (mom == 0.0f) {
    for (int64_t j = 0; j < n; ++j) w[j] -= lr * (gp[j] + wd * w[j]);
    return;
  }
  float *buf = buffer.data_ptr<float>();
  for (int64_t j = 0; j < n; ++j) {
    const float d = gp[j] + wd * w[j];
    buf[j] = first ? d : mom * buf[j] + one_minus_damp * d;
    const float update = h.nesterov ? d + mom * buf[j] : buf[j];
    w[j] -= lr * update;
  }
}
const dispatch::KernelRegistrar<SgdKernel> sgd_cpu_reg(sgd_stub, DeviceType::CPU, sgd_cpu);

/// CUDA: sgd_cpu's float32 arithmetic, in its order, as one generated kernel
/// that updates p (and the momentum buffer) in place.
void sgd_cuda(const SgdStep &h, const Tensor &p, const Tensor &grad, const Tensor &buffer, bool first) {
  using ir::OpKind;
  dispatch::GraphMaker g;
  const int w = g.input(p), gr = g.input(grad);
  auto c = [&](float value) { return g.constant(value, w); };
  auto mul = [&](int a, int b) { return g.binary(OpKind::Mul, a, b); };
  const int d = g.binary(OpKind::Add, gr, mul(c(h.wd), w));
  if (h.mom == 0.0f) {
    g.output(g.binary(OpKind::Sub, w, mul(c(h.lr), d)));
    g.run("sgd step", {p, grad}, {p});
    return;
  }
  const int b = g.input(buffer);
  const int b1 = first ? d : g.binary(OpKind::Add, mul(c(h.mom), b), mul(c(h.one_minus_damp), d));
  const int update = h.nesterov ? g.binary(OpKind::Add, d, mul(c(h.mom), b1)) : b1;
  g.output(g.binary(OpKind::Sub, w, mul(c(h.lr), update)));
  g.output(b1);
  g.run("sgd step", {p, grad, buffer}, {p, buffer});
}
const dispatch::KernelRegistrar<SgdKernel> sgd_cuda_reg(sgd_stub, DeviceType::CUDA, sgd_cuda);

}  // namespace

void SGD::step() {
  NoGradGuard no_grad;
  size_t index = 0;
  for (ParamGroup &group : param_groups()) {
    const auto &o = group.options_as<SGDOptions>();
    const SgdStep h{static_cast<float>(o.lr_), static_cast<float>(o.weight_decay_), static_cast<float>(o.momentum_),
                    static_cast<float>(1.0 - o.dampening_), o.nesterov_};
    for (Tensor &p : group.params) {
      std::map<std::string, Tensor> &st = state(index++);
      if (!p.grad().defined()) continue;
      Tensor g = dense_grad(p);
      Tensor buffer;
      bool first = false;
      if (h.mom != 0.0f) {
        Tensor &b = st["momentum_buffer"];
        first = !b.defined();
        if (first) b = zeros(p.sizes(), kFloat32, p.device());
        buffer = b;
      }
      dispatch::common_device("SGD", {&p, &g, &buffer});
      sgd_stub("SGD", p.device().type, h, p, g, buffer, first);
    }
  }
}

}  // namespace kiln::optim
