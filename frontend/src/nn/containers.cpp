// Containers: Sequential, ModuleList, ModuleDict, ParameterList.
#include "kiln/nn.h"

namespace kiln::nn {

namespace {

/// Python-style index: negative counts from the end; throws when out of range.
size_t checked_index(int64_t i, size_t size, const char *container) {
  const int64_t n = static_cast<int64_t>(size);
  KILN_CHECK(i >= -n && i < n, container, ": index ", i, " is out of range for size ", n);
  return static_cast<size_t>(i < 0 ? i + n : i);
}

}  // namespace

// ---- Sequential ------------------------------------------------------------------------------

Sequential::Sequential(std::initializer_list<std::shared_ptr<Module>> modules) {
  for (auto &m : modules) push_back(m);
}

void Sequential::push_back(std::shared_ptr<Module> m) { register_module(std::to_string(size()), std::move(m)); }

Tensor Sequential::forward(const Tensor &input) {
  Tensor x = input;
  for (auto &c : named_children()) x = c.second->forward(x);
  return x;
}

// ---- ModuleList ------------------------------------------------------------------------------

ModuleList::ModuleList(std::initializer_list<std::shared_ptr<Module>> modules) {
  for (auto &m : modules) push_back(m);
}

void ModuleList::push_back(std::shared_ptr<Module> m) {
  KILN_CHECK(m != nullptr, "ModuleList: cannot append a null module (index ", modules_.size(), ")");
  register_module(std::to_string(modules_.size()), m);
  modules_.push_back(std::move(m));
}

void ModuleList::extend(const std::vector<std::shared_ptr<Module>> &modules) {
  for (auto &m : modules) push_back(m);
}

std::shared_ptr<Module> ModuleList::operator[](int64_t i) const {
  return modules_[checked_index(i, modules_.size(), "ModuleList")];
}

Tensor ModuleList::forward(const Tensor &) {
  throw Error("ModuleList has no forward: iterate over its modules in the parent's forward");
}

// ---- ModuleDict ------------------------------------------------------------------------------

ModuleDict::ModuleDict(std::initializer_list<Item> items) {
  for (auto &[key, m] : items) insert(key, m);
}

void ModuleDict::insert(const std::string &key, std::shared_ptr<Module> m) {
  KILN_CHECK(m != nullptr, "ModuleDict: cannot insert a null module under '", key, "'");
  for (auto &item : items_)
    if (item.first == key) {
      replace_module(key, m);
      item.second = std::move(m);
      return;
    }
  register_module(key, m);  // checks the key
  items_.emplace_back(key, std::move(m));
}

bool ModuleDict::contains(const std::string &key) const {
  for (auto &item : items_)
    if (item.first == key) return true;
  return false;
}

std::shared_ptr<Module> ModuleDict::at(const std::string &key) const {
  for (auto &item : items_)
    if (item.first == key) return item.second;
  throw Error("ModuleDict: no module under key '" + key + "'");
}

std::vector<std::string> ModuleDict::keys() const {
  std::vector<std::string> out;
  for (auto &item : items_) out.push_back(item.first);
  return out;
}

Tensor ModuleDict::forward(const Tensor &) {
  throw Error("ModuleDict has no forward: look its modules up in the parent's forward");
}

// ---- ParameterList -----------------------------------------------------------------------------

ParameterList::ParameterList(std::initializer_list<Tensor> params) {
  for (auto &p : params) push_back(p);
}

Tensor ParameterList::push_back(Tensor p) {
  KILN_CHECK(p.defined(), "ParameterList: cannot append an undefined tensor (index ", params_list_.size(), ")");
  KILN_CHECK(p.is_floating_point(), "ParameterList: parameters must be floating point, got ", dtype_name(p.dtype()),
             " (index ", params_list_.size(), ")");
  Tensor &registered = register_parameter(std::to_string(params_list_.size()), std::move(p));
  params_list_.push_back(registered);
  return registered;
}

Tensor ParameterList::operator[](int64_t i) const {
  return params_list_[checked_index(i, params_list_.size(), "ParameterList")];
}

Tensor ParameterList::forward(const Tensor &) {
  throw Error("ParameterList has no forward: use its parameters in the parent's forward");
}

}  // namespace kiln::nn
