// Layers over the functional ops: Conv2d, BatchNorm1d/2d, LayerNorm, Dropout,
// Embedding, GELU, SiLU, MultiheadAttention. Each mirrors its torch.nn class:
// same parameter/buffer names (state dict keys), same init, same checks.
#include <cmath>
#include <limits>

#include "kiln/autograd.h"
#include "kiln/init.h"
#include "kiln/nn.h"

namespace kiln::nn {

namespace {

std::string shape_or_undefined(const Tensor &t) { return t.defined() ? shape_str(t.sizes()) : "undefined"; }

/// Float additive mask from a bool mask (true -> -inf) or a float mask.
Tensor additive_mask(const Tensor &mask, DType dtype, const char *what) {
  if (mask.dtype() == kBool)
    return masked_fill(zeros(mask.sizes(), dtype, mask.device()), mask, -std::numeric_limits<double>::infinity());
  KILN_CHECK(mask.is_floating_point(), "MultiheadAttention: ", what, " must be bool or floating point, got ",
             dtype_name(mask.dtype()));
  return mask.dtype() == dtype ? mask : mask.to(dtype);
}

/// [L, S] additive mask with -inf where key j > query i.
Tensor causal_mask(int64_t L, int64_t S, DType dtype, Device device) {
  Tensor above = lt(arange(L, kInt64, device).unsqueeze(1), arange(S, kInt64, device).unsqueeze(0));
  return masked_fill(zeros({L, S}, dtype, device), above, -std::numeric_limits<double>::infinity());
}

}  // namespace

// ---- Conv2d --------------------------------------------------------------------------------

Conv2d::Conv2d(const Conv2dOptions &o) : options(o) {
  const int64_t in = o.in_channels(), out = o.out_channels(), groups = o.groups();
  KILN_CHECK(in > 0 && out > 0, "Conv2d: in_channels and out_channels must be positive, got ", in, " and ", out);
  KILN_CHECK(groups > 0, "Conv2d: groups must be positive, got ", groups);
  KILN_CHECK(in % groups == 0, "Conv2d: in_channels (", in, ") must be divisible by groups (", groups, ")");
  KILN_CHECK(out % groups == 0, "Conv2d: out_channels (", out, ") must be divisible by groups (", groups, ")");
  for (int i = 0; i < 2; ++i) {
    KILN_CHECK(o.kernel_size()[i] > 0, "Conv2d: kernel_size must be positive, got ", o.kernel_size().str());
    KILN_CHECK(o.stride()[i] > 0, "Conv2d: stride must be positive, got ", o.stride().str());
    KILN_CHECK(o.dilation()[i] > 0, "Conv2d: dilation must be positive, got ", o.dilation().str());
    KILN_CHECK(o.padding()[i] >= 0, "Conv2d: padding must be non-negative, got ", o.padding().str());
  }
  weight = register_parameter("weight", Tensor::empty({out, in / groups, o.kernel_size()[0], o.kernel_size()[1]}));
  if (o.bias()) bias = register_parameter("bias", Tensor::empty({out}));
  reset_parameters();
}

void Conv2d::reset_parameters() {
  init::kaiming_uniform_(weight, std::sqrt(5.0));
  if (bias.defined()) {
    const double bound = 1.0 / std::sqrt(static_cast<double>(init::calculate_fan_in_and_fan_out(weight).first));
    init::uniform_(bias, -bound, bound);
  }
}

Tensor Conv2d::forward(const Tensor &input) {
  const int64_t in = options.in_channels();
  KILN_CHECK(input.defined() && (input.dim() == 3 || input.dim() == 4), "Conv2d: expected a 4-D input [N, ", in,
             ", H, W] (or 3-D unbatched [", in, ", H, W]), got ", shape_or_undefined(input));
  const bool batched = input.dim() == 4;
  Tensor x = batched ? input : input.unsqueeze(0);
  KILN_CHECK(x.size(1) == in, "Conv2d: expected input [N, ", in, ", H, W] with ", in, " channels, got ",
             shape_str(input.sizes()));
  for (int i = 0; i < 2; ++i) {
    const int64_t extent = x.size(2 + i) + 2 * options.padding()[i];
    const int64_t span = options.dilation()[i] * (options.kernel_size()[i] - 1) + 1;
    KILN_CHECK(extent >= span, "Conv2d: input ", shape_str(input.sizes()), " is smaller than the kernel ",
               options.kernel_size().str(), " (dilation ", options.dilation().str(), ", padding ",
               options.padding().str(), ")");
  }
  Tensor y = functional::conv2d(x, weight, bias, options.stride(), options.padding(), options.dilation(),
                                options.groups());
  return batched ? y : y.squeeze(0);
}

// ---- BatchNorm -----------------------------------------------------------------------------

BatchNormBase::BatchNormBase(const BatchNormOptions &o, const char *kind) : options(o) {
  const int64_t c = o.num_features();
  KILN_CHECK(c > 0, kind, ": num_features must be positive, got ", c);
  KILN_CHECK(o.eps() > 0, kind, ": eps must be positive, got ", o.eps());
  KILN_CHECK(!o.momentum() || (*o.momentum() >= 0 && *o.momentum() <= 1),
             kind, ": momentum must be in [0, 1] (or nullopt), got ", o.momentum().value_or(0));
  if (o.affine()) {
    weight = register_parameter("weight", ones({c}));
    bias = register_parameter("bias", zeros({c}));
  }
  if (o.track_running_stats()) {
    running_mean = register_buffer("running_mean", zeros({c}));
    running_var = register_buffer("running_var", ones({c}));
    num_batches_tracked = register_buffer("num_batches_tracked", zeros({}, kInt64));
  }
}

void BatchNormBase::reset_running_stats() {
  if (!options.track_running_stats()) return;
  NoGradGuard no_grad;
  running_mean.zero_();
  running_var.fill_(1.0);
  num_batches_tracked.zero_();
}

void BatchNormBase::reset_parameters() {
  reset_running_stats();
  if (!options.affine()) return;
  init::ones_(weight);
  init::zeros_(bias);
}

Tensor BatchNormBase::forward(const Tensor &input) {
  KILN_CHECK(input.defined(), name(), ": input is undefined");
  check_input_dim(input);
  const int64_t c = options.num_features();
  KILN_CHECK(input.size(1) == c, name(), ": expected ", c, " channels in dim 1, got input ", shape_str(input.sizes()));
  const bool track = options.track_running_stats();
  const bool use_batch_stats = is_training() || !track;
  KILN_CHECK(!use_batch_stats || input.numel() / c > 1, name(),
             ": expected more than 1 value per channel when training, got input ", shape_str(input.sizes()));
  double momentum = 0.0;
  if (is_training() && track) {
    NoGradGuard no_grad;
    num_batches_tracked.add_(ones_like(num_batches_tracked));
    // A fixed momentum needs no value read (kiln::compile captures the whole
    // update); the cumulative average reads the count (a graph break).
    momentum = options.momentum() ? *options.momentum() : 1.0 / num_batches_tracked.item();
  }
  // Without track_running_stats the buffers are undefined and batch
  // statistics are used in both modes (PyTorch's bn_training).
  return functional::batch_norm(input, running_mean, running_var, weight, bias, use_batch_stats, momentum,
                                options.eps());
}

void BatchNorm1d::check_input_dim(const Tensor &input) const {
  KILN_CHECK(input.dim() == 2 || input.dim() == 3, "BatchNorm1d: expected 2D [N, C] or 3D [N, C, L] input, got ",
             input.dim(), "D input ", shape_str(input.sizes()));
}

void BatchNorm2d::check_input_dim(const Tensor &input) const {
  KILN_CHECK(input.dim() == 4, "BatchNorm2d: expected 4D [N, C, H, W] input, got ", input.dim(), "D input ",
             shape_str(input.sizes()));
}

// ---- LayerNorm -----------------------------------------------------------------------------

LayerNorm::LayerNorm(const LayerNormOptions &o) : options(o) {
  const Shape &shape = o.normalized_shape();
  bool positive = !shape.empty();
  for (int64_t s : shape) positive = positive && s > 0;
  KILN_CHECK(positive, "LayerNorm: normalized_shape must be non-empty with positive sizes, got ", shape_str(shape));
  KILN_CHECK(o.eps() > 0, "LayerNorm: eps must be positive, got ", o.eps());
  if (o.elementwise_affine()) {
    weight = register_parameter("weight", ones(shape));
    bias = register_parameter("bias", zeros(shape));
  }
}

void LayerNorm::reset_parameters() {
  if (!options.elementwise_affine()) return;
  init::ones_(weight);
  init::zeros_(bias);
}

Tensor LayerNorm::forward(const Tensor &input) {
  const Shape &shape = options.normalized_shape();
  const int64_t k = static_cast<int64_t>(shape.size());
  bool ok = input.defined() && input.dim() >= k;
  for (int64_t i = 0; ok && i < k; ++i) ok = input.size(input.dim() - k + i) == shape[i];
  KILN_CHECK(ok, "LayerNorm: expected input [*, ", shape_str(shape).substr(1), " (trailing dims equal to "
             "normalized_shape), got ", shape_or_undefined(input));
  return functional::layer_norm(input, shape, weight, bias, options.eps());
}

// ---- Dropout, activations ------------------------------------------------------------------

Dropout::Dropout(double p_) : p(p_) {
  KILN_CHECK(p >= 0 && p <= 1, "Dropout: probability has to be between 0 and 1, but got p = ", p);
}

Tensor Dropout::forward(const Tensor &input) { return functional::dropout(input, p, is_training()); }

GELU::GELU(std::string approximate_) : approximate(std::move(approximate_)) {
  KILN_CHECK(approximate == "none" || approximate == "tanh",
             "GELU: approximate must be 'none' or 'tanh', got '", approximate, "'");
}

Tensor GELU::forward(const Tensor &input) { return gelu(input, approximate); }

Tensor SiLU::forward(const Tensor &input) { return silu(input); }

// ---- Embedding -----------------------------------------------------------------------------

Embedding::Embedding(const EmbeddingOptions &o) : options(o) {
  const int64_t n = o.num_embeddings(), d = o.embedding_dim();
  KILN_CHECK(n > 0 && d > 0, "Embedding: num_embeddings and embedding_dim must be positive, got ", n, " and ", d);
  if (o.padding_idx()) {
    const int64_t p = *o.padding_idx();
    KILN_CHECK(p >= -n && p < n, "Embedding: padding_idx must be within [", -n, ", ", n, "), got ", p);
    options.padding_idx(p < 0 ? p + n : p);
  }
  weight = register_parameter("weight", Tensor::empty({n, d}));
  reset_parameters();
}

void Embedding::reset_parameters() {
  init::normal_(weight);
  if (options.padding_idx()) {
    NoGradGuard no_grad;
    weight.narrow(0, *options.padding_idx(), 1).zero_();
  }
}

Tensor Embedding::forward(const Tensor &input) {
  KILN_CHECK(input.defined() && (input.dtype() == kInt64 || input.dtype() == kInt32),
             "Embedding: expected an int64 (or int32) index tensor, got ",
             input.defined() ? dtype_name(input.dtype()) : "undefined");
  Tensor idx = input.dtype() == kInt64 ? input : input.to(kInt64);
  // functional::embedding's gather checks the range, in eager and in every
  // compiled call (a host read here would be checked while tracing only).
  Tensor out = functional::embedding(idx, weight);
  if (options.padding_idx() && autograd::GradMode::is_enabled() && weight.requires_grad()) {
    // Lookups of padding_idx contribute no gradient to that row.
    Tensor pad = eq(idx, scalar_tensor(static_cast<double>(*options.padding_idx()), kInt64)).unsqueeze(-1);
    out = where(pad, out.detach(), out);
  }
  return out;
}

// ---- MultiheadAttention --------------------------------------------------------------------

MultiheadAttention::MultiheadAttention(const MultiheadAttentionOptions &o) : options(o) {
  const int64_t e = o.embed_dim(), h = o.num_heads();
  KILN_CHECK(e > 0 && h > 0, "MultiheadAttention: embed_dim and num_heads must be positive, got ", e, " and ", h);
  KILN_CHECK(e % h == 0, "MultiheadAttention: embed_dim (", e, ") must be divisible by num_heads (", h, ")");
  KILN_CHECK(o.dropout() >= 0 && o.dropout() <= 1, "MultiheadAttention: dropout must be in [0, 1], got ",
             o.dropout());
  head_dim = e / h;
  in_proj_weight = register_parameter("in_proj_weight", Tensor::empty({3 * e, e}));
  if (o.bias()) in_proj_bias = register_parameter("in_proj_bias", Tensor::empty({3 * e}));
  out_proj = register_module("out_proj", std::make_shared<Linear>(e, e, o.bias()));
  reset_parameters();
}

void MultiheadAttention::reset_parameters() {
  init::xavier_uniform_(in_proj_weight);
  if (in_proj_bias.defined()) init::zeros_(in_proj_bias);
  if (out_proj->bias.defined()) init::zeros_(out_proj->bias);
}

Tensor MultiheadAttention::forward(const Tensor &x) { return forward(x, x, x); }

Tensor MultiheadAttention::forward(const Tensor &query, const Tensor &key, const Tensor &value,
                                   const Tensor &attn_mask, bool is_causal, const Tensor &key_padding_mask) {
  const int64_t E = options.embed_dim(), H = options.num_heads();
  for (const Tensor *t : {&query, &key, &value})
    KILN_CHECK(t->defined() && (t->dim() == 2 || t->dim() == 3) && t->size(-1) == E && t->is_floating_point(),
               "MultiheadAttention: query, key and value must be float [N, L, ", E, "] (or unbatched [L, ", E,
               "]), got query ", shape_or_undefined(query), ", key ", shape_or_undefined(key), ", value ",
               shape_or_undefined(value));
  KILN_CHECK(key.dim() == query.dim() && value.dim() == query.dim(),
             "MultiheadAttention: query, key and value must have the same rank, got ", shape_str(query.sizes()), ", ",
             shape_str(key.sizes()), ", ", shape_str(value.sizes()));
  const bool batched = query.dim() == 3;
  auto to_nle = [&](const Tensor &t) {
    if (!batched) return t.unsqueeze(0);
    return options.batch_first() ? t : t.transpose(0, 1);
  };
  Tensor q = to_nle(query), k = to_nle(key), v = to_nle(value);
  const int64_t N = q.size(0), L = q.size(1), S = k.size(1);
  KILN_CHECK(k.size(0) == N && v.size(0) == N && v.size(1) == S,
             "MultiheadAttention: batch sizes and key/value lengths must match, got query ", shape_str(query.sizes()),
             ", key ", shape_str(key.sizes()), ", value ", shape_str(value.sizes()));

  // Combined additive mask, broadcastable to [N, H, L, S].
  Tensor mask;
  if (attn_mask.defined()) {
    const bool is2d = attn_mask.dim() == 2 && attn_mask.sizes() == Shape{L, S};
    const bool is3d = attn_mask.dim() == 3 && attn_mask.sizes() == Shape{N * H, L, S};
    KILN_CHECK(is2d || is3d, "MultiheadAttention: attn_mask must be [", L, ", ", S, "] or [", N * H, ", ", L, ", ", S,
               "] (N * num_heads, L, S), got ", shape_str(attn_mask.sizes()));
    mask = additive_mask(attn_mask, q.dtype(), "attn_mask");
    if (is3d) mask = mask.reshape({N, H, L, S});
  }
  if (key_padding_mask.defined()) {
    const Shape want = batched ? Shape{N, S} : Shape{S};
    KILN_CHECK(key_padding_mask.sizes() == want, "MultiheadAttention: key_padding_mask must be ", shape_str(want),
               ", got ", shape_str(key_padding_mask.sizes()));
    Tensor kpm = additive_mask(key_padding_mask, q.dtype(), "key_padding_mask").reshape({N, 1, 1, S});
    mask = mask.defined() ? mask + kpm : kpm;
  }
  if (is_causal) {
    Tensor causal = causal_mask(L, S, q.dtype(), q.device());
    mask = mask.defined() ? mask + causal : causal;
  }

  auto project = [&](const Tensor &x, int64_t which, int64_t len) {
    Tensor w = in_proj_weight.narrow(0, which * E, E);
    Tensor b = in_proj_bias.defined() ? in_proj_bias.narrow(0, which * E, E) : Tensor();
    return functional::linear(x, w, b).reshape({N, len, H, head_dim}).transpose(1, 2);  // [N, H, len, D]
  };
  const double dropout_p = is_training() ? options.dropout() : 0.0;
  Tensor o = functional::scaled_dot_product_attention(project(q, 0, L), project(k, 1, S), project(v, 2, S), mask,
                                                      dropout_p, false);
  Tensor out = out_proj->forward(o.transpose(1, 2).reshape({N, L, E}));
  if (!batched) return out.squeeze(0);
  return options.batch_first() ? out : out.transpose(0, 1);
}

}  // namespace kiln::nn
