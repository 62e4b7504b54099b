// SyncBatchNorm (kiln/nn.h): batch normalization over the global batch of the
// default process group, after PyTorch's torch/nn/modules/_functions.py
// (SyncBatchNorm.forward: local stats, all_gather, the merge of
// batch_norm_gather_stats_with_counts; SyncBatchNorm.backward: local
// sum(dy) and sum(dy * (x - mean)), all_reduce, batch_norm_backward_elemt)
// and torch/nn/modules/batchnorm.py (when to synchronize,
// convert_sync_batchnorm).
//
// Only per-channel statistics cross the ranks, as float64 host tensors
// (2C + 1 values in the forward, 2C in the backward), so the input may live
// on any device. Differences from PyTorch, each for exactness: the ranks
// gather their biased variance (PyTorch gathers invstd and recovers the
// variance as 1 / invstd^2 - eps), and the merge runs in float64.
#include <string>

#include "amp/autocast.h"
#include "distributed_internal.h"
#include "kiln/autograd.h"
#include "kiln/error.h"
#include "kiln/nn.h"
#include "kiln/ops.h"
#include "trace.h"

namespace kiln::nn {
namespace {

namespace dist = kiln::distributed;
constexpr const char *kOp = "SyncBatchNorm";

DType compute_type(DType t) { return t == kFloat16 || t == kBFloat16 ? kFloat32 : t; }

/// The dims the statistics run over: all but the channel dim 1.
Shape reduce_dims(int64_t rank) {
  Shape dims{0};
  for (int64_t d = 2; d < rank; ++d)
    dims.push_back(d);
  return dims;
}

/// [1, C, 1, ...]: a per-channel [C] tensor broadcast against the input.
Shape channel_shape(int64_t rank, int64_t channels) {
  Shape s(static_cast<size_t>(rank), 1);
  s[1] = channels;
  return s;
}

/// The global batch's per-channel statistics (compute dtype, x's device).
struct GlobalStats {
  Tensor mean;   ///< [C]
  Tensor var;    ///< [C], biased (divided by count)
  int64_t count; ///< values per channel over all ranks
};

/// This rank's statistics packed for all_gather: float64 [2C + 1] on the cpu =
/// (count, mean[0..C), biased var[0..C)); zeros for an empty input, which
/// the merge weighs by its count 0 (PyTorch's empty-input case).
Tensor pack_local_stats(const Tensor &xc, int64_t channels) {
  Tensor packed = zeros({2 * channels + 1}, kFloat64);
  const int64_t count = xc.numel() / channels;
  if (count == 0)
    return packed;
  const Shape dims = reduce_dims(xc.dim());
  Tensor mean_c = mean(xc, dims, /*keepdim=*/true);
  Tensor centered = xc - mean_c;
  Tensor var_c = mean(centered * centered, dims);
  packed.narrow(0, 0, 1).fill_(static_cast<double>(count));
  packed.narrow(0, 1, channels).copy_(mean_c.reshape({channels}).to(kFloat64).cpu());
  packed.narrow(0, 1 + channels, channels).copy_(var_c.to(kFloat64).cpu());
  return packed;
}

/// Merges every rank's (count, mean, var) into the global batch's (Chan,
/// Golub & LeVeque 1979; torch's batch_norm_gather_stats_with_counts):
/// N = sum n_r, mean = sum n_r m_r / N, var = sum n_r (v_r + (m_r - mean)^2) / N.
GlobalStats merge_stats(const std::vector<Tensor> &gathered, int64_t channels, DType dtype, Device device) {
  int64_t total = 0;
  for (const Tensor &g : gathered)
    total += static_cast<int64_t>(g.data_ptr<double>()[0]);
  Tensor mean_t = zeros({channels}, kFloat64), var_t = zeros({channels}, kFloat64);
  if (total > 0) {
    double *mean = mean_t.data_ptr<double>(), *var = var_t.data_ptr<double>();
    for (const Tensor &g : gathered) {
      const double *p = g.data_ptr<double>();
      for (int64_t c = 0; c < channels; ++c)
        mean[c] += p[0] * p[1 + c] / static_cast<double>(total);
    }
    for (const Tensor &g : gathered) {
      const double *p = g.data_ptr<double>();
      for (int64_t c = 0; c < channels; ++c) {
        const double d = p[1 + c] - mean[c];
        var[c] += p[0] * (p[1 + channels + c] + d * d) / static_cast<double>(total);
      }
    }
  }
  return {mean_t.to(device, dtype), var_t.to(device, dtype), total};
}

/// The global statistics of `xc` over the ranks of `group_size` (one
/// all_gather); kiln::Error on every rank alike when there are fewer than 2
/// values per channel in all.
GlobalStats gather_global_stats(const Tensor &xc, int64_t channels, int group_size) {
  // Exchanged on x's device (NCCL takes CUDA tensors only), merged on the cpu.
  std::vector<Tensor> gathered;
  try {
    dist::all_gather(gathered, pack_local_stats(xc, channels).to(xc.device()));
  } catch (const Error &e) {
    throw Error(std::string(kOp) + ": gathering the batch statistics: " + e.what());
  }
  for (Tensor &g : gathered)
    g = g.cpu();
  GlobalStats stats = merge_stats(gathered, channels, xc.dtype(), xc.device());
  KILN_CHECK(stats.count > 1, kOp, ": expected more than 1 value per channel when training, got ", stats.count,
             " over the ", group_size, " ranks (this rank's input ", shape_str(xc.sizes()), ")");
  return stats;
}

/// running = (1 - momentum) running + momentum batch, with the unbiased
/// global variance var * N / (N - 1) for running_var (BatchNorm's rule).
void update_running_stats(const Tensor &running_mean, const Tensor &running_var, const GlobalStats &stats,
                          double momentum) {
  NoGradGuard no_grad;
  if (running_mean.defined()) {
    Tensor r = running_mean;
    r.mul_(1.0 - momentum);
    r.add_(stats.mean.to(r.dtype()), momentum);
  }
  if (running_var.defined()) {
    const double bessel = static_cast<double>(stats.count) / static_cast<double>(stats.count - 1);
    Tensor r = running_var;
    r.mul_(1.0 - momentum);
    r.add_((stats.var * bessel).to(r.dtype()), momentum);
  }
}

/// Sums a float64 tensor (x's device) over the ranks in place (the backward's one
/// collective), its failure a kiln::Error naming SyncBatchNorm.
void all_reduce_sum(Tensor &t) {
  try {
    dist::all_reduce(t, dist::ReduceOp::Sum);
  } catch (const Error &e) {
    throw Error(std::string(kOp) + ": all-reducing the gradient sums: " + e.what());
  }
}

/// What the backward needs besides the saved input and weight.
struct BackwardState {
  Tensor mean, invstd; ///< [C], compute dtype
  int64_t count;       ///< N, values per channel over all ranks
  bool needs_input, needs_weight, needs_bias;
};

/// torch's SyncBatchNorm.backward: dweight = sum(dy * xhat) and dbias =
/// sum(dy) locally; for dx, sum(dy) and sum(dy * (x - mean)) are summed over
/// the ranks, then dx = (dy - sum_dy / N - (x - mean) invstd^2 sum_dy_xmu / N)
/// invstd weight (batch_norm_backward_elemt).
autograd::TensorList sync_batch_norm_backward(const Tensor &dy, const Tensor &x, const Tensor &weight,
                                              const BackwardState &st) {
  trace::GraphBreak graph_break("sync_batch_norm_backward"); // a collective: runs eagerly
  const int64_t channels = st.mean.numel();
  const DType compute = st.mean.dtype();
  const Shape dims = reduce_dims(x.dim()), bshape = channel_shape(x.dim(), channels);
  const Tensor xmu = x.to(compute) - st.mean.reshape(bshape);
  const Tensor dyc = dy.to(compute);
  const Tensor sum_dy = sum(dyc, dims), sum_dy_xmu = sum(dyc * xmu, dims);
  Tensor dx, dweight, dbias;
  if (st.needs_weight)
    dweight = (sum_dy_xmu * st.invstd).to(weight.dtype());
  if (st.needs_bias)
    dbias = sum_dy.to(weight.defined() ? weight.dtype() : compute);
  if (st.needs_input) {
    Tensor sums = cat({sum_dy, sum_dy_xmu}).to(kFloat64).contiguous(); // on x's device: NCCL takes CUDA only
    all_reduce_sum(sums);
    const double inv_n = 1.0 / static_cast<double>(st.count);
    const Tensor mean_dy = (sums.narrow(0, 0, channels) * inv_n).to(x.device(), compute).reshape(bshape);
    const Tensor mean_dy_xmu = (sums.narrow(0, channels, channels) * inv_n).to(x.device(), compute).reshape(bshape);
    const Tensor invstd = st.invstd.reshape(bshape);
    Tensor scale = invstd;
    if (weight.defined())
      scale = scale * weight.to(compute).reshape(bshape);
    dx = ((dyc - mean_dy - xmu * (invstd * invstd) * mean_dy_xmu) * scale).to(x.dtype());
  }
  return {dx, dweight, dbias};
}

/// The training forward across the ranks: y = (x - mean) invstd weight +
/// bias with the global statistics, running stats updated, and a backward
/// node recorded when x, weight or bias requires grad.
Tensor sync_batch_norm(const Tensor &x, const Tensor &running_mean, const Tensor &running_var, const Tensor &weight,
                       const Tensor &bias, double momentum, double eps, int group_size) {
  amp::detail::AutocastOp ac("batch_norm"); // batch_norm's autocast policy (float32)
  if (ac)
    return sync_batch_norm(ac.cast(x), running_mean, running_var, ac.cast(weight), ac.cast(bias), momentum, eps,
                           group_size);
  trace::GraphBreak graph_break("sync_batch_norm"); // a collective: runs eagerly
  const int64_t channels = x.size(1);
  const Shape bshape = channel_shape(x.dim(), channels);
  Tensor y;
  BackwardState st;
  {
    NoGradGuard no_grad; // the backward below is the op's own
    const Tensor xc = x.to(compute_type(x.dtype())).contiguous();
    const GlobalStats stats = gather_global_stats(xc, channels, group_size);
    update_running_stats(running_mean, running_var, stats, momentum);
    st.mean = stats.mean;
    st.invstd = rsqrt(stats.var + eps);
    st.count = stats.count;
    y = (xc - st.mean.reshape(bshape)) * st.invstd.reshape(bshape);
    if (weight.defined())
      y = y * weight.to(y.dtype()).reshape(bshape);
    if (bias.defined())
      y = y + bias.to(y.dtype()).reshape(bshape);
    y = y.to(x.dtype());
  }
  if (!autograd::any_requires_grad({x, weight, bias}))
    return y;
  st.needs_input = x.requires_grad();
  st.needs_weight = weight.defined() && weight.requires_grad();
  st.needs_bias = bias.defined() && bias.requires_grad();
  autograd::record(y, "SyncBatchNormBackward", {x, weight, bias}, {x, weight},
                   [st](const autograd::TensorList &g, const autograd::TensorList &saved) {
                     return sync_batch_norm_backward(g[0], saved[0], saved[1], st);
                   });
  return y;
}

} // namespace

void SyncBatchNorm::check_input_dim(const Tensor &input) const {
  KILN_CHECK(input.dim() >= 2, "SyncBatchNorm: expected an input of shape [N, C] or [N, C, *] (rank >= 2), got ",
             input.dim(), "D input ", shape_str(input.sizes()));
}

Tensor SyncBatchNorm::forward(const Tensor &input) {
  KILN_CHECK(input.defined(), kOp, ": input is undefined");
  check_input_dim(input);
  const int64_t c = options.num_features();
  KILN_CHECK(input.size(1) == c, kOp, ": expected ", c, " channels in dim 1, got input ", shape_str(input.sizes()));
  KILN_CHECK(input.is_floating_point(), kOp, ": expected a floating point input (float32, float64, float16 or ",
             "bfloat16), got ", dtype_name(input.dtype()), " input ", shape_str(input.sizes()));
  // batchnorm.py: synchronize only in training (not for the batch statistics
  // of eval without running stats), and only with more than one rank.
  if (!is_training())
    return BatchNormBase::forward(input);
  const int world = distributed::default_group(kOp)->size();
  if (world == 1)
    return BatchNormBase::forward(input);
  const bool track = options.track_running_stats();
  double momentum = 0.0;
  if (track) {
    NoGradGuard no_grad;
    num_batches_tracked.add_(ones_like(num_batches_tracked));
    momentum = options.momentum() ? *options.momentum() : 1.0 / num_batches_tracked.item();
  }
  return sync_batch_norm(input, running_mean, running_var, weight, bias, momentum, options.eps(), world);
}

std::shared_ptr<Module> SyncBatchNorm::convert_sync_batchnorm(std::shared_ptr<Module> module) {
  KILN_CHECK(module != nullptr, "convert_sync_batchnorm: no module");
  auto *bn = dynamic_cast<BatchNormBase *>(module.get());
  if (bn && !dynamic_cast<SyncBatchNorm *>(bn)) {
    auto sync = std::make_shared<SyncBatchNorm>(bn->options);
    // The new tensors take the old ones' dtype and device, then their values.
    const Tensor like = bn->options.affine() ? bn->weight : bn->running_mean;
    if (like.defined()) {
      sync->to(like.dtype());
      sync->to(like.device());
    }
    sync->load_state_dict(bn->state_dict());
    if (bn->options.affine()) {
      sync->weight.requires_grad_(bn->weight.requires_grad());
      sync->bias.requires_grad_(bn->bias.requires_grad());
    }
    sync->train(bn->is_training());
    return sync;
  }
  for (auto &[name, child] : module->named_children()) {
    auto converted = convert_sync_batchnorm(child);
    if (converted != child)
      module->replace_module(name, converted);
  }
  return module;
}

} // namespace kiln::nn
