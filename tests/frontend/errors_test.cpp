// Bad input to public ops throws kiln::Error whose message names the op and
// the offending values. Each case: the call, and substrings the message must hold.
#include <functional>

#include <gtest/gtest.h>

#include "kiln/kiln.h"
#include "bad_cases.h"

namespace kiln {
namespace {

using test_support::BadCase;

std::vector<BadCase> cases() {
  using namespace nn::functional;
  auto labels = [] { return tensor(std::vector<int64_t>{0, 1}, {2}); };
  return {
      {"add shape mismatch", [] { add(ones({2, 3}), ones({4})); }, {"add", "[2, 3]", "[4]"}},
      {"sub shape mismatch", [] { sub(ones({3}), ones({2})); }, {"sub", "[3]", "[2]"}},
      {"mul shape mismatch", [] { mul(ones({2, 2}), ones({3, 2})); }, {"mul", "[2, 2]", "[3, 2]"}},
      {"div shape mismatch", [] { div(ones({5}), ones({4})); }, {"div", "[5]", "[4]"}},
      {"add two bools", [] { add(gt(ones({2}), zeros({2})), lt(ones({2}), zeros({2}))); }, {"add", "two bool"}},
      {"neg bool", [] { neg(gt(ones({2}), zeros({2}))); }, {"neg", "bool"}},
      {"add undefined", [] { add(Tensor(), ones({2})); }, {"add", "undefined"}},
      {"matmul inner dims", [] { matmul(ones({2, 3}), ones({4, 5})); }, {"matmul", "[2, 3]", "[4, 5]", "3 != 4"}},
      {"matmul 0-d", [] { matmul(full({}, 1.0), ones({2})); }, {"matmul", "[]", "[2]"}},
      {"matmul batch mismatch", [] { matmul(ones({2, 3, 4}), ones({3, 4, 5})); }, {"matmul", "[2]", "[3]"}},
      {"matmul int", [] { matmul(ones({2, 2}, kInt64), ones({2, 2}, kInt64)); }, {"matmul", "int64"}},
      {"sum bad dim", [] { ones({2, 3}).sum({2}); }, {"sum", "dimension 2", "[2, 3]"}},
      {"sum repeated dim", [] { ones({2, 3}).sum({1, -1}); }, {"sum", "twice"}},
      {"mean int", [] { ones({2}, kInt64).mean(); }, {"mean", "int64"}},
      {"amax bad dim", [] { ones({2}).amax({-3}); }, {"amax", "-3"}},
      {"amax empty dim", [] { ones({0, 2}).amax({0}); }, {"amax", "zero-size"}},
      {"argmax 0-d", [] { full({}, 1.0).argmax(0); }, {"argmax", "0-d"}},
      {"view incompatible", [] { ones({2, 3}).t().view({6}); }, {"view", "[3, 2]", "reshape"}},
      {"view wrong numel", [] { ones({2, 3}).view({4}); }, {"view", "[4]", "6 elements"}},
      {"view two -1", [] { ones({2, 3}).view({-1, -1}); }, {"view", "-1"}},
      {"reshape wrong numel", [] { ones({2, 3}).reshape({5}); }, {"reshape", "[5]"}},
      {"transpose bad dim", [] { ones({2, 3}).transpose(0, 2); }, {"transpose", "2"}},
      {"permute wrong count", [] { ones({2, 3}).permute({0}); }, {"permute", "rank 2"}},
      {"permute repeated", [] { ones({2, 3}).permute({0, 0}); }, {"permute", "repeated"}},
      {"expand non-singleton", [] { ones({2, 3}).expand({4, 3}); }, {"expand", "4", "[2, 3]"}},
      {"expand fewer dims", [] { ones({2, 3}).expand({3}); }, {"expand"}},
      {"narrow out of range", [] { ones({4}).narrow(0, 3, 2); }, {"narrow", "exceeds"}},
      {"t on 3-d", [] { ones({2, 2, 2}).t(); }, {"t:", "[2, 2, 2]"}},
      {"item non-scalar", [] { ones({3}).item(); }, {"item", "3 elements"}},
      {"data_ptr wrong type", [] { ones({3}).data_ptr<int64_t>(); }, {"data_ptr", "float32", "int64"}},
      {"tensor value count", [] { tensor(std::vector<float>{1, 2, 3}, {2, 2}); }, {"tensor", "[2, 2]"}},
      {"empty negative size", [] { zeros({-1}); }, {"negative", "[-1]"}},
      {"cuda device", [] { Tensor::empty({2}, kFloat32, Device(DeviceType::CUDA, 0)); }, {"cuda:0", "cpu"}},
      {"randn int dtype", [] { randn({2}, kInt64); }, {"randn", "int64"}},
      {"uniform low > high", [] { uniform({2}, 1.0, 0.0); }, {"uniform", "low"}},
      {"where non-bool cond", [] { where(ones({2}), ones({2}), ones({2})); }, {"where", "bool", "float32"}},
      {"requires_grad on int", [] { ones({2}, kInt64).requires_grad_(); }, {"requires_grad_", "int64"}},
      {"requires_grad on non-leaf", [] {
         Tensor x = ones({2}).requires_grad_();
         (x * 2.0).requires_grad_(false);
       }, {"requires_grad_", "leaf"}},
      {"backward without grad", [] { ones({1}).backward(); }, {"backward", "require grad"}},
      {"backward non-scalar", [] { (ones({2}).requires_grad_() * 2.0).backward(); }, {"backward", "scalar", "[2]"}},
      {"backward wrong grad shape", [] {
         (ones({2}).requires_grad_() * 2.0).backward(ones({3}));
       }, {"backward", "[3]", "[2]"}},
      {"in-place on leaf requiring grad", [] { ones({2}).requires_grad_().add_(ones({2})); }, {"add_", "NoGradGuard"}},
      {"copy_ shape mismatch", [] { zeros({2}).copy_(ones({3})); }, {"copy_", "[3]", "[2]"}},
      {"linear input width", [] { nn::Linear(4, 2).forward(ones({3, 5})); }, {"Linear", "[N, 4]", "[3, 5]"}},
      {"linear bad sizes", [] { nn::Linear(0, 2); }, {"Linear", "positive"}},
      {"linear weight rank", [] { linear(ones({2, 3}), ones({3})); }, {"linear", "[3]"}},
      {"log_softmax int", [] { log_softmax(ones({2, 2}, kInt64), 1); }, {"log_softmax", "int64"}},
      {"nll_loss target dtype", [] { nll_loss(zeros({2, 3}), zeros({2})); }, {"nll_loss", "int64", "float32"}},
      {"nll_loss target shape", [labels] { nll_loss(zeros({3, 3}), labels()); }, {"nll_loss", "[3]", "[2]"}},
      {"nll_loss class out of range", [] {
         nll_loss(zeros({2, 3}), tensor(std::vector<int64_t>{0, 3}, {2}));
       }, {"nll_loss", "3", "out of bounds"}},
      {"cross_entropy rank", [labels] { cross_entropy(zeros({2}), labels()); }, {"cross_entropy", "[2]"}},
      {"SGD empty params", [] { optim::SGD({}, optim::SGDOptions(0.1)); }, {"SGD", "empty"}},
      {"AdamW non-leaf param", [] {
         Tensor x = ones({2}).requires_grad_();
         optim::AdamW({x * 2.0}, optim::AdamWOptions());
       }, {"AdamW", "leaf"}},
      {"AdamW bad beta", [] {
         optim::AdamW({ones({2}).requires_grad_()}, optim::AdamWOptions().betas(1.5, 0.9));
       }, {"AdamW", "betas", "1.5"}},
      {"SGD negative lr", [] { optim::SGD({ones({2}).requires_grad_()}, optim::SGDOptions(-1)); }, {"SGD", "-1"}},
      {"clip_grad_norm_ bad max", [] { nn::utils::clip_grad_norm_({}, 0.0); }, {"clip_grad_norm_", "0"}},
      {"load_digits missing file", [] { data::load_digits("/nonexistent/digits.csv"); }, {"load_digits", "/nonexistent"}},
      {"split bad test size", [] {
         data::TensorDataset ds{zeros({4, 2}), zeros({4}, kInt64)};
         data::train_test_split(ds, 4, 0);
       }, {"train_test_split", "test_size 4"}},
      {"DataLoader batch size", [] { data::DataLoader({zeros({4, 2}), zeros({4}, kInt64)}, 0); }, {"DataLoader", "batch_size"}},
      {"register duplicate parameter", [] {
         struct M : nn::Module {
           M() {
             register_parameter("w", ones({1}));
             register_parameter("w", ones({1}));
           }
           Tensor forward(const Tensor &x) override { return x; }
           std::string name() const override { return "M"; }
         } m;
       }, {"register_parameter", "'w'"}},
  };
}

TEST(BadInput, EveryCaseThrowsKilnErrorNamingOpAndValues) {
  auto all = cases();
  EXPECT_GE(all.size(), 40u);
  test_support::expect_kiln_errors(all);
}

TEST(BadInput, CorruptGzipIsAnError) {
  std::string path = ::testing::TempDir() + "/corrupt.csv.gz";
  {
    FILE *f = std::fopen(path.c_str(), "wb");
    const unsigned char bytes[] = {0x1f, 0x8b, 0x08, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x03, 0xff, 0xff};
    std::fwrite(bytes, 1, sizeof bytes, f);
    std::fclose(f);
  }
  EXPECT_THROW(data::load_digits(path), Error);
}

}  // namespace
}  // namespace kiln
