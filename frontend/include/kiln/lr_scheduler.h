// kiln/lr_scheduler.h - learning-rate schedulers (torch.optim.lr_scheduler
// names, defaults and numbers).
//
// A scheduler holds a reference to an optimizer (which must outlive it) and
// writes the lr of every param group. As in PyTorch, constructing a scheduler
// performs its first step: epoch 0's lr is in the optimizer right away, and
// step() is called once per epoch (or batch, for OneCycleLR) *after*
// optimizer.step(). The first scheduler attached to an optimizer records each
// group's lr as ParamGroup::initial_lr; schedulers compute from those
// ("base_lrs"), so several schedulers built on one optimizer (SequentialLR)
// share them.
//
// Schedulers use PyTorch's closed forms, lr(base_lr, epoch); they give the
// numbers of PyTorch's chainable forms when the scheduler alone sets the lr.
// Bad arguments throw kiln::Error naming the scheduler and the value.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "kiln/optim.h"

namespace kiln::optim::lr_scheduler {

/// A scheduler's state, as torch's scheduler.state_dict(): named numbers
/// ("last_epoch", "base_lrs", "last_lr", "best", ...; scalars are one-element
/// lists) plus the states of wrapped schedulers (SequentialLR). Hyperparameters
/// are not part of it: they come from the constructor.
struct SchedulerStateDict {
  std::string scheduler;  ///< "StepLR", "OneCycleLR", ...
  std::map<std::string, std::vector<double>> values;
  std::vector<SchedulerStateDict> children;

  /// {"scheduler": ..., "values": {...}, "children": [...]}; infinities are
  /// written as the strings "inf" / "-inf".
  std::string to_json() const;
  /// Inverse of to_json(); throws kiln::Error on malformed JSON.
  static SchedulerStateDict from_json(const std::string &json);
};

/// Base of the epoch-driven schedulers (PyTorch's LRScheduler).
class LRScheduler {
public:
  virtual ~LRScheduler() = default;
  LRScheduler(const LRScheduler &) = delete;
  LRScheduler &operator=(const LRScheduler &) = delete;

  /// Advances one epoch and writes the new lr into every param group.
  virtual void step();
  /// The lr of every group as this scheduler last set it.
  const std::vector<double> &get_last_lr() const { return last_lr_; }
  /// Epochs stepped since construction (0 right after construction).
  int64_t last_epoch() const { return last_epoch_; }
  /// The lrs the schedule starts from (each group's initial_lr).
  const std::vector<double> &base_lrs() const { return base_lrs_; }
  Optimizer &optimizer() const { return *optimizer_; }
  const std::string &name() const { return name_; }

  /// {"last_epoch", "base_lrs", "last_lr"} (+ children for SequentialLR).
  virtual SchedulerStateDict state_dict() const;
  /// Restores state_dict(). Does not touch the optimizer's lrs (load the
  /// optimizer's own state dict for those, as in PyTorch). Throws
  /// kiln::Error if the dict is for another scheduler type or another
  /// number of param groups, or a value is missing.
  virtual void load_state_dict(const SchedulerStateDict &dict);

protected:
  /// Records each group's initial_lr (if unset) and base_lrs. Throws
  /// kiln::Error if the optimizer has no groups.
  LRScheduler(Optimizer &optimizer, const char *name);
  /// The lr of every group at last_epoch_ (the closed form).
  virtual std::vector<double> get_lr() const = 0;
  /// Hook run after every step's lrs are applied (OneCycleLR's momentum).
  virtual void on_epoch() {}
  /// Sets each group's initial_lr if unset and copies them into base_lrs_.
  void init_base_lrs();
  /// PyTorch's _initial_step (init_base_lrs, then step()): derived
  /// constructors call it last.
  void initial_step();
  /// Sets last_epoch_ = epoch and applies the closed form (PyTorch's step(epoch)).
  void step_to(int64_t epoch);
  /// Writes `lrs` into the groups and last_lr_.
  void apply(const std::vector<double> &lrs);
  /// Helper for load_state_dict: values[key] with `size` entries, else throws.
  static const std::vector<double> &value(const SchedulerStateDict &dict, const char *key, size_t size);
  void check_dict_name(const SchedulerStateDict &dict) const;

  Optimizer *optimizer_;
  std::string name_;
  std::vector<double> base_lrs_, last_lr_;
  int64_t last_epoch_ = -1;

