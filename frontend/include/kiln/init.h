// kiln/init.h - parameter initialisation (torch.nn.init).
//
// Every function fills its tensor in place under NoGradGuard (so it works on
// parameters that require grad), draws from the default generator (see
// random.h; the numbers differ from PyTorch's CPU mt19937 stream, the
// distributions are the same), returns the tensor, and leaves a zero-element
// tensor untouched. Floating point tensors only; anything else throws
// kiln::Error naming the function and the dtype.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <utility>

#include "kiln/tensor.h"

namespace kiln::nn::init {

/// The recommended gain for a nonlinearity (torch.nn.init.calculate_gain):
/// "linear", "conv1d", "conv2d", "conv3d", "conv_transpose1d/2d/3d",
/// "sigmoid" -> 1; "tanh" -> 5/3; "relu" -> sqrt(2); "leaky_relu" ->
/// sqrt(2 / (1 + slope^2)) with slope = param (default 0.01); "selu" -> 3/4.
/// Throws kiln::Error on an unknown name.
double calculate_gain(const std::string &nonlinearity, std::optional<double> param = std::nullopt);

/// (fan_in, fan_out) as torch.nn.init._calculate_fan_in_and_fan_out: for a
/// weight [out, in, *kernel], fan_in = in * prod(kernel) and fan_out =
/// out * prod(kernel). Throws kiln::Error for fewer than 2 dimensions.
std::pair<int64_t, int64_t> calculate_fan_in_and_fan_out(const Tensor &t);

/// U(a, b). Throws unless a <= b.
Tensor &uniform_(Tensor &t, double a = 0.0, double b = 1.0);
/// N(mean, std^2). Throws if std < 0.
Tensor &normal_(Tensor &t, double mean = 0.0, double std = 1.0);
/// N(mean, std^2) truncated to [a, b] (inverse-CDF sampling, as PyTorch):
/// every value lies in [a, b]. Throws unless a < b and std > 0.
Tensor &trunc_normal_(Tensor &t, double mean = 0.0, double std = 1.0, double a = -2.0, double b = 2.0);
/// Fills with `value`.
Tensor &constant_(Tensor &t, double value);
Tensor &zeros_(Tensor &t);
Tensor &ones_(Tensor &t);

/// Glorot & Bengio 2010, "Understanding the difficulty of training deep
/// feedforward neural networks": U(-bound, bound) with
/// bound = gain * sqrt(6 / (fan_in + fan_out)). Needs >= 2 dimensions.
Tensor &xavier_uniform_(Tensor &t, double gain = 1.0);
/// Same paper: N(0, std^2) with std = gain * sqrt(2 / (fan_in + fan_out)).
Tensor &xavier_normal_(Tensor &t, double gain = 1.0);

/// He et al. 2015, "Delving deep into rectifiers": U(-bound, bound) with
/// bound = sqrt(3) * gain / sqrt(fan), gain = calculate_gain(nonlinearity, a),
/// fan = fan_in (mode "fan_in", the default) or fan_out (mode "fan_out").
/// a is the negative slope of leaky_relu. PyTorch's Linear/Conv default init
/// is kaiming_uniform_(w, sqrt(5)), i.e. bound = 1 / sqrt(fan_in).
/// Throws on an unknown mode or nonlinearity, or fewer than 2 dimensions.
Tensor &kaiming_uniform_(Tensor &t, double a = 0.0, const std::string &mode = "fan_in",
                         const std::string &nonlinearity = "leaky_relu");
/// Same paper: N(0, std^2) with std = gain / sqrt(fan).
Tensor &kaiming_normal_(Tensor &t, double a = 0.0, const std::string &mode = "fan_in",
                        const std::string &nonlinearity = "leaky_relu");

}  // namespace kiln::nn::init
