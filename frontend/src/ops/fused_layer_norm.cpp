// Fused eager layer_norm (fused.h): one row kernel forward (mean, variance,
// normalize + affine) and one backward, as PyTorch's
// aten/src/ATen/native/cpu/layer_norm_kernel.cpp.
#include <vector>

#include "fused.h"
#include "fused_kernels.h"
#include "dispatch.h"
#include "kiln/autograd.h"
#include "kiln/ops.h"

namespace kiln::fused {
namespace {

using autograd::TensorList;
using namespace detail;

/// Pointers of one layer_norm call: x, y [rows, n]; w, b [n] or null;
/// mean, rstd [rows].
template <class T> struct NormArgs {
  const T *x;
  T *y;
  const T *w, *b;
  T *mean, *rstd;
  int64_t rows, n;
  T eps;
};

template <class T> KILN_FUSED_INLINE void norm_row(const NormArgs<T> &a, int64_t r) {
  const int64_t n = a.n;
  const T *__restrict x = a.x + r * n;
  T *__restrict y = a.y + r * n;
  const T mu = row_sum(x, n) / static_cast<T>(n);
  for (int64_t i = 0; i < n; ++i) y[i] = x[i] - mu;
  const T var = dot(y, y, n) / static_cast<T>(n);
  const T rstd = T(1) / std::sqrt(var + a.eps);
  a.mean[r] = mu;
  a.rstd[r] = rstd;
  const T *__restrict w = a.w;
  const T *__restrict b = a.b;
  if (w && b)
    for (int64_t i = 0; i < n; ++i) y[i] = y[i] * rstd * w[i] + b[i];
  else if (w)
    for (int64_t i = 0; i < n; ++i) y[i] = y[i] * rstd * w[i];
  else if (b)
    for (int64_t i = 0; i < n; ++i) y[i] = y[i] * rstd + b[i];
  else
    for (int64_t i = 0; i < n; ++i) y[i] *= rstd;
}

template <class T> KILN_FUSED_INLINE void norm_rows(const NormArgs<T> &a, int64_t r0, int64_t r1) {
  for (int64_t r = r0; r < r1; ++r) norm_row(a, r);
}
KILN_FUSED_CLONES void norm_rows_f32(const NormArgs<float> &a, int64_t r0, int64_t r1) { norm_rows(a, r0, r1); }

/// Pointers of one backward: g, x, dx [rows, n]; w [n] or null; mean, rstd
/// [rows]; dw, db: one [n] partial sum per chunk of `chunk` rows.
template <class T> struct NormGradArgs {
  const T *g, *x, *w, *mean, *rstd;
  T *dx, *dw, *db;
  int64_t rows, n, chunk;
};

/// Sum of g[i] w[i] (x[i] - mu) (w null: 1) over n elements (16 lanes).
template <class T>
KILN_FUSED_INLINE T centered_dot(const T *__restrict g, const T *__restrict w, const T *__restrict x, T mu, int64_t n) {
  constexpr int kLanes = 16;
  T acc[kLanes] = {};
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes)
    for (int l = 0; l < kLanes; ++l) acc[l] += g[i + l] * (w ? w[i + l] : T(1)) * (x[i + l] - mu);
  for (int l = 0; i < n; ++i, ++l) acc[l] += g[i] * (w ? w[i] : T(1)) * (x[i] - mu);
  for (int h = kLanes / 2; h >= 1; h /= 2)
    for (int l = 0; l < h; ++l) acc[l] += acc[l + h];
  return acc[0];
}

/// dx[i] = rstd (g w - mean(g w) - xhat mean(g w xhat)); dw += g xhat, db += g.
/// Every pointer restrict (else GCC runs a scalar loop behind an alias check).
template <bool kWeight, class T>
KILN_FUSED_INLINE void dx_row(const T *__restrict g, const T *__restrict x, const T *__restrict w, T mu, T rstd,
                              T mean_gw, T mean_gwxhat, T *__restrict dx, T *__restrict dw, T *__restrict db,
                              int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    const T xhat = (x[i] - mu) * rstd;
    const T gw = kWeight ? g[i] * w[i] : g[i];
    dx[i] = rstd * (gw - mean_gw - xhat * mean_gwxhat);
    dw[i] += g[i] * xhat;
    db[i] += g[i];
  }
}

/// dx of row r; adds g xhat and g into the chunk's partials dw, db.
template <class T> KILN_FUSED_INLINE void norm_backward_row(const NormGradArgs<T> &a, int64_t r, T *dw, T *db) {
  const int64_t n = a.n;
  const T *__restrict g = a.g + r * n;
  const T *__restrict x = a.x + r * n;
  const T *__restrict w = a.w;
  T *__restrict dx = a.dx + r * n;
  const T mu = a.mean[r], rstd = a.rstd[r];
  const T sum_gw = w ? dot(g, w, n) : row_sum(g, n);
  const T sum_gwx = centered_dot(g, w, x, mu, n);
  const T inv_n = T(1) / static_cast<T>(n);
  const T mean_gw = sum_gw * inv_n, mean_gwxhat = sum_gwx * rstd * inv_n;
  if (w) dx_row<true>(g, x, w, mu, rstd, mean_gw, mean_gwxhat, dx, dw, db, n);
  else dx_row<false>(g, x, w, mu, rstd, mean_gw, mean_gwxhat, dx, dw, db, n);
}

