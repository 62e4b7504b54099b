// The Optimizer base: parameter groups, zero_grad, and state_dict /
// load_state_dict with their JSON form. The update rules live in sgd.cpp,
// adam.cpp and rmsprop.cpp.
#include <algorithm>
#include <cstdlib>
#include <set>

#include <nlohmann/json.hpp>

#include "kiln/autograd.h"
#include "kiln/ops.h"
#include "kiln/optim.h"
#include "optim/update_utils.h"

namespace kiln::optim {

// ---- OptimizerOptions -------------------------------------------------------------

std::map<std::string, double> OptimizerOptions::to_map() const {
  std::map<std::string, double> out;
  for (const Field &f : const_cast<OptimizerOptions *>(this)->fields())
    out[f.name] = f.number ? *f.number : (*f.flag ? 1.0 : 0.0);
  return out;
}

void OptimizerOptions::from_map(const std::map<std::string, double> &values) {
  std::vector<Field> all = fields();
  for (const auto &[key, value] : values) {
    bool known = std::any_of(all.begin(), all.end(), [&](const Field &f) { return key == f.name; });
    KILN_CHECK(known, optimizer_name(), ": unknown hyperparameter '", key, "'");
  }
  for (const Field &f : all)
    KILN_CHECK(values.count(f.name), optimizer_name(), ": hyperparameter '", f.name, "' is missing");
  for (const Field &f : all) {
    double v = values.at(f.name);
    if (f.number) *f.number = v;
    else *f.flag = v != 0.0;
  }
}

// ---- ParamGroup ---------------------------------------------------------------------

ParamGroup::ParamGroup(const ParamGroup &other)
    : params(other.params), initial_lr(other.initial_lr), options_(other.options_->clone()) {}

ParamGroup &ParamGroup::operator=(const ParamGroup &other) {
  if (this != &other) {
    params = other.params;
    initial_lr = other.initial_lr;
    options_ = other.options_->clone();
  }
  return *this;
}

void ParamGroup::throw_wrong_options(const char *wanted) const {
  throw Error(std::string("ParamGroup: expected ") + wanted + " options, the group holds " +
              options_->optimizer_name() + " options");
}

// ---- Optimizer ------------------------------------------------------------------------

static void check_group(const ParamGroup &group, size_t g, size_t first, const std::string &name) {
  KILN_CHECK(group.options().optimizer_name() == name, name, ": param group ", g, " holds ",
             group.options().optimizer_name(), " options, expected ", name, "Options");
  KILN_CHECK(!group.params.empty(), name, ": got an empty parameter list (param group ", g, ")");
  for (size_t i = 0; i < group.params.size(); ++i) {
    const Tensor &p = group.params[i];
    KILN_CHECK(p.defined() && p.requires_grad() && p.is_leaf(), name, ": parameter ", first + i,
               " is not a leaf tensor that requires grad");
    KILN_CHECK(p.dtype() == kFloat32 && p.is_contiguous(), name, ": parameter ", first + i,
               " must be a contiguous float32 tensor, got ", dtype_name(p.dtype()));
  }
}

Optimizer::Optimizer(std::vector<ParamGroup> groups, const char *name) : name_(name) {
  KILN_CHECK(!groups.empty(), name, ": got an empty list of param groups");
  for (ParamGroup &g : groups) add_param_group(std::move(g));
}

void Optimizer::add_param_group(ParamGroup group) {
  const size_t first = state_.size();
  check_group(group, groups_.size(), first, name_);
  std::set<const TensorImpl *> seen;
  for (const Tensor &p : params()) seen.insert(p.impl());
  for (size_t i = 0; i < group.params.size(); ++i)
    KILN_CHECK(seen.insert(group.params[i].impl()).second, name_, ": parameter ", first + i,
               " appears more than once (in one or several param groups)");
  // Before construction completes check_options is pure; derived constructors
  // call check_all_options() instead.
  if (constructed_) check_options(group.options());
  state_.resize(first + group.params.size());
  groups_.push_back(std::move(group));
}

void Optimizer::check_all_options() const {
  for (const ParamGroup &g : groups_) check_options(g.options());
}

void Optimizer::mark_constructed() {
  check_all_options();
  constructed_ = true;
}

void Optimizer::zero_grad(bool set_to_none) {
  NoGradGuard no_grad;
  for (ParamGroup &g : groups_)
    for (Tensor &p : g.params) {
      if (set_to_none) p.set_grad(Tensor());
      else if (p.grad().defined()) p.grad().zero_();
    }
}

void Optimizer::set_lr(double lr) {
  KILN_CHECK(lr >= 0.0, name_, ": invalid learning rate ", lr, " (expected >= 0)");
  for (ParamGroup &g : groups_) g.set_lr(lr);
}

std::vector<Tensor> Optimizer::params() const {
  std::vector<Tensor> all;
  for (const ParamGroup &g : groups_) all.insert(all.end(), g.params.begin(), g.params.end());
  return all;
}

Tensor dense_grad(const Tensor &p) {
  Tensor g = p.grad();
  KILN_CHECK(g.sizes() == p.sizes(), "optimizer: gradient shape ", shape_str(g.sizes()),
             " does not match parameter shape ", shape_str(p.sizes()));
  return g.to(kFloat32).contiguous();
}

float increment_step(std::map<std::string, Tensor> &state) {
  Tensor &step = state["step"];
  if (!step.defined()) step = scalar_tensor(0.0);
  float *s = step.data_ptr<float>();
  *s += 1.0f;
  return *s;
}

// ---- state_dict ---------------------------------------------------------------------

static std::string state_key(size_t index, const std::string &name) {
  return "state." + std::to_string(index) + "." + name;
}

OptimizerStateDict Optimizer::state_dict() const {
  OptimizerStateDict dict;
  dict.optimizer = name_;
  size_t index = 0;
  for (const ParamGroup &g : groups_) {
    OptimizerStateDict::Group out;
    out.options = g.options().to_map();
    if (g.initial_lr) out.options["initial_lr"] = *g.initial_lr;
    for (size_t i = 0; i < g.params.size(); ++i, ++index) {
      out.params.push_back(static_cast<int64_t>(index));
      for (const auto &[name, t] : state_[index]) dict.state[state_key(index, name)] = t.clone();
    }
    dict.param_groups.push_back(std::move(out));
  }
  return dict;
}

/// Splits "state.<index>.<name>"; throws naming the key if malformed.
static std::pair<size_t, std::string> parse_state_key(const std::string &key, const std::string &opt) {
  const std::string prefix = "state.";
  size_t dot = key.find('.', prefix.size());
  bool ok = key.compare(0, prefix.size(), prefix) == 0 && dot != std::string::npos && dot > prefix.size() &&
            dot + 1 < key.size();
  std::string digits = ok ? key.substr(prefix.size(), dot - prefix.size()) : "";
  ok = ok && std::all_of(digits.begin(), digits.end(), [](char c) { return c >= '0' && c <= '9'; });
  KILN_CHECK(ok, opt, ".load_state_dict: malformed state key '", key, "' (expected state.<param_index>.<name>)");
  return {static_cast<size_t>(std::strtoull(digits.c_str(), nullptr, 10)), key.substr(dot + 1)};
}

void Optimizer::load_state_dict(const OptimizerStateDict &dict) {
  const std::string where = name_ + ".load_state_dict";
  KILN_CHECK(dict.optimizer == name_, where, ": the state dict is for optimizer '", dict.optimizer,
             "', this optimizer is ", name_);
  KILN_CHECK(dict.param_groups.size() == groups_.size(), where, ": the state dict has ",
             dict.param_groups.size(), " param groups, this optimizer has ", groups_.size());
  // Validate everything first, so a failed load leaves the optimizer as it was.
  std::vector<std::map<std::string, double>> group_values;
  for (size_t g = 0; g < groups_.size(); ++g) {
    const auto &in = dict.param_groups[g];
    KILN_CHECK(in.params.size() == groups_[g].params.size(), where, ": param group ", g, " has ",
               in.params.size(), " parameters in the state dict, ", groups_[g].params.size(), " here");
    std::map<std::string, double> values = in.options;
    values.erase("initial_lr");
    std::unique_ptr<OptimizerOptions> trial = groups_[g].options().clone();
    try {
      trial->from_map(values);
      check_options(*trial);
    } catch (const Error &e) {
      throw Error(where + ": param group " + std::to_string(g) + ": " + e.what());
    }
    group_values.push_back(std::move(values));
  }
  const std::vector<Tensor> all = params();
  const std::vector<std::string> names = state_names();
  std::vector<std::map<std::string, Tensor>> state(all.size());
  for (const auto &[key, t] : dict.state) {
    auto [index, name] = parse_state_key(key, name_);
    KILN_CHECK(index < all.size(), where, ": ", key, " names parameter ", index, ", this optimizer has ",
               all.size(), " parameters");
    KILN_CHECK(name == "step" || std::find(names.begin(), names.end(), name) != names.end(), where,
               ": unknown state '", name, "' in ", key, " for ", name_);
    KILN_CHECK(t.defined(), where, ": ", key, " is an undefined tensor");
    if (name == "step") {
      KILN_CHECK(t.numel() == 1, where, ": ", key, " must hold one element, got shape ", shape_str(t.sizes()));
      state[index][name] = scalar_tensor(t.item());
    } else {
      KILN_CHECK(t.sizes() == all[index].sizes(), where, ": ", key, " has shape ", shape_str(t.sizes()),
                 ", parameter ", index, " has shape ", shape_str(all[index].sizes()));
      state[index][name] = t.to(kFloat32).contiguous().clone();
    }
  }
  for (size_t g = 0; g < groups_.size(); ++g) {
    groups_[g].options().from_map(group_values[g]);
    const auto &in = dict.param_groups[g].options;
    auto it = in.find("initial_lr");
    groups_[g].initial_lr = it == in.end() ? std::nullopt : std::optional<double>(it->second);
  }
  state_ = std::move(state);
}

// ---- JSON ---------------------------------------------------------------------------------

std::string OptimizerStateDict::to_json() const {
  nlohmann::json j;
  j["optimizer"] = optimizer;
  j["param_groups"] = nlohmann::json::array();
  for (const Group &g : param_groups) {
    nlohmann::json out(g.options);
    out["params"] = g.params;
    j["param_groups"].push_back(std::move(out));
  }
  std::vector<std::string> names;
  for (const auto &kv : state) names.push_back(kv.first);
  j["state"] = names;
  return j.dump();
}

OptimizerStateDict OptimizerStateDict::from_json(const std::string &json, std::map<std::string, Tensor> state) {
  OptimizerStateDict dict;
  try {
    nlohmann::json j = nlohmann::json::parse(json);
    dict.optimizer = j.at("optimizer").get<std::string>();
    for (const nlohmann::json &g : j.at("param_groups")) {
      Group out;
      for (auto it = g.begin(); it != g.end(); ++it) {
        if (it.key() == "params") out.params = it.value().get<std::vector<int64_t>>();
        else if (it.value().is_boolean()) out.options[it.key()] = it.value().get<bool>() ? 1.0 : 0.0;
        else out.options[it.key()] = it.value().get<double>();
      }
      dict.param_groups.push_back(std::move(out));
    }
    if (j.contains("state"))
      for (const auto &name : j.at("state").get<std::vector<std::string>>())
        KILN_CHECK(state.count(name), "OptimizerStateDict::from_json: state tensor '", name,
                   "' is listed in the JSON but was not given");
  } catch (const nlohmann::json::exception &e) {
    throw Error(std::string("OptimizerStateDict::from_json: ") + e.what());
  }
  dict.state = std::move(state);
  return dict;
}

}  // namespace kiln::optim
