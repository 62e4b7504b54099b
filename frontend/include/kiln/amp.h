// kiln/amp.h - automatic mixed precision: autocast regions and GradScaler
// (PyTorch's torch.autocast and torch.cuda.amp.GradScaler, on CPU tensors).
//
//   kiln::amp::GradScaler scaler;
//   for (...) {
//     opt.zero_grad();
//     Tensor loss;
//     {
//       kiln::AutocastGuard autocast(kiln::kBFloat16);   // `with torch.autocast("cpu")`
//       loss = nn::functional::cross_entropy(model.forward(x), y);
//     }
//     scaler.scale(loss).backward();   // backward outside the region, as PyTorch recommends
//     scaler.step(opt);                // unscales, skips opt.step() on inf/NaN gradients
//     scaler.update();
//   }
//
// Which op runs in which precision comes from one table,
// ir/include/kiln/ir/AutocastPolicy.h (`kiln::ir::autocastPolicy`), shared
// with the compiler's kiln-autocast pass. Under an enabled AutocastGuard, at
// the entry of every listed eager op:
// - lower precision (linear, matmul, bmm, conv2d,
//   scaled_dot_product_attention): float32/float16/bfloat16 inputs are cast
//   to the autocast dtype;
// - float32 (softmax, log_softmax, layer_norm, batch_norm, sum, mean, var,
//   std, cumsum, logsumexp, exp, log, pow, rsqrt, sqrt, cross_entropy,
//   nll_loss, mse_loss, binary_cross_entropy_with_logits): those inputs are
//   cast to float32;
// - promote (add, sub, mul, div, where, cat, stack, masked_fill): nothing to
//   do, Kiln's type promotion already computes mixed floats in the widest.
// float64, integer and bool tensors are never cast (as PyTorch's
// is_eligible). Casts are the ordinary `Tensor::to(dtype)` op: autograd
// records them (gradients reach float32 parameters in float32, so
// parameters stay the float32 master weights) and kiln::compile's tracer
// records them as conversions. The ops an autocast op runs internally, the
// cast itself and every backward pass run with autocast off (no re-casting),
// and composites that are not in the table (sigmoid, silu, gelu,
// avg_pool2d) keep their input dtype as in PyTorch. PyTorch's weight-cast
// cache (cache_enabled) is not implemented: each use casts again.
// kiln::compile traces whatever autocast casts (tests/frontend/
// amp_compile_test.cpp) and keys its cache on autocast_enabled() /
// autocast_dtype(), so one compiled module serves calls with and without
// autocast (an artifact each).
//
// Differences from PyTorch 1.13's CPU autocast, whose fp32 list holds only
// the losses (cross_entropy, nll_loss, mse_loss, BCE-with-logits, ...):
// Kiln follows the table above (CUDA-like), so softmax, log_softmax,
// layer_norm, batch_norm, sum, mean, exp, log, pow, rsqrt, sqrt, var, std,
// cumsum and logsumexp run in float32 here where PyTorch CPU keeps bfloat16;
// and float16 is accepted (PyTorch 1.13 CPU refuses it). See
// tests/golden/amp/gen_amp.py.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "kiln/tensor.h"

namespace kiln {

namespace optim {
class Optimizer;
}

// ---- autocast ------------------------------------------------------------------

/// Whether autocast is on for this thread (the innermost AutocastGuard's
/// `enabled`; false outside any guard). Thread-local, as PyTorch's
/// torch.is_autocast_cpu_enabled(); kiln::compile may key on it.
bool autocast_enabled();
/// The lower-precision dtype of the innermost AutocastGuard (kBFloat16
/// outside any guard, PyTorch's CPU default). Thread-local.
DType autocast_dtype();

/// RAII autocast region, torch.autocast("cpu", dtype, enabled): sets this
/// thread's autocast state for its lifetime and restores the previous state
/// (dtype and enabled) on destruction, so guards nest:
///   { AutocastGuard a(kBFloat16); { AutocastGuard off(kBFloat16, false); ... } ... }
/// dtype must be kBFloat16 or kFloat16 (on this CPU bfloat16 GEMMs run on
/// oneDNN's AMX/AVX512-BF16 kernels; float16 GEMMs convert to float32, see
/// runtime::gemm16_native). Throws kiln::Error naming the dtype for any
/// other dtype (float32 and float64 included), whether enabled or not.
class AutocastGuard {
public:
  explicit AutocastGuard(DType dtype = kBFloat16, bool enabled = true);
  ~AutocastGuard();
  AutocastGuard(const AutocastGuard &) = delete;
  AutocastGuard &operator=(const AutocastGuard &) = delete;

private:
  bool prev_enabled_;
  DType prev_dtype_;
};

/// PyTorch's spelling: `kiln::autocast guard(kiln::kBFloat16);`.
using autocast = AutocastGuard;

namespace amp {

// ---- GradScaler ------------------------------------------------------------------

/// GradScaler's constructor arguments (PyTorch names and defaults), with
/// chained setters: `GradScalerOptions().init_scale(1024).growth_interval(100)`.
struct GradScalerOptions {
  GradScalerOptions &init_scale(double v) { init_scale_ = v; return *this; }
  GradScalerOptions &growth_factor(double v) { growth_factor_ = v; return *this; }
  GradScalerOptions &backoff_factor(double v) { backoff_factor_ = v; return *this; }
  GradScalerOptions &growth_interval(int64_t v) { growth_interval_ = v; return *this; }
  GradScalerOptions &enabled(bool v) { enabled_ = v; return *this; }
  double init_scale_ = 65536.0;   ///< 2^16, the first scale
  double growth_factor_ = 2.0;    ///< scale *= this after growth_interval clean steps
  double backoff_factor_ = 0.5;   ///< scale *= this after a step with inf/NaN gradients
  int64_t growth_interval_ = 2000;///< clean steps between growths
  bool enabled_ = true;           ///< false: every method is a pass-through (step = optimizer.step())
};

/// Dynamic loss scaling (Micikevicius et al., "Mixed Precision Training",
/// ICLR 2018) with torch.cuda.amp.GradScaler's semantics (PyTorch 1.13,
/// torch/cuda/amp/grad_scaler.py; the update rule is
/// aten/src/ATen/native/cuda/AmpKernels.cu, _amp_update_scale_), on CPU
/// tensors. The scale is a float32 value; per optimizer (by address) the
/// scaler tracks the stage READY -> UNSCALED -> STEPPED of the current
/// iteration and whether its gradients held inf/NaN:
/// - scale(loss) = loss * scale (a float32 [1] tensor, as PyTorch: a 0-d
///   loss becomes [1]; float16/bfloat16 losses promote to float32).
/// - unscale_(opt): every defined gradient of opt's parameters is multiplied
///   in place by float32(1 / double(scale)), and inf/NaN anywhere is recorded.
/// - step(opt): unscale_(opt) unless done this iteration, then opt.step()
///   only if no inf/NaN was found. Returns whether opt.step() ran.
/// - update(): scale *= backoff_factor and the growth tracker resets if any
///   optimizer of this iteration saw inf/NaN; otherwise the tracker counts
///   the clean step and when it reaches growth_interval, scale *=
///   growth_factor (kept only if finite in float32) and the tracker resets.
///   Then every optimizer is READY again.
/// Disabled (enabled = false): scale returns its input, unscale_/update do
/// nothing, step calls opt.step(), get_scale() is 1, state_dict() is empty.
class GradScaler {
public:
  /// Throws kiln::Error (when enabled) on growth_factor <= 1 or
  /// backoff_factor >= 1 (PyTorch's asserts), and, stricter than PyTorch,
  /// on init_scale not finite and > 0, backoff_factor <= 0 or
  /// growth_interval < 1.
  explicit GradScaler(GradScalerOptions options = {});

