// nn/module_registry.h (internal) - which module owns a parameter or buffer,
// which modules contain a module, and whether a module is still alive.
// kiln::compile of a function uses it to find the modules whose tensors a
// trace read (the "roots": the outermost live modules containing them) and
// to guard those modules' state on later calls, as TorchDynamo guards the
// modules a function's closure reaches. C++ cannot inspect a closure; the
// registry sees every Module through its constructor, destructor and
// register_* calls instead.
#pragma once

#include <cstdint>
#include <vector>

#include "kiln/nn.h"

namespace kiln::nn::registry {

/// A module and the serial it got when it was constructed: a new module
/// built at the address of a destroyed one has another serial, so a stale
/// reference never resolves to it.
struct ModuleRef {
  const Module *module = nullptr;
  uint64_t serial = 0;
  bool operator==(const ModuleRef &o) const { return module == o.module && serial == o.serial; }
};

void module_created(const Module *m);
/// Forgets `m` and the ownership entries of its own parameters and buffers.
void module_destroyed(const Module *m, const std::vector<Tensor> &own_tensors);
/// `owner` registered `t` as a parameter or buffer.
void tensor_registered(const Module *owner, const Tensor &t);
/// `parent` registered (or replaced a child with) `child`.
void child_registered(const Module *parent, const Module *child);

/// The reference of a live module (serial 0 if it is not known).
ModuleRef ref_of(const Module *m);
/// The module `ref` names when it is still alive, else nullptr.
const Module *live(const ModuleRef &ref);
/// The outermost live modules that contain `t` (through the module that
/// registered it and the parents that still hold that module as a child);
/// empty when no live module registered `t`.
std::vector<ModuleRef> roots_of(const Tensor &t);

}  // namespace kiln::nn::registry
