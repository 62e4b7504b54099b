// compile/compiled_backward.h - CompiledBackward: the autograd node whose
// apply() runs a compiled backward executable (whole graphs and graph-break
// segments).
#pragma once

#include <cmath>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "compile/artifact.h"
#include "kiln/ops.h"
#include "kiln/runtime/Profiler.h"
#include "compile/run_error.h"

namespace kiln::compile_detail {

/// Runs the compiled backward: (primals..., saved..., tangents...) -> grads.
struct CompiledBackward : autograd::Node {
  std::shared_ptr<CompiledModule::Artifact> artifact;
  std::vector<runtime::TensorView> primals, saved;
  std::string module_name;  ///< for profiler events
  std::vector<Shape> output_shapes;
  std::vector<DType> output_types;
  /// The device of each output: an undefined gradient becomes zeros there,
  /// and a gradient that arrives elsewhere (an eager op after a graph break
  /// that made it on the cpu) is moved there; the backward executable runs on
  /// one device.
  std::vector<Device> output_devices;
  /// Graph-break segments (several outputs): reach[k][i] tells whether a
  /// gradient flows from output k to gradient target i. A target that only
  /// outputs without a gradient this backward reach (a value computed and
  /// never used) gets none, as in eager. Empty: every target is reached.
  std::vector<std::vector<bool>> reach;
  /// Graph-break segments: the targets' gradients computed as eager would,
  /// by replaying the segment with autograd and differentiating only the
  /// outputs whose gradient is defined. Used when some are undefined and the
  /// compiled backward (which feeds those zeros) gives a non-finite value: a
  /// zero tangent times a NaN/Inf Jacobian (a value nobody uses downstream,
  /// computed from a NaN) is NaN where eager, which never runs that branch,
  /// gives a number.
  std::function<TensorList(const TensorList &grad_outputs)> eager_backward;

  TensorList apply(const TensorList &grad_outputs) override {
    KILN_CHECK(!released, "backward: trying to backward through the compiled graph a second time; its saved tensors "
               "were freed. Pass retain_graph=true to the first backward call");
    std::vector<runtime::TensorView> args = primals;
    // The last backward through this node hands the saved activations over
    // (args holds them alone): the executable reuses the memory of those
    // nothing else references after their last read (run_donating).
    const bool donate = releases_after_apply;
    args.insert(args.end(), saved.begin(), saved.end());
    for (size_t i = 0; i < grad_outputs.size(); ++i) {
      const Device device = i < output_devices.size() ? output_devices[i] : kCPU;
      Tensor g = grad_outputs[i].defined() ? grad_outputs[i] : zeros(output_shapes[i], output_types[i], device);
      if (g.device() != device) g = g.to(device);
      args.push_back(to_view(g.to(output_types[i])));
    }
    std::string error;
    runtime::Profiler &profiler = runtime::Profiler::instance();
    const double start_us = profiler.now_us();
    if (donate) saved.clear();
    // Each gradient is announced as soon as its launch has run, so a reducer
    // can start on it while the rest of the backward runs (DDP's buckets).
    // Not when the eager replay may replace the results (needs_eager_backward).
    bool announce = true;
    if (eager_backward)
      for (const Tensor &g : grad_outputs) announce &= g.defined();
    runtime::RunHooks hooks;
    if (announce)
      hooks.on_output_ready = [&](int i, const runtime::TensorView &v) {
        if (reached(grad_outputs, static_cast<size_t>(i))) autograd::announce_gradient(*this, static_cast<size_t>(i), from_view(v));
      };
    auto grads = donate ? artifact->graph.backward->run_donating(args, &error, &hooks)
                        : artifact->graph.backward->run(args, &error, &hooks);
    profiler.record("backward " + module_name, "step", start_us, profiler.now_us() - start_us);
    compile_detail::check_run(error, "backward");
    TensorList out;
    for (size_t i = 0; i < grads.size(); ++i) out.push_back(reached(grad_outputs, i) ? from_view(grads[i]) : Tensor());
    if (eager_backward && needs_eager_backward(grad_outputs, out)) return eager_backward(grad_outputs);
    return out;
  }
  static bool needs_eager_backward(const TensorList &grad_outputs, const TensorList &grads) {
    bool some_undefined = false;
    for (const Tensor &g : grad_outputs) some_undefined |= !g.defined();
    if (!some_undefined) return false;
    for (const Tensor &g : grads)
      if (g.defined() && g.is_floating_point())
        for (double v : g.to_vector<double>())
          if (!std::isfinite(v)) return true;
    return false;
  }
  bool reached(const TensorList &grad_outputs, size_t target) const {
    if (reach.empty()) return true;
    for (size_t k = 0; k < grad_outputs.size(); ++k)
      if (grad_outputs[k].defined() && reach[k][target]) return true;
    return false;
  }
  std::string name() const override { return "CompiledFunctionBackward"; }
  void release_saved() override {
    saved.clear();
    released = true;
  }
  bool released = false;
};

}  // namespace kiln::compile_detail