  friend class SequentialLR;
};

/// lr = base_lr * gamma^floor(epoch / step_size).
/// Throws kiln::Error if step_size < 1 or gamma <= 0.
class StepLR : public LRScheduler {
public:
  StepLR(Optimizer &optimizer, int64_t step_size, double gamma = 0.1);

protected:
  std::vector<double> get_lr() const override;

private:
  int64_t step_size_;
  double gamma_;
};

/// lr = base_lr * gamma^(number of milestones <= epoch). Milestones must be
/// non-decreasing; a repeated milestone decays twice (as PyTorch's Counter).
/// Throws kiln::Error on unsorted or negative milestones or gamma <= 0.
class MultiStepLR : public LRScheduler {
public:
  MultiStepLR(Optimizer &optimizer, std::vector<int64_t> milestones, double gamma = 0.1);

protected:
  std::vector<double> get_lr() const override;

private:
  std::vector<int64_t> milestones_;
  double gamma_;
};

/// Cosine annealing (Loshchilov & Hutter, "SGDR: Stochastic Gradient Descent
/// with Warm Restarts", ICLR 2017), without restarts:
/// lr = eta_min + (base_lr - eta_min) * (1 + cos(pi * epoch / T_max)) / 2
/// (periodic past T_max, as PyTorch). Throws kiln::Error if T_max < 1.
class CosineAnnealingLR : public LRScheduler {
public:
  CosineAnnealingLR(Optimizer &optimizer, int64_t T_max, double eta_min = 0.0);

protected:
  std::vector<double> get_lr() const override;

private:
  int64_t T_max_;
  double eta_min_;
};

/// Linear warmup (or decay) of a multiplicative factor:
/// lr = base_lr * (start_factor + (end_factor - start_factor) * min(epoch, total_iters) / total_iters).
/// Throws kiln::Error unless 0 < start_factor <= 1, 0 <= end_factor <= 1,
/// total_iters >= 1.
class LinearLR : public LRScheduler {
public:
  LinearLR(Optimizer &optimizer, double start_factor = 1.0 / 3, double end_factor = 1.0, int64_t total_iters = 5);

protected:
  std::vector<double> get_lr() const override;

private:
  double start_factor_, end_factor_;
  int64_t total_iters_;
};

/// Runs schedulers one after another: schedulers[i] is active for epochs in
/// [milestones[i-1], milestones[i]); at a milestone the next scheduler
/// restarts from its epoch 0. E.g. warmup then cosine:
///   auto warm = std::make_shared<LinearLR>(opt, 0.1, 1.0, 5);
///   auto cos = std::make_shared<CosineAnnealingLR>(opt, 95);
///   SequentialLR sched(opt, {warm, cos}, {5});
/// Construction resets every group's lr to initial_lr and restarts
/// schedulers[0] (as PyTorch). Throws kiln::Error if the schedulers are empty,
/// null, built on another optimizer, or milestones.size() !=
/// schedulers.size() - 1, or milestones are not increasing and positive.
class SequentialLR : public LRScheduler {
public:
  SequentialLR(Optimizer &optimizer, std::vector<std::shared_ptr<LRScheduler>> schedulers,
               std::vector<int64_t> milestones);
  void step() override;
  SchedulerStateDict state_dict() const override;
  void load_state_dict(const SchedulerStateDict &dict) override;

protected:
  std::vector<double> get_lr() const override { return last_lr_; }

private:
  std::vector<std::shared_ptr<LRScheduler>> schedulers_;
  std::vector<int64_t> milestones_;
};

struct OneCycleLROptions {
  /// One max_lr for every group, or one per group with max_lrs().
  explicit OneCycleLROptions(double max_lr) : max_lrs_{max_lr} {}
  OneCycleLROptions &max_lrs(std::vector<double> v) { max_lrs_ = std::move(v); return *this; }
  OneCycleLROptions &total_steps(int64_t v) { total_steps_ = v; return *this; }
  OneCycleLROptions &epochs(int64_t v) { epochs_ = v; return *this; }
  OneCycleLROptions &steps_per_epoch(int64_t v) { steps_per_epoch_ = v; return *this; }
  OneCycleLROptions &pct_start(double v) { pct_start_ = v; return *this; }
  OneCycleLROptions &anneal_strategy(std::string v) { anneal_strategy_ = std::move(v); return *this; }
  OneCycleLROptions &cycle_momentum(bool v) { cycle_momentum_ = v; return *this; }
  OneCycleLROptions &base_momentum(double v) { base_momentum_ = v; return *this; }
  OneCycleLROptions &max_momentum(double v) { max_momentum_ = v; return *this; }
  OneCycleLROptions &div_factor(double v) { div_factor_ = v; return *this; }
  OneCycleLROptions &final_div_factor(double v) { final_div_factor_ = v; return *this; }
  OneCycleLROptions &three_phase(bool v) { three_phase_ = v; return *this; }
  std::vector<double> max_lrs_;
  int64_t total_steps_ = 0;                   ///< 0: epochs * steps_per_epoch
  int64_t epochs_ = 0, steps_per_epoch_ = 0;
  double pct_start_ = 0.3;                    ///< fraction of steps spent warming up
  std::string anneal_strategy_ = "cos";       ///< "cos" or "linear"
  bool cycle_momentum_ = true;
  double base_momentum_ = 0.85, max_momentum_ = 0.95;
  double div_factor_ = 25.0;                  ///< initial_lr = max_lr / div_factor
  double final_div_factor_ = 1e4;             ///< min_lr = initial_lr / final_div_factor
  bool three_phase_ = false;
};

/// The 1cycle policy (Smith & Topin, "Super-Convergence: Very Fast Training of
/// Neural Networks Using Large Learning Rates", 2017), fastai's two phases by
/// default: lr anneals initial_lr -> max_lr over pct_start*total_steps steps,
/// then max_lr -> min_lr; three_phase: initial -> max -> initial (symmetric),
/// then -> min_lr. Annealing is cosine (end + (start-end)/2*(1+cos(pi*pct)))
/// or linear. Stepped once per batch; total_steps steps allowed.
/// cycle_momentum (default on, as PyTorch) cycles each group's momentum
/// (SGD/RMSprop momentum, Adam/AdamW beta1) inversely between max_momentum
/// and base_momentum. Throws kiln::Error on total_steps (or epochs,
/// steps_per_epoch) < 1, pct_start outside [0, 1], an unknown
/// anneal_strategy, max_lrs not 1 or one per group, div factors <= 0, and
/// from step() past total_steps.
class OneCycleLR : public LRScheduler {
public:
  OneCycleLR(Optimizer &optimizer, OneCycleLROptions options);
  /// The total number of steps of the cycle.
  int64_t total_steps() const { return total_steps_; }

protected:
  std::vector<double> get_lr() const override;
  void on_epoch() override;

private:
  struct Phase {
    double end_step;
    int start_lr, end_lr, start_momentum, end_momentum;  ///< 0 initial, 1 max, 2 min (lr); 0 max, 1 base (momentum)
  };
  double anneal(double start, double end, double pct) const;
  OneCycleLROptions opt_;
  int64_t total_steps_;
  std::vector<Phase> phases_;
  std::vector<double> max_lrs_, min_lrs_;
};

struct ReduceLROnPlateauOptions {
  ReduceLROnPlateauOptions &mode(std::string v) { mode_ = std::move(v); return *this; }
  ReduceLROnPlateauOptions &factor(double v) { factor_ = v; return *this; }
  ReduceLROnPlateauOptions &patience(int64_t v) { patience_ = v; return *this; }
  ReduceLROnPlateauOptions &threshold(double v) { threshold_ = v; return *this; }
  ReduceLROnPlateauOptions &threshold_mode(std::string v) { threshold_mode_ = std::move(v); return *this; }
  ReduceLROnPlateauOptions &cooldown(int64_t v) { cooldown_ = v; return *this; }
  ReduceLROnPlateauOptions &min_lr(double v) { min_lrs_ = {v}; return *this; }
  ReduceLROnPlateauOptions &min_lrs(std::vector<double> v) { min_lrs_ = std::move(v); return *this; }
  ReduceLROnPlateauOptions &eps(double v) { eps_ = v; return *this; }
  std::string mode_ = "min";            ///< "min": lower metric is better; "max": higher
  double factor_ = 0.1;                 ///< new_lr = lr * factor
  int64_t patience_ = 10;               ///< bad epochs tolerated before reducing
  double threshold_ = 1e-4;             ///< significance of an improvement
  std::string threshold_mode_ = "rel";  ///< "rel": best*(1 -/+ threshold); "abs": best -/+ threshold
  int64_t cooldown_ = 0;                ///< epochs ignored after a reduction
  std::vector<double> min_lrs_ = {0.0}; ///< one for every group, or one per group
  double eps_ = 1e-8;                   ///< reductions smaller than this are skipped
};

/// Reduces the lr by `factor` when a metric stops improving for more than
/// `patience` epochs (torch.optim.lr_scheduler.ReduceLROnPlateau): a metric
/// is better in mode min/rel if metric < best*(1-threshold), min/abs if
/// metric < best-threshold, max/rel if > best*(1+threshold), max/abs if
/// > best+threshold. Then new_lr = max(lr*factor, min_lr), applied if
/// lr - new_lr > eps; `cooldown` epochs follow in which bad epochs are not
/// counted. Unlike the other schedulers it reads the current lr (chainable).
/// Throws kiln::Error on factor >= 1 or < 0, an unknown mode or threshold_mode,
/// negative patience/cooldown/threshold, or min_lrs not 1 or one per group.
class ReduceLROnPlateau {
public:
  explicit ReduceLROnPlateau(Optimizer &optimizer, ReduceLROnPlateauOptions options = {});
  /// One epoch with validation `metric` (e.g. the loss). Throws kiln::Error on NaN.
  void step(double metric);
  const std::vector<double> &get_last_lr() const { return last_lr_; }
  int64_t last_epoch() const { return last_epoch_; }
  /// The best metric seen (+inf in mode min, -inf in max before any step).
  double best() const { return best_; }
  int64_t num_bad_epochs() const { return num_bad_epochs_; }
  bool in_cooldown() const { return cooldown_counter_ > 0; }

  /// {"last_epoch", "best", "num_bad_epochs", "cooldown_counter", "last_lr"}.
  SchedulerStateDict state_dict() const;
  /// Throws kiln::Error on another scheduler type or a missing value.
  void load_state_dict(const SchedulerStateDict &dict);

private:
  bool is_better(double metric) const;
  void reduce_lr();
  Optimizer *optimizer_;
  ReduceLROnPlateauOptions opt_;
  std::vector<double> min_lrs_, last_lr_;
  double best_;
  int64_t last_epoch_ = 0, num_bad_epochs_ = 0, cooldown_counter_ = 0;
};

}  // namespace kiln::optim::lr_scheduler
