// The CPU backend's work: kernel launches (MLIR packed convention, row-split
// over the OpenMP threads), GEMMs (oneDNN through Gemm.h, float64 by a
// plain loop) and strided copies.
#include "CpuWork.h"

#include <algorithm>
#include <cstring>
#include <stdexcept>
#include <vector>
#ifdef _OPENMP
#include <omp.h>
#endif

#include "kiln/runtime/DeviceBackend.h"
#include "kiln/runtime/Gemm.h"

namespace kiln::runtime::cpu {
namespace {

/// Copies the elements of `src` (any strides) into `dst`, contiguous.
template <size_t N> void copy_elements(const TensorView &src, char *dst) {
  const size_t rank = src.sizes.size();
  const int64_t total = src.numel();
  if (total == 0)
    return;
  const char *base = static_cast<const char *>(src.data());
  if (rank == 0) {
    std::memcpy(dst, base, N);
    return;
  }
  std::vector<int64_t> index(rank, 0);
  const int64_t inner = src.sizes[rank - 1];
  const int64_t inner_stride = src.strides[rank - 1];
  int64_t outer_offset = 0; // elements, for all dims but the last
  for (int64_t done = 0; done < total; done += inner) {
    const char *row = base + outer_offset * static_cast<int64_t>(N);
    if (inner_stride == 1) {
      std::memcpy(dst, row, static_cast<size_t>(inner) * N);
      dst += inner * static_cast<int64_t>(N);
    } else {
      for (int64_t j = 0; j < inner; ++j, dst += N)
        std::memcpy(dst, row + j * inner_stride * static_cast<int64_t>(N), N);
    }
    // Advance the outer index (odometer over dims rank-2 .. 0).
    for (int64_t d = static_cast<int64_t>(rank) - 2; d >= 0; --d) {
      if (++index[d] < src.sizes[d]) {
        outer_offset += src.strides[d];
        break;
      }
      outer_offset -= (index[d] - 1) * src.strides[d];
      index[d] = 0;
    }
  }
}

int64_t view_bytes(const TensorView &v) { return v.numel() * static_cast<int64_t>(itemsize(v.dtype)); }

/// Calls `kernel` on rows [begin, end) of dim 0 of every operand and result
/// (the whole tensors when `slice` is false). Packed args: per memref,
/// allocated ptr, aligned ptr, offset, sizes, strides. The aligned pointer
/// already includes the view's offset and the descriptor offset is 0:
/// result memrefs have a static offset of 0 (identity layout), so the
/// kernel would ignore a nonzero one.
void call_kernel(const KernelHandle &kernel, const KernelArgs &a, bool slice, int64_t begin, int64_t end) {
  const size_t num_memrefs = a.operands.size() + a.results.size();
  size_t num_scalars = 0;
  for (const TensorView *v : a.operands)
    num_scalars += 1 + 2 * v->sizes.size();
  for (const TensorView *v : a.results)
    num_scalars += 1 + 2 * v->sizes.size();
  // Per thread, reused across launches (no allocation per launch); `args`
  // points into the other two, which are sized before any pointer is taken.
  thread_local std::vector<void *> pointers, args;
  thread_local std::vector<int64_t> scalars;
  pointers.assign(2 * num_memrefs, nullptr);
  scalars.assign(num_scalars, 0);
  args.clear();
  args.reserve(2 * num_memrefs + num_scalars);
  size_t pi = 0, si = 0;
  auto push = [&](const TensorView &v) {
    const bool cut = slice && !v.sizes.empty();
    pointers[pi] = v.buffer->data();
    pointers[pi + 1] = static_cast<char *>(v.data()) +
                       (cut ? begin * v.strides[0] * static_cast<int64_t>(itemsize(v.dtype)) : 0);
    args.push_back(&pointers[pi]);
    args.push_back(&pointers[pi + 1]);
    pi += 2;
    scalars[si] = 0;
    args.push_back(&scalars[si++]);
    for (size_t d = 0; d < v.sizes.size(); ++d) {
      scalars[si] = cut && d == 0 ? end - begin : v.sizes[d];
      args.push_back(&scalars[si++]);
    }
    for (int64_t st : v.strides) {
      scalars[si] = st;
      args.push_back(&scalars[si++]);
    }
  };
  for (const TensorView *v : a.operands)
    push(*v);
  for (const TensorView *v : a.results)
    push(*v);
  kernel.packed(args.data());
}

/// Threads a split_rows launch runs on: the OpenMP threads (oneDNN's and the
/// eager kernels' pool), at most one per row, 1 below kCpuSplitMinBytes.
int split_threads(const KernelHandle &kernel, const KernelArgs &a) {
  if (!kernel.split_rows || a.results.empty())
    return 1;
#ifdef _OPENMP
  int64_t bytes = 0;
  for (const TensorView *v : a.operands)
    bytes += view_bytes(*v);
  for (const TensorView *v : a.results)
    bytes += view_bytes(*v);
  const int64_t rows = a.results[0]->sizes.empty() ? 1 : a.results[0]->sizes[0];
  if (bytes < kCpuSplitMinBytes || rows < 2 || omp_in_parallel())
    return 1;
  return static_cast<int>(std::min<int64_t>(omp_get_max_threads(), rows));
#else
  return 1;
#endif
}

/// C[i] = A[i] x B[i] in float64 (contiguous C, A[i] [M, K] and B[i] [K, N]
/// strided views, batch strides sa/sb): a plain i-k-j loop, as eager's
/// float64 GEMM (oneDNN 2.6 has no f64 matmul; float64 is for accuracy).
void dgemm_batched(int64_t batches, const TensorView &a, int64_t sa, const TensorView &b, int64_t sb, double *c,
                   int64_t M, int64_t K, int64_t N) {
  const size_t r = a.sizes.size();
  const double *pa = static_cast<const double *>(a.data()), *pb = static_cast<const double *>(b.data());
  const int64_t ar = a.strides[r - 2], ac = a.strides[r - 1], br = b.strides[r - 2], bc = b.strides[r - 1];
  std::fill(c, c + batches * M * N, 0.0);
  for (int64_t s = 0; s < batches; ++s) {
    const double *x = pa + s * sa, *y = pb + s * sb;
    double *z = c + s * M * N;
    for (int64_t i = 0; i < M; ++i)
      for (int64_t k = 0; k < K; ++k) {
        const double aik = x[i * ar + k * ac];
        for (int64_t j = 0; j < N; ++j)
          z[i * N + j] += aik * y[k * br + j * bc];
      }
  }
}

} // namespace

void copy_to_contiguous(const TensorView &src, void *dst) {
  char *out = static_cast<char *>(dst);
  switch (itemsize(src.dtype)) {
  case 1:
    copy_elements<1>(src, out);
    break;
  case 2:
    copy_elements<2>(src, out);
    break;
  case 4:
    copy_elements<4>(src, out);
    break;
  case 8:
    copy_elements<8>(src, out);
    break;
  }
}

void launch_kernel(const KernelHandle &kernel, const KernelArgs &args) {
  if (!kernel.packed)
    throw std::runtime_error("cpu launch: the kernel handle has no host entry (not a CPU kernel)");
  const int threads = split_threads(kernel, args);
  if (threads <= 1) {
    call_kernel(kernel, args, /*slice=*/false, 0, 0);
    return;
  }
  // Contiguous blocks of rows, one per thread (static schedule).
  const int64_t rows = args.results[0]->sizes[0];
#ifdef _OPENMP
#pragma omp parallel for num_threads(threads) schedule(static, 1)
#endif
  for (int t = 0; t < threads; ++t)
    call_kernel(kernel, args, /*slice=*/true, rows * t / threads, rows * (t + 1) / threads);
}

void gemm(const TensorView &a, const TensorView &b, const TensorView &c) {
  const size_t r = a.sizes.size();
  const int64_t batches = r == 3 ? a.sizes[0] : 1;
  const int64_t sa = r == 3 ? a.strides[0] : 0, sb = r == 3 ? b.strides[0] : 0;
  const int64_t M = a.sizes[r - 2], K = a.sizes[r - 1], N = b.sizes[r - 1];
  if (a.dtype == DType::Float64) {
    dgemm_batched(batches, a, sa, b, sb, static_cast<double *>(c.data()), M, K, N);
  } else if (a.dtype != DType::Float32) {
    Matrix16View ma{static_cast<const uint16_t *>(a.data()), M, K, a.strides[r - 2], a.strides[r - 1]};
    Matrix16View mb{static_cast<const uint16_t *>(b.data()), b.sizes[r - 2], N, b.strides[r - 2], b.strides[r - 1]};
    gemm16_batched(a.dtype, batches, ma, sa, mb, sb, a.dtype, c.data(), std::max<int64_t>(N, 1), M * N);
  } else {
    MatrixView ma{static_cast<const float *>(a.data()), M, K, a.strides[r - 2], a.strides[r - 1]};
    MatrixView mb{static_cast<const float *>(b.data()), b.sizes[r - 2], N, b.strides[r - 2], b.strides[r - 1]};
    sgemm_batched(batches, ma, sa, mb, sb, static_cast<float *>(c.data()), std::max<int64_t>(N, 1), M * N);
  }
}

} // namespace kiln::runtime::cpu
