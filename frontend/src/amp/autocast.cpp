// Eager autocast: the thread-local state, AutocastGuard, and the per-op cast
// helper the listed ops call (amp/autocast.h). The op table is
// kiln::ir::autocastPolicy (ir/include/kiln/ir/AutocastPolicy.h).
#include "kiln/amp.h"
#include "kiln/ir/AutocastPolicy.h"
#include "amp/autocast.h"

namespace kiln {
namespace {

struct AutocastState {
  bool enabled = false;
  DType dtype = kBFloat16;  // PyTorch's CPU default
  int exclude_depth = 0;    // > 0 inside an autocast op or a backward pass
};

thread_local AutocastState state;

}  // namespace

bool autocast_enabled() { return state.enabled; }
DType autocast_dtype() { return state.dtype; }

AutocastGuard::AutocastGuard(DType dtype, bool enabled) : prev_enabled_(state.enabled), prev_dtype_(state.dtype) {
  KILN_CHECK(dtype == kBFloat16 || dtype == kFloat16, "autocast: dtype must be bfloat16 or float16, got ",
             dtype_name(dtype));
  state.enabled = enabled;
  state.dtype = dtype;
}

AutocastGuard::~AutocastGuard() {
  state.enabled = prev_enabled_;
  state.dtype = prev_dtype_;
}

namespace amp::detail {

ExcludeGuard::ExcludeGuard() { ++state.exclude_depth; }
ExcludeGuard::~ExcludeGuard() { --state.exclude_depth; }

AutocastOp::AutocastOp(const char *name) {
  const ir::CastPolicy policy = ir::autocastPolicy(name);
  if (policy == ir::CastPolicy::Float32 && trace::active()) scope_.emplace();
  if (!state.enabled || state.exclude_depth > 0) return;
  switch (policy) {
  case ir::CastPolicy::LowerPrecision: target_ = state.dtype; break;
  case ir::CastPolicy::Float32: target_ = kFloat32; break;
  case ir::CastPolicy::Promote:  // the ops' own type promotion does it
  case ir::CastPolicy::None: return;
  }
  active_ = true;
  ++state.exclude_depth;
}

AutocastOp::~AutocastOp() {
  if (active_) --state.exclude_depth;
}

Tensor AutocastOp::cast(const Tensor &t) const {
  if (!active_ || !t.defined()) return t;
  const DType d = t.dtype();
  if (d != kFloat32 && d != kFloat16 && d != kBFloat16) return t;
  return t.to(target_);
}

}  // namespace amp::detail
}  // namespace kiln
