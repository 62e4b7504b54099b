// compile/guard_key.h - GuardKey: everything a compiled artifact of
// kiln::compile specializes on (input shape, dtype, device, grad flags,
// training and grad mode, parameter identities, autocast, guard_scalars),
// its printed form, and the words for what changed between two keys.
#pragma once

#include <functional>
#include <sstream>
#include <string>
#include <vector>

#include "kiln/amp.h"
#include "kiln/nn.h"

namespace kiln {

/// Everything a compiled artifact specializes on; one field per guard.
struct GuardKey {
  Shape shape;
  DType dtype;
  Device device;
  bool requires_grad, training, grad_enabled;
  std::string params_requires_grad;  ///< '1'/'0' per parameter
  /// The precision casts run in: the eager kiln::autocast state when on (its
  /// casts are traced into the graph), else CompileOptions::autocast when not
  /// float32 (the kiln-autocast pass), else "" (off).
  std::string autocast;
  /// Identity, shape and dtype of every parameter and buffer: the compiled
  /// graph binds these tensors by reference, so one replaced (replace_module,
  /// Module::to(dtype)) or resized (set_data) must not reuse the artifact.
  std::string state;
  std::vector<double> user_scalars;  ///< CompileOptions::guard_scalars() of this call

  static GuardKey of(const Tensor &input, bool training, bool grad_enabled, const nn::Module &m,
                     DType compile_autocast, const std::function<std::vector<double>()> &guard_scalars) {
    GuardKey k{input.sizes(), input.dtype(), input.device(), input.requires_grad(), training, grad_enabled, {},
               autocast_enabled()                ? dtype_name(autocast_dtype())
               : compile_autocast != kFloat32 ? dtype_name(compile_autocast)
                                              : ""};
    for (const auto &p : m.parameters()) k.params_requires_grad += p.requires_grad() ? '1' : '0';
    k.state = state_signature(m);
    if (guard_scalars) k.user_scalars = guard_scalars();
    return k;
  }
  static std::string state_signature(const nn::Module &m) {
    std::ostringstream os;
    auto add = [&os](const Tensor &t) {
      os << static_cast<const void *>(t.impl()) << shape_str(t.sizes()) << dtype_name(t.dtype()) << ";";
    };
    for (const auto &p : m.parameters()) add(p);
    for (const auto &b : m.buffers()) add(b);
    return os.str();
  }
  /// The key as a string; `dynamic_dim` >= 0 prints that dim as "s".
  std::string str(int dynamic_dim = -1) const {
    std::ostringstream os;
    os << "input";
    if (dynamic_dim < 0) {
      os << shape_str(shape);
    } else {
      os << "[";
      for (size_t d = 0; d < shape.size(); ++d)
        os << (d ? ", " : "") << (static_cast<int>(d) == dynamic_dim ? std::string("s") : std::to_string(shape[d]));
      os << "]";
    }
    os << ":" << dtype_name(dtype) << ":" << device.str() << (requires_grad ? ":rg" : "")
       << " training=" << training << " grad=" << grad_enabled << " params=" << params_requires_grad
       << " state=" << std::hex << std::hash<std::string>{}(state) << std::dec;
    if (!user_scalars.empty()) {
      os << " scalars=" << std::hexfloat;
      for (double v : user_scalars) os << v << ",";
      os << std::defaultfloat;
    }
    if (!autocast.empty()) os << " autocast=" << autocast;
    return os.str();
  }
  /// The one input dim in which `this` differs from `old` when nothing else
  /// differs and both sizes are >= 2 (0 and 1 are specialized, as in
  /// PyTorch); -1 otherwise.
  int single_changed_dim(const GuardKey &old) const {
    if (dtype != old.dtype || device != old.device || requires_grad != old.requires_grad ||
        training != old.training || grad_enabled != old.grad_enabled ||
        params_requires_grad != old.params_requires_grad || autocast != old.autocast || state != old.state ||
        user_scalars != old.user_scalars ||
        shape.size() != old.shape.size())
      return -1;
    int changed = -1;
    for (size_t d = 0; d < shape.size(); ++d)
      if (shape[d] != old.shape[d]) {
        if (changed >= 0 || shape[d] < 2 || old.shape[d] < 2) return -1;
        changed = static_cast<int>(d);
      }
    return changed;
  }
  /// Why `this` misses an artifact compiled for `old`: the guards that differ.
  std::string diff(const GuardKey &old) const {
    std::ostringstream os;
    auto add = [&](const std::string &what) { os << (os.tellp() > 0 ? ", " : "") << what; };
    if (shape != old.shape) add("input shape " + shape_str(old.shape) + " -> " + shape_str(shape));
    if (dtype != old.dtype) add(std::string("input dtype ") + dtype_name(old.dtype) + " -> " + dtype_name(dtype));
    if (device != old.device) add("device " + old.device.str() + " -> " + device.str());
    if (requires_grad != old.requires_grad) add(requires_grad ? "input now requires grad" : "input no longer requires grad");
    if (training != old.training) add(training ? "train() mode" : "eval() mode");
    if (grad_enabled != old.grad_enabled) add(grad_enabled ? "grad mode enabled" : "under NoGradGuard");
    if (params_requires_grad != old.params_requires_grad) add("parameters' requires_grad changed");
    if (state != old.state) add("a parameter or buffer was replaced or changed shape or dtype");
    if (user_scalars != old.user_scalars) {
      std::ostringstream values;
      for (size_t i = 0; i < user_scalars.size(); ++i) values << (i ? ", " : "") << user_scalars[i];
      add("CompileOptions::guard_scalars changed (now " + values.str() + ")");
    }
    if (autocast != old.autocast)
      add("autocast " + (old.autocast.empty() ? std::string("off") : old.autocast) + " -> " +
          (autocast.empty() ? std::string("off") : autocast));
    return os.str();
  }
};

}  // namespace kiln
