// Learning-rate schedulers: PyTorch's closed forms (torch/optim/lr_scheduler.py,
// `_get_closed_form_lr`) and its SequentialLR / OneCycleLR / ReduceLROnPlateau
// logic, plus the JSON form of SchedulerStateDict.
#include "kiln/lr_scheduler.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include <nlohmann/json.hpp>

namespace kiln::optim::lr_scheduler {

namespace {
constexpr double kPi = 3.14159265358979323846;

/// `values` broadcast to one per group (a single value repeats), else throws.
std::vector<double> per_group(const std::vector<double> &values, size_t groups, const char *who, const char *what) {
  KILN_CHECK(values.size() == 1 || values.size() == groups, who, ": expected 1 or ", groups, " values for ", what,
             ", got ", values.size());
  return values.size() == 1 ? std::vector<double>(groups, values[0]) : values;
}
}  // namespace

// ---- LRScheduler --------------------------------------------------------------------

LRScheduler::LRScheduler(Optimizer &optimizer, const char *name) : optimizer_(&optimizer), name_(name) {
  KILN_CHECK(!optimizer.param_groups().empty(), name, ": the optimizer has no param groups");
}

void LRScheduler::init_base_lrs() {
  base_lrs_.clear();
  for (ParamGroup &g : optimizer_->param_groups()) {
    if (!g.initial_lr) g.initial_lr = g.lr();
    base_lrs_.push_back(*g.initial_lr);
  }
}

void LRScheduler::initial_step() {
  init_base_lrs();
  step();
}

void LRScheduler::step() { step_to(last_epoch_ + 1); }

void LRScheduler::step_to(int64_t epoch) {
  last_epoch_ = epoch;
  apply(get_lr());
  on_epoch();
}

void LRScheduler::apply(const std::vector<double> &lrs) {
  std::vector<ParamGroup> &groups = optimizer_->param_groups();
  KILN_CHECK(lrs.size() == groups.size(), name_, ": the optimizer has ", groups.size(),
             " param groups, the scheduler was built for ", lrs.size());
  for (size_t i = 0; i < groups.size(); ++i) groups[i].set_lr(lrs[i]);
  last_lr_ = lrs;
}

SchedulerStateDict LRScheduler::state_dict() const {
  SchedulerStateDict dict;
  dict.scheduler = name_;
  dict.values["last_epoch"] = {static_cast<double>(last_epoch_)};
  dict.values["base_lrs"] = base_lrs_;
  dict.values["last_lr"] = last_lr_;
  return dict;
}

void LRScheduler::check_dict_name(const SchedulerStateDict &dict) const {
  KILN_CHECK(dict.scheduler == name_, name_, ".load_state_dict: the state dict is for scheduler '", dict.scheduler,
             "', this scheduler is ", name_);
}

const std::vector<double> &LRScheduler::value(const SchedulerStateDict &dict, const char *key, size_t size) {
  auto it = dict.values.find(key);
  KILN_CHECK(it != dict.values.end(), dict.scheduler, ".load_state_dict: the state dict has no '", key, "'");
  KILN_CHECK(it->second.size() == size, dict.scheduler, ".load_state_dict: '", key, "' has ", it->second.size(),
             " values, expected ", size, " (one per param group)");
  return it->second;
}

/// A counter stored as a double in a state dict (last_epoch, ...) back as an
/// integer. Throws kiln::Error naming the scheduler, key and value unless it
/// is a whole number in int64 range (a cast would be undefined otherwise).
static int64_t whole_number(const SchedulerStateDict &dict, const char *key, double v) {
  KILN_CHECK(std::isfinite(v) && v == std::floor(v) && v >= -9.2e18 && v <= 9.2e18, dict.scheduler,
             ".load_state_dict: '", key, "' is ", v, "; expected a whole number (a count of epochs or steps)");
  return static_cast<int64_t>(v);
}

void LRScheduler::load_state_dict(const SchedulerStateDict &dict) {
  check_dict_name(dict);
  const size_t groups = optimizer_->param_groups().size();
  const int64_t epoch = whole_number(dict, "last_epoch", value(dict, "last_epoch", 1)[0]);
  base_lrs_ = value(dict, "base_lrs", groups);
  last_lr_ = value(dict, "last_lr", groups);
  last_epoch_ = epoch;
}

// ---- StepLR, MultiStepLR, CosineAnnealingLR, LinearLR ------------------------------------

StepLR::StepLR(Optimizer &optimizer, int64_t step_size, double gamma)
    : LRScheduler(optimizer, "StepLR"), step_size_(step_size), gamma_(gamma) {
  KILN_CHECK(step_size >= 1, "StepLR: step_size must be >= 1, got ", step_size);
  KILN_CHECK(gamma > 0, "StepLR: gamma must be > 0, got ", gamma);
  initial_step();
}

std::vector<double> StepLR::get_lr() const {
  std::vector<double> lrs;
  for (double base : base_lrs_) lrs.push_back(base * std::pow(gamma_, static_cast<double>(last_epoch_ / step_size_)));
  return lrs;
}

MultiStepLR::MultiStepLR(Optimizer &optimizer, std::vector<int64_t> milestones, double gamma)
    : LRScheduler(optimizer, "MultiStepLR"), milestones_(std::move(milestones)), gamma_(gamma) {
  for (size_t i = 0; i < milestones_.size(); ++i) {
    KILN_CHECK(milestones_[i] >= 0, "MultiStepLR: milestone ", milestones_[i], " is negative");
    KILN_CHECK(i == 0 || milestones_[i - 1] <= milestones_[i], "MultiStepLR: milestones must be sorted, got ",
               milestones_[i - 1], " before ", milestones_[i]);
  }
  KILN_CHECK(gamma > 0, "MultiStepLR: gamma must be > 0, got ", gamma);
  initial_step();
}

std::vector<double> MultiStepLR::get_lr() const {
  const auto passed = std::upper_bound(milestones_.begin(), milestones_.end(), last_epoch_) - milestones_.begin();
  std::vector<double> lrs;
  for (double base : base_lrs_) lrs.push_back(base * std::pow(gamma_, static_cast<double>(passed)));
  return lrs;
}

CosineAnnealingLR::CosineAnnealingLR(Optimizer &optimizer, int64_t T_max, double eta_min)
    : LRScheduler(optimizer, "CosineAnnealingLR"), T_max_(T_max), eta_min_(eta_min) {
  KILN_CHECK(T_max >= 1, "CosineAnnealingLR: T_max must be >= 1, got ", T_max);
  initial_step();
}

std::vector<double> CosineAnnealingLR::get_lr() const {
  const double c = 1.0 + std::cos(kPi * static_cast<double>(last_epoch_) / static_cast<double>(T_max_));
  std::vector<double> lrs;
  for (double base : base_lrs_) lrs.push_back(eta_min_ + (base - eta_min_) * c / 2.0);
  return lrs;
}

LinearLR::LinearLR(Optimizer &optimizer, double start_factor, double end_factor, int64_t total_iters)
    : LRScheduler(optimizer, "LinearLR"), start_factor_(start_factor), end_factor_(end_factor),
      total_iters_(total_iters) {
  KILN_CHECK(start_factor > 0 && start_factor <= 1, "LinearLR: start_factor must be in (0, 1], got ", start_factor);
  KILN_CHECK(end_factor >= 0 && end_factor <= 1, "LinearLR: end_factor must be in [0, 1], got ", end_factor);
  KILN_CHECK(total_iters >= 1, "LinearLR: total_iters must be >= 1, got ", total_iters);
  initial_step();
}

std::vector<double> LinearLR::get_lr() const {
  const double t = static_cast<double>(std::min(total_iters_, last_epoch_)) / static_cast<double>(total_iters_);
  std::vector<double> lrs;
  for (double base : base_lrs_) lrs.push_back(base * (start_factor_ + (end_factor_ - start_factor_) * t));
  return lrs;
}

// ---- SequentialLR ----------------------------------------------------------------------------

SequentialLR::SequentialLR(Optimizer &optimizer, std::vector<std::shared_ptr<LRScheduler>> schedulers,
                           std::vector<int64_t> milestones)
    : LRScheduler(optimizer, "SequentialLR"), schedulers_(std::move(schedulers)), milestones_(std::move(milestones)) {
  KILN_CHECK(!schedulers_.empty(), "SequentialLR: got no schedulers");
  for (size_t i = 0; i < schedulers_.size(); ++i) {
    KILN_CHECK(schedulers_[i] != nullptr, "SequentialLR: scheduler ", i, " is null");
    KILN_CHECK(&schedulers_[i]->optimizer() == &optimizer, "SequentialLR: scheduler ", i, " (",
               schedulers_[i]->name(), ") belongs to another optimizer");
    KILN_CHECK(dynamic_cast<SequentialLR *>(schedulers_[i].get()) == nullptr, "SequentialLR: scheduler ", i,
               " is a SequentialLR; nesting is not supported");
  }
  KILN_CHECK(milestones_.size() == schedulers_.size() - 1, "SequentialLR: expected ", schedulers_.size() - 1,
             " milestones for ", schedulers_.size(), " schedulers, got ", milestones_.size());
  for (size_t i = 0; i < milestones_.size(); ++i)
    KILN_CHECK(milestones_[i] > (i == 0 ? 0 : milestones_[i - 1]), "SequentialLR: milestones must be positive and ",
               "increasing, got ", milestones_[i], " at index ", i);
  init_base_lrs();
  last_epoch_ = 0;
  // As PyTorch: reset the lrs, undo the initial step of every scheduler and
  // redo it for the first one only.
  for (ParamGroup &g : optimizer.param_groups()) g.set_lr(*g.initial_lr);
  for (auto &s : schedulers_) s->last_epoch_ -= 1;
  schedulers_[0]->step();
  last_lr_ = schedulers_[0]->get_last_lr();
}

void SequentialLR::step() {
  ++last_epoch_;
  const size_t idx = std::upper_bound(milestones_.begin(), milestones_.end(), last_epoch_) - milestones_.begin();
  LRScheduler &s = *schedulers_[idx];
  if (idx > 0 && milestones_[idx - 1] == last_epoch_) s.step_to(0);
  else s.step();
  last_lr_ = s.get_last_lr();
}

SchedulerStateDict SequentialLR::state_dict() const {
  SchedulerStateDict dict;
  dict.scheduler = name_;
  dict.values["last_epoch"] = {static_cast<double>(last_epoch_)};
  dict.values["last_lr"] = last_lr_;
  for (const auto &s : schedulers_) dict.children.push_back(s->state_dict());
  return dict;
}

void SequentialLR::load_state_dict(const SchedulerStateDict &dict) {
  check_dict_name(dict);
  KILN_CHECK(dict.children.size() == schedulers_.size(), "SequentialLR.load_state_dict: the state dict has ",
             dict.children.size(), " schedulers, this SequentialLR has ", schedulers_.size());
  const size_t groups = optimizer_->param_groups().size();
  const int64_t epoch = whole_number(dict, "last_epoch", value(dict, "last_epoch", 1)[0]);
  std::vector<double> last_lr = value(dict, "last_lr", groups);
  for (size_t i = 0; i < schedulers_.size(); ++i) schedulers_[i]->check_dict_name(dict.children[i]);
  for (size_t i = 0; i < schedulers_.size(); ++i) schedulers_[i]->load_state_dict(dict.children[i]);
  last_epoch_ = epoch;
  last_lr_ = std::move(last_lr);
}

// ---- OneCycleLR ------------------------------------------------------------------------------

OneCycleLR::OneCycleLR(Optimizer &optimizer, OneCycleLROptions options)
    : LRScheduler(optimizer, "OneCycleLR"), opt_(std::move(options)) {
  if (opt_.total_steps_ != 0) {
    KILN_CHECK(opt_.total_steps_ > 0, "OneCycleLR: expected a positive total_steps, got ", opt_.total_steps_);
    total_steps_ = opt_.total_steps_;
  } else {
    KILN_CHECK(opt_.epochs_ > 0 && opt_.steps_per_epoch_ > 0, "OneCycleLR: set total_steps, or positive epochs and ",
               "steps_per_epoch (got epochs ", opt_.epochs_, ", steps_per_epoch ", opt_.steps_per_epoch_, ")");
    total_steps_ = opt_.epochs_ * opt_.steps_per_epoch_;
  }
  KILN_CHECK(opt_.pct_start_ >= 0 && opt_.pct_start_ <= 1, "OneCycleLR: pct_start must be in [0, 1], got ",
             opt_.pct_start_);
  KILN_CHECK(opt_.anneal_strategy_ == "cos" || opt_.anneal_strategy_ == "linear",
             "OneCycleLR: anneal_strategy must be 'cos' or 'linear', got '", opt_.anneal_strategy_, "'");
  KILN_CHECK(opt_.div_factor_ > 0, "OneCycleLR: div_factor must be > 0, got ", opt_.div_factor_);
  KILN_CHECK(opt_.final_div_factor_ > 0, "OneCycleLR: final_div_factor must be > 0, got ", opt_.final_div_factor_);
  std::vector<ParamGroup> &groups = optimizer.param_groups();
  max_lrs_ = per_group(opt_.max_lrs_, groups.size(), "OneCycleLR", "max_lr");
  const double total = static_cast<double>(total_steps_), pct = opt_.pct_start_;
  // lr endpoints: 0 initial, 1 max, 2 min; momentum endpoints: 0 max, 1 base.
  if (opt_.three_phase_)
    phases_ = {{pct * total - 1, 0, 1, 0, 1}, {2 * pct * total - 2, 1, 0, 1, 0}, {total - 1, 0, 2, 0, 0}};
  else
    phases_ = {{pct * total - 1, 0, 1, 0, 1}, {total - 1, 1, 2, 1, 0}};
  for (size_t i = 0; i < groups.size(); ++i) {
    groups[i].initial_lr = max_lrs_[i] / opt_.div_factor_;
    min_lrs_.push_back(*groups[i].initial_lr / opt_.final_div_factor_);
  }
  initial_step();
}

double OneCycleLR::anneal(double start, double end, double pct) const {
  if (opt_.anneal_strategy_ == "cos") return end + (start - end) / 2.0 * (std::cos(kPi * pct) + 1);
  return (end - start) * pct + start;
}

/// The phase holding `step` and the fraction of it done (PyTorch's loop).
static std::pair<size_t, double> find_phase(const std::vector<double> &ends, double step) {
  double start = 0;
  for (size_t i = 0; i < ends.size(); ++i) {
    if (step <= ends[i] || i + 1 == ends.size()) return {i, (step - start) / (ends[i] - start)};
    start = ends[i];
  }
  return {0, 0.0};
}

std::vector<double> OneCycleLR::get_lr() const {
  KILN_CHECK(last_epoch_ <= total_steps_, "OneCycleLR: tried to step ", last_epoch_ + 1,
             " times; the specified number of total steps is ", total_steps_);
  std::vector<double> ends;
  for (const Phase &p : phases_) ends.push_back(p.end_step);
  auto [phase, pct] = find_phase(ends, static_cast<double>(last_epoch_));
  std::vector<double> lrs;
  for (size_t i = 0; i < base_lrs_.size(); ++i) {
    const double points[3] = {base_lrs_[i], max_lrs_[i], min_lrs_[i]};
    lrs.push_back(anneal(points[phases_[phase].start_lr], points[phases_[phase].end_lr], pct));
  }
  return lrs;
}

void OneCycleLR::on_epoch() {
  if (!opt_.cycle_momentum_) return;
  std::vector<double> ends;
  for (const Phase &p : phases_) ends.push_back(p.end_step);
  auto [phase, pct] = find_phase(ends, static_cast<double>(last_epoch_));
  const double points[2] = {opt_.max_momentum_, opt_.base_momentum_};
  const double m = anneal(points[phases_[phase].start_momentum], points[phases_[phase].end_momentum], pct);
  for (ParamGroup &g : optimizer_->param_groups()) g.options().set_momentum(m);
}

// ---- ReduceLROnPlateau ------------------------------------------------------------------------

ReduceLROnPlateau::ReduceLROnPlateau(Optimizer &optimizer, ReduceLROnPlateauOptions options)
    : optimizer_(&optimizer), opt_(std::move(options)) {
  const char *who = "ReduceLROnPlateau";
  KILN_CHECK(opt_.factor_ >= 0 && opt_.factor_ < 1, who, ": factor must be in [0, 1), got ", opt_.factor_);
  KILN_CHECK(opt_.mode_ == "min" || opt_.mode_ == "max", who, ": mode must be 'min' or 'max', got '", opt_.mode_,
             "'");
  KILN_CHECK(opt_.threshold_mode_ == "rel" || opt_.threshold_mode_ == "abs", who,
             ": threshold_mode must be 'rel' or 'abs', got '", opt_.threshold_mode_, "'");
  KILN_CHECK(opt_.patience_ >= 0, who, ": patience must be >= 0, got ", opt_.patience_);
  KILN_CHECK(opt_.cooldown_ >= 0, who, ": cooldown must be >= 0, got ", opt_.cooldown_);
  KILN_CHECK(opt_.threshold_ >= 0, who, ": threshold must be >= 0, got ", opt_.threshold_);
  KILN_CHECK(opt_.eps_ >= 0, who, ": eps must be >= 0, got ", opt_.eps_);
  KILN_CHECK(!optimizer.param_groups().empty(), who, ": the optimizer has no param groups");
  min_lrs_ = per_group(opt_.min_lrs_, optimizer.param_groups().size(), who, "min_lr");
  best_ = opt_.mode_ == "min" ? std::numeric_limits<double>::infinity() : -std::numeric_limits<double>::infinity();
  for (const ParamGroup &g : optimizer.param_groups()) last_lr_.push_back(g.lr());
}

bool ReduceLROnPlateau::is_better(double a) const {
  const bool rel = opt_.threshold_mode_ == "rel";
  if (opt_.mode_ == "min") return rel ? a < best_ * (1.0 - opt_.threshold_) : a < best_ - opt_.threshold_;
  return rel ? a > best_ * (opt_.threshold_ + 1.0) : a > best_ + opt_.threshold_;
}

void ReduceLROnPlateau::step(double metric) {
  KILN_CHECK(!std::isnan(metric), "ReduceLROnPlateau: step got a NaN metric");
  ++last_epoch_;
  if (is_better(metric)) {
    best_ = metric;
    num_bad_epochs_ = 0;
  } else {
    ++num_bad_epochs_;
  }
  if (in_cooldown()) {
    --cooldown_counter_;
    num_bad_epochs_ = 0;  // bad epochs in cooldown do not count
  }
  if (num_bad_epochs_ > opt_.patience_) {
    reduce_lr();
    cooldown_counter_ = opt_.cooldown_;
    num_bad_epochs_ = 0;
  }
  last_lr_.clear();
  for (const ParamGroup &g : optimizer_->param_groups()) last_lr_.push_back(g.lr());
}

void ReduceLROnPlateau::reduce_lr() {
  std::vector<ParamGroup> &groups = optimizer_->param_groups();
  KILN_CHECK(groups.size() == min_lrs_.size(), "ReduceLROnPlateau: the optimizer has ", groups.size(),
             " param groups, the scheduler was built for ", min_lrs_.size());
  for (size_t i = 0; i < groups.size(); ++i) {
    const double old_lr = groups[i].lr(), new_lr = std::max(old_lr * opt_.factor_, min_lrs_[i]);
    if (old_lr - new_lr > opt_.eps_) groups[i].set_lr(new_lr);
  }
}

SchedulerStateDict ReduceLROnPlateau::state_dict() const {
  SchedulerStateDict dict;
  dict.scheduler = "ReduceLROnPlateau";
  dict.values["last_epoch"] = {static_cast<double>(last_epoch_)};
  dict.values["best"] = {best_};
  dict.values["num_bad_epochs"] = {static_cast<double>(num_bad_epochs_)};
  dict.values["cooldown_counter"] = {static_cast<double>(cooldown_counter_)};
  dict.values["last_lr"] = last_lr_;
  return dict;
}

void ReduceLROnPlateau::load_state_dict(const SchedulerStateDict &dict) {
  KILN_CHECK(dict.scheduler == "ReduceLROnPlateau", "ReduceLROnPlateau.load_state_dict: the state dict is for ",
             "scheduler '", dict.scheduler, "', this scheduler is ReduceLROnPlateau");
  auto get = [&](const char *key, size_t size) -> const std::vector<double> & {
    auto it = dict.values.find(key);
    KILN_CHECK(it != dict.values.end() && it->second.size() == size, "ReduceLROnPlateau.load_state_dict: '", key,
               "' is missing or does not hold ", size, " values");
    return it->second;
  };
  const size_t groups = optimizer_->param_groups().size();
  std::vector<double> last_lr = get("last_lr", groups);
  const int64_t last_epoch = whole_number(dict, "last_epoch", get("last_epoch", 1)[0]);
  const double best = get("best", 1)[0];
  const int64_t num_bad_epochs = whole_number(dict, "num_bad_epochs", get("num_bad_epochs", 1)[0]);
  const int64_t cooldown_counter = whole_number(dict, "cooldown_counter", get("cooldown_counter", 1)[0]);
  last_epoch_ = last_epoch; // all checked: now assign
  best_ = best;
  num_bad_epochs_ = num_bad_epochs;
  cooldown_counter_ = cooldown_counter;
  last_lr_ = std::move(last_lr);
}

// ---- JSON ----------------------------------------------------------------------------------------

static nlohmann::json number_to_json(double v) {
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  if (std::isnan(v)) return "nan";
  return v;
}

static double number_from_json(const nlohmann::json &j) {
  if (!j.is_string()) return j.get<double>();
  const std::string s = j.get<std::string>();
  if (s == "inf") return std::numeric_limits<double>::infinity();
  if (s == "-inf") return -std::numeric_limits<double>::infinity();
  KILN_CHECK(s == "nan", "SchedulerStateDict::from_json: bad number '", s, "'");
  return std::numeric_limits<double>::quiet_NaN();
}

static nlohmann::json dict_to_json(const SchedulerStateDict &d) {
  nlohmann::json j;
  j["scheduler"] = d.scheduler;
  j["values"] = nlohmann::json::object();
  for (const auto &[key, values] : d.values) {
    nlohmann::json list = nlohmann::json::array();
    for (double v : values) list.push_back(number_to_json(v));
    j["values"][key] = std::move(list);
  }
  j["children"] = nlohmann::json::array();
  for (const auto &c : d.children) j["children"].push_back(dict_to_json(c));
  return j;
}

static SchedulerStateDict dict_from_json(const nlohmann::json &j) {
  SchedulerStateDict d;
  d.scheduler = j.at("scheduler").get<std::string>();
  for (auto it = j.at("values").begin(); it != j.at("values").end(); ++it)
    for (const auto &v : it.value()) d.values[it.key()].push_back(number_from_json(v));
  if (j.contains("children"))
    for (const auto &c : j.at("children")) d.children.push_back(dict_from_json(c));
  return d;
}

std::string SchedulerStateDict::to_json() const { return dict_to_json(*this).dump(); }

SchedulerStateDict SchedulerStateDict::from_json(const std::string &json) {
  try {
    return dict_from_json(nlohmann::json::parse(json));
  } catch (const nlohmann::json::exception &e) {
    throw Error(std::string("SchedulerStateDict::from_json: ") + e.what());
  }
}

}  // namespace kiln::optim::lr_scheduler
