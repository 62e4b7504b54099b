// LaunchInternal.h - what LaunchExecutable.cpp (building, the memory plan)
// and LaunchRun.cpp (run()) share; not installed.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "kiln/runtime/LaunchExecutable.h"

namespace kiln::runtime {

struct LaunchExecutable::Launch {
  LaunchKind kind = LaunchKind::Kernel;
  std::string name;              ///< kernel name (Kernel only): the fusion's, for describe() and errors
  std::string symbol;            ///< Kernel only: its function in the kernel library (Builder::setKernelSymbol; empty: `name`)
  KernelHandle kernel;           ///< Kernel only (split_rows: may run on slices of dim 0)
  std::vector<int> operands;
  std::vector<int> results;
  std::vector<int64_t> attr;     ///< permutation (Transpose) or target sizes
  std::vector<InPlace> in_place; ///< Kernel only: results that may overwrite an operand (addKernel)
  ConvOp conv_op = ConvOp::Forward;      ///< Conv only
  Conv2dParams conv;                     ///< Conv only
  MaxPoolOp pool_op = MaxPoolOp::Forward; ///< MaxPool only
  Pool2dParams pool;                     ///< MaxPool only
  std::vector<std::pair<int, IndexCheck>> checks; ///< Kernel only: status slot, what it checks (addIndexCheck)
};

namespace detail {

inline int64_t numel_of(const std::vector<int64_t> &sizes) {
  int64_t n = 1;
  for (int64_t s : sizes)
    n *= s;
  return n;
}

inline int64_t nbytes_of(const SlotType &t) { return numel_of(t.sizes) * static_cast<int64_t>(itemsize(t.dtype)); }

/// "[2, 3]": sizes or strides for messages.
std::string join(const std::vector<int64_t> &v);

/// "kernel", "gemm", ... (describe() and profiler events).
const char *kind_name(LaunchKind k);

} // namespace detail
} // namespace kiln::runtime
