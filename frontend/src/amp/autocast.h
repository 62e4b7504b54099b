// amp/autocast.h (internal) - what eager ops call to apply autocast.
//
// At the entry of an op listed in kiln/ir/AutocastPolicy.h:
//
//   Tensor softmax(const Tensor &x, int64_t dim) {
//     amp::detail::AutocastOp ac("softmax");
//     if (ac) return softmax(ac.cast(x), dim);
//     ...
//
// `ac` is true when autocast is enabled on this thread, the op is not
// running inside another autocast op (or a backward pass), and its policy
// casts (LowerPrecision or Float32). While `ac` lives, autocast is excluded,
// so the re-entered call (and every op it runs) does not cast again. `ac`
// lives for the whole op (not only the `if`): under a compiled autocast
// trace a float32-policy op marks every node it records while it lives
// (trace::Float32Scope).
#pragma once

#include <optional>

#include "kiln/tensor.h"
#include "../trace.h"

namespace kiln::amp::detail {

/// Keeps autocast off on this thread while alive (PyTorch's
/// ExcludeDispatchKeyGuard for the Autocast key). Nestable.
class ExcludeGuard {
public:
  ExcludeGuard();
  ~ExcludeGuard();
  ExcludeGuard(const ExcludeGuard &) = delete;
  ExcludeGuard &operator=(const ExcludeGuard &) = delete;
};

/// Autocast at the entry of op `name` (a key of ir::autocastPolicy). See the
/// file comment.
class AutocastOp {
public:
  explicit AutocastOp(const char *name);
  ~AutocastOp();
  AutocastOp(const AutocastOp &) = delete;
  AutocastOp &operator=(const AutocastOp &) = delete;

  /// True when this call must cast its inputs and re-enter.
  explicit operator bool() const { return active_; }
  /// `t` converted to the op's autocast dtype when it is a float32, float16
  /// or bfloat16 tensor; undefined, float64, integer and bool tensors are
  /// returned unchanged (PyTorch's is_eligible).
  Tensor cast(const Tensor &t) const;

private:
  bool active_ = false;
  DType target_ = kFloat32;
  /// A float32-policy op under a compiled trace: its nodes are marked for
  /// kiln-autocast (trace::Float32Scope), whether or not eager autocast is on.
  std::optional<trace::Float32Scope> scope_;
};

}  // namespace kiln::amp::detail
