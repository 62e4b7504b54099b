// bmm: batched matrix multiply [B, M, K] x [B, K, N] -> [B, M, N].
// float32 runs runtime::sgemm_batched (one oneDNN matmul for the batch) on
// strided matrix views (transposed operands cost nothing); bfloat16 x bfloat16 runs
// runtime::gemm16_batched (one oneDNN matmul for the whole batch,
// AMX/AVX512-BF16; batch stride 0 broadcasts); float64 is a plain loop
// (traced as an f64 kiln.matmul, which the compiled runtime also loops).
#include <optional>
#include <algorithm>

#include "kiln/autograd.h"
#include "kiln/ops.h"
#include "kiln/runtime/Gemm.h"
#include "gemm_utils.h"
#include "dispatch.h"
#include "kernels.h"
#include "../trace.h"
#include "../amp/autocast.h"

namespace kiln {
namespace {

/// Matrix `batch` of a float32 [B, R, C] tensor as a strided view.
runtime::MatrixView batch_view(const Tensor &t, int64_t batch) {
  const float *base = reinterpret_cast<const float *>(kernels::storage_base(t)) + t.storage_offset();
  return runtime::MatrixView{base + batch * t.stride(0), t.size(1), t.size(2), t.stride(1), t.stride(2)};
}

/// out[b] = a[b] x b[b] for float32 in one runtime::sgemm_batched call (one
/// oneDNN matmul over the whole batch, as the compiled bmm).
void bmm_float(const Tensor &a, const Tensor &b, Tensor &out) {
  const int64_t M = a.size(1), N = b.size(2);
  runtime::sgemm_batched(a.size(0), batch_view(a, 0), a.stride(0), batch_view(b, 0), b.stride(0),
                         out.data_ptr<float>(), N, M * N);
}

/// out[b] = a[b] x b[b] for bfloat16/float16 in one runtime::gemm16_batched
/// call (float32 accumulation, the result rounded once).
void bmm_half(const Tensor &a, const Tensor &b, Tensor &out) {
  const int64_t M = a.size(1), N = b.size(2);
  runtime::gemm16_batched(a.dtype(), a.size(0), gemm::matrix16_view(a), a.stride(0), gemm::matrix16_view(b),
                          b.stride(0), a.dtype(), out.raw_data(), N, M * N);
}

/// out[b] = a[b] x b[b] for float64: an i-k-j loop per batch.
void bmm_double(const Tensor &a, const Tensor &b, Tensor &out) {
  const double *pa = reinterpret_cast<const double *>(kernels::storage_base(a)) + a.storage_offset();
  const double *pb = reinterpret_cast<const double *>(kernels::storage_base(b)) + b.storage_offset();
  double *pc = out.data_ptr<double>();
  const int64_t B = a.size(0), M = a.size(1), K = a.size(2), N = b.size(2);
  std::fill(pc, pc + B * M * N, 0.0);
  for (int64_t s = 0; s < B; ++s) {
    const double *x = pa + s * a.stride(0), *y = pb + s * b.stride(0);
    double *z = pc + s * M * N;
    for (int64_t i = 0; i < M; ++i)
      for (int64_t k = 0; k < K; ++k) {
        const double aik = x[i * a.stride(1) + k * a.stride(2)];
        for (int64_t j = 0; j < N; ++j) z[i * N + j] += aik * y[k * b.stride(1) + j * b.stride(2)];
      }
  }
}

/// out = a x b for [B, M, K] x [B, K, N] operands of one compute dtype, K > 0.
using BmmKernel = void(const Tensor &a, const Tensor &b, Tensor &out);
dispatch::DispatchStub<BmmKernel> bmm_stub("bmm");

void bmm_cpu(const Tensor &a, const Tensor &b, Tensor &out) {
  if (a.dtype() == kFloat64) bmm_double(a, b, out);
  else if (a.dtype() != kFloat32) gemm::guarded("bmm", a, b, [&] { bmm_half(a, b, out); });
  else gemm::guarded("bmm", a, b, [&] { bmm_float(a, b, out); });
}
const dispatch::KernelRegistrar<BmmKernel> bmm_cpu_reg(bmm_stub, DeviceType::CPU, bmm_cpu);
void bmm_cuda(const Tensor &a, const Tensor &b, Tensor &out) { dispatch::device_gemm("bmm", a, b, out); }
const dispatch::KernelRegistrar<BmmKernel> bmm_cuda_reg(bmm_stub, DeviceType::CUDA, bmm_cuda);

void check_operands(const Tensor &a, const Tensor &b) {
  KILN_CHECK(a.defined() && b.defined(), "bmm: operand is an undefined tensor");
  dispatch::common_device("bmm", {&a, &b});
  KILN_CHECK(a.dim() == 3 && b.dim() == 3, "bmm: expected 3-D operands [B, M, K] and [B, K, N], got shapes ",
             shape_str(a.sizes()), " and ", shape_str(b.sizes()));
  KILN_CHECK(a.is_floating_point() && b.is_floating_point(), "bmm: expected floating point operands, got ",
             dtype_name(a.dtype()), " and ", dtype_name(b.dtype()));
  KILN_CHECK(a.size(0) == b.size(0), "bmm: batch sizes differ: shapes ", shape_str(a.sizes()), " and ",
             shape_str(b.sizes()), " (", a.size(0), " != ", b.size(0), ")");
  KILN_CHECK(a.size(2) == b.size(1), "bmm: shapes ", shape_str(a.sizes()), " and ", shape_str(b.sizes()),
             " cannot be multiplied (", a.size(2), " != ", b.size(1), ")");
}

}  // namespace

Tensor bmm(const Tensor &a, const Tensor &b) {
  amp::detail::AutocastOp ac("bmm");
  if (ac) return bmm(ac.cast(a), ac.cast(b));
  check_operands(a, b);
  const DType result = promote_types(a.dtype(), b.dtype());
  const DType compute = gemm::compute_type(result);
  // kiln.matmul is f32 or f64: a native 16-bit GEMM (never chosen while
  // tracing, see gemm::compute_type) runs eagerly.
  std::optional<trace::GraphBreak> graph_break;
  if (compute != kFloat32 && compute != kFloat64) graph_break.emplace("bmm");
  Tensor x = a.to(compute), y = b.to(compute);
  Tensor out = Tensor::empty({x.size(0), x.size(1), y.size(2)}, compute, x.device());
  if (trace::skip_compute()) {
    // lazy segment trace: the compiled segment computes it
  } else if (out.numel() > 0 && x.size(2) == 0) out.zero_();  // empty inner dim: sums of nothing
  else if (out.numel() > 0) bmm_stub("bmm", x.device().type, x, y, out);
  trace::record(ir::OpKind::Matmul, {x, y}, out);  // batched kiln.matmul (a no-op while a graph break pauses tracing)
  if (autograd::any_requires_grad({x, y}))
    autograd::record(out, "BmmBackward", {x, y}, {x, y},
                     [](const autograd::TensorList &g, const autograd::TensorList &s) -> autograd::TensorList {
                       return {bmm(g[0], s[1].transpose(1, 2)), bmm(s[0].transpose(1, 2), g[0])};
                     });
  return result != compute ? out.to(result) : out;
}

}  // namespace kiln
