// Regression.h - replays a program kiln-fuzz found (or a hand-written one)
// through the oracle: the compiled module must match eager (Oracle.h's rule).
#pragma once

#include <cstdlib>

#include <gtest/gtest.h>

#include "kiln/runtime/cuda/CudaBackend.h"

#include "Oracle.h"

namespace kiln::fuzz {

/// `program` and `options` in Program::str() / Options::str() form; `seed`
/// draws the inputs. Options with device=cuda:N (kiln-fuzz --device) run on
/// the GPU when there is one, else on the CUDA-on-CPU simulator.
inline void expect_compiled_matches_eager(const std::string &program, const std::string &options, uint64_t seed) {
  const Options o = Options::parse(options);
  if (o.device.is_cuda() && !runtime::cuda::ensure_cuda_backend()) {
    ::setenv("KILN_CUDA_SIM", "1", 1);
    ASSERT_NE(runtime::cuda::ensure_cuda_backend(), nullptr) << "no CUDA backend, even the simulator";
  }
  const Verdict v = check(Program::parse(program), o, seed);
  EXPECT_EQ(v.status, Verdict::Pass) << v.message << "\nprogram: " << program << "\noptions: " << options;
}

}  // namespace kiln::fuzz
