// kiln/ops.h - tensor operations with autograd (PyTorch names and semantics).
//
// Binary elementwise ops broadcast with NumPy rules ([3, 1] op [4] -> [3, 4]).
// Type promotion: float32 op int64 -> float32; both int64 -> int64; bool
// operands of arithmetic ops throw (convert with to()). float16/bfloat16
// inputs are computed in float32 and the result converted back.
// Every op throws kiln::Error naming the op and the bad value on wrong shape,
// dtype or rank. Gradients are written with these same ops, so the tracer of
// kiln::compile sees backward formulas as ordinary ops.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "kiln/tensor.h"

namespace kiln {

// ---- creation ------------------------------------------------------------
/// Filled tensors on `device` (its backend allocates; the fill runs in the
/// device's "fill" kernel). Shapes may be empty ({} = a 0-d scalar).
Tensor full(const Shape &shape, double value, DType dtype = kFloat32, Device device = kCPU);
Tensor zeros(const Shape &shape, DType dtype = kFloat32, Device device = kCPU);
Tensor ones(const Shape &shape, DType dtype = kFloat32, Device device = kCPU);
/// Same shape, dtype and device as `t`.
Tensor zeros_like(const Tensor &t);
Tensor ones_like(const Tensor &t);
Tensor full_like(const Tensor &t, double value);
/// Uninitialized, same shape, dtype and device as `t` (torch.empty_like).
Tensor empty_like(const Tensor &t);
/// 0-d tensor holding `value`.
Tensor scalar_tensor(double value, DType dtype = kFloat32, Device device = kCPU);
/// [0, 1, ..., n-1] as int64 (or `dtype`), on `device`.
Tensor arange(int64_t n, DType dtype = kInt64, Device device = kCPU);
/// A tensor from row-major values; numel(shape) must equal values.size().
/// Built on the host, then copied to `device`.
Tensor tensor(const std::vector<float> &values, const Shape &shape, Device device = kCPU);
Tensor tensor(const std::vector<int64_t> &values, const Shape &shape, Device device = kCPU);
/// float32 from a braced list: tensor({1.f, 2.f}, {2}).
inline Tensor tensor(std::initializer_list<float> values, const Shape &shape, Device device = kCPU) {
  return tensor(std::vector<float>(values), shape, device);
}
/// Standard normal samples (Box-Muller on the Philox stream of the default
/// generator, see random.h). The samples are drawn on the host and copied to
/// `device`, so every device gets the same values for the same seed.
Tensor randn(const Shape &shape, DType dtype = kFloat32, Device device = kCPU);
/// Uniform samples in [low, high) (drawn on the host as randn).
Tensor uniform(const Shape &shape, double low = 0.0, double high = 1.0, DType dtype = kFloat32,
               Device device = kCPU);
Tensor rand(const Shape &shape, DType dtype = kFloat32, Device device = kCPU);

// ---- elementwise -----------------------------------------------------------
Tensor add(const Tensor &a, const Tensor &b);
Tensor sub(const Tensor &a, const Tensor &b);
Tensor mul(const Tensor &a, const Tensor &b);
/// True division; int64 / int64 gives float32 (as torch.div).
Tensor div(const Tensor &a, const Tensor &b);
Tensor neg(const Tensor &a);
Tensor exp(const Tensor &a);
/// Natural log; log(0) = -inf, log(x<0) = nan (IEEE).
Tensor log(const Tensor &a);
Tensor relu(const Tensor &a);
/// a^exponent elementwise (float only).
Tensor pow(const Tensor &a, double exponent);
Tensor sqrt(const Tensor &a);
/// Elementwise max of two tensors (gradient goes to the larger; ties split).
Tensor maximum(const Tensor &a, const Tensor &b);

// ---- extremes, rounded division, remainders (elementwise.cpp, issue 13) ---------
/// torch.minimum: NaN if either element is NaN, else the smaller (the first
/// on a tie, so minimum(0.0, -0.0) is 0.0). The gradient goes to the smaller
/// element; ties give half to each (as PyTorch's derivatives.yaml).
Tensor minimum(const Tensor &a, const Tensor &b);
/// torch.max(a, b) / torch.min(a, b): maximum / minimum.
Tensor max(const Tensor &a, const Tensor &b);
Tensor min(const Tensor &a, const Tensor &b);
/// torch.div(a, b, rounding_mode): "trunc" rounds the quotient toward zero
/// (floats: trunc(a / b)), "floor" toward -inf (floats: PyTorch's
/// div_floor_floating, aten/src/ATen/native/BinaryOps.h, so x / 0 is
/// +-inf or nan as IEEE); integer operands stay integer (promote_types).
/// Throws on another mode, on bool x bool, and for integers when an element
/// of b is 0 ("ZeroDivisionError", as PyTorch on CPU; a compiled graph
/// cannot raise and gives 0 there). The gradient is zero for both operands.
Tensor div(const Tensor &a, const Tensor &b, const std::string &rounding_mode);
/// div(a, b, "floor") (torch.floor_divide).
Tensor floor_divide(const Tensor &a, const Tensor &b);
/// torch.remainder: a - b * floor(a / b), with the sign of b (Python's %;
/// computed as fmod plus b where the signs differ, as aten's
/// remainder_kernel). Integer division by zero as div. Gradient: a gets g,
/// b gets -g * floor_divide(a, b) (derivatives.yaml).
Tensor remainder(const Tensor &a, const Tensor &b);
/// torch.fmod: C fmod, with the sign of a. Integer division by zero as div.
/// Gradient: a gets g, b gets -g * div(a, b, "trunc").
Tensor fmod(const Tensor &a, const Tensor &b);

// comparisons (broadcasting, bool result, no gradient)
Tensor eq(const Tensor &a, const Tensor &b);
Tensor ne(const Tensor &a, const Tensor &b);
Tensor lt(const Tensor &a, const Tensor &b);
Tensor le(const Tensor &a, const Tensor &b);
Tensor gt(const Tensor &a, const Tensor &b);
Tensor ge(const Tensor &a, const Tensor &b);
/// cond ? a : b, broadcasting all three; cond must be bool.
Tensor where(const Tensor &cond, const Tensor &a, const Tensor &b);

// ---- reductions ----------------------------------------------------------------
/// Sum over `dims` (empty = all dims). [N, C] sum({1}) -> [N]; keepdim -> [N, 1].
Tensor sum(const Tensor &a, const Shape &dims = {}, bool keepdim = false);
Tensor mean(const Tensor &a, const Shape &dims = {}, bool keepdim = false);
/// Max over `dims` (PyTorch amax); the gradient is split evenly among ties.
Tensor amax(const Tensor &a, const Shape &dims = {}, bool keepdim = false);
/// Index of the max along `dim` (first on ties), int64, no gradient.
Tensor argmax(const Tensor &a, int64_t dim, bool keepdim = false);
/// Index of the max of the flattened tensor (torch.argmax(a)), a 0-d int64.
/// A NaN counts as the max (the first NaN's index), as PyTorch.
Tensor argmax(const Tensor &a);
/// Index of the min along `dim` / of the flattened tensor; as argmax.
Tensor argmin(const Tensor &a, int64_t dim, bool keepdim = false);
Tensor argmin(const Tensor &a);
/// Min over `dims` (PyTorch amin); as amax.
Tensor amin(const Tensor &a, const Shape &dims = {}, bool keepdim = false);
/// The max / min over all elements as a 0-d tensor (torch.max(a),
/// torch.min(a)); NaN if any element is NaN. The gradient is split evenly
/// among the elements equal to the result (NaN ones when it is NaN), as
/// PyTorch's evenly_distribute_backward. Throws on an empty tensor.
Tensor max(const Tensor &a);
Tensor min(const Tensor &a);

// ---- linear algebra ----------------------------------------------------------------
/// [M, K] x [K, N] -> [M, N]; [K] vectors are promoted as in torch.matmul;
/// rank > 2 broadcasts the batch dims (through bmm). Floating operands,
/// dtypes promoted (promote_types): float32 runs oneDNN sgemm; bfloat16 x
/// bfloat16 runs oneDNN's bfloat16 matmul (AMX/AVX512-BF16 on this CPU,
/// float32 accumulation, the result rounded once to bfloat16); float16 x
/// float16 is computed in float32 and rounded (oneDNN 2.6 has no CPU
/// float16 matmul); float64 is a plain loop. While kiln::compile traces,
/// 16-bit operands are converted to float32 around a float32 matmul.
Tensor matmul(const Tensor &a, const Tensor &b);

// ---- more pointwise math (frontend/src/ops/pointwise.cpp) ----------------------
// All differentiable, any shape (output = input shape). Float inputs keep
// their dtype (float16/bfloat16 are computed in float32 and rounded once);
// int inputs are computed as float32 (except abs and clamp, see there).
// Bool inputs and undefined tensors throw kiln::Error naming the op.
// sigmoid, silu, gelu, clamp and masked_fill are composites of traceable ops; the
// others are kernels with a kiln dialect op (kiln::compile captures them all).
/// |a|; integer inputs stay integer (as torch.abs). Gradient sign(a) (0 at 0).
Tensor abs(const Tensor &a);
/// 1 / sqrt(a) (nan for a < 0, inf at 0).
Tensor rsqrt(const Tensor &a);
Tensor tanh(const Tensor &a);
/// 1 / (1 + exp(-a)), evaluated with exp(-|a|) so neither the value nor the
/// gradient overflows for large |a|.
Tensor sigmoid(const Tensor &a);
/// a * sigmoid(a) (Elfwing et al. 2018; PyTorch's SiLU).
Tensor silu(const Tensor &a);
/// GELU (Hendrycks & Gimpel 2016). approximate "none": a * Phi(a) with the
/// exact normal CDF Phi(a) = (1 + erf(a / sqrt 2)) / 2 (as PyTorch's
/// GeluKernel; captured by kiln::compile as kiln.erf); "tanh":
/// 0.5 a (1 + tanh(sqrt(2/pi) (a + 0.044715 a^3))), computed as the identical
/// a * sigmoid(2 sqrt(2/pi) (a + 0.044715 a^3)).
/// Throws on any other `approximate` string.
Tensor gelu(const Tensor &a, const std::string &approximate = "none");
Tensor sin(const Tensor &a);
Tensor cos(const Tensor &a);
/// min(max(a, min), max) as torch.clamp (so min > max gives max everywhere);
/// use -inf/+inf for "no bound"; NaN bounds throw, NaN elements pass through.
/// Gradient 1 inside [min, max] (bounds included), 0 outside. Integer inputs
/// stay integer when both finite bounds are integral, else become float32.
Tensor clamp(const Tensor &a, double min, double max);
/// clamp with optional bounds (torch.clamp(a, min=None, max=None)): an
/// absent bound is no bound; both absent throws (as PyTorch).
Tensor clamp(const Tensor &a, std::optional<double> min, std::optional<double> max);
/// clamp(a, min, +inf) / clamp(a, -inf, max) (torch.clamp_min / clamp_max).
Tensor clamp_min(const Tensor &a, double min);
Tensor clamp_max(const Tensor &a, double max);
/// The error function 2/sqrt(pi) int_0^a exp(-t^2) dt (float result, as the
/// other float ops). Gradient 2/sqrt(pi) exp(-a^2).
Tensor erf(const Tensor &a);
/// Rounding (torch.floor / ceil / round / trunc): round is half to even
/// (round(2.5) = 2, round(-0.5) = -0.0). Integer inputs are returned as a
/// copy with their dtype; floats keep theirs. NaN, +-inf and -0.0 pass
/// through. The gradient is zero.
Tensor floor(const Tensor &a);
Tensor ceil(const Tensor &a);
Tensor round(const Tensor &a);
Tensor trunc(const Tensor &a);
/// Copy of `a` with `value` (converted to a's dtype) where `mask` is true.
/// mask must be bool and broadcast to a's shape (the result has a's shape);
/// no gradient flows to masked positions.
Tensor masked_fill(const Tensor &a, const Tensor &mask, double value);

// ---- more reductions (frontend/src/ops/reduce_more.cpp) ---------------------------
/// Variance over `dims` (empty = all): sum((a - mean)^2) / max(0, N - correction)
/// (1 = unbiased, as torch.var's default; 0 = population; N <= correction
/// gives inf or nan, as torch). Floating inputs only; throws on integer
/// dtypes, out-of-range or repeated dims. [N, C] var({1}) -> [N].
Tensor var(const Tensor &a, const Shape &dims = {}, int64_t correction = 1, bool keepdim = false);
/// sqrt(var(a, dims, correction, keepdim)); same rules as var.
Tensor std(const Tensor &a, const Shape &dims = {}, int64_t correction = 1, bool keepdim = false);
/// Max along `dim`: (values, int64 indices) as torch.max(x, dim); values keep
/// a's dtype. The first NaN wins; otherwise the first index on ties. The
/// gradient flows to the returned index only. Throws on a bad dim or a
/// zero-size `dim`. [N, C] max(1) -> ([N], [N]); keepdim -> [N, 1].
std::pair<Tensor, Tensor> max(const Tensor &a, int64_t dim, bool keepdim = false);
/// Min along `dim`; as max.
std::pair<Tensor, Tensor> min(const Tensor &a, int64_t dim, bool keepdim = false);
/// log(sum(exp(a))) over `dims` (empty = all), stable: shifted by the
/// (detached) max, with infinite maxima handled as torch.logsumexp. Integer
/// inputs give float32; bool throws. Gradient softmax(a) over dims.
Tensor logsumexp(const Tensor &a, const Shape &dims, bool keepdim = false);
/// Inclusive prefix sum along `dim` (same shape). Floats keep their dtype
/// (accumulated in double); integer and bool inputs give int64 (as torch).
Tensor cumsum(const Tensor &a, int64_t dim);

// ---- batched linear algebra (frontend/src/ops/bmm.cpp) ---------------------------
/// [B, M, K] x [B, K, N] -> [B, M, N] for floating operands (promoted and
/// computed as matmul: float64 stays float64, bfloat16 x bfloat16 through
/// oneDNN's bfloat16 matmul per batch, other 16-bit floats in float32
/// through sgemm per batch). Throws on non-3-D operands, integer dtypes and
/// batch or inner size mismatch.
Tensor bmm(const Tensor &a, const Tensor &b);

// ---- indexing and joining (frontend/src/ops/indexing.cpp) ------------------------------
// Data movement is bytewise (every dtype, float16/bfloat16 exact). All are
// captured by kiln::compile: index_select/gather/embedding as kiln.gather,
// scatter_add as kiln.scatter_add, the slicing views and cat/stack as
// gathers/scatter-adds of constant position indices (compile.h).
/// Rows/slices of `a` along `dim` at `index` (int64 or int32, [K] or 0-d):
/// [.., N, ..] -> [.., K, ..]; repeats allowed (their gradients add). Throws
/// naming the index on one outside [0, a.size(dim)).
Tensor index_select(const Tensor &a, int64_t dim, const Tensor &index);
/// out[i][j] = a[i][index[i][j]] (dim = 1), as torch.gather. index int64 with
/// a's rank and index.size(d) <= a.size(d) for d != dim; out has index's
/// shape. Gradient: scatter_add into zeros. Throws on an out-of-range index.
Tensor gather(const Tensor &a, int64_t dim, const Tensor &index);
/// Copy of `a` with src[i][j] added at out[index[i][j]][j] (dim = 0), as
/// torch.scatter_add: index int64 with a's rank, index.size(d) <= src.size(d)
/// for all d and <= a.size(d) for d != dim; src has a's dtype (not bool).
/// float16/bfloat16 accumulate in float32. src elements beyond the index's
/// extent are unused and get a zero gradient (PyTorch's backward throws).
Tensor scatter_add(const Tensor &a, int64_t dim, const Tensor &index, const Tensor &src);
/// Python slice a[start:end:step] along dim (step >= 1; negative start/end
/// count from the end; both clamped to [0, size]), a view: size
/// ceil((end - start) / step) (0 if end <= start), stride * step. Throws on
/// step < 1 or a 0-d tensor.
Tensor slice(const Tensor &a, int64_t dim, int64_t start, int64_t end, int64_t step = 1);
/// Concatenates along an existing dim into a new tensor; sizes must match in
/// every other dim; dtypes promote (promote_types). 1-D empty tensors [0] are
/// skipped, as in PyTorch. Throws on an empty list, 0-d tensors or mismatches.
Tensor cat(const std::vector<Tensor> &tensors, int64_t dim = 0);
/// Stacks along a new dim (-(rank+1) <= dim <= rank); all shapes equal.
/// cat of unsqueeze(dim). [2, 3] x 4 with dim 1 -> [2, 4, 3].
Tensor stack(const std::vector<Tensor> &tensors, int64_t dim = 0);
/// Pieces of `split_size` along dim (the last may be smaller), narrow views;
/// a size-0 dim gives one empty piece. Throws unless split_size > 0.
std::vector<Tensor> split(const Tensor &a, int64_t split_size, int64_t dim = 0);
/// torch.chunk: split with split_size ceil(size / chunks), so it may return
/// fewer than `chunks` pieces ([6] into 4 -> 2, 2, 2); views. Throws unless
/// chunks > 0.
std::vector<Tensor> chunk(const Tensor &a, int64_t chunks, int64_t dim = 0);
/// torch.select: the slice at `index` of `dim` with that dim removed, a view
/// ([2, 3, 4] select(1, -1) -> [2, 4], a[:, -1]). index may be negative
/// (counts from the end). Throws on a 0-d tensor or an index outside
/// [-size, size).
Tensor select(const Tensor &a, int64_t dim, int64_t index);
/// torch.unbind: every select(a, dim, i), i = 0 .. size(dim) - 1, as views.
/// Throws on a 0-d tensor.
std::vector<Tensor> unbind(const Tensor &a, int64_t dim = 0);

// ---- dtypes -------------------------------------------------------------------
/// PyTorch's type promotion for two tensor dtypes: bool < integers < floats;
/// int32+int64 -> int64; float16+bfloat16 -> float32; anything+float64 -> float64.
DType promote_types(DType a, DType b);

// ---- layout -------------------------------------------------------------------
/// Broadcast shape of two shapes (NumPy rules); throws naming `op` if incompatible.
Shape broadcast_shapes(const Shape &a, const Shape &b, const char *op);
/// Reduces `grad` to `shape` by summing broadcast dims (the gradient of expand).
Tensor sum_to(const Tensor &grad, const Shape &shape);

}  // namespace kiln
