// onnx_models.h - the three models the ONNX tests export (issue 17): the
// digits MLP of kiln-train-digits, the GPT of examples/models/gpt.h at small
// sizes and the zoo CNN of examples/models/cnn.h, with seeded weights and
// non-trivial normalization parameters and statistics (so eval-mode
// BatchNorm and LayerNorm do more than the identity), plus example inputs at two batch sizes.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "kiln/kiln.h"
#include "models/cnn.h"
#include "models/gpt.h"

namespace kiln::onnx_test {

/// Most pointwise, comparison, division, reduction and indexing ops of Kiln
/// on one input, as one output: x [B, 6] float32 -> [B, 6 * pieces] (each
/// piece is [B, 6] or [B, 1]; integer pieces computed in int64, then cast).
class OpsCatalogue : public nn::Module {
public:
  Tensor forward(const Tensor &x) override {
    const Tensor y = x * -0.5 + 0.25, one5 = full(x.sizes(), 1.5);
    const Tensor xi = trunc(x * 10.0).to(kInt64), three = full(x.sizes(), 3.0, kInt64);
    auto f = [](const Tensor &t) { return t.to(kFloat32); };
    std::vector<Tensor> pieces = {
        abs(x), neg(x), sin(x), cos(x), tanh(x), erf(x), exp(x * 0.5), log(abs(x) + 1.0), sqrt(abs(x)),
        rsqrt(abs(x) + 1.0), relu(x), sigmoid(x), silu(x), gelu(x), gelu(x, "tanh"),
        floor(x * 3.0), ceil(x * 3.0), round(x * 3.0), trunc(x * 3.0), pow(x, 2.0), pow(abs(x) + 1.0, 0.5),
        maximum(x, y), minimum(x, y), clamp(x, -0.5, 0.5), x / y, x - y,
        remainder(x * 5.0, one5), fmod(x * 5.0, one5), floor_divide(x * 5.0, one5),
        f(remainder(xi, three)), f(fmod(xi, three)), f(floor_divide(xi, three)), f(div(xi, three, "trunc")),
        where(gt(x, y), x, y), f(ge(x, y)), f(lt(x, y)), f(eq(xi, three)), f(ne(xi, three)),
        masked_fill(x, lt(x, y), -1.0),
        cumsum(x, 1), f(argmax(x, 1, true)), f(argmin(x, 1, true)), amax(x, {1}, true), amin(x, {1}, true),
        sum(x, {1}, true), mean(x, {1}, true), var(x, {1}, 1, true),
        nn::functional::softmax(x, 1), nn::functional::log_softmax(x, 1),
        gather(x, 1, argmax(x, 1, true)), index_select(x, 1, tensor(std::vector<int64_t>{5, 0, 2, 2, 1, 3}, {6})),
        x.narrow(1, 1, 3), matmul(x, w_)};
    for (Tensor &p : pieces) p = p.reshape({x.size(0), -1});
    return cat(pieces, 1);
  }
  std::string name() const override { return "OpsCatalogue"; }

private:
  Tensor w_ = randn({6, 6});  ///< not registered: a captured constant (initializer "_const_<k>")
};

struct ModelCase {
  std::string name;
  std::shared_ptr<nn::Module> model;
  std::string input_name, output_name;
  Tensor input;          ///< at the export batch size
  Tensor other_input;    ///< at another batch size (the dynamic axis)
};

/// Gives BatchNorm running statistics and LayerNorm/BatchNorm affine
/// parameters seeded values other than their 0/1 defaults.
inline void perturb_normalization(nn::Module &m) {
  NoGradGuard no_grad;
  for (auto &[name, b] : m.named_buffers()) {
    auto ends = [&](const char *s) {
      return name.size() >= std::string(s).size() && name.rfind(s) == name.size() - std::string(s).size();
    };
    if (ends("running_mean")) b.copy_(randn(b.sizes()) * 0.2);
    if (ends("running_var")) b.copy_(uniform(b.sizes(), 0.5, 1.5));
  }
  for (auto &[name, p] : m.named_parameters())
    if (name.find("ln") != std::string::npos || name.find("bn") != std::string::npos)
      p.copy_(p + randn(p.sizes()) * 0.1);
}

/// `rows` rows of the UCI digits (pixels / 16) starting at row `first`: [rows, 64].
inline Tensor digits_rows(const std::string &data, int64_t first, int64_t rows) {
  static data::TensorDataset digits = data::load_digits(data);
  return digits.features.narrow(0, first, rows).to(kFloat32).contiguous() / 16.0;
}

inline ModelCase make_case(const std::string &name, const std::string &data_path) {
  manual_seed(17);
  ModelCase c;
  c.name = name;
  if (name == "mlp") {  // kiln-train-digits: 64 -> 128 -> 10
    c.model = std::make_shared<nn::Sequential>(std::initializer_list<std::shared_ptr<nn::Module>>{
        std::make_shared<nn::Linear>(64, 128), std::make_shared<nn::ReLU>(), std::make_shared<nn::Linear>(128, 10)});
    c.input_name = "pixels";
    c.output_name = "logits";
    c.input = digits_rows(data_path, 0, 8);
    c.other_input = digits_rows(data_path, 100, 5);
  } else if (name == "gpt") {  // vocab 65, context 16, 2 layers, d 32, 4 heads
    c.model = std::make_shared<models::GPT>(65, 16, 2, 32, 4, 0.1);
    c.input_name = "tokens";
    c.output_name = "logits";
    auto tokens = [](int64_t b, int64_t t, int64_t salt) {
      std::vector<int64_t> ids;
      for (int64_t i = 0; i < b * t; ++i) ids.push_back((i * 37 + salt * 11 + 5) % 65);
      return tensor(ids, {b, t});
    };
    c.input = tokens(3, 16, 0);
    c.other_input = tokens(5, 16, 1);
  } else if (name == "cnn") {  // the zoo CNN, 8 channels, on digits as [N, 1, 8, 8]
    c.model = std::make_shared<models::DigitsCNN>(8);
    c.input_name = "images";
    c.output_name = "logits";
    c.input = digits_rows(data_path, 0, 4).reshape({4, 1, 8, 8});
    c.other_input = digits_rows(data_path, 50, 7).reshape({7, 1, 8, 8});
    // Running statistics of real activations (one train-mode forward of 128
    // digits with momentum 1): eval-mode BatchNorm then really normalizes.
    NoGradGuard no_grad;
    auto momentum = [&](double m) {
      c.model->apply([m](nn::Module &mod) {
        if (auto *bn = dynamic_cast<nn::BatchNormBase *>(&mod)) bn->options.momentum(m);
      });
    };
    momentum(1.0);
    c.model->forward(digits_rows(data_path, 200, 128).reshape({128, 1, 8, 8}));
    momentum(0.1);
  } else if (name == "ops") {
    c.model = std::make_shared<OpsCatalogue>();
    c.input_name = "x";
    c.output_name = "y";
    c.input = randn({4, 6});
    c.other_input = randn({9, 6});
  } else {
    throw Error("onnx_models: unknown model '" + name + "'; expected mlp, gpt, cnn or ops");
  }
  if (name != "cnn") perturb_normalization(*c.model);
  c.model->eval();
  return c;
}

}  // namespace kiln::onnx_test
