// The prelude text prepended (with -include) to every simulated kernel.
// Not installed.
#pragma once

#include <string>

namespace kiln::runtime::sim::detail {

/// Host C++ definitions of the CUDA built-ins the kernel-source contract
/// uses (runtime/src/sim/README.md lists them), the entry-point table
/// (ApiTable.h) and UBSan handlers that report through the simulator.
/// Deterministic: part of every kernel library's cache key.
std::string prelude_text();

} // namespace kiln::runtime::sim::detail
