// NvrtcKernelCheck.h - the check that every eager CUDA kernel emitted so far
// in this process compiles with NVRTC to a non-empty sm_90 CUBIN with 0
// register spills (issue 14's acceptance). Header-only: the tests that use it
// link the frontend (which owns emitted_kernels) and the CUDA loader.
#pragma once

#include <array>
#include <exception>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "kiln/runtime/cuda/Nvrtc.h"

namespace kiln::cuda_eager { // frontend/src/cuda/graph_kernels.cpp
size_t emitted_kernel_count();
/// (name, source, kind) of each kernel the eager CUDA path has emitted.
std::vector<std::array<std::string, 3>> emitted_kernels();
} // namespace kiln::cuda_eager

namespace kiln::test {

/// Compiles each of `kernels` for sm_90 with a compiler made of `options`;
/// a failure names the kernel, its kind and NVRTC's log.
inline void expect_compile_for_sm90_without_spills(const std::vector<std::array<std::string, 3>> &kernels,
                                                   runtime::cuda::NvrtcCompilerOptions options = {}) {
  runtime::cuda::NvrtcCompiler nvrtc(std::move(options));
  for (const auto &[name, source, kind] : kernels) {
    runtime::cuda::KernelSource src;
    src.code = source;
    src.kernel_names = {name};
    src.file_name = name + ".cu";
    try {
      const runtime::cuda::CompiledModule m = nvrtc.compile(src, 90);
      EXPECT_GT(m.binary.size(), 0u) << name;
      const runtime::cuda::KernelResources *r = m.kernel(name);
      ASSERT_NE(r, nullptr) << m.log;
      EXPECT_EQ(r->spill_store_bytes + r->spill_load_bytes, 0) << name << " (" << kind << ")\n" << m.log;
    } catch (const std::exception &e) {
      ADD_FAILURE() << name << " (" << kind << "): " << e.what();
    }
  }
}

} // namespace kiln::test
