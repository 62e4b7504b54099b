// kiln/runtime/IndexCheck.h - data-dependent checks that kernels make on
// every launch (CUDA's device-side assert model), backend-neutral.
//
// A kernel that reads addresses from an index tensor (kiln.gather,
// kiln.scatter_add) never reads or writes outside its tensors: an index out
// of range is clamped (gather) or skipped (scatter_add), and the kernel
// writes a **status word** as one extra result, an int64 [2] tensor
// {found, first bad index} (row-major order of the index tensor; {0, 0}
// when every index is in range). The executable reads the status after the
// launch (LaunchExecutable::Builder::addIndexCheck) and fails the run with
// kIndexErrorPrefix + index_error(check, index), which the frontend throws
// as the kiln::Error eager raises (the eager kernels format their message
// with the same index_error).
#pragma once

#include <cstdint>
#include <string>

namespace kiln::runtime {

/// What one status word checks: indices of `op`'s dimension `dim` must be
/// in [0, size).
struct IndexCheck {
  std::string op;   ///< the op the user called: "gather", "index_select", "embedding", "scatter_add"
  int64_t dim = 0;  ///< the indexed dimension of the op's input
  int64_t size = 0; ///< the input's size in `dim`
};

/// Elements of a status word: {found (0 or 1), first bad index}.
constexpr int64_t kIndexStatusElements = 2;

/// The message eager and compiled calls raise for `index` outside
/// [0, check.size): "embedding: index 7 is out of range for a table of 5
/// embeddings (expected 0..4)", or for the other ops PyTorch's
/// "gather: index 7 is out of bounds for dimension 0 with size 5".
std::string index_error(const IndexCheck &check, int64_t index);

/// Prefix of a run error that is a failed data check (the rest is the
/// user's error message, index_error's).
inline constexpr const char *kIndexErrorPrefix = "index check: ";

} // namespace kiln::runtime
