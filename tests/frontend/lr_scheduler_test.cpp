// LR schedulers against PyTorch 1.13 (tests/golden/optim/schedulers.json,
// written by gen_optim_golden.py), state-dict round trips and bad arguments.
#include <cmath>
#include <fstream>
#include <functional>
#include <memory>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "kiln/kiln.h"
#include "kiln/lr_scheduler.h"

namespace kiln {
namespace {

using nlohmann::json;
using namespace optim::lr_scheduler;
using optim::ParamGroup;

json load_golden() {
  std::ifstream in(std::string(KILN_SOURCE_DIR) + "/tests/golden/optim/schedulers.json");
  EXPECT_TRUE(in.good()) << "missing schedulers.json";
  return json::parse(in);
}

/// SGD with momentum 0.9 and two groups (lr 0.1 and 0.05), as the generator.
struct Rig {
  Tensor w = zeros({2}).requires_grad_(), b = zeros({2}).requires_grad_();
  optim::SGD opt{std::vector<ParamGroup>{{{w}, optim::SGDOptions(0.1).momentum(0.9)},
                                         {{b}, optim::SGDOptions(0.05).momentum(0.9)}}};
  std::vector<double> lrs() const {
    return {opt.param_groups()[0].lr(), opt.param_groups()[1].lr()};
  }
  std::vector<double> momenta() const {
    return {opt.param_groups()[0].options().get_momentum(), opt.param_groups()[1].options().get_momentum()};
  }
};

std::vector<int64_t> ints(const json &j) { return j.get<std::vector<int64_t>>(); }

/// The scheduler named in the golden file, built on `opt` from its args.
std::shared_ptr<LRScheduler> make_scheduler(const std::string &name, const json &a, optim::Optimizer &opt) {
  if (name == "step_lr") return std::make_shared<StepLR>(opt, a["step_size"].get<int64_t>(), a["gamma"].get<double>());
  if (name == "multi_step_lr") return std::make_shared<MultiStepLR>(opt, ints(a["milestones"]), a["gamma"].get<double>());
  if (name == "cosine_annealing_lr")
    return std::make_shared<CosineAnnealingLR>(opt, a["T_max"].get<int64_t>(), a["eta_min"].get<double>());
  if (name.rfind("linear_lr", 0) == 0)
    return std::make_shared<LinearLR>(opt, a["start_factor"].get<double>(), a["end_factor"].get<double>(),
                                      a["total_iters"].get<int64_t>());
  if (name == "sequential_warmup_cosine") {
    auto warm = std::make_shared<LinearLR>(opt, 0.1, 1.0, 5);
    auto cosine = std::make_shared<CosineAnnealingLR>(opt, 20, 1e-4);
    return std::make_shared<SequentialLR>(opt, std::vector<std::shared_ptr<LRScheduler>>{warm, cosine},
                                          ints(a["milestones"]));
  }
  if (name == "sequential_three") {
    auto warm = std::make_shared<LinearLR>(opt, 0.5, 1.0, 4);
    auto step = std::make_shared<StepLR>(opt, 3, 0.5);
    auto cosine = std::make_shared<CosineAnnealingLR>(opt, 18);
    return std::make_shared<SequentialLR>(opt, std::vector<std::shared_ptr<LRScheduler>>{warm, step, cosine},
                                          ints(a["milestones"]));
  }
  if (name.rfind("one_cycle", 0) == 0) {
    OneCycleLROptions o(0.0);
    o.max_lrs(a["max_lr"].get<std::vector<double>>()).total_steps(a["total_steps"].get<int64_t>());
    if (a.contains("pct_start")) o.pct_start(a["pct_start"].get<double>());
    if (a.contains("anneal_strategy")) o.anneal_strategy(a["anneal_strategy"].get<std::string>());
    if (a.contains("div_factor")) o.div_factor(a["div_factor"].get<double>());
    if (a.contains("final_div_factor")) o.final_div_factor(a["final_div_factor"].get<double>());
    if (a.contains("three_phase")) o.three_phase(a["three_phase"].get<bool>());
    if (a.contains("base_momentum")) o.base_momentum(a["base_momentum"].get<double>());
    if (a.contains("max_momentum")) o.max_momentum(a["max_momentum"].get<double>());
    return std::make_shared<OneCycleLR>(opt, o);
  }
  ADD_FAILURE() << "unknown golden scheduler " << name;
  return nullptr;
}

ReduceLROnPlateauOptions plateau_options(const json &a) {
  return ReduceLROnPlateauOptions()
      .mode(a["mode"].get<std::string>())
      .factor(a["factor"].get<double>())
      .patience(a["patience"].get<int64_t>())
      .threshold(a["threshold"].get<double>())
      .threshold_mode(a["threshold_mode"].get<std::string>())
      .cooldown(a["cooldown"].get<int64_t>())
      .min_lrs(a["min_lr"].get<std::vector<double>>());
}

/// Relative 1e-9 (values that are exactly zero in PyTorch compared to 1e-15).
void expect_lrs(const std::vector<double> &got, const json &want, const std::string &what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (size_t i = 0; i < got.size(); ++i) {
    const double w = want[i].get<double>();
    EXPECT_NEAR(got[i], w, std::max(1e-9 * std::abs(w), 1e-15)) << what << " group " << i;
  }
}

TEST(LRSchedulerGolden, MatchesPyTorch) {
  const json golden = load_golden();
  ASSERT_GE(golden["cases"].size(), 11u);
  const json &metrics = golden["plateau_metrics"];
  for (auto it = golden["cases"].begin(); it != golden["cases"].end(); ++it) {
    const std::string name = it.key();
    SCOPED_TRACE(name);
    const json &c = it.value();
    Rig rig;
    const bool plateau = name.rfind("plateau", 0) == 0;
    std::shared_ptr<LRScheduler> sched;
    std::unique_ptr<ReduceLROnPlateau> reduce;
    if (plateau) reduce = std::make_unique<ReduceLROnPlateau>(rig.opt, plateau_options(c["args"]));
    else sched = make_scheduler(name, c["args"], rig.opt);
    const size_t steps = c["lrs"].size();
    for (size_t i = 0; i < steps; ++i) {
      if (i > 0) {
        rig.opt.step();
        if (plateau) reduce->step(metrics[i - 1].get<double>());
        else sched->step();
      }
      expect_lrs(rig.lrs(), c["lrs"][i], "lr at epoch " + std::to_string(i));
      if (plateau) EXPECT_EQ(reduce->get_last_lr(), rig.lrs());
      else EXPECT_EQ(sched->get_last_lr(), rig.lrs());
      if (c.contains("momentum")) expect_lrs(rig.momenta(), c["momentum"][i], "momentum at " + std::to_string(i));
    }
  }
}

TEST(LRScheduler, OneCyclePastTotalStepsThrows) {
  Rig rig;
  OneCycleLR sched(rig.opt, OneCycleLROptions(1.0).total_steps(3));
  for (int i = 0; i < 3; ++i) sched.step();
  EXPECT_THROW(sched.step(), Error);
}

TEST(LRScheduler, OneCycleCyclesAdamBeta1) {
  Tensor p = zeros({1}).requires_grad_();
  optim::Adam adam({p}, optim::AdamOptions());
  OneCycleLR sched(adam, OneCycleLROptions(0.1).epochs(2).steps_per_epoch(5));
  EXPECT_EQ(sched.total_steps(), 10);
  EXPECT_DOUBLE_EQ(adam.param_groups()[0].options_as<optim::AdamOptions>().beta1_, 0.95);
  EXPECT_DOUBLE_EQ(adam.lr(), 0.1 / 25);
}

// ---- state dicts --------------------------------------------------------------------------

/// Runs `steps` steps, snapshots optimizer + scheduler (through JSON), then
/// checks a fresh pair loaded from the snapshot follows the original.
void check_round_trip(const std::function<std::shared_ptr<LRScheduler>(optim::Optimizer &)> &make, int steps) {
  Rig a;
  auto sa = make(a.opt);
  for (int i = 0; i < steps; ++i) sa->step();
  const std::string opt_json = a.opt.state_dict().to_json();
  const auto opt_tensors = a.opt.state_dict().state;
  const SchedulerStateDict dict = SchedulerStateDict::from_json(sa->state_dict().to_json());
  Rig b;
  auto sb = make(b.opt);
  b.opt.load_state_dict(optim::OptimizerStateDict::from_json(opt_json, opt_tensors));
  sb->load_state_dict(dict);
  EXPECT_EQ(sb->last_epoch(), sa->last_epoch());
  EXPECT_EQ(sb->get_last_lr(), sa->get_last_lr());
  EXPECT_EQ(b.opt.param_groups()[0].initial_lr, a.opt.param_groups()[0].initial_lr);
  for (int i = 0; i < 6; ++i) {
    sa->step();
    sb->step();
    EXPECT_EQ(b.lrs(), a.lrs()) << "step " << i;
    EXPECT_EQ(b.momenta(), a.momenta()) << "step " << i;
  }
}

TEST(LRSchedulerStateDict, RoundTripContinuesIdentically) {
  check_round_trip([](optim::Optimizer &o) { return std::make_shared<StepLR>(o, 3, 0.5); }, 4);
  check_round_trip([](optim::Optimizer &o) { return std::make_shared<MultiStepLR>(o, std::vector<int64_t>{2, 6}); }, 3);
  check_round_trip([](optim::Optimizer &o) { return std::make_shared<CosineAnnealingLR>(o, 10, 0.01); }, 5);
  check_round_trip([](optim::Optimizer &o) { return std::make_shared<LinearLR>(o, 0.2, 1.0, 8); }, 3);
  check_round_trip([](optim::Optimizer &o) { return std::make_shared<OneCycleLR>(o, OneCycleLROptions(1.0).total_steps(20)); }, 7);
  check_round_trip(
      [](optim::Optimizer &o) {
        std::vector<std::shared_ptr<LRScheduler>> parts{std::make_shared<LinearLR>(o, 0.1, 1.0, 4),
                                                        std::make_shared<CosineAnnealingLR>(o, 10)};
        return std::make_shared<SequentialLR>(o, parts, std::vector<int64_t>{4});
      },
      3);  // resumes before the milestone and crosses it
}

TEST(LRSchedulerStateDict, PlateauRoundTripAndInfinityInJson) {
  Rig a, b;
  auto options = ReduceLROnPlateauOptions().patience(1).factor(0.5);
  ReduceLROnPlateau ra(a.opt, options), rb(b.opt, options);
  EXPECT_EQ(ra.best(), std::numeric_limits<double>::infinity());
  rb.load_state_dict(SchedulerStateDict::from_json(ra.state_dict().to_json()));
  EXPECT_EQ(rb.best(), std::numeric_limits<double>::infinity());
  for (double m : {1.0, 1.0, 1.0}) ra.step(m);
  b.opt.load_state_dict(a.opt.state_dict());
  rb.load_state_dict(SchedulerStateDict::from_json(ra.state_dict().to_json()));
  for (double m : {0.9, 0.95, 0.96, 0.97, 0.8}) {
    ra.step(m);
    rb.step(m);
    EXPECT_EQ(rb.get_last_lr(), ra.get_last_lr());
    EXPECT_EQ(rb.num_bad_epochs(), ra.num_bad_epochs());
  }
  EXPECT_LT(ra.get_last_lr()[0], 0.1);
}

void expect_error(const std::function<void()> &fn, const std::vector<std::string> &parts) {
  try {
    fn();
    ADD_FAILURE() << "expected kiln::Error containing " << parts[0];
  } catch (const Error &e) {
    for (const std::string &p : parts) EXPECT_NE(std::string(e.what()).find(p), std::string::npos) << e.what();
  }
}

TEST(LRSchedulerStateDict, MismatchesThrow) {
  Rig rig;
  StepLR step(rig.opt, 2);
  CosineAnnealingLR cosine(rig.opt, 5);
  expect_error([&] { cosine.load_state_dict(step.state_dict()); }, {"CosineAnnealingLR", "'StepLR'"});
  auto short_dict = step.state_dict();
  short_dict.values["base_lrs"] = {0.1};
  expect_error([&] { step.load_state_dict(short_dict); }, {"base_lrs", "1 values", "expected 2"});
  auto missing = step.state_dict();
  missing.values.erase("last_epoch");
  expect_error([&] { step.load_state_dict(missing); }, {"last_epoch"});
  ReduceLROnPlateau plateau(rig.opt);
  expect_error([&] { plateau.load_state_dict(step.state_dict()); }, {"ReduceLROnPlateau", "'StepLR'"});
  expect_error([] { SchedulerStateDict::from_json("[1, 2"); }, {"from_json"});
}

// Counters saved as doubles (a checkpoint's JSON) that are not whole numbers
// were cast to int64 (undefined behaviour for 1e300 or NaN; found by the
// checkpoint fuzzer's corpus, tests/fuzz/corpus/checkpoint/crash-plateau-epoch-1e300).
TEST(LRSchedulerStateDict, CountersMustBeWholeNumbers) {
  Rig rig;
  StepLR step(rig.opt, 2);
  for (double bad : {1e300, std::nan(""), 2.5}) {
    auto dict = step.state_dict();
    dict.values["last_epoch"] = {bad};
    expect_error([&] { step.load_state_dict(dict); }, {"StepLR.load_state_dict", "'last_epoch'", "whole number"});
    EXPECT_EQ(step.last_epoch(), 0);
  }
  ReduceLROnPlateau plateau(rig.opt);
  auto dict = plateau.state_dict();
  dict.values["last_epoch"] = {7.0};
  dict.values["cooldown_counter"] = {-std::numeric_limits<double>::infinity()};
  expect_error([&] { plateau.load_state_dict(dict); }, {"'cooldown_counter' is -inf", "whole number"});
  EXPECT_EQ(plateau.state_dict().values.at("last_epoch"), std::vector<double>{0.0}); // nothing assigned
}

// ---- bad arguments ----------------------------------------------------------------------------

TEST(LRSchedulerErrors, BadArgumentsNameTheValue) {
  Rig rig, other;
  auto &o = rig.opt;
  expect_error([&] { StepLR(o, 0); }, {"StepLR", "step_size", "0"});
  expect_error([&] { StepLR(o, 2, -0.5); }, {"StepLR", "gamma", "-0.5"});
  expect_error([&] { MultiStepLR(o, {5, 3}); }, {"MultiStepLR", "sorted", "5", "3"});
  expect_error([&] { MultiStepLR(o, {-1}); }, {"MultiStepLR", "-1"});
  expect_error([&] { CosineAnnealingLR(o, 0); }, {"CosineAnnealingLR", "T_max", "0"});
  expect_error([&] { LinearLR(o, 1.5); }, {"LinearLR", "start_factor", "1.5"});
  expect_error([&] { LinearLR(o, 0.5, -0.1); }, {"LinearLR", "end_factor", "-0.1"});
  expect_error([&] { LinearLR(o, 0.5, 1.0, 0); }, {"LinearLR", "total_iters", "0"});
  auto s1 = std::make_shared<StepLR>(o, 2);
  auto s2 = std::make_shared<StepLR>(o, 3);
  auto foreign = std::make_shared<StepLR>(other.opt, 3);
  using List = std::vector<std::shared_ptr<LRScheduler>>;
  expect_error([&] { SequentialLR(o, List{s1, s2}, {}); }, {"SequentialLR", "1 milestones", "got 0"});
  expect_error([&] { SequentialLR(o, List{s1, foreign}, {3}); }, {"SequentialLR", "scheduler 1", "another optimizer"});
  expect_error([&] { SequentialLR(o, List{}, {}); }, {"SequentialLR", "no schedulers"});
  expect_error([&] { SequentialLR(o, List{s1, s2}, {0}); }, {"SequentialLR", "milestones", "0"});
  expect_error([&] { OneCycleLR(o, OneCycleLROptions(1.0)); }, {"OneCycleLR", "total_steps"});
  expect_error([&] { OneCycleLR(o, OneCycleLROptions(1.0).total_steps(-4)); }, {"OneCycleLR", "-4"});
  expect_error([&] { OneCycleLR(o, OneCycleLROptions(1.0).total_steps(9).pct_start(1.5)); }, {"pct_start", "1.5"});
  expect_error([&] { OneCycleLR(o, OneCycleLROptions(1.0).total_steps(9).anneal_strategy("exp")); },
               {"anneal_strategy", "'exp'"});
  expect_error([&] { OneCycleLR(o, OneCycleLROptions(1.0).total_steps(9).max_lrs({1, 2, 3})); },
               {"OneCycleLR", "max_lr", "got 3"});
  expect_error([&] { OneCycleLR(o, OneCycleLROptions(1.0).total_steps(9).div_factor(0)); }, {"div_factor", "0"});
  expect_error([&] { ReduceLROnPlateau(o, ReduceLROnPlateauOptions().factor(1.0)); }, {"factor", "1"});
  expect_error([&] { ReduceLROnPlateau(o, ReduceLROnPlateauOptions().mode("up")); }, {"mode", "'up'"});
  expect_error([&] { ReduceLROnPlateau(o, ReduceLROnPlateauOptions().threshold_mode("pct")); },
               {"threshold_mode", "'pct'"});
  expect_error([&] { ReduceLROnPlateau(o, ReduceLROnPlateauOptions().patience(-1)); }, {"patience", "-1"});
  expect_error([&] { ReduceLROnPlateau(o, ReduceLROnPlateauOptions().min_lrs({0, 0, 0})); }, {"min_lr", "got 3"});
  ReduceLROnPlateau plateau(o);
  expect_error([&] { plateau.step(std::nan("")); }, {"ReduceLROnPlateau", "NaN"});
}

}  // namespace
}  // namespace kiln
