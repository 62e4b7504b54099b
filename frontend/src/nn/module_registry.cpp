// nn/module_registry.cpp - the live modules, tensor owners and parent links
// (module_registry.h), behind one mutex.
#include "nn/module_registry.h"

#include <algorithm>
#include <mutex>
#include <unordered_map>

namespace kiln::nn::registry {
namespace {

struct Registry {
  std::mutex mutex;
  uint64_t next_serial = 1;
  std::unordered_map<const Module *, uint64_t> live;
  std::unordered_map<const TensorImpl *, ModuleRef> owner;
  std::unordered_map<const Module *, std::vector<ModuleRef>> parents;
};

Registry &registry() {
  static Registry *r = new Registry();  // never destroyed: modules may die during static destruction
  return *r;
}

bool alive_locked(const Registry &r, const ModuleRef &ref) {
  auto it = r.live.find(ref.module);
  return it != r.live.end() && it->second == ref.serial;
}

/// Whether `parent` (alive) still holds `child` as a direct child.
bool holds_child(const Module &parent, const Module *child) {
  for (const auto &entry : parent.named_children())
    if (entry.second.get() == child) return true;
  return false;
}

/// Adds the outermost live containers of `ref` to `roots` (a walk up the
/// parent links that still hold; `seen` stops cycles).
void collect_roots(Registry &r, const ModuleRef &ref, std::vector<ModuleRef> &roots, std::vector<const Module *> &seen) {
  if (std::find(seen.begin(), seen.end(), ref.module) != seen.end()) return;
  seen.push_back(ref.module);
  bool has_parent = false;
  auto it = r.parents.find(ref.module);
  if (it != r.parents.end())
    for (const ModuleRef &parent : it->second)
      if (alive_locked(r, parent) && holds_child(*parent.module, ref.module)) {
        has_parent = true;
        collect_roots(r, parent, roots, seen);
      }
  if (!has_parent && std::find(roots.begin(), roots.end(), ref) == roots.end()) roots.push_back(ref);
}

}  // namespace

void module_created(const Module *m) {
  Registry &r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  r.live[m] = r.next_serial++;
}

void module_destroyed(const Module *m, const std::vector<Tensor> &own_tensors) {
  Registry &r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  const uint64_t serial = r.live.count(m) ? r.live[m] : 0;
  r.live.erase(m);
  r.parents.erase(m);
  for (const Tensor &t : own_tensors) {
    auto it = r.owner.find(t.impl());
    if (it != r.owner.end() && it->second == ModuleRef{m, serial}) r.owner.erase(it);
  }
}

void tensor_registered(const Module *owner, const Tensor &t) {
  Registry &r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  r.owner[t.impl()] = ModuleRef{owner, r.live.count(owner) ? r.live[owner] : 0};
}

void child_registered(const Module *parent, const Module *child) {
  Registry &r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  const ModuleRef ref{parent, r.live.count(parent) ? r.live[parent] : 0};
  auto &list = r.parents[child];
  if (std::find(list.begin(), list.end(), ref) == list.end()) list.push_back(ref);
}

ModuleRef ref_of(const Module *m) {
  Registry &r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  auto it = r.live.find(m);
  return ModuleRef{m, it == r.live.end() ? 0 : it->second};
}

const Module *live(const ModuleRef &ref) {
  Registry &r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  return alive_locked(r, ref) ? ref.module : nullptr;
}

std::vector<ModuleRef> roots_of(const Tensor &t) {
  Registry &r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  std::vector<ModuleRef> roots;
  auto it = r.owner.find(t.impl());
  if (it == r.owner.end() || !alive_locked(r, it->second)) return roots;
  std::vector<const Module *> seen;
  collect_roots(r, it->second, roots, seen);
  return roots;
}

}  // namespace kiln::nn::registry
