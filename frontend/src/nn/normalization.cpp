// layer_norm and batch_norm as composites of differentiable ops (mean, sub,
// mul, sqrt, div), so autograd needs no formulas of their own; batch_norm's
// running-statistics update is an in-place update of buffers under no_grad,
// which kiln::compile captures (trace::functionalizes). float16 and
// bfloat16 inputs are normalized in float32 (as PyTorch's CPU kernels) and
// the result converted back.
#include <string>

#include "kiln/autograd.h"
#include "kiln/functional.h"
#include "../amp/autocast.h"
#include "../ops/fused.h"

namespace kiln::nn::functional {
namespace {

bool is_half(DType t) { return t == kFloat16 || t == kBFloat16; }
DType compute_type(DType t) { return is_half(t) ? kFloat32 : t; }

std::string shape_or_undefined(const Tensor &t) { return t.defined() ? shape_str(t.sizes()) : "undefined"; }

void check_float_input(const Tensor &x, const char *op) {
  KILN_CHECK(x.defined(), op, ": input is an undefined tensor");
  KILN_CHECK(x.is_floating_point(), op, ": expected a floating point input, got ", dtype_name(x.dtype()));
}

/// An optional per-feature tensor (weight, bias, running stat) must have `shape`.
void check_affine(const Tensor &t, const Shape &shape, const char *op, const char *what) {
  if (!t.defined())
    return;
  KILN_CHECK(t.sizes() == shape, op, ": expected ", what, " of shape ", shape_str(shape), ", got ",
             shape_str(t.sizes()));
  KILN_CHECK(t.is_floating_point(), op, ": expected a floating point ", what, ", got ", dtype_name(t.dtype()));
}

/// (x - mean) / sqrt(var + eps) over `dims` with the biased variance; also
/// returns the batch mean and variance (keepdim) for running statistics.
struct Normalized {
  Tensor y, mean, var;
};
Normalized normalize(const Tensor &x, const Shape &dims, double eps) {
  Tensor mu = mean(x, dims, /*keepdim=*/true);
  Tensor centered = x - mu;
  Tensor var = mean(centered * centered, dims, /*keepdim=*/true);
  return {centered / sqrt(var + eps), mu, var};
}

/// batch_norm's training statistics in one pass over x: the sums of x and of
/// x * x over `dims` read the same data, so kiln-fuse merges the two
/// reductions into one kernel (sibling fusion) where the two-pass form
/// (mean, then the mean of (x - mean)^2) needs two. mean = E[x], var =
/// E[x^2] - E[x]^2 (biased), as cuDNN's and Apex's one-pass batch norm.
Normalized normalize_one_pass(const Tensor &x, const Shape &dims, double eps, int64_t count) {
  const double inv = 1.0 / static_cast<double>(count);
  Tensor mu = sum(x, dims, /*keepdim=*/true) * inv;
  Tensor var = sum(x * x, dims, /*keepdim=*/true) * inv - mu * mu;
  return {(x - mu) / sqrt(var + eps), mu, var};
}

/// y * weight + bias, each optional, converted to y's dtype and viewed as `shape`.
Tensor affine(Tensor y, const Tensor &weight, const Tensor &bias, const Shape &shape) {
  if (weight.defined())
    y = y * weight.to(y.dtype()).reshape(shape);
  if (bias.defined())
    y = y + bias.to(y.dtype()).reshape(shape);
  return y;
}

/// running = (1 - momentum) * running + momentum * batch, in place, no autograd.
void update_running(const Tensor &running, const Tensor &batch, double momentum) {
  if (!running.defined())
    return;
  NoGradGuard no_grad;
  Tensor r = running;
  r.mul_(1.0 - momentum);
  r.add_(batch.detach().reshape(running.sizes()).to(running.dtype()), momentum);
}

} // namespace

Tensor layer_norm(const Tensor &x, const Shape &normalized_shape, const Tensor &weight, const Tensor &bias,
                  double eps) {
  amp::detail::AutocastOp ac("layer_norm");
  if (ac)
    return layer_norm(ac.cast(x), normalized_shape, ac.cast(weight), ac.cast(bias), eps);
  check_float_input(x, "layer_norm");
  const int64_t k = static_cast<int64_t>(normalized_shape.size());
  KILN_CHECK(k >= 1 && k <= x.dim(), "layer_norm: normalized_shape ", shape_str(normalized_shape),
             " must have between 1 and ", x.dim(), " dims for input of shape ", shape_str(x.sizes()));
  const Shape tail(x.sizes().end() - k, x.sizes().end());
  KILN_CHECK(tail == normalized_shape, "layer_norm: input of shape ", shape_str(x.sizes()),
             " does not end in normalized_shape ", shape_str(normalized_shape));
  check_affine(weight, normalized_shape, "layer_norm", "weight");
  check_affine(bias, normalized_shape, "layer_norm", "bias");
  KILN_CHECK(eps >= 0.0, "layer_norm: eps must be >= 0, got ", eps);
  auto same_dtype = [&](const Tensor &t) { return !t.defined() || t.dtype() == x.dtype(); };
  if (fused::applies(x) && same_dtype(weight) && same_dtype(bias))
    return fused::layer_norm(x, k, weight, bias, eps);  // untraced eager: one kernel
  Shape dims;
  for (int64_t d = x.dim() - k; d < x.dim(); ++d)
    dims.push_back(d);
  Tensor y = normalize(x.to(compute_type(x.dtype())), dims, eps).y;
  return affine(y, weight, bias, normalized_shape).to(x.dtype());
}

Tensor batch_norm(const Tensor &x, const Tensor &running_mean, const Tensor &running_var, const Tensor &weight,
                  const Tensor &bias, bool training, double momentum, double eps) {
  // The running statistics are state updated in place: never cast (a cast
  // would update a copy); the update converts to their dtype itself.
  amp::detail::AutocastOp ac("batch_norm");
  if (ac)
    return batch_norm(ac.cast(x), running_mean, running_var, ac.cast(weight), ac.cast(bias), training, momentum, eps);
  check_float_input(x, "batch_norm");
  KILN_CHECK(x.dim() >= 2, "batch_norm: expected an input of shape [N, C] or [N, C, *], got ", shape_str(x.sizes()));
  const int64_t channels = x.size(1);
  const Shape per_channel{channels};
  check_affine(running_mean, per_channel, "batch_norm", "running_mean");
  check_affine(running_var, per_channel, "batch_norm", "running_var");
  check_affine(weight, per_channel, "batch_norm", "weight");
  check_affine(bias, per_channel, "batch_norm", "bias");
  KILN_CHECK(eps >= 0.0, "batch_norm: eps must be >= 0, got ", eps);
  Shape dims{0}, bshape(static_cast<size_t>(x.dim()), 1);
  for (int64_t d = 2; d < x.dim(); ++d)
    dims.push_back(d);
  bshape[1] = channels;
  const Tensor xc = x.to(compute_type(x.dtype()));
  Tensor y;
  if (training) {
    const int64_t count = channels == 0 ? 0 : x.numel() / channels;
    KILN_CHECK(count > 1, "batch_norm: expected more than 1 value per channel when training, got input of shape ",
               shape_str(x.sizes()));
    Normalized n = normalize_one_pass(xc, dims, eps, count);
    update_running(running_mean, n.mean, momentum);
    // The running variance uses the unbiased batch variance (as PyTorch).
    const double bessel = static_cast<double>(count) / static_cast<double>(count - 1);
    if (running_var.defined())
      update_running(running_var, n.var.detach() * bessel, momentum);
    y = n.y;
  } else {
    KILN_CHECK(running_mean.defined() && running_var.defined(),
               "batch_norm: running_mean and running_var are required in eval mode (training = false), got ",
               shape_or_undefined(running_mean), " and ", shape_or_undefined(running_var));
    Tensor mu = running_mean.to(xc.dtype()).reshape(bshape);
    Tensor var = running_var.to(xc.dtype()).reshape(bshape);
    y = (xc - mu) / sqrt(var + eps);
  }
  return affine(y, weight, bias, bshape).to(x.dtype());
}

} // namespace kiln::nn::functional
