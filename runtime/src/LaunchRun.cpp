// LaunchExecutable::run(): binds the inputs, allocates the arena and the
// results' buffers, and performs the launches in order (kernels, row-split
// over the OpenMP threads, GEMMs, views, copies).
#include "LaunchInternal.h"

#include <algorithm>
#include <cstring>
#include <exception>
#include <string>
#ifdef _OPENMP
#include <omp.h>
#endif

#include "kiln/runtime/Gemm.h"
#include "kiln/runtime/Profiler.h"

namespace kiln::runtime {

using detail::join;
using detail::kind_name;
using detail::nbytes_of;
using detail::numel_of;

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

/// Calls kernel `l` on rows [begin, end) of dim 0 of every operand and
/// result (the whole tensors when `slice` is false). Packed args: per
/// memref, allocated ptr, aligned ptr, offset, sizes, strides. The aligned
/// pointer already includes the view's offset and the descriptor offset is
/// 0: result memrefs have a static offset of 0 (identity layout), so the
/// kernel would ignore a nonzero one.
void call_kernel(const LaunchExecutable::Launch &l, const std::vector<TensorView> &values, bool slice, int64_t begin,
                 int64_t end) {
  const size_t num_memrefs = l.operands.size() + l.results.size();
  size_t num_scalars = 0;
  for (int s : l.operands)
    num_scalars += 1 + 2 * values[s].sizes.size();
  for (int s : l.results)
    num_scalars += 1 + 2 * values[s].sizes.size();
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
  for (int s : l.operands)
    push(values[s]);
  for (int s : l.results)
    push(values[s]);
  l.fn(args.data());
}

/// Threads a split_rows launch runs on: the OpenMP threads (oneDNN's and the
/// eager kernels' pool), at most one per row, 1 below kSplitMinBytes.
int split_threads(const LaunchExecutable::Launch &l, const std::vector<TensorView> &values) {
  if (!l.split_rows || l.results.empty())
    return 1;
#ifdef _OPENMP
  int64_t bytes = 0;
  for (int s : l.operands)
    bytes += numel_of(values[s].sizes) * static_cast<int64_t>(itemsize(values[s].dtype));
  for (int s : l.results)
    bytes += numel_of(values[s].sizes) * static_cast<int64_t>(itemsize(values[s].dtype));
  const int64_t rows = values[l.results[0]].sizes.empty() ? 1 : values[l.results[0]].sizes[0];
  if (bytes < LaunchExecutable::kSplitMinBytes || rows < 2 || omp_in_parallel())
    return 1;
  return static_cast<int>(std::min<int64_t>(omp_get_max_threads(), rows));
#else
  (void)values;
  return 1;
#endif
}

/// "[4, 5] strides [5, 1] float32", for error messages.
std::string view_str(const TensorView &v) {
  return slot_type_str(SlotType{v.sizes, v.dtype}) + " strides " + join(v.strides);
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
        for (int64_t j = 0; j < N; ++j) z[i * N + j] += aik * y[k * br + j * bc];
      }
  }
}

/// c = a x b for a gemm launch: rank 2, or rank 3 with any batch stride (0
/// for a broadcast operand), strided matrix views; one sgemm_batched (f32),
/// gemm16_batched (bfloat16, float16) or dgemm_batched (f64) call for the
/// launch `name`. An
/// exception from the GEMM library becomes `error` (naming the launch,
/// shapes and strides) and false.
bool runGemm(const std::string &name, const TensorView &a, const TensorView &b, TensorView &c, std::string *error) {
  const size_t r = a.sizes.size();
  const int64_t batches = r == 3 ? a.sizes[0] : 1;
  const int64_t sa = r == 3 ? a.strides[0] : 0, sb = r == 3 ? b.strides[0] : 0;
  const int64_t M = a.sizes[r - 2], N = b.sizes[r - 1];
  try {
    if (a.dtype == DType::Float64) {
      dgemm_batched(batches, a, sa, b, sb, static_cast<double *>(c.data()), M, a.sizes[r - 1], N);
      return true;
    }
    if (a.dtype != DType::Float32) {
      Matrix16View ma{static_cast<const uint16_t *>(a.data()), M, a.sizes[r - 1], a.strides[r - 2], a.strides[r - 1]};
      Matrix16View mb{static_cast<const uint16_t *>(b.data()), b.sizes[r - 2], N, b.strides[r - 2], b.strides[r - 1]};
      gemm16_batched(a.dtype, batches, ma, sa, mb, sb, a.dtype, c.data(), std::max<int64_t>(N, 1), M * N);
      return true;
    }
    const float *pa = static_cast<const float *>(a.data()), *pb = static_cast<const float *>(b.data());
    MatrixView ma{pa, M, a.sizes[r - 1], a.strides[r - 2], a.strides[r - 1]};
    MatrixView mb{pb, b.sizes[r - 2], N, b.strides[r - 2], b.strides[r - 1]};
    sgemm_batched(batches, ma, sa, mb, sb, static_cast<float *>(c.data()), std::max<int64_t>(N, 1), M * N);
    return true;
  } catch (const std::exception &e) {
    if (error)
      *error = name + ": " + view_str(a) + " x " + view_str(b) + ": " + e.what();
    return false;
  }
}

} // namespace

