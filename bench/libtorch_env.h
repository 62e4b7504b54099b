// libtorch_env.h - the process set-up every LibTorch-comparing benchmark
// needs before LibTorch runs (kiln-bench-ops, kiln-bench-gpt through
// peer_main.h; kiln-zoo-libtorch).
//
// LibTorch's OpenBLAS misdetects this CPU unless OPENBLAS_CORETYPE is set
// before the process starts (OpenBLAS reads it when the library loads), so
// the process re-executes itself with OPENBLAS_CORETYPE=SkylakeX (Haswell on
// a host without AVX-512: SkylakeX kernels die with SIGILL there) when it is
// missing. bench/README.md "Eager vs LibTorch" has the measurements.
#pragma once

#include <cstdlib>

#include <unistd.h>

namespace kiln::bench {

/// Re-executes /proc/self/exe with `argv` and OPENBLAS_CORETYPE set when the
/// variable is missing; returns only when it was set already or the exec
/// failed (the benchmark then runs with OpenBLAS's own detection).
inline void reexec_with_openblas_coretype(char **argv) {
  if (std::getenv("OPENBLAS_CORETYPE")) return;
  setenv("OPENBLAS_CORETYPE", __builtin_cpu_supports("avx512f") ? "SkylakeX" : "Haswell", 1);
  execv("/proc/self/exe", argv);  // only returns on failure: continue without it
}

}  // namespace kiln::bench
