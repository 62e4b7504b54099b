// conv2d (kiln/runtime/Conv.h): float32 through cached oneDNN convolution
// primitives (the forward on oneDNN's own layouts where the plain one is
// im2col + sgemm), float64 through im2col and a plain GEMM loop (as Caffe's and
// PyTorch's slow_conv2d), 16-bit floats through float32.
#include <algorithm>
#include <map>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>
#include <vector>

#include <dnnl.hpp>

#include "Half.h"
#include "OneDnn.h"
#include "kiln/runtime/Conv.h"

namespace kiln::runtime {
namespace {

using dnnl::memory;

int64_t numel(const std::array<int64_t, 4> &s) { return s[0] * s[1] * s[2] * s[3]; }

std::string shape_text(const std::array<int64_t, 4> &s) {
  return "[" + std::to_string(s[0]) + ", " + std::to_string(s[1]) + ", " + std::to_string(s[2]) + ", " +
         std::to_string(s[3]) + "]";
}

const std::array<int64_t, 4> &result_shape(ConvOp op, const ConvShape &s) {
  return op == ConvOp::Forward ? s.output : op == ConvOp::InputGrad ? s.input : s.weight;
}

// ---- float32: oneDNN convolution primitives -----------------------------------------

using cpu::blas_or_ref;
using cpu::cpu_engine;

/// One argument of a cached primitive: the caller's plain nchw / (g)oihw
/// layout and the primitive's, with the reorder between them (plain ->
/// inner for an input, inner -> plain for the result) where they differ.
struct Arg {
  int id = 0; ///< DNNL_ARG_*
  memory::desc plain, inner;
  dnnl::reorder reorder;
};

/// One cached primitive: its two inputs (ConvOp's `a`, `b`) and its result.
struct Cached {
  Arg in[2], out;
  dnnl::primitive primitive;
};

/// Everything a primitive depends on: op, the three shapes, the params.
using Key = std::array<int64_t, 20>;

Key key_of(ConvOp op, const Conv2dParams &p, const ConvShape &s) {
  Key k{};
  size_t i = 0;
  k[i++] = static_cast<int64_t>(op);
  for (const auto *dims : {&s.input, &s.weight})
    for (int64_t d : *dims)
      k[i++] = d;
  for (const auto *pair : {&p.stride, &p.padding, &p.dilation})
    for (int64_t v : *pair)
      k[i++] = v;
  k[i++] = p.groups;
  return k;
}

/// The weight descriptor: oihw, or goihw [g, O/g, C/g, kH, kW] for groups > 1.
memory::desc weight_desc(const ConvShape &s, int64_t groups) {
  const auto &w = s.weight;
  if (groups == 1)
    return memory::desc({w[0], w[1], w[2], w[3]}, memory::data_type::f32, memory::format_tag::oihw);
  return memory::desc({groups, w[0] / groups, w[1], w[2], w[3]}, memory::data_type::f32, memory::format_tag::goihw);
}

/// The plain descriptors of x, w and y.
struct PlainDescs {
  memory::desc src, weights, dst;
};

PlainDescs plain_descs(const Conv2dParams &p, const ConvShape &s) {
  return {
      memory::desc({s.input[0], s.input[1], s.input[2], s.input[3]}, memory::data_type::f32, memory::format_tag::nchw),
      weight_desc(s, p.groups),
      memory::desc({s.output[0], s.output[1], s.output[2], s.output[3]}, memory::data_type::f32,
                   memory::format_tag::nchw)};
}

/// `d` with its layout left to oneDNN (`any`), or `d` itself.
memory::desc layout(const memory::desc &d, bool any) {
  return any ? memory::desc(d.dims(), memory::data_type::f32, memory::format_tag::any) : d;
}

/// The primitive descriptor of `op` on the `plain` layouts (plain_descs),
/// or with `any`, on layouts of oneDNN's choosing. Every backward one is created with the
/// forward's as its hint. oneDNN's dilation counts the gaps (PyTorch's
/// dilation - 1); right padding = left padding gives PyTorch's floor
/// output size. Throws dnnl::error when oneDNN has none.
template <class Make>
auto with_descs(ConvOp op, const Conv2dParams &p, const PlainDescs &plain, bool any, Make make) {
  const memory::desc src = layout(plain.src, any), w = layout(plain.weights, any), dst = layout(plain.dst, any);
  const memory::dims strides{p.stride[0], p.stride[1]}, padding{p.padding[0], p.padding[1]};
  const memory::dims dilation{p.dilation[0] - 1, p.dilation[1] - 1};
  const dnnl::convolution_forward::primitive_desc fwd(
      dnnl::convolution_forward::desc(dnnl::prop_kind::forward_training, dnnl::algorithm::convolution_direct, src, w,
                                      dst, strides, dilation, padding, padding),
      cpu_engine());
  if (op == ConvOp::Forward)
    return make(fwd, fwd.impl_info_str());
  if (op == ConvOp::InputGrad) {
    const dnnl::convolution_backward_data::primitive_desc pd(
        dnnl::convolution_backward_data::desc(dnnl::algorithm::convolution_direct, src, w, dst, strides, dilation,
                                              padding, padding),
        cpu_engine(), fwd);
    return make(pd, pd.impl_info_str());
  }
  const dnnl::convolution_backward_weights::primitive_desc pd(
      dnnl::convolution_backward_weights::desc(dnnl::algorithm::convolution_direct, src, w, dst, strides, dilation,
                                               padding, padding),
      cpu_engine(), fwd);
  return make(pd, pd.impl_info_str());
}

dnnl::primitive primitive_of(const dnnl::convolution_forward::primitive_desc &pd) {
  return dnnl::convolution_forward(pd);
}
dnnl::primitive primitive_of(const dnnl::convolution_backward_data::primitive_desc &pd) {
  return dnnl::convolution_backward_data(pd);
}
dnnl::primitive primitive_of(const dnnl::convolution_backward_weights::primitive_desc &pd) {
  return dnnl::convolution_backward_weights(pd);
}

/// Whether the primitives of this convolution run on one thread (the
/// forward's multiply-adds against cpu::kSerialMacs; each backward has as
/// many).
bool serial_conv(const ConvShape &s) {
  const int64_t macs =
      s.output[0] * s.output[1] * s.output[2] * s.output[3] * (s.weight[1] * s.weight[2] * s.weight[3]);
  return macs < cpu::kSerialMacs;
}

/// A new primitive for `op`: on the plain layouts unless it is a forward
/// that oneDNN runs as blas_or_ref there and has another impl for on its
/// own layouts. Throws dnnl::error when oneDNN has none.
std::shared_ptr<Cached> create(ConvOp op, const Conv2dParams &p, const ConvShape &s) {
  cpu::SerialScope serial(serial_conv(s));
  auto entry = std::make_shared<Cached>();
  const PlainDescs plain = plain_descs(p, s);
  // ConvOp's a, b and result: Forward x, w -> y; InputGrad dy, w -> dx;
  // WeightGrad x, dy -> dw.
  const memory::desc *roles[3];
  int ids[3];
  if (op == ConvOp::Forward) {
    roles[0] = &plain.src, roles[1] = &plain.weights, roles[2] = &plain.dst;
    ids[0] = DNNL_ARG_SRC, ids[1] = DNNL_ARG_WEIGHTS, ids[2] = DNNL_ARG_DST;
  } else if (op == ConvOp::InputGrad) {
    roles[0] = &plain.dst, roles[1] = &plain.weights, roles[2] = &plain.src;
    ids[0] = DNNL_ARG_DIFF_DST, ids[1] = DNNL_ARG_WEIGHTS, ids[2] = DNNL_ARG_DIFF_SRC;
  } else {
    roles[0] = &plain.src, roles[1] = &plain.dst, roles[2] = &plain.weights;
    ids[0] = DNNL_ARG_SRC, ids[1] = DNNL_ARG_DIFF_DST, ids[2] = DNNL_ARG_DIFF_WEIGHTS;
  }
  // The descriptors the primitive expects for the three roles.
  auto inner_of = [op](const auto &pd) -> std::array<memory::desc, 3> {
    if (op == ConvOp::Forward)
      return {pd.src_desc(), pd.weights_desc(), pd.dst_desc()};
    if (op == ConvOp::InputGrad)
      return {pd.diff_dst_desc(), pd.weights_desc(), pd.diff_src_desc()};
    return {pd.src_desc(), pd.diff_dst_desc(), pd.diff_weights_desc()};
  };
  struct Made {
    dnnl::primitive primitive;
    std::array<memory::desc, 3> inner;
    bool blas_or_ref;
  };
  auto make = [&](const auto &pd, const std::string &impl) {
    return Made{primitive_of(pd), inner_of(pd), blas_or_ref(impl)};
  };
  Made made = with_descs(op, p, plain, false, make);
  // The backward primitives stay on the plain layouts: on oneDNN's own
  // (the zoo CNN's shapes, this VM) backward_weights ran 2.4x slower and
  // the reorders of three operands cost more than backward_data saved.
  if (op == ConvOp::Forward && made.blas_or_ref) {
    try {
      Made chosen = with_descs(op, p, plain, true, make);
      if (!chosen.blas_or_ref)
        made = std::move(chosen);
    } catch (const dnnl::error &) { // none on oneDNN's layouts: the plain one stays
    }
  }
  entry->primitive = made.primitive;
  Arg *args[3] = {&entry->in[0], &entry->in[1], &entry->out};
  for (int i = 0; i < 3; ++i) {
    Arg &arg = *args[i];
    arg.id = ids[i];
    arg.plain = *roles[i];
    arg.inner = made.inner[i];
    if (arg.inner != arg.plain)
      arg.reorder =
          i < 2 ? dnnl::reorder(dnnl::reorder::primitive_desc(cpu_engine(), arg.plain, cpu_engine(), arg.inner))
                : dnnl::reorder(dnnl::reorder::primitive_desc(cpu_engine(), arg.inner, cpu_engine(), arg.plain));
  }
  return entry;
}

/// The cache (bounded as Gemm.cpp's: shapes repeat across steps; entries
/// are shared_ptrs so a clear never frees a primitive another thread runs).
constexpr size_t kMaxCached = 256;

std::shared_ptr<Cached> primitive_for(ConvOp op, const Conv2dParams &p, const ConvShape &s) {
  static std::mutex mutex;
  static std::map<Key, std::shared_ptr<Cached>> cache;
  const Key key = key_of(op, p, s);
  std::lock_guard<std::mutex> lock(mutex);
  if (auto it = cache.find(key); it != cache.end())
    return it->second;
  std::shared_ptr<Cached> entry = create(op, p, s);
  if (cache.size() >= kMaxCached)
    cache.clear();
  cache.emplace(key, entry);
  return entry;
}

void conv_f32(ConvOp op, const Conv2dParams &p, const ConvShape &s, const float *a, const float *b, float *out) {
  std::shared_ptr<Cached> c = primitive_for(op, p, s);
  cpu::SerialScope serial(serial_conv(s)); // as at creation
  thread_local dnnl::stream stream(cpu_engine());
  auto mem = [](const memory::desc &d, const void *data) { return memory(d, cpu_engine(), const_cast<void *>(data)); };
  // Each argument in the primitive's layout: in place where it is the
  // caller's, else a copy (per call: the entry is shared between threads).
  std::vector<char> copies[3];
  memory inputs[2];
  const void *data[2] = {a, b};
  for (int i = 0; i < 2; ++i) {
    const Arg &arg = c->in[i];
    if (arg.inner == arg.plain) {
      inputs[i] = mem(arg.plain, data[i]);
      continue;
    }
    copies[i].resize(arg.inner.get_size());
    memory from = mem(arg.plain, data[i]);
    inputs[i] = mem(arg.inner, copies[i].data());
    arg.reorder.execute(stream, from, inputs[i]);
  }
  const bool out_in_place = c->out.inner == c->out.plain;
  if (!out_in_place)
    copies[2].resize(c->out.inner.get_size());
  memory result = mem(c->out.inner, out_in_place ? static_cast<void *>(out) : copies[2].data());
  c->primitive.execute(stream, {{c->in[0].id, inputs[0]}, {c->in[1].id, inputs[1]}, {c->out.id, result}});
  if (!out_in_place) {
    memory to = mem(c->out.plain, out);
    c->out.reorder.execute(stream, result, to);
  }
  stream.wait(); // before the copies go
}

// ---- float64: im2col + GEMM loop ----------------------------------------------------

/// Sizes of one group's im2col problem.
struct Im2col {
  int64_t N, C, H, W, O, Cg, Og, kH, kW, OH, OW, groups;
  Conv2dParams p;
  int64_t rows() const { return Cg * kH * kW; }
  int64_t cols() const { return OH * OW; }
};

Im2col im2col_of(const Conv2dParams &p, const ConvShape &s) {
  return {s.input[0],  s.input[1],  s.input[2],  s.input[3],  s.weight[0],       s.weight[1],
          s.weight[0] / p.groups,   s.weight[2], s.weight[3], s.output[2],       s.output[3], p.groups, p};
}

/// Input row of output row `o` at kernel tap `k` along one axis.
int64_t tap(int64_t o, int64_t k, int axis, const Conv2dParams &p) {
  return o * p.stride[axis] - p.padding[axis] + k * p.dilation[axis];
}

/// im2col: unfolds Cg planes of `x` into cols [Cg*kH*kW, OH*OW] (zero
/// outside); with `fold`, its adjoint col2im adds cols back into x.
void unfold(const Im2col &g, double *x, double *cols, bool fold) {
  for (int64_t c = 0; c < g.Cg; ++c)
    for (int64_t kh = 0; kh < g.kH; ++kh)
      for (int64_t kw = 0; kw < g.kW; ++kw) {
        double *row = cols + ((c * g.kH + kh) * g.kW + kw) * g.cols();
        for (int64_t oh = 0; oh < g.OH; ++oh) {
          const int64_t ih = tap(oh, kh, 0, g.p);
          double *dst = row + oh * g.OW;
          const bool row_inside = ih >= 0 && ih < g.H;
          for (int64_t ow = 0; ow < g.OW; ++ow) {
            const int64_t iw = tap(ow, kw, 1, g.p);
            const bool inside = row_inside && iw >= 0 && iw < g.W;
            double *src = x + (c * g.H + ih) * g.W + iw;
            if (fold && inside)
              *src += dst[ow];
            else if (!fold)
              dst[ow] = inside ? *src : 0.0;
          }
        }
      }
}

/// c[M, N] (+)= a b with a[i, k] = a[i * ars + k * acs], b likewise.
void gemm_f64(int64_t M, int64_t N, int64_t K, const double *a, int64_t ars, int64_t acs, const double *b,
              int64_t brs, int64_t bcs, double *c, bool accumulate) {
  if (!accumulate)
    std::fill(c, c + M * N, 0.0);
  for (int64_t i = 0; i < M; ++i)
    for (int64_t k = 0; k < K; ++k) {
      const double aik = a[i * ars + k * acs];
      for (int64_t j = 0; j < N; ++j)
        c[i * N + j] += aik * b[k * brs + j * bcs];
    }
}

void conv_f64(ConvOp op, const Conv2dParams &p, const ConvShape &s, const double *a, const double *b, double *out) {
  const Im2col g = im2col_of(p, s);
  std::vector<double> cols(static_cast<size_t>(g.rows() * g.cols()));
  if (op != ConvOp::Forward)
    std::fill(out, out + numel(result_shape(op, s)), 0.0);
  for (int64_t n = 0; n < g.N; ++n)
    for (int64_t grp = 0; grp < g.groups; ++grp) {
      const int64_t x_at = (n * g.C + grp * g.Cg) * g.H * g.W, y_at = (n * g.O + grp * g.Og) * g.cols();
      const int64_t w_at = grp * g.Og * g.rows();
      if (op == ConvOp::Forward) {
        unfold(g, const_cast<double *>(a) + x_at, cols.data(), false);
        gemm_f64(g.Og, g.cols(), g.rows(), b + w_at, g.rows(), 1, cols.data(), g.cols(), 1, out + y_at, false);
      } else if (op == ConvOp::InputGrad) {
        gemm_f64(g.rows(), g.cols(), g.Og, b + w_at, 1, g.rows(), a + y_at, g.cols(), 1, cols.data(), false);
        unfold(g, out + x_at, cols.data(), true);
      } else {
        unfold(g, const_cast<double *>(a) + x_at, cols.data(), false);
        gemm_f64(g.Og, g.rows(), g.cols(), b + y_at, g.cols(), 1, cols.data(), 1, g.cols(), out + w_at, true);
      }
    }
}

// ---- 16-bit floats through float32 ---------------------------------------------------

std::vector<float> widen(DType dtype, const void *data, int64_t n) {
  std::vector<float> out(static_cast<size_t>(n));
  const auto *bits = static_cast<const uint16_t *>(data);
  for (int64_t i = 0; i < n; ++i)
    out[i] = dtype == DType::BFloat16 ? cpu::bf16_to_float(bits[i]) : cpu::half_to_float(bits[i]);
  return out;
}

void conv_16(ConvOp op, const Conv2dParams &p, const ConvShape &s, DType dtype, const void *a, const void *b,
             void *out) {
  const std::array<int64_t, 4> &sa = op == ConvOp::InputGrad ? s.output : s.input;
  const std::array<int64_t, 4> &sb = op == ConvOp::WeightGrad ? s.output : s.weight;
  std::vector<float> fa = widen(dtype, a, numel(sa)), fb = widen(dtype, b, numel(sb));
  std::vector<float> fo(static_cast<size_t>(numel(result_shape(op, s))));
  conv_f32(op, p, s, fa.data(), fb.data(), fo.data());
  auto *bits = static_cast<uint16_t *>(out);
  for (size_t i = 0; i < fo.size(); ++i)
    bits[i] = dtype == DType::BFloat16 ? cpu::float_to_bf16(fo[i]) : cpu::float_to_half(fo[i]);
}

} // namespace

void conv2d(ConvOp op, const Conv2dParams &p, const ConvShape &s, DType dtype, const void *a, const void *b,
            void *out) {
  const int64_t result_numel = numel(result_shape(op, s));
  if (result_numel == 0)
    return;
  if (numel(s.input) == 0 || numel(s.output) == 0) { // sums of nothing
    std::fill(static_cast<char *>(out), static_cast<char *>(out) + result_numel * itemsize(dtype), 0);
    return;
  }
  try {
    switch (dtype) {
    case DType::Float32:
      return conv_f32(op, p, s, static_cast<const float *>(a), static_cast<const float *>(b),
                      static_cast<float *>(out));
    case DType::Float64:
      return conv_f64(op, p, s, static_cast<const double *>(a), static_cast<const double *>(b),
                      static_cast<double *>(out));
    case DType::BFloat16:
    case DType::Float16:
      return conv_16(op, p, s, dtype, a, b, out);
    default:
      break;
    }
  } catch (const dnnl::error &e) {
    throw std::runtime_error("conv2d: oneDNN failed for input " + shape_text(s.input) + ", weight " +
                             shape_text(s.weight) + ", output " + shape_text(s.output) + ": " + e.what());
  }
  throw std::runtime_error(std::string("conv2d: no kernel for dtype ") + dtype_name(dtype));
}

} // namespace kiln::runtime
