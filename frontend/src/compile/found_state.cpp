// compile/found_state.cpp - FoundState: the modules and tensors a compiled
// function's trace read besides its arguments, and the check that they
// still are what the artifact was compiled for (compile(fn)'s guards on
// captured modules, as TorchDynamo's guards on a closure's modules).
#include <sstream>

#include "compile/artifact.h"

namespace kiln::compile_detail {
namespace {

std::string root_state(const nn::Module &m) {
  std::string state = GuardKey::state_signature(m) + "|rg=";
  for (const Tensor &p : m.parameters()) state += p.requires_grad() ? '1' : '0';
  return state;
}

TensorGuard guard_of(const Tensor &t) { return {t.sizes(), t.dtype(), t.device(), t.requires_grad()}; }

}  // namespace
}  // namespace kiln::compile_detail

namespace kiln {

using namespace compile_detail;

FoundState FoundState::of(const std::vector<Tensor> &captured) {
  FoundState found;
  for (const Tensor &t : captured) {
    found.captured.push_back(guard_of(t));
    for (const nn::registry::ModuleRef &ref : nn::registry::roots_of(t)) {
      bool known = false;
      for (const Root &root : found.roots) known |= root.ref == ref;
      if (known) continue;
      found.roots.push_back(Root{ref, ref.module->name(), root_state(*ref.module), ref.module->is_training()});
    }
  }
  return found;
}

std::string FoundState::check(const std::vector<Tensor> &captured_now) const {
  for (const Root &root : roots) {
    const nn::Module *m = nn::registry::live(root.ref);
    if (!m) return "module " + root.name + " used by the function was destroyed";
    if (m->is_training() != root.training)
      return "module " + root.name + " used by the function is now in " + (m->is_training() ? "train()" : "eval()") +
             " mode";
    if (root_state(*m) != root.state)
      return "a parameter or buffer of module " + root.name +
             " (used by the function) was replaced, or changed shape, dtype or requires_grad";
  }
  for (size_t i = 0; i < captured.size() && i < captured_now.size(); ++i) {
    const TensorGuard now = guard_of(captured_now[i]), &was = captured[i];
    if (now == was) continue;
    std::ostringstream os;
    os << "tensor " << i << " read by the function (not an argument) changed: ";
    if (now.shape != was.shape) os << "shape " << shape_str(was.shape) << " -> " << shape_str(now.shape);
    else if (now.dtype != was.dtype) os << "dtype " << dtype_name(was.dtype) << " -> " << dtype_name(now.dtype);
    else if (now.requires_grad != was.requires_grad) os << (now.requires_grad ? "now requires grad" : "no longer requires grad");
    else os << "device " << was.device.str() << " -> " << now.device.str();
    return os.str();
  }
  return "";
}

}  // namespace kiln
