// compile/guard_key.h - GuardKey: everything a compiled artifact of
// kiln::compile specializes on (per input tensor: shape, dtype, device,
// requires_grad; the values of non-tensor arguments; training and grad mode,
// parameter identities, autocast, guard_scalars), its printed form, and the
// words for what changed between two keys.
#pragma once

#include <functional>
#include <sstream>
#include <string>
#include <vector>

#include "kiln/amp.h"
#include "kiln/compile.h"
#include "kiln/nn.h"

namespace kiln {

/// The guards of one input tensor.
struct TensorGuard {
  Shape shape;
  DType dtype;
  Device device;
  bool requires_grad;
  bool operator==(const TensorGuard &o) const {
    return shape == o.shape && dtype == o.dtype && device == o.device && requires_grad == o.requires_grad;
  }
};

/// Everything a compiled artifact specializes on; one field per guard.
struct GuardKey {
  std::vector<TensorGuard> inputs;
  std::vector<std::string> input_names;  ///< "input" (one-tensor module), "input 1", "argument 2" (messages only)
  std::vector<detail::ScalarArg> scalars;  ///< non-tensor arguments of a compiled function, by value
  bool training, grad_enabled;
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

  static GuardKey of(const detail::CallSpec &call, bool training, bool grad_enabled, const nn::Module &m,
                     DType compile_autocast, const std::function<std::vector<double>()> &guard_scalars) {
    GuardKey k;
    k.input_names = call.input_names;
    k.scalars = call.scalars;
    k.training = training;
    k.grad_enabled = grad_enabled;
    k.autocast = autocast_enabled()            ? dtype_name(autocast_dtype())
                 : compile_autocast != kFloat32 ? dtype_name(compile_autocast)
                                                : "";
    for (const Tensor &t : call.inputs) k.inputs.push_back({t.sizes(), t.dtype(), t.device(), t.requires_grad()});
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
  /// The shape of the only input (dynamic shapes serve one-input calls).
  const Shape &shape() const { return inputs[0].shape; }
  /// The key as a string; `dynamic_dim` >= 0 prints that dim of the (only)
  /// input as "s".
  std::string str(int dynamic_dim = -1) const {
    std::ostringstream os;
    for (size_t i = 0; i < inputs.size(); ++i) {
      os << (i ? ", " : "") << input_names[i] << (input_names[i] == "input" ? "" : " ");
      print_shape(os, inputs[i].shape, dynamic_dim);
      os << ":" << dtype_name(inputs[i].dtype) << ":" << inputs[i].device.str() << (inputs[i].requires_grad ? ":rg" : "");
    }
    for (const detail::ScalarArg &a : scalars) os << " " << a.name << "=" << a.type << ":" << a.value;
    os << " training=" << training << " grad=" << grad_enabled << " params=" << params_requires_grad
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
  /// differs, there is one input tensor and both sizes are >= 2 (0 and 1 are
  /// specialized, as in PyTorch); -1 otherwise.
  int single_changed_dim(const GuardKey &old) const {
    if (inputs.size() != 1 || old.inputs.size() != 1) return -1;
    const TensorGuard &in = inputs[0], &was = old.inputs[0];
    if (in.dtype != was.dtype || in.device != was.device || in.requires_grad != was.requires_grad ||
        training != old.training || grad_enabled != old.grad_enabled || !same_scalars(old) ||
        params_requires_grad != old.params_requires_grad || autocast != old.autocast || state != old.state ||
        user_scalars != old.user_scalars || in.shape.size() != was.shape.size())
      return -1;
    int changed = -1;
    for (size_t d = 0; d < in.shape.size(); ++d)
      if (in.shape[d] != was.shape[d]) {
        if (changed >= 0 || in.shape[d] < 2 || was.shape[d] < 2) return -1;
        changed = static_cast<int>(d);
      }
    return changed;
  }
  bool same_scalars(const GuardKey &old) const {
    if (scalars.size() != old.scalars.size()) return false;
    for (size_t i = 0; i < scalars.size(); ++i)
      if (scalars[i].type != old.scalars[i].type || scalars[i].value != old.scalars[i].value) return false;
    return true;
  }
  /// Why `this` misses an artifact compiled for `old`: the guards that differ.
  std::string diff(const GuardKey &old) const {
    std::ostringstream os;
    auto add = [&](const std::string &what) { os << (os.tellp() > 0 ? ", " : "") << what; };
    if (inputs.size() != old.inputs.size())
      add("number of input tensors " + std::to_string(old.inputs.size()) + " -> " + std::to_string(inputs.size()));
    for (size_t i = 0; i < inputs.size() && i < old.inputs.size(); ++i) diff_input(i, old.inputs[i], add);
    for (size_t i = 0; i < scalars.size() && i < old.scalars.size(); ++i)
      if (scalars[i].value != old.scalars[i].value || scalars[i].type != old.scalars[i].type)
        add(scalars[i].name + " (" + scalars[i].type + ") changed " + old.scalars[i].value + " -> " + scalars[i].value);
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

private:
  static void print_shape(std::ostringstream &os, const Shape &shape, int dynamic_dim) {
    if (dynamic_dim < 0) {
      os << shape_str(shape);
      return;
    }
    os << "[";
    for (size_t d = 0; d < shape.size(); ++d)
      os << (d ? ", " : "") << (static_cast<int>(d) == dynamic_dim ? std::string("s") : std::to_string(shape[d]));
    os << "]";
  }
  template <class Add> void diff_input(size_t i, const TensorGuard &was, Add &add) const {
    const TensorGuard &in = inputs[i];
    const std::string &who = input_names[i];
    if (in.shape != was.shape) add(who + " shape " + shape_str(was.shape) + " -> " + shape_str(in.shape));
    if (in.dtype != was.dtype) add(who + " dtype " + dtype_name(was.dtype) + " -> " + dtype_name(in.dtype));
    if (in.device != was.device) add("device " + was.device.str() + " -> " + in.device.str());
    if (in.requires_grad != was.requires_grad)
      add(who + (in.requires_grad ? " now requires grad" : " no longer requires grad"));
  }
};

}  // namespace kiln