template <class T> KILN_FUSED_INLINE void norm_backward_chunks(const NormGradArgs<T> &a, int64_t c0, int64_t c1) {
  for (int64_t c = c0; c < c1; ++c) {
    T *dw = a.dw + c * a.n, *db = a.db + c * a.n;
    const int64_t end = std::min(a.rows, (c + 1) * a.chunk);
    for (int64_t r = c * a.chunk; r < end; ++r) norm_backward_row(a, r, dw, db);
  }
}
KILN_FUSED_CLONES void norm_backward_chunks_f32(const NormGradArgs<float> &a, int64_t c0, int64_t c1) {
  norm_backward_chunks(a, c0, c1);
}

// ---- The kernel tables --------------------------------------------------------------

/// Contiguous x, y; w, b undefined or contiguous; mean, rstd [rows].
using NormKernel = void(const Tensor &x, const Tensor &w, const Tensor &b, double eps, const Tensor &y,
                        const Tensor &mean, const Tensor &rstd);
/// Contiguous g, x; dw, db [n] (always written).
using NormBackwardKernel = void(const Tensor &g, const Tensor &x, const Tensor &w, const Tensor &mean,
                                const Tensor &rstd, const Tensor &dx, const Tensor &dw, const Tensor &db);
dispatch::DispatchStub<NormKernel> norm_stub("fused layer_norm");
dispatch::DispatchStub<NormBackwardKernel> norm_backward_stub("fused layer_norm backward");

template <class T> const T *ptr_or_null(const Tensor &t) { return t.defined() ? t.data_ptr<T>() : nullptr; }

template <class T>
void norm_typed(const Tensor &x, const Tensor &w, const Tensor &b, double eps, const Tensor &y, const Tensor &mean,
                const Tensor &rstd) {
  const int64_t rows = mean.numel();
  const NormArgs<T> a{x.data_ptr<T>(), y.data_ptr<T>(), ptr_or_null<T>(w), ptr_or_null<T>(b),
                      mean.data_ptr<T>(), rstd.data_ptr<T>(), rows, x.numel() / std::max<int64_t>(rows, 1),
                      static_cast<T>(eps)};
  parallel_items(rows, a.n, [&](int64_t r0, int64_t r1) {
    if constexpr (std::is_same_v<T, float>) norm_rows_f32(a, r0, r1);
    else norm_rows(a, r0, r1);
  });
}

void norm_cpu(const Tensor &x, const Tensor &w, const Tensor &b, double eps, const Tensor &y, const Tensor &mean,
              const Tensor &rstd) {
  if (x.dtype() == kFloat32) norm_typed<float>(x, w, b, eps, y, mean, rstd);
  else norm_typed<double>(x, w, b, eps, y, mean, rstd);
}

/// Sums the per-chunk partials [chunks, n] into out [n], chunk by chunk.
template <class T> void sum_partials(const std::vector<T> &part, int64_t chunks, int64_t n, T *out) {
  for (int64_t i = 0; i < n; ++i) out[i] = T(0);
  for (int64_t c = 0; c < chunks; ++c)
    for (int64_t i = 0; i < n; ++i) out[i] += part[static_cast<size_t>(c * n + i)];
}

template <class T>
void norm_backward_typed(const Tensor &g, const Tensor &x, const Tensor &w, const Tensor &mean, const Tensor &rstd,
                         const Tensor &dx, const Tensor &dw, const Tensor &db) {
  const int64_t rows = mean.numel(), n = dw.numel();
  const int64_t chunk = std::max<int64_t>(1, kernels::kMapChunk / std::max<int64_t>(n, 1));
  const int64_t chunks = (rows + chunk - 1) / chunk;
  std::vector<T> pw(static_cast<size_t>(chunks * n), T(0)), pb(pw.size(), T(0));
  const NormGradArgs<T> a{g.data_ptr<T>(), x.data_ptr<T>(), ptr_or_null<T>(w), mean.data_ptr<T>(),
                          rstd.data_ptr<T>(), dx.data_ptr<T>(), pw.data(), pb.data(), rows, n, chunk};
  kernels::parallel_for(chunks, 1, rows * n, [&](int64_t c0, int64_t c1) {
    if constexpr (std::is_same_v<T, float>) norm_backward_chunks_f32(a, c0, c1);
    else norm_backward_chunks(a, c0, c1);
  });
  sum_partials(pw, chunks, n, dw.data_ptr<T>());
  sum_partials(pb, chunks, n, db.data_ptr<T>());
}

