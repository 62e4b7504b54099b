// torch.nn.init: in-place initialisers drawing from the default generator.
//
// Samples are computed in double on the host and copied into the tensor
// (converted to its dtype) under NoGradGuard.
#include "kiln/init.h"

#include <cmath>
#include <functional>
#include <vector>

#include "kiln/autograd.h"
#include "kiln/random.h"

namespace kiln::nn::init {

namespace {

void check_float(const Tensor &t, const char *fn) {
  KILN_CHECK(t.defined(), fn, ": tensor is undefined");
  KILN_CHECK(t.is_floating_point(), fn, ": expected a floating point tensor, got ", dtype_name(t.dtype()));
}

/// Fills `t` with draw() for every element (row-major) under NoGradGuard.
Tensor &fill_with(Tensor &t, const std::function<double()> &draw) {
  if (t.numel() == 0) return t;
  std::vector<double> values(static_cast<size_t>(t.numel()));
  for (double &v : values) v = draw();
  Tensor src = Tensor::empty(t.sizes(), kFloat64);
  std::copy(values.begin(), values.end(), src.data_ptr<double>());
  NoGradGuard no_grad;
  t.copy_(src);
  return t;
}

/// Uniform in (0, 1]: never 0, so log() is finite.
double open_uniform() { return 1.0 - static_cast<double>(default_generator().next_uniform()); }

/// One standard normal sample (Box-Muller, one of the pair).
double standard_normal() {
  const double u1 = open_uniform(), u2 = open_uniform();
  return std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * M_PI * u2);
}

double normal_cdf(double x) { return 0.5 * std::erfc(-x / std::sqrt(2.0)); }

/// Inverse of the standard normal CDF for p in (0, 1): Acklam's rational
/// approximation refined by two Newton steps on erfc (error ~1e-15).
double normal_icdf(double p) {
  static const double a[] = {-3.969683028665376e+01, 2.209460984245205e+02, -2.759285104469687e+02,
                             1.383577518672690e+02,  -3.066479806614716e+01, 2.506628277459239e+00};
  static const double b[] = {-5.447609879822406e+01, 1.615858368580409e+02, -1.556989798598866e+02,
                             6.680131188771972e+01,  -1.328068155288572e+01};
  static const double c[] = {-7.784894002430293e-03, -3.223964580411365e-01, -2.400758277161838e+00,
                             -2.549732539343734e+00, 4.374664141464968e+00,  2.938163982698783e+00};
  static const double d[] = {7.784695709041462e-03, 3.224671290700398e-01, 2.445134137142996e+00,
                             3.754408661907416e+00};
  double x;
  if (p < 0.02425) {
    const double q = std::sqrt(-2 * std::log(p));
    x = (((((c[0] * q + c[1]) * q + c[2]) * q + c[3]) * q + c[4]) * q + c[5]) /
        ((((d[0] * q + d[1]) * q + d[2]) * q + d[3]) * q + 1);
  } else if (p > 1 - 0.02425) {
    const double q = std::sqrt(-2 * std::log(1 - p));
    x = -(((((c[0] * q + c[1]) * q + c[2]) * q + c[3]) * q + c[4]) * q + c[5]) /
        ((((d[0] * q + d[1]) * q + d[2]) * q + d[3]) * q + 1);
  } else {
    const double q = p - 0.5, r = q * q;
    x = (((((a[0] * r + a[1]) * r + a[2]) * r + a[3]) * r + a[4]) * r + a[5]) * q /
        (((((b[0] * r + b[1]) * r + b[2]) * r + b[3]) * r + b[4]) * r + 1);
  }
  for (int i = 0; i < 2; ++i) {
    const double pdf = std::exp(-0.5 * x * x) / std::sqrt(2 * M_PI);
    if (pdf <= 0) break;
    x -= (normal_cdf(x) - p) / pdf;
  }
  return x;
}

int64_t fan_for(const Tensor &t, const std::string &mode, const char *fn) {
  KILN_CHECK(mode == "fan_in" || mode == "fan_out", fn, ": mode must be 'fan_in' or 'fan_out', got '", mode, "'");
  auto [fan_in, fan_out] = calculate_fan_in_and_fan_out(t);
  return mode == "fan_in" ? fan_in : fan_out;
}

}  // namespace

