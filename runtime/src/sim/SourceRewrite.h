// What the loader does to a kernel source before compiling it. Not installed.
#pragma once

#include <string>
#include <vector>

namespace kiln::runtime::sim::detail {

/// The names of the `extern "C" __global__ void name(` kernels in `source`
/// (an optional __launch_bounds__(...) before the name), in order.
std::vector<std::string> find_kernels(const std::string &source);

/// `source` with each `extern __shared__ T name[];` replaced by a macro for
/// the launch's dynamic shared memory arena (line numbers kept with #line),
/// and with one kiln_sim_entry_<name>(void **args) per kernel appended.
std::string rewrite_for_host(const std::string &source, const std::vector<std::string> &kernels);

} // namespace kiln::runtime::sim::detail
