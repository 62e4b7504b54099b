// gemm_utils.h (internal) - which element type eager matmul/bmm multiply in.
#pragma once

#include <exception>

#include "kiln/runtime/Gemm.h"
#include "kiln/tensor.h"
#include "../trace.h"

namespace kiln::gemm {

/// The dtype a GEMM with result dtype `result` (promote_types of the
/// operands) computes in: float64 in float64; bfloat16 (or float16) x the
/// same type natively through runtime::gemm16 / gemm16_batched when oneDNN
/// has a matmul for it on this CPU (runtime::gemm16_native) (float32 accumulation, one rounding of the result), except while
/// kiln::compile traces (the compiler's matmul is float32, so the trace
/// shows convert -> f32 matmul -> convert, which gives the same values up to
/// summation order); everything else in float32 (sgemm).
inline DType compute_type(DType result) {
  if (result == kFloat64) return kFloat64;
  if ((result == kBFloat16 || result == kFloat16) && !trace::active() && runtime::gemm16_native(result))
    return result;
  return kFloat32;
}

/// The first matrix of a 16-bit [B, R, C] tensor (the next ones are
/// t.stride(0) elements apart), or the whole 2-D tensor, as a strided view.
inline runtime::Matrix16View matrix16_view(const Tensor &t) {
  const uint16_t *base =
      static_cast<const uint16_t *>(t.impl()->storage->data()) + t.storage_offset();
  const int64_t d = t.dim();
  return runtime::Matrix16View{base, t.size(d - 2), t.size(d - 1), t.stride(d - 2), t.stride(d - 1)};
}

/// Runs `call` (a runtime GEMM on a and b) and turns any exception the GEMM
/// library throws into a kiln::Error naming `op` and both operands' shapes,
/// strides and dtypes.
template <class F> void guarded(const char *op, const Tensor &a, const Tensor &b, F &&call) {
  try {
    call();
  } catch (const Error &) {
    throw;
  } catch (const std::exception &e) {
    KILN_CHECK(false, op, ": the GEMM failed for ", shape_str(a.sizes()), " (strides ", shape_str(a.strides()), ") x ",
               shape_str(b.sizes()), " (strides ", shape_str(b.strides()), ") ", dtype_name(a.dtype()), ": ",
               e.what());
  }
}

}  // namespace kiln::gemm
