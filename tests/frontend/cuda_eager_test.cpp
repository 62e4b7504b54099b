// Eager ops on CUDA tensors (the CUDA-on-CPU simulator, KILN_CUDA_SIM=1):
// each op runs its dialect form through the CUDA C emitter
// (frontend/src/cuda/graph_kernels.cpp) and must match the CPU's result on
// the same values: bit for bit for exact ops (integer math, comparisons,
// selection, copies, relu, neg), to a few ulp for the float math. One
// compiled kernel serves every shape of a size pattern.
#include <array>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <limits>

#include <gtest/gtest.h>

#include "kiln/kiln.h"
#include "kiln/runtime/cuda/Nvrtc.h"
#include "../support/NvrtcKernelCheck.h"
#include "models/cnn.h"
#include "models/gpt.h"


namespace kiln {
namespace {

const Device kCuda0{DeviceType::CUDA, 0};

class CudaEager : public ::testing::Test {
protected:
  // The simulator, unless the device script runs this on a GPU (KILN_TEST_REAL_CUDA=1).
  void SetUp() override {
    if (!std::getenv("KILN_TEST_REAL_CUDA")) ::setenv("KILN_CUDA_SIM", "1", 1);
  }
};

/// Largest |a - b| / max(1, |b|) over the elements (both moved to the cpu as float64).
double max_relative(const Tensor &a, const Tensor &b) {
  const std::vector<double> x = a.cpu().to(kFloat64).to_vector<double>(), y = b.cpu().to(kFloat64).to_vector<double>();
  EXPECT_EQ(x.size(), y.size());
  double worst = 0;
  for (size_t i = 0; i < x.size() && i < y.size(); ++i) {
    if (std::isnan(x[i]) && std::isnan(y[i])) continue;
    worst = std::max(worst, std::abs(x[i] - y[i]) / std::max(1.0, std::abs(y[i])));
  }
  return worst;
}

bool bitwise_equal(const Tensor &a, const Tensor &b) {
  Tensor x = a.cpu().contiguous(), y = b.cpu().contiguous();
  return x.sizes() == y.sizes() && x.dtype() == y.dtype() &&
         std::memcmp(x.raw_data(), y.raw_data(), static_cast<size_t>(x.numel()) * itemsize(x.dtype())) == 0;
}

TEST_F(CudaEager, BinaryOpsMatchTheCpu) {
  manual_seed(1);
  Tensor a = randn({5, 7}), b = randn({5, 7}) + 3.0;
  Tensor da = a.to(kCuda0), db = b.to(kCuda0);
  EXPECT_TRUE(bitwise_equal(da + db, a + b));
  EXPECT_TRUE(bitwise_equal(da - db, a - b));
  EXPECT_TRUE(bitwise_equal(da * db, a * b));
  EXPECT_TRUE(bitwise_equal(da / db, a / b));
  EXPECT_TRUE(bitwise_equal(maximum(da, db), maximum(a, b)));
  EXPECT_EQ((da + db).device(), kCuda0);
}

TEST_F(CudaEager, BroadcastAndTransposedViewsReadThroughStrides) {
  manual_seed(2);
  Tensor a = randn({4, 6}), row = randn({6}), t = randn({6, 4});
  Tensor da = a.to(kCuda0), drow = row.to(kCuda0), dt = t.to(kCuda0);
  EXPECT_TRUE(bitwise_equal(da + drow, a + row));
  EXPECT_TRUE(bitwise_equal(da * dt.transpose(0, 1), a * t.transpose(0, 1)));
  EXPECT_TRUE(bitwise_equal(da.narrow(1, 2, 3) - 1.5, a.narrow(1, 2, 3) - 1.5));
}

TEST_F(CudaEager, UnaryMathAndPow) {
  manual_seed(3);
  Tensor a = rand({33, 9}) + 0.1;
  Tensor da = a.to(kCuda0);
  EXPECT_TRUE(bitwise_equal(-da, -a));
  EXPECT_TRUE(bitwise_equal(relu(da - 0.5), relu(a - 0.5)));
  EXPECT_LE(max_relative(exp(da), exp(a)), 1e-6);
  EXPECT_LE(max_relative(log(da), log(a)), 1e-6);
  EXPECT_LE(max_relative(sqrt(da), sqrt(a)), 1e-6);
  EXPECT_LE(max_relative(pow(da, 2.5), pow(a, 2.5)), 1e-6);
}

TEST_F(CudaEager, ComparisonsAndWhere) {
  manual_seed(4);
  Tensor a = randn({3, 8}), b = randn({3, 8});
  Tensor da = a.to(kCuda0), db = b.to(kCuda0);
  EXPECT_TRUE(bitwise_equal(lt(da, db), lt(a, b)));
  EXPECT_TRUE(bitwise_equal(ge(da, db), ge(a, b)));
  EXPECT_TRUE(bitwise_equal(eq(da, da), eq(a, a)));
  EXPECT_TRUE(bitwise_equal(where(lt(da, db), da, db), where(lt(a, b), a, b)));
}

TEST_F(CudaEager, IntegerMathIsExactAndDivisionByZeroRaises) {
  Tensor a = tensor(std::vector<int64_t>{7, -7, 9, -9, 1LL << 40, 0}, {6});
  Tensor b = tensor(std::vector<int64_t>{2, 2, -4, -4, 3, 5}, {6});
  Tensor da = a.to(kCuda0), db = b.to(kCuda0);
  EXPECT_TRUE(bitwise_equal(da + db, a + b));
  EXPECT_TRUE(bitwise_equal(da * db, a * b));
  EXPECT_TRUE(bitwise_equal(floor_divide(da, db), floor_divide(a, b)));
  EXPECT_TRUE(bitwise_equal(remainder(da, db), remainder(a, b)));
  EXPECT_TRUE(bitwise_equal(fmod(da, db), fmod(a, b)));
  Tensor zero = tensor(std::vector<int64_t>{1, 0, 1, 1, 1, 1}, {6}).to(kCuda0);
  try {
    (void)floor_divide(da, zero);
    ADD_FAILURE() << "integer division by zero on cuda did not raise";
  } catch (const Error &e) {
    EXPECT_NE(std::string(e.what()).find("ZeroDivisionError"), std::string::npos) << e.what();
  }
}

TEST_F(CudaEager, CopiesAndConversions) {
  manual_seed(6);
  Tensor a = randn({5, 3});
  Tensor da = a.to(kCuda0);
  EXPECT_TRUE(bitwise_equal(da.transpose(0, 1).contiguous(), a.transpose(0, 1).contiguous()));
  for (DType dt : {kFloat16, kBFloat16, kFloat64, kInt64})
    EXPECT_TRUE(bitwise_equal(da.to(dt), a.to(dt))) << dtype_name(dt);
  EXPECT_TRUE(bitwise_equal(full({2, 3}, 0.37, kFloat32, kCuda0), full({2, 3}, 0.37)));
}

TEST_F(CudaEager, ReductionsMatchTheCpu) {
  manual_seed(7);
  for (Shape shape : {Shape{6, 10}, Shape{3, 2000}, Shape{50, 4, 3}}) {
    Tensor a = randn(shape);
    Tensor da = a.to(kCuda0);
    EXPECT_LE(max_relative(sum(da, {-1}), sum(a, {-1})), 1e-5) << shape_str(shape);
    EXPECT_LE(max_relative(sum(da, {0}, /*keepdim=*/true), sum(a, {0}, true)), 1e-5) << shape_str(shape);
    EXPECT_LE(max_relative(mean(da), mean(a)), 1e-5) << shape_str(shape);
    EXPECT_TRUE(bitwise_equal(amax(da, {-1}), amax(a, {-1}))) << shape_str(shape);
    EXPECT_TRUE(bitwise_equal(amin(da, {0}), amin(a, {0}))) << shape_str(shape);
    EXPECT_TRUE(bitwise_equal(argmax(da, -1), argmax(a, -1))) << shape_str(shape);
    EXPECT_TRUE(bitwise_equal(argmin(da, 0), argmin(a, 0))) << shape_str(shape);
  }
}

TEST_F(CudaEager, MaxWithIndicesAndCumsum) {
  manual_seed(9);
  for (Shape shape : {Shape{6, 10}, Shape{4, 3, 5}}) {
    Tensor a = randn(shape);
    Tensor da = a.to(kCuda0);
    for (int64_t dim : {0, -1}) {
      auto [v, i] = max(da, dim);
      auto [cv, ci] = max(a, dim);
      EXPECT_TRUE(bitwise_equal(v, cv)) << shape_str(shape) << " dim " << dim;
      EXPECT_TRUE(bitwise_equal(i, ci)) << shape_str(shape) << " dim " << dim;
      auto [mv, mi] = min(da, dim, /*keepdim=*/true);
      auto [cmv, cmi] = min(a, dim, true);
      EXPECT_TRUE(bitwise_equal(mv, cmv) && bitwise_equal(mi, cmi)) << shape_str(shape) << " dim " << dim;
      EXPECT_LE(max_relative(cumsum(da, dim), cumsum(a, dim)), 1e-6) << shape_str(shape) << " dim " << dim;
    }
  }
}

TEST_F(CudaEager, GradScalerUnscalesAndFindsInfOnCuda) {
  for (bool poison : {false, true}) {
    std::vector<std::vector<float>> grads;
    std::vector<double> scales;
    for (Device d : {kCPU, kCuda0}) {
      manual_seed(10);
      Tensor w = randn({6, 4}).to(d).requires_grad_(true);
      optim::SGD opt({w}, optim::SGDOptions(0.1));
      amp::GradScaler scaler(amp::GradScalerOptions().init_scale(1024.0));
      Tensor loss = (w * w).sum();
      if (poison) loss = loss * full({}, std::numeric_limits<double>::infinity(), kFloat32, d);
      scaler.scale(loss).backward();
      scaler.unscale_(opt);
      scaler.step(opt);
      scaler.update();
      grads.push_back(w.grad().cpu().to_vector<float>());
      scales.push_back(scaler.get_scale());
    }
    EXPECT_EQ(scales[0], scales[1]) << "poison " << poison;
    if (!poison) EXPECT_EQ(grads[0], grads[1]);
  }
}

TEST_F(CudaEager, OneKernelServesEveryShapeOfAPattern) {
  manual_seed(5);
  (void)(randn({3, 4}).to(kCuda0) * randn({3, 4}).to(kCuda0));
  const size_t before = cuda_eager::emitted_kernel_count();
  for (int64_t n : {2, 5, 17, 300}) {
    Tensor a = randn({n, n + 1}), b = randn({n, n + 1});
    EXPECT_TRUE(bitwise_equal(a.to(kCuda0) * b.to(kCuda0), a * b)) << n;
  }
  EXPECT_EQ(cuda_eager::emitted_kernel_count(), before);
}

/// One op of every family this file tests, at two ranks and several dtypes.
void run_every_family() {
  const Device c = kCuda0;
  for (DType dt : {kFloat32, kFloat64, kInt64}) {
    Tensor a = (rand({4, 5}) * 4.0 + 1.0).to(dt).to(c), b = (rand({4, 5}) * 4.0 + 1.0).to(dt).to(c);
    (void)(a + b), (void)(a * b), (void)(a - b), (void)maximum(a, b), (void)lt(a, b), (void)where(lt(a, b), a, b);
    (void)sum(a, {1}), (void)amax(a, {0}), (void)argmax(a, 1), (void)a.transpose(0, 1).contiguous();
    if (dt != kInt64) (void)exp(a), (void)log(a), (void)pow(a, 1.5), (void)(a / b);
    else (void)floor_divide(a, b), (void)remainder(a, b);
  }
  Tensor x = rand({3, 2000}).to(c);
  (void)sum(x, {1}), (void)argmin(x, 1), (void)x.to(kBFloat16), (void)x.to(kFloat16), (void)full({7}, 2.0, kFloat32, c);
  Tensor y = rand({2, 3, 4}).to(c);
  (void)(y * y), (void)relu(y), (void)-y, (void)sum(y, {0, 2});
}

TEST_F(CudaEager, EveryKernelCompilesWithNvrtcWithoutSpills) {
  if (!runtime::cuda::nvrtc_available()) GTEST_SKIP() << "skipped: " << runtime::cuda::nvrtc_unavailable_reason();
  manual_seed(8);
  run_every_family();
  runtime::cuda::NvrtcCompilerOptions options;
  options.cache_dir = "";  // no disk cache: the point is to compile
  const auto kernels = cuda_eager::emitted_kernels();
  EXPECT_GE(kernels.size(), 30u);
  test::expect_compile_for_sm90_without_spills(kernels, options);
}

/// The loss of each of `steps` AdamW steps (lr `lr`, gradient norm clipped
/// at `clip`) of `model` on the fixed batch (x, y), everything moved to
/// `device` first; `loss` maps (model output, y) to the scalar loss.
std::vector<double> adamw_losses(std::shared_ptr<nn::Module> model, Tensor x, Tensor y, Device device, int steps,
                                 double lr, double clip,
                                 const std::function<Tensor(const Tensor &, const Tensor &)> &loss_of) {
  model->to(device);
  x = x.to(device), y = y.to(device);
  optim::AdamW opt(model->parameters(), optim::AdamWOptions(lr).weight_decay(0.1));
  std::vector<double> losses;
  for (int i = 0; i < steps; ++i) {
    opt.zero_grad();
    Tensor loss = loss_of(model->forward(x), y);
    loss.backward();
    (void)nn::utils::clip_grad_norm_(model->parameters(), clip);
    opt.step();
    losses.push_back(loss.item());
  }
  return losses;
}

/// Class labels [n] in [0, classes) from the default generator.
Tensor labels(int64_t n, int64_t classes) {
  return clamp(floor(rand({n}) * static_cast<double>(classes)), 0.0, static_cast<double>(classes - 1)).to(kInt64);
}

Tensor classification(const Tensor &logits, const Tensor &y) {
  return nn::functional::cross_entropy(logits.reshape({-1, logits.size(-1)}), y);
}

/// `losses(kCPU)` and `losses(kCuda0)` agree at 1e-4 relative at every step, and training lowers the loss.
void expect_same_training(const std::function<std::vector<double>(Device)> &losses) {
  const std::vector<double> cpu = losses(kCPU), cuda = losses(kCuda0);
  ASSERT_EQ(cpu.size(), cuda.size());
  for (size_t i = 0; i < cpu.size(); ++i) EXPECT_NEAR(cuda[i], cpu[i], 1e-4 * std::abs(cpu[i])) << "step " << i + 1;
  EXPECT_LT(cuda.back(), cuda.front());
}

/// A 64-128-10 MLP with cross-entropy, 20 steps.
TEST_F(CudaEager, MlpTrainingMatchesTheCpuFor20Steps) {
  expect_same_training([](Device d) {
    manual_seed(11);
    auto mlp = std::make_shared<nn::Sequential>(std::initializer_list<std::shared_ptr<nn::Module>>{
        std::make_shared<nn::Linear>(64, 128), std::make_shared<nn::ReLU>(), std::make_shared<nn::Linear>(128, 10)});
    Tensor x = rand({32, 64}), y = labels(32, 10);
    return adamw_losses(mlp, x, y, d, 20, 2e-3, 1e9, classification);
  });
}

/// One step of `make_optimizer` on a parameter with a fixed gradient, on `device`.
template <class MakeOptimizer> std::vector<float> one_step(Device device, MakeOptimizer make_optimizer) {
  manual_seed(3);
  Tensor w = randn({37}), g = randn({37});
  Tensor p = w.to(device).requires_grad_(true);
  auto opt = make_optimizer(p);
  for (int i = 0; i < 3; ++i) {
    p.set_grad(g.to(device) * (1.0 + i));
    opt.step();
  }
  return p.detach().cpu().to_vector<float>();
}

TEST_F(CudaEager, OptimizerStepsMatchTheCpu) {
  auto expect_close = [](const std::vector<float> &cuda, const std::vector<float> &cpu, const char *what) {
    ASSERT_EQ(cuda.size(), cpu.size());
    for (size_t i = 0; i < cpu.size(); ++i) EXPECT_NEAR(cuda[i], cpu[i], 1e-6 * (1 + std::abs(cpu[i]))) << what << " " << i;
  };
  auto adamw = [](const Tensor &p) { return optim::AdamW({p}, optim::AdamWOptions(0.1).weight_decay(0.1)); };
  auto adam = [](const Tensor &p) { return optim::Adam({p}, optim::AdamOptions(0.1).weight_decay(0.1).amsgrad(true)); };
  auto sgd = [](const Tensor &p) { return optim::SGD({p}, optim::SGDOptions(0.1).momentum(0.9).nesterov(true).weight_decay(0.01)); };
  auto rms = [](const Tensor &p) { return optim::RMSprop({p}, optim::RMSpropOptions(0.01).momentum(0.5).centered(true)); };
  expect_close(one_step(kCuda0, adamw), one_step(kCPU, adamw), "adamw");
  expect_close(one_step(kCuda0, adam), one_step(kCPU, adam), "adam amsgrad");
  expect_close(one_step(kCuda0, sgd), one_step(kCPU, sgd), "sgd nesterov");
  expect_close(one_step(kCuda0, rms), one_step(kCPU, rms), "rmsprop centered");
}

/// A small GPT (examples/models/gpt.h: embedding, layer_norm, attention
/// with softmax, gelu, cross-entropy) on token ids, 20 steps.
TEST_F(CudaEager, GptTrainingMatchesTheCpuFor20Steps) {
  expect_same_training([](Device d) {
    manual_seed(12);
    auto gpt = std::make_shared<models::GPT>(/*vocab=*/11, /*context=*/8, /*layers=*/1, /*d_model=*/16, /*heads=*/2,
                                             /*dropout=*/0.0);
    Tensor x = labels(16, 11).reshape({2, 8}), y = labels(16, 11);
    return adamw_losses(gpt, x, y, d, 20, 3e-3, 1.0, classification);
  });
}

/// The residual digits CNN (conv2d, batch_norm, max and average pooling), 10 steps.
TEST_F(CudaEager, CnnTrainingMatchesTheCpuFor10Steps) {
  expect_same_training([](Device d) {
    manual_seed(13);
    auto cnn = std::make_shared<models::DigitsCNN>(4);
    Tensor x = rand({8, 1, 8, 8}), y = labels(8, 10);
    return adamw_losses(cnn, x, y, d, 10, 1e-2, 1e9, classification);
  });
}

/// Backward formulas build their helper tensors on the gradient's device
/// (kiln-fuzz --device cuda-sim seed 1 graph 17: narrow's padding; seed 3
/// graph 103: max(dim)'s positions were cpu tensors).
TEST_F(CudaEager, NarrowAndMaxDimGradientsStayOnTheDevice) {
  manual_seed(14);
  Tensor a = randn({3, 4, 5});
  std::vector<std::vector<float>> grads;
  for (Device d : {kCPU, kCuda0}) {
    Tensor x = a.to(d).detach().requires_grad_(true);
    Tensor y = x.narrow(1, 1, 2) * 2.0;
    Tensor z = max(x, 2).first;
    (sum(y) + sum(z * z)).backward();
    EXPECT_EQ(x.grad().device(), d);
    grads.push_back(x.grad().cpu().to_vector<float>());
  }
  EXPECT_EQ(grads[0], grads[1]);
}

TEST_F(CudaEager, OutOfRangeIndexRaisesAsOnTheCpu) {
  Tensor weight = ones({5, 3}).to(kCuda0);
  Tensor ids = tensor(std::vector<int64_t>{1, 7, 2}, {3}).to(kCuda0);
  std::string cuda_error, cpu_error;
  try {
    (void)nn::functional::embedding(ids, weight);
  } catch (const Error &e) {
    cuda_error = e.what();
  }
  try {
    (void)nn::functional::embedding(ids.cpu(), weight.cpu());
  } catch (const Error &e) {
    cpu_error = e.what();
  }
  EXPECT_FALSE(cuda_error.empty());
  EXPECT_EQ(cuda_error, cpu_error);
}

TEST_F(CudaEager, MixingDevicesNamesTheOpAndBothDevices) {
  Tensor a = ones({3}).to(kCuda0), b = ones({3});
  try {
    (void)(a + b);
    ADD_FAILURE() << "cuda + cpu did not raise";
  } catch (const Error &e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("add"), std::string::npos) << what;
    EXPECT_NE(what.find("cuda:0"), std::string::npos) << what;
    EXPECT_NE(what.find("cpu"), std::string::npos) << what;
  }
}

} // namespace
} // namespace kiln
