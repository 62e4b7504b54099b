// What Gemm.cpp and Conv.cpp share about oneDNN: the engine, which
// implementations to avoid (blas_or_ref) and the thread count of small
// primitives (SerialScope). Internal to runtime/src/cpu.
#pragma once

#include <cstdint>
#include <string>

#include <dnnl.hpp>

#ifdef _OPENMP
#include <omp.h>
#endif

namespace kiln::runtime::cpu {

/// The CPU engine every primitive runs on (one per process).
inline dnnl::engine &cpu_engine() {
  static dnnl::engine engine(dnnl::engine::kind::cpu, 0);
  return engine;
}

/// Whether `impl` (a primitive descriptor's impl_info_str()) is oneDNN's
/// BLAS-style implementation ("gemm:jit", "x64:gemm:jit": im2col + sgemm
/// for a convolution, strides brgemm does not take for a matmul) or its
/// reference loops. The first "gemm:jit" execution in a process generates
/// every dnnl_sgemm kernel (36-45 ms here, whatever the shape), the whole
/// first-output budget of an exported model (bench/README.md, "Exported
/// model"); Gemm.cpp and Conv.cpp take another implementation where oneDNN
/// has one.
inline bool blas_or_ref(const std::string &impl) {
  return impl.find("gemm:") != std::string::npos || impl.rfind("ref", 0) == 0;
}

/// Below this many multiply-adds (a GEMM's batch * M * N * K, a
/// convolution's N * O * OH * OW * C/groups * kH * kW; 128^3) a primitive
/// runs on the calling thread alone: waking a second OpenMP thread (passive
/// wait policy) costs ~20 us, more than the work (kiln-bench-gemm
/// BM_MatmulF32/64, 2026-12-04: 48-53 us on 2 threads, 6.3-6.6 us on one;
/// 128^3 about equal). oneDNN fixes a primitive's thread count when it is
/// created, so the same scope covers creation and execution.
constexpr int64_t kSerialMacs = int64_t(1) << 21;

/// omp_set_num_threads(1) for its scope (this thread's ICV only) when `on`.
class SerialScope {
public:
  explicit SerialScope(bool on) {
#ifdef _OPENMP
    if (on) {
      saved_ = omp_get_max_threads();
      omp_set_num_threads(1);
    }
#endif
  }
  ~SerialScope() {
#ifdef _OPENMP
    if (saved_ > 0)
      omp_set_num_threads(saved_);
#endif
  }
  SerialScope(const SerialScope &) = delete;
  SerialScope &operator=(const SerialScope &) = delete;

private:
  int saved_ = 0;
};

} // namespace kiln::runtime::cpu
