// Errors of the CUDA-on-CPU simulator (runtime/src/sim/README.md).
//
// runtime/ cannot see kiln::Error, so these follow the runtime's convention:
// std::runtime_error subclasses the frontend catches and rethrows.
#pragma once

#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>

namespace kiln::runtime::sim {

/// A grid or block extent, as CUDA's dim3 (x fastest).
struct Dim3 {
  uint32_t x = 1, y = 1, z = 1;
  /// x * y * z.
  uint64_t count() const { return uint64_t(x) * y * z; }
};

/// "(x,y,z)".
std::string to_string(const Dim3 &d);

/// A launch that failed: a bad launch configuration, or something a
/// simulated thread did (a divergent __syncthreads, a shuffle whose mask
/// names a lane that is not there, an out-of-bounds access, undefined
/// behaviour, a deadlock). what() reads
///   "cuda-sim: kernel 'name' block (bx,by,bz) thread (tx,ty,tz): <problem>"
/// (block and thread omitted for a configuration error). The launch is
/// abandoned: the other blocks stop, global memory holds whatever the
/// threads wrote before.
class KernelError : public std::runtime_error {
public:
  KernelError(std::string kernel, std::optional<Dim3> block, std::optional<Dim3> thread, std::string problem);
  const std::string &kernel() const { return kernel_; }
  /// The block and thread the problem is charged to (none for a launch
  /// configuration error).
  const std::optional<Dim3> &block() const { return block_; }
  const std::optional<Dim3> &thread() const { return thread_; }
  /// The problem alone, without the kernel/block/thread prefix.
  const std::string &problem() const { return problem_; }

private:
  std::string kernel_;
  std::optional<Dim3> block_, thread_;
  std::string problem_;
};

/// The host compiler rejected a kernel source: what() names the kernels in
/// the source and carries the compiler's own messages.
class CompileError : public std::runtime_error {
public:
  using std::runtime_error::runtime_error;
};

} // namespace kiln::runtime::sim
