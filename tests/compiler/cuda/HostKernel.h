// tests/compiler/cuda/HostKernel.h - TEST-ONLY: compiles emitted CUDA C plus
// the kiln prelude with the host g++ into a shared object and runs a kernel
// with a minimal sequential launcher (every block, every thread, one after
// another). Only for kernels without barriers or shuffles (pointwise): the
// simulator of issue 14 ("cudasim") runs the others.
#pragma once

#include <dlfcn.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

#include "EmitCuda.h"

namespace kiln::test {

/// The CUDA names a host build of the prelude and a pointwise kernel needs.
inline const char *hostShim() {
  return R"(#include <math.h>
#define __global__
#define __device__
#define __forceinline__ inline
struct kiln_dim3 { unsigned x, y, z; };
static kiln_dim3 threadIdx, blockIdx, blockDim, gridDim;
inline void __syncthreads() { __builtin_trap(); }  // pointwise kernels have none
template <class T> T __shfl_xor_sync(unsigned, T, int) { __builtin_trap(); }
)";
}

/// A shared object built from `source`; `symbol` resolved from it.
class HostLibrary {
public:
  /// Compiles `source` (-O1 -shared -fPIC). Empty error() on success.
  explicit HostLibrary(const std::string &source) {
    char dir[] = "/tmp/kiln-cuda-host-XXXXXX";
    if (!mkdtemp(dir)) {
      error_ = "mkdtemp failed";
      return;
    }
    dir_ = dir;
    const std::string cpp = dir_ + "/k.cpp", so = dir_ + "/k.so", log = dir_ + "/log.txt";
    std::ofstream(cpp) << source;
    const std::string cmd = "g++ -std=c++17 -O1 -shared -fPIC -o " + so + " " + cpp + " > " + log + " 2>&1";
    if (std::system(cmd.c_str()) != 0) {
      std::ifstream in(log);
      error_ = "g++ failed: " + std::string(std::istreambuf_iterator<char>(in), {});
      return;
    }
    handle_ = dlopen(so.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (!handle_)
      error_ = dlerror();
  }
  ~HostLibrary() {
    if (handle_)
      dlclose(handle_);
    if (!dir_.empty())
      std::system(("rm -rf " + dir_).c_str());
  }
  const std::string &error() const { return error_; }
  void *symbol(const char *name) const { return handle_ ? dlsym(handle_, name) : nullptr; }

private:
  std::string dir_, error_;
  void *handle_ = nullptr;
};

/// `extern "C" void kiln_host_launch(void **args, unsigned grid, unsigned block)`:
/// calls the kernel for every (block, thread) in order; pointer params take
/// args[i] as the pointer, value params read *args[i].
inline std::string hostLauncher(const codegen::cuda::EmittedKernel &k) {
  std::string call = k.name + "(";
  for (size_t i = 0; i < k.params.size(); ++i) {
    const auto &p = k.params[i];
    const bool pointer = p.ctype.find('*') != std::string::npos;
    call += (i ? ", " : "") + (pointer ? "(" + p.ctype + ")args[" + std::to_string(i) + "]"
                                       : "*(" + p.ctype + " *)args[" + std::to_string(i) + "]");
  }
  call += ");";
  return "extern \"C\" void kiln_host_launch(void **args, unsigned grid, unsigned block) {\n"
         "  gridDim = {grid, 1, 1}; blockDim = {block, 1, 1};\n"
         "  for (unsigned b = 0; b < grid; ++b)\n"
         "    for (unsigned t = 0; t < block; ++t) {\n"
         "      blockIdx = {b, 0, 0}; threadIdx = {t, 0, 0};\n"
         "      " + call + "\n    }\n}\n";
}

using HostLaunch = void (*)(void **, unsigned, unsigned);

} // namespace kiln::test