  /// outputs * scale (see the class comment). Throws on an undefined or
  /// non-floating tensor.
  Tensor scale(const Tensor &outputs);
  /// scale() of each tensor.
  std::vector<Tensor> scale(const std::vector<Tensor> &outputs);
  /// Divides opt's gradients by the scale in place and records inf/NaN (see
  /// the class comment). Optional; step() calls it when the user did not.
  /// Throws kiln::Error if scale() was never called, if unscale_(opt) was
  /// already called since the last update() ("unscale_() has already been
  /// called on this optimizer since the last update()"), after step(opt) in
  /// this iteration, or on a float16 gradient (as PyTorch: "Attempting to
  /// unscale FP16 gradients").
  void unscale_(optim::Optimizer &optimizer);
  /// Unscales if needed, then runs optimizer.step() unless inf/NaN was
  /// found. Returns true if optimizer.step() ran. Throws kiln::Error if
  /// scale() was never called or step(opt) already ran since the last update().
  bool step(optim::Optimizer &optimizer);
  /// Updates the scale from this iteration's inf/NaN checks (see the class
  /// comment), or sets it to `new_scale` when given. Throws kiln::Error if
  /// scale() was never called, or (without new_scale) if no optimizer was
  /// unscaled/stepped since the last update ("No inf checks were recorded
  /// prior to update"), or on a new_scale that is not finite and > 0.
  void update(std::optional<double> new_scale = std::nullopt);

  /// The current scale (init_scale before the first scale(); 1 when disabled).
  double get_scale() const;
  double get_growth_factor() const { return growth_factor_; }
  void set_growth_factor(double v);
  double get_backoff_factor() const { return backoff_factor_; }
  void set_backoff_factor(double v);
  int64_t get_growth_interval() const { return growth_interval_; }
  void set_growth_interval(int64_t v);
  /// Clean steps since the last growth or backoff (PyTorch's _growth_tracker).
  int64_t growth_tracker() const { return growth_tracker_; }
  bool is_enabled() const { return enabled_; }

  /// PyTorch's keys: "scale", "growth_factor", "backoff_factor",
  /// "growth_interval", "_growth_tracker" (the integers as exact doubles).
  /// Empty when disabled. Call it after update(), as in PyTorch.
  std::map<std::string, double> state_dict() const;
  /// Restores a state_dict() (no-op when disabled). Throws kiln::Error,
  /// changing nothing, on an empty dict ("saved from a disabled instance of
  /// GradScaler"), a missing key, or values the constructor would refuse.
  void load_state_dict(const std::map<std::string, double> &state);

private:
  enum class Stage { Ready, Unscaled, Stepped };
  struct OptimizerState {
    Stage stage = Stage::Ready;
    bool checked = false;    ///< unscale_ ran this iteration (PyTorch: found_inf_per_device non-empty)
    bool found_inf = false;  ///< some gradient held inf/NaN
  };
  void check_initialized(const char *method) const;

  bool enabled_;
  double init_scale_;
  float scale_ = 0.0f;
  bool initialized_ = false;  ///< scale() ran (PyTorch's lazily created _scale)
  double growth_factor_, backoff_factor_;
  int64_t growth_interval_;
  int64_t growth_tracker_ = 0;
  std::map<const optim::Optimizer *, OptimizerState> per_optimizer_;
};

}  // namespace amp
}  // namespace kiln
