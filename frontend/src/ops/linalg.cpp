// matmul through the runtime's oneDNN GEMMs (sgemm; gemm16 for bfloat16).
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

runtime::MatrixView matrix_view(const Tensor &t) {
  return runtime::MatrixView{reinterpret_cast<const float *>(kernels::storage_base(t)) + t.storage_offset(),
                             t.size(0), t.size(1), t.stride(0), t.stride(1)};
}

/// float64 GEMM: a plain i-k-j loop (float64 is for accuracy checks, not speed).
void dgemm(const Tensor &a, const Tensor &b, Tensor &out) {
  const double *pa = reinterpret_cast<const double *>(kernels::storage_base(a)) + a.storage_offset();
  const double *pb = reinterpret_cast<const double *>(kernels::storage_base(b)) + b.storage_offset();
  double *pc = out.data_ptr<double>();
  const int64_t M = a.size(0), K = a.size(1), N = b.size(1);
  std::fill(pc, pc + M * N, 0.0);
  for (int64_t i = 0; i < M; ++i)
    for (int64_t k = 0; k < K; ++k) {
      const double aik = pa[i * a.stride(0) + k * a.stride(1)];
      for (int64_t j = 0; j < N; ++j) pc[i * N + j] += aik * pb[k * b.stride(0) + j * b.stride(1)];
    }
}

/// out = a x b for [M, K] x [K, N] operands of one compute dtype.
using MmKernel = void(const Tensor &a, const Tensor &b, Tensor &out);
dispatch::DispatchStub<MmKernel> mm_stub("matmul");

void mm_cpu(const Tensor &a, const Tensor &b, Tensor &out) {
  if (a.dtype() == kFloat64)
    dgemm(a, b, out);
  else if (a.dtype() == kBFloat16 || a.dtype() == kFloat16)  // gemm::compute_type chose the native 16-bit GEMM
    gemm::guarded("matmul", a, b, [&] {
      runtime::gemm16(a.dtype(), gemm::matrix16_view(a), gemm::matrix16_view(b), a.dtype(), out.raw_data(), b.size(1));
    });
  else
    gemm::guarded("matmul", a, b,
                  [&] { runtime::sgemm(matrix_view(a), matrix_view(b), out.data_ptr<float>(), b.size(1)); });
}
const dispatch::KernelRegistrar<MmKernel> mm_cpu_reg(mm_stub, DeviceType::CPU, mm_cpu);
void mm_cuda(const Tensor &a, const Tensor &b, Tensor &out) { dispatch::device_gemm("matmul", a, b, out); }
const dispatch::KernelRegistrar<MmKernel> mm_cuda_reg(mm_stub, DeviceType::CUDA, mm_cuda);

Tensor matmul_2d(const Tensor &a, const Tensor &b) {
  KILN_CHECK(a.size(1) == b.size(0), "matmul: shapes ", shape_str(a.sizes()), " and ", shape_str(b.sizes()),
             " cannot be multiplied (", a.size(1), " != ", b.size(0), ")");
  Tensor out = Tensor::empty({a.size(0), b.size(1)}, a.dtype(), a.device());
  if (!trace::skip_compute()) mm_stub("matmul", a.device().type, a, b, out);  // lazy trace: the segment computes it
  trace::record(ir::OpKind::Matmul, {a, b}, out);
  if (autograd::any_requires_grad({a, b}))
    autograd::record(out, "MmBackward", {a, b}, {a, b},
                     [](const autograd::TensorList &g, const autograd::TensorList &s) -> autograd::TensorList {
                       return {g[0].matmul(s[1].t()), s[0].t().matmul(g[0])};
                     });
  return out;
}

/// Batched matmul with NumPy broadcasting of the leading dims (torch.matmul
/// for rank > 2): [*A, M, K] x [*B, K, N] -> [broadcast(A, B), M, N] via bmm.
Tensor matmul_batched(const Tensor &a, const Tensor &b) {
  const bool a_vec = a.dim() == 1, b_vec = b.dim() == 1;
  Tensor x = a_vec ? a.unsqueeze(0) : a, y = b_vec ? b.unsqueeze(1) : b;
  KILN_CHECK(x.size(-1) == y.size(-2), "matmul: shapes ", shape_str(a.sizes()), " and ", shape_str(b.sizes()),
             " cannot be multiplied (", x.size(-1), " != ", y.size(-2), ")");
  Shape batch_a(x.sizes().begin(), x.sizes().end() - 2), batch_b(y.sizes().begin(), y.sizes().end() - 2);
  Shape batch = broadcast_shapes(batch_a, batch_b, "matmul");
  const int64_t m = x.size(-2), k = x.size(-1), n = y.size(-1);
  Shape xa = batch, ya = batch;
  xa.insert(xa.end(), {m, k});
  ya.insert(ya.end(), {k, n});
  Tensor out = bmm(x.expand(xa).reshape({-1, m, k}), y.expand(ya).reshape({-1, k, n}));
  Shape out_shape = batch;
  if (!a_vec) out_shape.push_back(m);
  if (!b_vec) out_shape.push_back(n);
  return out.reshape(out_shape);
}

}  // namespace

Tensor matmul(const Tensor &a, const Tensor &b) {
  amp::detail::AutocastOp ac("matmul");
  if (ac) return matmul(ac.cast(a), ac.cast(b));
  KILN_CHECK(a.defined() && b.defined(), "matmul: operand is an undefined tensor");
  dispatch::common_device("matmul", {&a, &b});
  KILN_CHECK(a.dim() >= 1 && b.dim() >= 1, "matmul: both operands need at least 1 dimension, got shapes ",
             shape_str(a.sizes()), " and ", shape_str(b.sizes()));
  KILN_CHECK(a.is_floating_point() && b.is_floating_point(), "matmul: expected floating point operands, got ",
             dtype_name(a.dtype()), " and ", dtype_name(b.dtype()));
  const DType result = promote_types(a.dtype(), b.dtype());
  const DType compute = gemm::compute_type(result);
  Tensor x = a.to(compute), y = b.to(compute);
  Tensor out;
  if (x.dim() > 2 || y.dim() > 2) out = matmul_batched(x, y);
  else if (x.dim() == 2 && y.dim() == 2) out = matmul_2d(x, y);
  else if (x.dim() == 1 && y.dim() == 2) out = matmul_2d(x.unsqueeze(0), y).squeeze(0);
  else if (x.dim() == 2 && y.dim() == 1) out = matmul_2d(x, y.unsqueeze(1)).squeeze(1);
  else out = matmul_2d(x.unsqueeze(0), y.unsqueeze(1)).reshape({});
  return result != compute ? out.to(result) : out;
}

Tensor Tensor::matmul(const Tensor &o) const { return kiln::matmul(*this, o); }

}  // namespace kiln