void norm_backward_cpu(const Tensor &g, const Tensor &x, const Tensor &w, const Tensor &mean, const Tensor &rstd,
                       const Tensor &dx, const Tensor &dw, const Tensor &db) {
  if (x.dtype() == kFloat32) norm_backward_typed<float>(g, x, w, mean, rstd, dx, dw, db);
  else norm_backward_typed<double>(g, x, w, mean, rstd, dx, dw, db);
}

const dispatch::KernelRegistrar<NormKernel> norm_reg(norm_stub, DeviceType::CPU, norm_cpu);
const dispatch::KernelRegistrar<NormBackwardKernel> norm_backward_reg(norm_backward_stub, DeviceType::CPU,
                                                                      norm_backward_cpu);

// ---- Autograd -------------------------------------------------------------------------

/// What the backward needs besides g: the input, its row statistics (shaped
/// [leading dims, 1 x k], so they broadcast against x) and the weight.
struct NormSaved {
  int64_t k = 1;
  bool has_w = false, has_b = false;
  Shape affine_shape;  ///< the weight's / bias's shape
};

/// The dims a reduction over rows (dims < x.dim() - k) or within a row (the last k) names.
Shape leading_dims(int64_t dim, int64_t k) {
  Shape d;
  for (int64_t i = 0; i < dim - k; ++i) d.push_back(i);
  return d;
}
Shape trailing_dims(int64_t dim, int64_t k) {
  Shape d;
  for (int64_t i = dim - k; i < dim; ++i) d.push_back(i);
  return d;
}

/// t summed over the rows (the leading dims; none: t itself), as `shape`.
Tensor sum_rows(const Tensor &t, int64_t k, const Shape &shape) {
  const Shape lead = leading_dims(t.dim(), k);
  return (lead.empty() ? t : t.sum(lead)).reshape(shape);
}

/// The backward from primitive ops (while a trace records it); the same formulas as the kernel.
TensorList norm_backward_composite(const Tensor &g, const TensorList &s, const NormSaved &m) {
  const Tensor &x = s[0], &mean = s[1], &rstd = s[2];
  const Shape row = trailing_dims(x.dim(), m.k);
  const Tensor xhat = (x - mean) * rstd;
  const Tensor gw = m.has_w ? g * s[3].reshape(m.affine_shape) : g;
  TensorList out{rstd * (gw - gw.mean(row, true) - xhat * (gw * xhat).mean(row, true))};
  if (m.has_w) out.push_back(sum_rows(g * xhat, m.k, m.affine_shape));
  if (m.has_b) out.push_back(sum_rows(g, m.k, m.affine_shape));
  return out;
}

TensorList norm_backward(const Tensor &g, const TensorList &s, const NormSaved &m) {
  if (!applies(g)) return norm_backward_composite(g, s, m);
  const Tensor &x = s[0];
  const int64_t n = x.numel() / std::max<int64_t>(s[1].numel(), 1);
  const Tensor gc = g.contiguous();
  Tensor dx = Tensor::empty(x.sizes(), x.dtype(), x.device());
  Tensor dw = Tensor::empty({n}, x.dtype(), x.device()), db = Tensor::empty({n}, x.dtype(), x.device());
  norm_backward_stub("layer_norm", x.device().type, gc, x, m.has_w ? s[3] : Tensor(), s[1], s[2], dx, dw, db);
  TensorList out{dx};
  if (m.has_w) out.push_back(dw.reshape(m.affine_shape));
  if (m.has_b) out.push_back(db.reshape(m.affine_shape));
  return out;
}

}  // namespace

Tensor layer_norm(const Tensor &x, int64_t k, const Tensor &weight, const Tensor &bias, double eps) {
  const Tensor xc = x.contiguous();
  const Tensor w = weight.defined() ? weight.contiguous() : Tensor();
  const Tensor b = bias.defined() ? bias.contiguous() : Tensor();
  Shape stat_shape(xc.sizes().begin(), xc.sizes().end() - k);
  stat_shape.resize(static_cast<size_t>(xc.dim()), 1);
  Tensor y = Tensor::empty(xc.sizes(), xc.dtype(), xc.device());
  Tensor mean = Tensor::empty(stat_shape, xc.dtype(), xc.device());
  Tensor rstd = Tensor::empty(stat_shape, xc.dtype(), xc.device());
  norm_stub("layer_norm", xc.device().type, xc, w, b, eps, y, mean, rstd);
  TensorList inputs{xc}, saved{xc, mean, rstd};
  NormSaved meta{k, w.defined(), b.defined(), w.defined() ? w.sizes() : (b.defined() ? b.sizes() : Shape{})};
  if (w.defined()) inputs.push_back(w), saved.push_back(w);
  if (b.defined()) inputs.push_back(b);
  if (autograd::any_requires_grad(inputs))
    autograd::record(y, "NativeLayerNormBackward", inputs, saved,
                     [meta](const TensorList &g, const TensorList &s) -> TensorList {
                       return norm_backward(g[0], s, meta);
                     });
  return y;
}

}  // namespace kiln::fused