bool LaunchExecutable::bindInputs(const std::vector<TensorView> &inputs, std::vector<TensorView> &values,
                                  std::string *error) const {
  auto fail = [&](const std::string &msg) {
    if (error)
      *error = msg;
    return false;
  };
  if (inputs.size() != inputs_.size())
    return fail("expected " + std::to_string(inputs_.size()) + " inputs, got " + std::to_string(inputs.size()));
  for (size_t i = 0; i < inputs.size(); ++i) {
    const TensorView &in = inputs[i];
    const SlotType &t = types_[inputs_[i]];
    const std::string where = "input " + std::to_string(i) + ": ";
    if (in.dtype != t.dtype || in.sizes != t.sizes)
      return fail(where + "expected " + slot_type_str(t) + ", got " + slot_type_str(SlotType{in.sizes, in.dtype}));
    if (in.strides.size() != in.sizes.size())
      return fail(where + "has " + std::to_string(in.strides.size()) + " strides for rank " +
                  std::to_string(in.sizes.size()));
    if (!in.buffer)
      return fail(where + "has no buffer");
    if (in.offset < 0)
      return fail(where + "negative offset");
    int64_t last = in.offset;
    bool empty = false;
    for (size_t d = 0; d < in.sizes.size(); ++d) {
      if (in.strides[d] < 0)
        return fail(where + "negative stride " + join(in.strides));
      if (in.sizes[d] == 0)
        empty = true;
      else
        last += (in.sizes[d] - 1) * in.strides[d];
    }
    const int64_t capacity = static_cast<int64_t>(in.buffer->nbytes() / itemsize(in.dtype));
    if (!empty && last >= capacity)
      return fail(where + "view (offset " + std::to_string(in.offset) + ", strides " + join(in.strides) +
                  ") reaches element " + std::to_string(last) + " of a buffer holding " + std::to_string(capacity));
    values[inputs_[i]] = in;
    // Row-major inside the executable (addInput): copy anything else.
    const std::vector<int64_t> want = contiguous_strides(in.sizes);
    bool contiguous = true;
    for (size_t d = 0; d < in.sizes.size(); ++d)
      if (in.sizes[d] > 1 && in.strides[d] != want[d])
        contiguous = false;
    if (!contiguous && !empty) {
      auto buffer = Buffer::make(static_cast<size_t>(in.numel()) * itemsize(in.dtype));
      copy_to_contiguous(in, buffer->data());
      values[inputs_[i]] = TensorView{buffer, 0, in.sizes, want, in.dtype};
    }
  }
  return true;
}

std::vector<TensorView> LaunchExecutable::run(const std::vector<TensorView> &inputs, std::string *error) const {
  return runWith(inputs, plans_, arena_bytes_, error);
}

std::vector<TensorView> LaunchExecutable::run_donating(const std::vector<TensorView> &inputs,
                                                       std::string *error) const {
  // Every donatable input must be private (`inputs` holds the only
  // reference to its buffer), contiguous memory from offset 0; else the
  // plain plan (same results, more memory).
  bool ok = inputs.size() == inputs_.size();
  for (size_t i = 0; ok && i < inputs.size(); ++i) {
    if (!donatable_[i])
      continue;
    const TensorView &in = inputs[i];
    const SlotType &t = types_[inputs_[i]];
    ok = in.buffer && in.buffer.use_count() == 1 && in.offset == 0 && in.sizes == t.sizes && in.dtype == t.dtype &&
         static_cast<int64_t>(in.buffer->nbytes()) >= nbytes_of(t) && in.strides.size() == t.sizes.size();
    const std::vector<int64_t> want = contiguous_strides(t.sizes);
    for (size_t d = 0; ok && d < t.sizes.size(); ++d)
      ok = t.sizes[d] <= 1 || in.strides[d] == want[d];
    for (size_t j = 0; ok && j < inputs.size(); ++j)
      ok = j == i || inputs[j].buffer != in.buffer;
  }
  if (!ok)
    return runWith(inputs, plans_, arena_bytes_, error);
  return runWith(inputs, donating_plans_, donating_arena_bytes_, error);
}

