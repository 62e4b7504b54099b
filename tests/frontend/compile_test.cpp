// kiln::compile against eager execution: same losses, same gradients.
#include <cmath>

#include <gtest/gtest.h>

#include "kiln/kiln.h"

namespace kiln {
namespace {

std::shared_ptr<nn::Sequential> make_mlp(uint64_t seed) {
  manual_seed(seed);
  return std::make_shared<nn::Sequential>(std::initializer_list<std::shared_ptr<nn::Module>>{
      std::make_shared<nn::Linear>(64, 128), std::make_shared<nn::ReLU>(), std::make_shared<nn::Linear>(128, 10)});
}

data::TensorDataset digits() { return data::load_digits(std::string(KILN_SOURCE_DIR) + "/data/digits.csv.gz"); }

/// Trains `steps` AdamW steps on fixed batches and returns the losses.
std::vector<double> train(nn::Module &model, const data::TensorDataset &ds, int steps) {
  optim::AdamW opt(model.parameters(), optim::AdamWOptions(1e-3));
  data::DataLoader loader(ds, 64, /*shuffle=*/true, /*seed=*/3);
  std::vector<double> losses;
  while (static_cast<int>(losses.size()) < steps) {
    for (auto &[x, y] : loader.epoch()) {
      if (static_cast<int>(losses.size()) == steps) break;
      opt.zero_grad();
      Tensor loss = nn::functional::cross_entropy(model.forward(x), y);
      loss.backward();
      opt.step();
      losses.push_back(loss.item());
    }
  }
  return losses;
}

TEST(Compile, LossesMatchEagerFor50Steps) {
  auto ds = digits();
  auto eager_model = make_mlp(11);
  auto compiled_model = compile(make_mlp(11));
  auto eager = train(*eager_model, ds, 50);
  auto compiled = train(*compiled_model, ds, 50);
  ASSERT_EQ(eager.size(), 50u);
  for (size_t i = 0; i < eager.size(); ++i)
    EXPECT_NEAR(compiled[i], eager[i], 1e-4 * std::abs(eager[i])) << "step " << i;
  EXPECT_LT(eager.back(), eager.front());  // it learned something
  // Batches of 64 plus one ragged last batch: at most two artifacts.
  EXPECT_LE(compiled_model->stats().compiles, 2);
  EXPECT_GE(compiled_model->stats().cache_hits, 45);
}

TEST(Compile, GradientsMatchEager) {
  auto ds = digits();
  Tensor x = data::index_rows(ds.features, {0, 1, 2, 3, 4, 5, 6, 7});
  Tensor y = data::index_rows(ds.labels, {0, 1, 2, 3, 4, 5, 6, 7});
  auto eager_model = make_mlp(5);
  auto compiled_model = compile(make_mlp(5));
  for (int call = 0; call < 2; ++call) {  // the trace call and a cached call
    eager_model->zero_grad();
    compiled_model->zero_grad();
    nn::functional::cross_entropy(eager_model->forward(x), y).backward();
    Tensor out = compiled_model->forward(x);
    EXPECT_EQ(out.grad_fn()->name(), "CompiledFunctionBackward");
    nn::functional::cross_entropy(out, y).backward();
    auto pe = eager_model->named_parameters(), pc = compiled_model->named_parameters();
    ASSERT_EQ(pe.size(), pc.size());
    for (size_t i = 0; i < pe.size(); ++i) {
      EXPECT_EQ(pc[i].first, "_orig_mod." + pe[i].first);
      auto ge = pe[i].second.grad().to_vector<double>(), gc = pc[i].second.grad().to_vector<double>();
      ASSERT_EQ(ge.size(), gc.size());
      for (size_t k = 0; k < ge.size(); ++k) EXPECT_NEAR(gc[k], ge[k], 1e-5 + 1e-4 * std::abs(ge[k])) << pe[i].first;
    }
  }
}

TEST(Compile, InputGradientAndNoGradInference) {
  auto model = make_mlp(2);
  auto compiled = compile(make_mlp(2));
  manual_seed(9);
  Tensor x = randn({4, 64});
  Tensor xe = x.clone().requires_grad_(), xc = x.clone().requires_grad_();
  model->forward(xe).sum().backward();
  compiled->forward(xc).sum().backward();
  auto ge = xe.grad().to_vector<double>(), gc = xc.grad().to_vector<double>();
  for (size_t k = 0; k < ge.size(); ++k) EXPECT_NEAR(gc[k], ge[k], 1e-5 + 1e-4 * std::abs(ge[k]));
  NoGradGuard no_grad;
  Tensor yc = compiled->forward(x), ye = model->forward(x);
  EXPECT_FALSE(yc.requires_grad());
  auto a = yc.to_vector<double>(), b = ye.to_vector<double>();
  for (size_t k = 0; k < a.size(); ++k) EXPECT_NEAR(a[k], b[k], 1e-5 + 1e-5 * std::abs(b[k]));
  EXPECT_EQ(compiled->stats().compiles, 2);  // training graph + inference graph
}

TEST(Compile, UncapturableOpIsAClearError) {
  struct UsesArgmax : nn::Module {
    Tensor forward(const Tensor &x) override { return x.argmax(1).to(kFloat32); }
    std::string name() const override { return "UsesArgmax"; }
  };
  auto compiled = compile(std::make_shared<UsesArgmax>());
  try {
    compiled->forward(ones({2, 3}));
    FAIL() << "expected kiln::Error";
  } catch (const Error &e) {
    EXPECT_NE(std::string(e.what()).find("argmax"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace kiln
