// GradScaler: PyTorch 1.13's torch.cuda.amp.GradScaler state machine
// (torch/cuda/amp/grad_scaler.py) with its two CUDA kernels written for CPU
// tensors: _amp_foreach_non_finite_check_and_unscale_ (unscale_grads) and
// _amp_update_scale_ (update(); aten/src/ATen/native/cuda/AmpKernels.cu).
#include <cmath>

#include "kiln/amp.h"
#include "kiln/ops.h"
#include "kiln/optim.h"
#include "ops/dispatch.h"
#include "ops/kernels.h"
#include "ops/shape_utils.h"

namespace kiln::amp {
namespace {

void check_factors(double init_scale, double growth_factor, double backoff_factor, int64_t growth_interval,
                   const char *where) {
  KILN_CHECK(std::isfinite(init_scale) && init_scale > 0.0, where, ": init_scale must be finite and > 0, got ",
             init_scale);
  KILN_CHECK(growth_factor > 1.0 && std::isfinite(growth_factor), where,
             ": growth_factor must be finite and > 1, got ", growth_factor);
  KILN_CHECK(backoff_factor > 0.0 && backoff_factor < 1.0, where, ": backoff_factor must be in (0, 1), got ",
             backoff_factor);
  KILN_CHECK(growth_interval >= 1, where, ": growth_interval must be >= 1, got ", growth_interval);
}

/// g *= inv_scale in place (computed in float for float32/bfloat16, double
/// for float64, as PyTorch's opmath); returns whether g held inf or NaN.
/// PyTorch's _amp_foreach_non_finite_check_and_unscale_ for one tensor: the
/// cpu entry of the "amp unscale" table.
bool unscale_grad_cpu(const Tensor &g, float inv_scale) {
  bool found = false;
  char *base = kernels::storage_base(g);
  const DType t = g.dtype();
  kernels::for_each_row<1>(g.sizes(), {&g.strides()}, {g.storage_offset()},
                           [&](std::array<int64_t, 1> off, int64_t n, std::array<int64_t, 1> s) {
    if (t == kFloat32) {
      float *p = reinterpret_cast<float *>(base) + off[0];
      for (int64_t i = 0; i < n; ++i) {
        float &v = p[i * s[0]];
        found |= !std::isfinite(v);
        v *= inv_scale;
      }
      return;
    }
    for (int64_t i = 0; i < n; ++i) {
      const int64_t o = off[0] + i * s[0];
      const double v = kernels::load_as_double(base, t, o);
      found |= !std::isfinite(v);
      const double scaled = t == kFloat64 ? v * static_cast<double>(inv_scale)
                                          : static_cast<double>(static_cast<float>(v) * inv_scale);
      kernels::store_from_double(base, t, o, scaled);
    }
  });
  return found;
}

using UnscaleKernel = bool(const Tensor &g, float inv_scale);
dispatch::DispatchStub<UnscaleKernel> unscale_stub("amp unscale");
const dispatch::KernelRegistrar<UnscaleKernel> unscale_cpu_reg(unscale_stub, DeviceType::CPU, unscale_grad_cpu);

/// CUDA: one reduction kernel for "all finite" (min over (x - x == 0):
/// inf - inf and NaN - NaN are NaN, which compares unequal), read back to
/// the host (a synchronization; PyTorch keeps found_inf on the device), then
/// one kernel scaling g in place with unscale_grad_cpu's rounding.
bool unscale_grad_cuda(const Tensor &g, float inv_scale) {
  KILN_CHECK(g.is_contiguous(), "GradScaler.unscale_: a non-contiguous ", g.device().str(), " gradient (strides ",
             shape_str(g.strides()), ") is not supported yet");
  if (g.numel() == 0) return false;
  const Tensor flat = shape_utils::strided_view(g, {g.numel()}, {1}, g.storage_offset());
  const Tensor finite = Tensor::empty({}, kFloat32, g.device());
  {
    dispatch::GraphMaker r;
    const int x = r.input(flat);
    const int same = r.compare(ir::Predicate::EQ, r.binary(ir::OpKind::Sub, x, x), r.constant(0.0, x));
    r.output(r.node(dispatch::graph_node(ir::OpKind::ReduceMin, {0}), {r.convert(same, kFloat32)}, {},
                    ir::ElementType::F32));
    r.run("GradScaler.unscale_", {flat}, {finite});
  }
  const bool found = finite.cpu().item() == 0.0;
  dispatch::GraphMaker m;
  const DType compute = g.dtype() == kFloat64 ? kFloat64 : kFloat32;
  const int x = m.convert(m.input(flat), compute);
  m.output(m.convert(m.binary(ir::OpKind::Mul, x, m.constant(inv_scale, x)), g.dtype()));
  m.run("GradScaler.unscale_", {flat}, {flat});
  return found;
}
const dispatch::KernelRegistrar<UnscaleKernel> unscale_cuda_reg(unscale_stub, DeviceType::CUDA, unscale_grad_cuda);

/// g *= inv_scale in place through g's device kernel; whether g held inf or NaN.
bool unscale_grad(const Tensor &g, float inv_scale) {
  const bool found = unscale_stub("GradScaler.unscale_", g.device().type, g, inv_scale);
  g.bump_version();
  return found;
}

}  // namespace

GradScaler::GradScaler(GradScalerOptions o)
    : enabled_(o.enabled_), init_scale_(o.init_scale_), growth_factor_(o.growth_factor_),
      backoff_factor_(o.backoff_factor_), growth_interval_(o.growth_interval_) {
  if (enabled_) check_factors(init_scale_, growth_factor_, backoff_factor_, growth_interval_, "GradScaler");
}

void GradScaler::check_initialized(const char *method) const {
  KILN_CHECK(initialized_, "GradScaler.", method, ": attempted ", method, " but the scale is not set yet. This may "
             "indicate your script did not use scaler.scale(loss or outputs) earlier in the iteration");
}

Tensor GradScaler::scale(const Tensor &outputs) {
  if (!enabled_) return outputs;
  KILN_CHECK(outputs.defined(), "GradScaler.scale: outputs is an undefined tensor");
  KILN_CHECK(outputs.is_floating_point(), "GradScaler.scale: expected a floating point tensor, got ",
             dtype_name(outputs.dtype()));
  if (!initialized_) {
    scale_ = static_cast<float>(init_scale_);
    initialized_ = true;
  }
  return outputs * full({1}, scale_, kFloat32, outputs.device());
}

std::vector<Tensor> GradScaler::scale(const std::vector<Tensor> &outputs) {
  std::vector<Tensor> out;
  out.reserve(outputs.size());
  for (const Tensor &t : outputs) out.push_back(scale(t));
  return out;
}

void GradScaler::unscale_(optim::Optimizer &optimizer) {
  if (!enabled_) return;
  check_initialized("unscale_");
  OptimizerState &st = per_optimizer_[&optimizer];
  KILN_CHECK(st.stage != Stage::Unscaled,
             "GradScaler.unscale_: unscale_() has already been called on this optimizer since the last update()");
  KILN_CHECK(st.stage != Stage::Stepped, "GradScaler.unscale_: unscale_() is being called after step()");
  // The reciprocal in double, then float (as PyTorch: FP32 division can be
  // imprecise for some compile options).
  const float inv_scale = static_cast<float>(1.0 / static_cast<double>(scale_));
  const std::vector<Tensor> params = optimizer.params();
  for (size_t i = 0; i < params.size(); ++i) {
    Tensor g = params[i].grad();
    if (g.defined())
      KILN_CHECK(g.dtype() != kFloat16, "GradScaler.unscale_: Attempting to unscale FP16 gradients (parameter ", i,
                 " has a float16 gradient; keep float32 master parameters)");
  }
  bool found = false;
  for (const Tensor &p : params)
    if (Tensor g = p.grad(); g.defined()) found |= unscale_grad(g, inv_scale);
  st.found_inf = found;
  st.checked = true;
  st.stage = Stage::Unscaled;
}

bool GradScaler::step(optim::Optimizer &optimizer) {
  if (!enabled_) {
    optimizer.step();
    return true;
  }
  check_initialized("step");
  KILN_CHECK(per_optimizer_[&optimizer].stage != Stage::Stepped,
             "GradScaler.step: step() has already been called since the last update()");
  if (per_optimizer_[&optimizer].stage == Stage::Ready) unscale_(optimizer);
  OptimizerState &st = per_optimizer_[&optimizer];
  const bool run = !st.found_inf;
  if (run) optimizer.step();
  st.stage = Stage::Stepped;
  return run;
}

void GradScaler::update(std::optional<double> new_scale) {
  if (!enabled_) return;
  check_initialized("update");
  if (new_scale) {
    KILN_CHECK(std::isfinite(*new_scale) && *new_scale > 0.0, "GradScaler.update: new_scale must be finite and > 0, got ",
               *new_scale);
    scale_ = static_cast<float>(*new_scale);
  } else {
    bool any_checked = false, found_inf = false;
    for (const auto &[opt, st] : per_optimizer_) {
      any_checked |= st.checked;
      found_inf |= st.found_inf;
    }
    KILN_CHECK(any_checked, "GradScaler.update: No inf checks were recorded prior to update (call step(optimizer) "
               "or unscale_(optimizer) first)");
    // _amp_update_scale_ (AmpKernels.cu): the products are taken in double
    // and stored in the float32 scale.
    if (found_inf) {
      scale_ = static_cast<float>(static_cast<double>(scale_) * backoff_factor_);
      growth_tracker_ = 0;
    } else {
      const int64_t successful = growth_tracker_ + 1;
      if (successful == growth_interval_) {
        const float grown = static_cast<float>(static_cast<double>(scale_) * growth_factor_);
        if (std::isfinite(grown)) scale_ = grown;  // never grow past float32's range to inf
        growth_tracker_ = 0;
      } else {
        growth_tracker_ = successful;
      }
    }
  }
  per_optimizer_.clear();
}

double GradScaler::get_scale() const {
  if (!enabled_) return 1.0;
  return initialized_ ? static_cast<double>(scale_) : init_scale_;
}

void GradScaler::set_growth_factor(double v) {
  check_factors(get_scale(), v, backoff_factor_, growth_interval_, "GradScaler.set_growth_factor");
  growth_factor_ = v;
}

void GradScaler::set_backoff_factor(double v) {
  check_factors(get_scale(), growth_factor_, v, growth_interval_, "GradScaler.set_backoff_factor");
  backoff_factor_ = v;
}

void GradScaler::set_growth_interval(int64_t v) {
  check_factors(get_scale(), growth_factor_, backoff_factor_, v, "GradScaler.set_growth_interval");
  growth_interval_ = v;
}

std::map<std::string, double> GradScaler::state_dict() const {
  if (!enabled_) return {};
  return {{"scale", get_scale()},
          {"growth_factor", growth_factor_},
          {"backoff_factor", backoff_factor_},
          {"growth_interval", static_cast<double>(growth_interval_)},
          {"_growth_tracker", static_cast<double>(growth_tracker_)}};
}

void GradScaler::load_state_dict(const std::map<std::string, double> &state) {
  if (!enabled_) return;
  KILN_CHECK(!state.empty(), "GradScaler.load_state_dict: The source state dict is empty, possibly because it was "
             "saved from a disabled instance of GradScaler");
  auto get = [&](const char *key) {
    auto it = state.find(key);
    KILN_CHECK(it != state.end(), "GradScaler.load_state_dict: missing key '", key,
               "' (expected scale, growth_factor, backoff_factor, growth_interval, _growth_tracker)");
    return it->second;
  };
  const double scale = get("scale"), growth = get("growth_factor"), backoff = get("backoff_factor");
  const double interval = get("growth_interval"), tracker = get("_growth_tracker");
  KILN_CHECK(interval == std::floor(interval) && tracker == std::floor(tracker) && tracker >= 0.0,
             "GradScaler.load_state_dict: growth_interval and _growth_tracker must be non-negative integers, got ",
             interval, " and ", tracker);
  check_factors(scale, growth, backoff, static_cast<int64_t>(interval), "GradScaler.load_state_dict");
  growth_factor_ = growth;
  backoff_factor_ = backoff;
  growth_interval_ = static_cast<int64_t>(interval);
  growth_tracker_ = static_cast<int64_t>(tracker);
  if (initialized_) scale_ = static_cast<float>(scale);
  else init_scale_ = scale;
}

}  // namespace kiln::amp
