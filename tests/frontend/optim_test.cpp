// Optimizers against PyTorch 1.13 (tests/golden/optim/optimizers.json, written
// by gen_optim_golden.py), param groups, state dicts, gradient accumulation,
// clip_grad_value_ and bad arguments.
#include <cmath>
#include <fstream>
#include <functional>
#include <memory>
#include <sstream>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "kiln/kiln.h"

namespace kiln {
namespace {

using nlohmann::json;
using optim::ParamGroup;

json load_golden(const std::string &name) {
  std::ifstream in(std::string(KILN_SOURCE_DIR) + "/tests/golden/optim/" + name);
  EXPECT_TRUE(in.good()) << "missing golden file " << name;
  return json::parse(in);
}

std::vector<float> flat(const json &nested) {
  std::vector<float> out;
  if (nested.is_array())
    for (const json &x : nested) {
      std::vector<float> inner = flat(x);
      out.insert(out.end(), inner.begin(), inner.end());
    }
  else
    out.push_back(nested.get<float>());
  return out;
}

Shape shape_of(const json &nested) { return nested.is_array() && nested[0].is_array() ? Shape{2, 3} : Shape{3}; }

Tensor from_json(const json &nested) { return tensor(flat(nested), shape_of(nested)); }

/// Concrete options of `kind` with hyperparameters `hp` (C++ names) set
/// through OptimizerOptions::to_map / from_map.
template <class Options> ParamGroup group_with(std::vector<Tensor> params, const json &hp) {
  Options o;
  std::map<std::string, double> values = o.to_map();
  for (auto it = hp.begin(); it != hp.end(); ++it) {
    EXPECT_TRUE(values.count(it.key())) << "golden hyperparameter " << it.key();
    values[it.key()] = it.value().is_boolean() ? (it.value().get<bool>() ? 1.0 : 0.0) : it.value().get<double>();
  }
  o.from_map(values);
  return ParamGroup(std::move(params), o);
}

std::unique_ptr<optim::Optimizer> make_optimizer(const std::string &kind, const json &groups,
                                                 std::map<std::string, Tensor> &params) {
  std::vector<ParamGroup> out;
  for (const json &g : groups) {
    std::vector<Tensor> ps;
    for (const json &n : g["params"]) ps.push_back(params.at(n.get<std::string>()));
    if (kind == "SGD") out.push_back(group_with<optim::SGDOptions>(ps, g["options"]));
    else if (kind == "Adam") out.push_back(group_with<optim::AdamOptions>(ps, g["options"]));
    else if (kind == "AdamW") out.push_back(group_with<optim::AdamWOptions>(ps, g["options"]));
    else out.push_back(group_with<optim::RMSpropOptions>(ps, g["options"]));
  }
  if (kind == "SGD") return std::make_unique<optim::SGD>(out);
  if (kind == "Adam") return std::make_unique<optim::Adam>(out);
  if (kind == "AdamW") return std::make_unique<optim::AdamW>(out);
  EXPECT_EQ(kind, "RMSprop");
  return std::make_unique<optim::RMSprop>(out);
}

/// |got - want| <= 1e-5 * max(|want|, 1e-2): relative, with near-zero values
/// compared to 1e-7 absolute.
void expect_close(const std::vector<float> &got, const std::vector<float> &want, const std::string &what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (size_t i = 0; i < got.size(); ++i)
    EXPECT_NEAR(got[i], want[i], 1e-5 * std::max(std::abs(want[i]), 1e-2f)) << what << " element " << i;
}

TEST(OptimGolden, MatchesPyTorchOnAQuadratic) {
  const json golden = load_golden("optimizers.json");
  ASSERT_GE(golden["cases"].size(), 10u);
  for (auto it = golden["cases"].begin(); it != golden["cases"].end(); ++it) {
    SCOPED_TRACE(it.key());
    const json &c = it.value();
    std::map<std::string, Tensor> params, coef_c, coef_d;
    for (const char *n : {"w", "b"}) {
      params[n] = from_json(golden["init"][n]).requires_grad_();
      coef_c[n] = from_json(golden["coef"][n]["c"]);
      coef_d[n] = from_json(golden["coef"][n]["d"]);
    }
    auto opt = make_optimizer(c["optimizer"].get<std::string>(), c["groups"], params);
    EXPECT_EQ(opt->name(), c["optimizer"].get<std::string>());
    for (size_t step = 0; step < c["steps"].size(); ++step) {
      opt->zero_grad();
      Tensor loss = scalar_tensor(0.0);
      for (const char *n : {"w", "b"})
        loss = loss + (coef_c[n] * params[n] * params[n]).sum() + (coef_d[n] * params[n]).sum();
      loss.backward();  // grad = 2 c p + d
      opt->step();
      for (const char *n : {"w", "b"})
        expect_close(params[n].to_vector<float>(), flat(c["steps"][step][n]),
                     std::string(n) + " after step " + std::to_string(step + 1));
    }
  }
}

// ---- param groups --------------------------------------------------------------------------

TEST(ParamGroups, EachGroupUsesItsOwnOptions) {
  Tensor a = ones({2}).requires_grad_(), b = ones({2}).requires_grad_();
  optim::AdamW opt({ParamGroup{{a}, optim::AdamWOptions(1e-1)}, ParamGroup{{b}, optim::AdamWOptions(1e-2).weight_decay(0)}});
  ASSERT_EQ(opt.param_groups().size(), 2u);
  EXPECT_DOUBLE_EQ(opt.param_groups()[1].lr(), 1e-2);
  EXPECT_DOUBLE_EQ(opt.param_groups()[1].options_as<optim::AdamWOptions>().weight_decay_, 0.0);
  EXPECT_EQ(opt.params().size(), 2u);
  (a.sum() + b.sum()).backward();
  opt.step();
  // First Adam step moves by lr * sign(g); group 0 also decays by lr*wd.
  EXPECT_NEAR(a.to_vector<double>()[0], 1.0 * (1 - 1e-1 * 1e-2) - 1e-1, 1e-6);
  EXPECT_NEAR(b.to_vector<double>()[0], 1.0 - 1e-2, 1e-6);
}

TEST(ParamGroups, MutableLrAndAddParamGroup) {
  Tensor a = ones({2}).requires_grad_(), b = ones({3}).requires_grad_();
  optim::SGD opt({a}, optim::SGDOptions(0.5));
  opt.add_param_group(ParamGroup{{b}, optim::SGDOptions(0.25)});
  opt.param_groups()[0].set_lr(0.0);  // a frozen through its group's lr
  (a.sum() + b.sum()).backward();
  opt.step();
  EXPECT_EQ(a.to_vector<double>(), (std::vector<double>{1, 1}));
  EXPECT_NEAR(b.to_vector<double>()[2], 0.75, 1e-7);
  opt.set_lr(0.125);
  EXPECT_DOUBLE_EQ(opt.param_groups()[1].lr(), 0.125);
  EXPECT_DOUBLE_EQ(opt.lr(), 0.125);
}

void expect_error(const std::function<void()> &fn, const std::vector<std::string> &parts) {
  try {
    fn();
    ADD_FAILURE() << "expected kiln::Error containing " << parts[0];
  } catch (const Error &e) {
    for (const std::string &p : parts) EXPECT_NE(std::string(e.what()).find(p), std::string::npos) << e.what();
  }
}

TEST(ParamGroups, BadGroupsThrow) {
  Tensor a = ones({2}).requires_grad_();
  expect_error([&] { optim::SGD({ParamGroup{{a}, optim::AdamOptions()}}); }, {"SGD", "group 0", "Adam"});
  expect_error([&] { optim::Adam({ParamGroup{{a}, optim::AdamOptions()}, ParamGroup{{a}, optim::AdamOptions()}}); },
               {"Adam", "parameter 1", "more than once"});
  expect_error([&] { optim::Adam(std::vector<ParamGroup>{}); }, {"Adam", "empty"});
  optim::SGD sgd({a}, optim::SGDOptions());
  expect_error([&] { sgd.param_groups()[0].options_as<optim::AdamWOptions>(); }, {"AdamW", "SGD"});
  expect_error([&] { sgd.add_param_group(ParamGroup{{ones({1}).requires_grad_()}, optim::SGDOptions(-2)}); },
               {"SGD", "-2"});
}

// ---- state dicts ---------------------------------------------------------------------------

/// A two-group optimizer of `kind` over fresh copies of fixed parameters.
struct Rig {
  Tensor w = tensor({0.5f, -1.0f, 2.0f, 0.25f}, {2, 2}).requires_grad_();
  Tensor b = tensor({0.3f, -0.7f}, {2}).requires_grad_();
  std::unique_ptr<optim::Optimizer> opt;
  explicit Rig(const std::string &kind) {
    if (kind == "SGD")
      opt = std::make_unique<optim::SGD>(std::vector<ParamGroup>{
          {{w}, optim::SGDOptions(0.1).momentum(0.9).nesterov(true)}, {{b}, optim::SGDOptions(0.05).momentum(0.5)}});
    else if (kind == "Adam")
      opt = std::make_unique<optim::Adam>(std::vector<ParamGroup>{
          {{w}, optim::AdamOptions(0.1).amsgrad(true).betas(0.8, 0.5)}, {{b}, optim::AdamOptions(0.05)}});
    else if (kind == "AdamW")
      opt = std::make_unique<optim::AdamW>(std::vector<ParamGroup>{{{w}, optim::AdamWOptions(0.1)},
                                                                   {{b}, optim::AdamWOptions(0.05).weight_decay(0)}});
    else
      opt = std::make_unique<optim::RMSprop>(std::vector<ParamGroup>{
          {{w}, optim::RMSpropOptions(0.01).centered(true).momentum(0.5)}, {{b}, optim::RMSpropOptions(0.02)}});
  }
  void train(int steps) {
    for (int i = 0; i < steps; ++i) {
      opt->zero_grad();
      ((w * w * w).sum() + (b * b * 2.0).sum() + (w * 0.3).sum()).backward();
      opt->step();
    }
  }
};

TEST(OptimStateDict, RoundTripContinuesIdentically) {
  for (const std::string kind : {"SGD", "Adam", "AdamW", "RMSprop"}) {
    SCOPED_TRACE(kind);
    Rig original(kind);
    original.train(3);
    optim::OptimizerStateDict saved = original.opt->state_dict();
    EXPECT_EQ(saved.optimizer, kind);
    ASSERT_EQ(saved.param_groups.size(), 2u);
    EXPECT_EQ(saved.param_groups[1].params, (std::vector<int64_t>{1}));
    // Through JSON, as a checkpoint writer would store it.
    optim::OptimizerStateDict loaded = optim::OptimizerStateDict::from_json(saved.to_json(), saved.state);
    Rig resumed(kind);
    resumed.w.detach().copy_(original.w);
    resumed.b.detach().copy_(original.b);
    resumed.opt->load_state_dict(loaded);
    EXPECT_DOUBLE_EQ(resumed.opt->param_groups()[1].lr(), original.opt->param_groups()[1].lr());
    original.train(3);
    resumed.train(3);
    EXPECT_EQ(resumed.w.to_vector<float>(), original.w.to_vector<float>());
    EXPECT_EQ(resumed.b.to_vector<float>(), original.b.to_vector<float>());
  }
}

TEST(OptimStateDict, NamesStateByParameterIndex) {
  Rig rig("Adam");
  EXPECT_TRUE(rig.opt->state_dict().state.empty());  // state is created lazily
  rig.train(2);
  auto dict = rig.opt->state_dict();
  std::vector<std::string> names;
  for (const auto &kv : dict.state) names.push_back(kv.first);
  EXPECT_EQ(names, (std::vector<std::string>{"state.0.exp_avg", "state.0.exp_avg_sq", "state.0.max_exp_avg_sq",
                                             "state.0.step", "state.1.exp_avg", "state.1.exp_avg_sq", "state.1.step"}));
  EXPECT_EQ(dict.state.at("state.0.step").item(), 2.0);
  EXPECT_EQ(dict.state.at("state.1.exp_avg").sizes(), (Shape{2}));
  EXPECT_EQ(dict.param_groups[0].options.at("amsgrad"), 1.0);
  EXPECT_EQ(dict.param_groups[0].options.at("beta1"), 0.8);
  // The dict is a snapshot, not a view of the live state.
  rig.train(1);
  EXPECT_EQ(dict.state.at("state.0.step").item(), 2.0);
}

TEST(OptimStateDict, ParameterWithoutGradKeepsNoState) {
  Tensor a = ones({2}).requires_grad_(), b = ones({2}).requires_grad_();
  optim::Adam opt({a, b}, optim::AdamOptions(0.1));
  a.sum().backward();
  opt.step();
  auto dict = opt.state_dict();
  EXPECT_TRUE(dict.state.count("state.0.step"));
  EXPECT_FALSE(dict.state.count("state.1.step"));
  EXPECT_EQ(b.to_vector<double>(), (std::vector<double>{1, 1}));
}

TEST(OptimStateDict, MismatchesThrowAndChangeNothing) {
  Rig adam("Adam");
  adam.train(1);
  const auto good = adam.opt->state_dict();
  Rig adamw("AdamW");
  expect_error([&] { adamw.opt->load_state_dict(good); }, {"AdamW", "'Adam'"});

  auto bad_shape = good;
  bad_shape.state["state.0.exp_avg"] = zeros({4});
  expect_error([&] { adam.opt->load_state_dict(bad_shape); }, {"state.0.exp_avg", "[4]", "[2, 2]"});
  auto bad_name = good;
  bad_name.state["state.1.momentum_buffer"] = zeros({2});
  expect_error([&] { adam.opt->load_state_dict(bad_name); }, {"momentum_buffer"});
  auto bad_index = good;
  bad_index.state["state.7.exp_avg"] = zeros({2});
  expect_error([&] { adam.opt->load_state_dict(bad_index); }, {"state.7", "2 parameters"});
  auto bad_key = good;
  bad_key.state["exp_avg"] = zeros({2});
  expect_error([&] { adam.opt->load_state_dict(bad_key); }, {"malformed", "exp_avg"});
  auto bad_groups = good;
  bad_groups.param_groups.pop_back();
  expect_error([&] { adam.opt->load_state_dict(bad_groups); }, {"1 param groups", "has 2"});
  auto bad_option = good;
  bad_option.param_groups[0].options["momentum"] = 0.9;
  expect_error([&] { adam.opt->load_state_dict(bad_option); }, {"group 0", "momentum"});
  auto bad_beta = good;
  bad_beta.param_groups[1].options["beta2"] = 2.0;
  expect_error([&] { adam.opt->load_state_dict(bad_beta); }, {"group 1", "betas", "2"});
  // Nothing changed: the optimizer still continues like a twin that never failed.
  Rig twin("Adam");
  twin.train(1);
  adam.train(2);
  twin.train(2);
  EXPECT_EQ(adam.w.to_vector<float>(), twin.w.to_vector<float>());
  expect_error([] { optim::OptimizerStateDict::from_json("{\"optimizer\": 3}"); }, {"from_json"});
}

// ---- gradient accumulation -------------------------------------------------------------------

TEST(OptimTraining, AccumulatedHalfBatchesEqualOneBatch) {
  manual_seed(3);
  nn::Linear big(3, 2), small(3, 2);
  small.weight.detach().copy_(big.weight);
  small.bias.detach().copy_(big.bias);
  Tensor x = randn({8, 3}), y = randn({8, 2});
  auto mse = [](const Tensor &pred, const Tensor &target) {
    Tensor d = pred - target;
    return (d * d).mean();
  };
  optim::SGD opt_big(big.parameters(), optim::SGDOptions(0.1).momentum(0.9));
  optim::SGD opt_small(small.parameters(), optim::SGDOptions(0.1).momentum(0.9));
  for (int step = 0; step < 3; ++step) {
    opt_big.zero_grad();
    mse(big(x), y).backward();
    opt_big.step();
    opt_small.zero_grad();
    for (int half = 0; half < 2; ++half) {  // grads accumulate: no zero_grad between
      Tensor xs = x.narrow(0, 4 * half, 4), ys = y.narrow(0, 4 * half, 4);
      (mse(small(xs), ys) * 0.5).backward();
    }
    opt_small.step();
  }
  std::vector<float> a = small.weight.to_vector<float>(), b = big.weight.to_vector<float>();
  for (size_t i = 0; i < a.size(); ++i) EXPECT_NEAR(a[i], b[i], 1e-6);
  EXPECT_NEAR(small.bias.to_vector<float>()[1], big.bias.to_vector<float>()[1], 1e-6);
}

// ---- clip_grad_value_ and bad arguments ---------------------------------------------------------

TEST(OptimClip, ClipGradValueClampsEveryGradient) {
  Tensor a = ones({3}).requires_grad_(), b = ones({2}).requires_grad_(), unused = ones({1}).requires_grad_();
  ((a * tensor({-3.f, 0.5f, 2.f}, {3})).sum() + (b * 4.0).sum()).backward();
  nn::utils::clip_grad_value_({a, b, unused}, 1.0);
  EXPECT_EQ(a.grad().to_vector<float>(), (std::vector<float>{-1.f, 0.5f, 1.f}));
  EXPECT_EQ(b.grad().to_vector<float>(), (std::vector<float>{1.f, 1.f}));
  EXPECT_FALSE(unused.grad().defined());
  expect_error([&] { nn::utils::clip_grad_value_({a}, -0.5); }, {"clip_grad_value_", "-0.5"});
}

TEST(OptimErrors, BadHyperparametersNameTheValue) {
  auto p = [] { return std::vector<Tensor>{ones({2}).requires_grad_()}; };
  expect_error([&] { optim::Adam(p(), optim::AdamOptions().betas(0.9, 1.0)); }, {"Adam", "betas", "1"});
  expect_error([&] { optim::Adam(p(), optim::AdamOptions(-0.1)); }, {"Adam", "-0.1"});
  expect_error([&] { optim::Adam(p(), optim::AdamOptions().eps(-1)); }, {"Adam", "eps", "-1"});
  expect_error([&] { optim::AdamW(p(), optim::AdamWOptions().weight_decay(-3)); }, {"AdamW", "weight_decay", "-3"});
  expect_error([&] { optim::RMSprop(p(), optim::RMSpropOptions().alpha(-0.5)); }, {"RMSprop", "alpha", "-0.5"});
  expect_error([&] { optim::RMSprop(p(), optim::RMSpropOptions().momentum(-1)); }, {"RMSprop", "momentum"});
  expect_error([&] { optim::SGD(p(), optim::SGDOptions().nesterov(true)); }, {"SGD", "nesterov", "momentum 0"});
  expect_error([&] { optim::SGD(p(), optim::SGDOptions().weight_decay(-1)); }, {"SGD", "weight_decay"});
  optim::SGDOptions o;
  expect_error([&] { o.from_map({{"lr", 1.0}}); }, {"SGD", "'momentum'", "missing"});
  auto m = o.to_map();
  m["gamma"] = 1;
  expect_error([&] { o.from_map(m); }, {"SGD", "unknown", "'gamma'"});
}

}  // namespace
}  // namespace kiln