std::vector<TensorView> LaunchExecutable::runWith(const std::vector<TensorView> &inputs,
                                                  const std::vector<SlotPlan> &plans, int64_t arena_bytes,
                                                  std::string *error) const {
  std::vector<TensorView> values(types_.size());
  if (!bindInputs(inputs, values, error))
    return {};
  for (const auto &[slot, buffer] : constants_) {
    const SlotType &t = types_[slot];
    values[slot] = TensorView{buffer, 0, t.sizes, contiguous_strides(t.sizes), t.dtype};
  }

  std::shared_ptr<Buffer> arena;
  if (arena_bytes > 0)
    arena = Buffer::make(static_cast<size_t>(arena_bytes));
  // Results' own buffers, allocated now: intermediates may use them before
  // they are written (pools).
  std::vector<std::shared_ptr<Buffer>> owned(types_.size());
  for (size_t s = 0; s < plans.size(); ++s)
    if (plans[s].storage == SlotStorage::Owned)
      owned[s] = Buffer::make(static_cast<size_t>(plans[s].nbytes));

  // A fresh contiguous tensor in the slot's planned memory.
  auto materialize = [&](int slot) -> TensorView & {
    const SlotPlan &p = plans[slot];
    const SlotType &t = types_[slot];
    TensorView &v = values[slot];
    v.dtype = t.dtype;
    v.sizes = t.sizes;
    v.strides = contiguous_strides(t.sizes);
    if (p.storage == SlotStorage::Arena) {
      // A pool is an Owned result not written yet, or a donated input
      // (bound at offset 0, checked by run_donating) no longer read.
      v.buffer = p.pool < 0 ? arena : plans[p.pool].storage == SlotStorage::Owned ? owned[p.pool] : values[p.pool].buffer;
      v.offset = p.arena_offset / static_cast<int64_t>(itemsize(t.dtype));
    } else if (p.storage == SlotStorage::Owned) {
      v.buffer = owned[slot];
      v.offset = 0;
    } else {
      v.buffer = Buffer::make(static_cast<size_t>(p.nbytes));
      v.offset = 0;
    }
    return v;
  };

  Profiler &profiler = Profiler::instance();
  const bool profiling = profiler.enabled();
  for (const auto &lp : launches_) {
    const Launch &l = *lp;
    const double start_us = profiling ? profiler.now_us() : 0.0;
    switch (l.kind) {
    case LaunchKind::Kernel: {
      for (int r : l.results)
        materialize(r);
      const int threads = split_threads(l, values);
      if (threads <= 1) {
        call_kernel(l, values, /*slice=*/false, 0, 0);
        break;
      }
      // Contiguous blocks of rows, one per thread (static schedule).
      const int64_t rows = values[l.results[0]].sizes[0];
#ifdef _OPENMP
#pragma omp parallel for num_threads(threads) schedule(static, 1)
#endif
      for (int t = 0; t < threads; ++t)
        call_kernel(l, values, /*slice=*/true, rows * t / threads, rows * (t + 1) / threads);
      break;
    }
    case LaunchKind::Gemm: {
      TensorView &c = materialize(l.results[0]);
      if (!runGemm(l.name, values[l.operands[0]], values[l.operands[1]], c, error))
        return {};
      break;
    }
    case LaunchKind::Transpose: {
      const TensorView &b = values[l.operands[0]];
      TensorView v = b;
      for (size_t i = 0; i < l.attr.size(); ++i) {
        v.sizes[i] = b.sizes[l.attr[i]];
        v.strides[i] = b.strides[l.attr[i]];
      }
      values[l.results[0]] = std::move(v);
      break;
    }
    case LaunchKind::Broadcast: {
      const TensorView &b = values[l.operands[0]];
      const size_t rank = l.attr.size(), brank = b.sizes.size();
      TensorView v = b;
      v.sizes = l.attr;
      v.strides.assign(rank, 0);
      for (size_t i = 0; i < brank; ++i) {
        size_t d = rank - brank + i;
        v.strides[d] = b.sizes[i] == l.attr[d] ? b.strides[i] : 0;
      }
      values[l.results[0]] = std::move(v);
      break;
    }
    case LaunchKind::Reshape: {
      const TensorView &b = values[l.operands[0]];
      const int r = l.results[0];
      std::vector<int64_t> strides;
      if (plans[r].base >= 0 && compute_view_strides(b.sizes, b.strides, l.attr, &strides)) {
        TensorView v = b;
        v.sizes = l.attr;
        v.strides = std::move(strides);
        values[r] = std::move(v);
      } else {
        TensorView &v = materialize(r);
        copy_to_contiguous(b, v.data());
      }
      break;
    }
    case LaunchKind::Copy: {
      TensorView &v = materialize(l.results[0]);
      copy_to_contiguous(values[l.operands[0]], v.data());
      break;
    }
    }
    if (profiling && (l.kind == LaunchKind::Kernel || l.kind == LaunchKind::Gemm || l.kind == LaunchKind::Copy))
      profiler.record(l.kind == LaunchKind::Kernel ? l.name : kind_name(l.kind), "kernel", start_us,
                      profiler.now_us() - start_us);
  }

  std::vector<TensorView> results;
  results.reserve(outputs_.size());
  for (int s : outputs_)
    results.push_back(values[s]);
  return results;
}

} // namespace kiln::runtime