double calculate_gain(const std::string &nonlinearity, std::optional<double> param) {
  static const char *unit_gain[] = {"linear",           "conv1d",           "conv2d",          "conv3d",
                                    "conv_transpose1d", "conv_transpose2d", "conv_transpose3d", "sigmoid"};
  for (const char *n : unit_gain)
    if (nonlinearity == n) return 1.0;
  if (nonlinearity == "tanh") return 5.0 / 3.0;
  if (nonlinearity == "relu") return std::sqrt(2.0);
  if (nonlinearity == "leaky_relu") {
    const double slope = param.value_or(0.01);
    return std::sqrt(2.0 / (1.0 + slope * slope));
  }
  if (nonlinearity == "selu") return 3.0 / 4.0;
  throw Error("calculate_gain: unsupported nonlinearity '" + nonlinearity + "'");
}

std::pair<int64_t, int64_t> calculate_fan_in_and_fan_out(const Tensor &t) {
  KILN_CHECK(t.defined() && t.dim() >= 2,
             "calculate_fan_in_and_fan_out: fan in and fan out can not be computed for a tensor with fewer than 2 "
             "dimensions, got shape ",
             t.defined() ? shape_str(t.sizes()) : std::string("undefined"));
  int64_t receptive = 1;
  for (int64_t d = 2; d < t.dim(); ++d) receptive *= t.size(d);
  return {t.size(1) * receptive, t.size(0) * receptive};
}

Tensor &uniform_(Tensor &t, double a, double b) {
  check_float(t, "uniform_");
  KILN_CHECK(a <= b, "uniform_: expected a <= b, got a=", a, " b=", b);
  return fill_with(t, [a, b] { return a + (b - a) * static_cast<double>(default_generator().next_uniform()); });
}

Tensor &normal_(Tensor &t, double mean, double std) {
  check_float(t, "normal_");
  KILN_CHECK(std >= 0, "normal_: expected std >= 0, got ", std);
  return fill_with(t, [mean, std] { return mean + std * standard_normal(); });
}

Tensor &trunc_normal_(Tensor &t, double mean, double std, double a, double b) {
  check_float(t, "trunc_normal_");
  KILN_CHECK(std > 0, "trunc_normal_: expected std > 0, got ", std);
  KILN_CHECK(a < b, "trunc_normal_: expected a < b, got a=", a, " b=", b);
  // Sample the CDF between the (standardised) bounds and invert it.
  const double lo = normal_cdf((a - mean) / std), hi = normal_cdf((b - mean) / std);
  return fill_with(t, [=] {
    double p = lo + (hi - lo) * static_cast<double>(default_generator().next_uniform());
    p = std::min(std::max(p, 1e-300), 1.0 - 1e-16);
    const double x = mean + std * normal_icdf(p);
    return std::min(std::max(x, a), b);
  });
}

Tensor &constant_(Tensor &t, double value) {
  check_float(t, "constant_");
  if (t.numel() == 0) return t;
  NoGradGuard no_grad;
  t.fill_(value);
  return t;
}

Tensor &zeros_(Tensor &t) { return constant_(t, 0.0); }
Tensor &ones_(Tensor &t) { return constant_(t, 1.0); }

Tensor &xavier_uniform_(Tensor &t, double gain) {
  check_float(t, "xavier_uniform_");
  auto [fan_in, fan_out] = calculate_fan_in_and_fan_out(t);
  const double bound = gain * std::sqrt(6.0 / static_cast<double>(fan_in + fan_out));
  return uniform_(t, -bound, bound);
}

Tensor &xavier_normal_(Tensor &t, double gain) {
  check_float(t, "xavier_normal_");
  auto [fan_in, fan_out] = calculate_fan_in_and_fan_out(t);
  return normal_(t, 0.0, gain * std::sqrt(2.0 / static_cast<double>(fan_in + fan_out)));
}

Tensor &kaiming_uniform_(Tensor &t, double a, const std::string &mode, const std::string &nonlinearity) {
  check_float(t, "kaiming_uniform_");
  const int64_t fan = fan_for(t, mode, "kaiming_uniform_");
  if (t.numel() == 0) return t;
  const double bound = std::sqrt(3.0) * calculate_gain(nonlinearity, a) / std::sqrt(static_cast<double>(fan));
  return uniform_(t, -bound, bound);
}

Tensor &kaiming_normal_(Tensor &t, double a, const std::string &mode, const std::string &nonlinearity) {
  check_float(t, "kaiming_normal_");
  const int64_t fan = fan_for(t, mode, "kaiming_normal_");
  if (t.numel() == 0) return t;
  return normal_(t, 0.0, calculate_gain(nonlinearity, a) / std::sqrt(static_cast<double>(fan)));
}

}  // namespace kiln::nn::init
