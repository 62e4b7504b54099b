// kiln/nn.h - modules and functional layers (PyTorch's torch.nn names).
//
// A Module is one class (no Impl/holder split). Children are registered with
// register_module and may be owned by the parent (shared_ptr) or be plain
// members of it (reference; the parent must outlive the registration).
// Layers: Linear, Conv2d, BatchNorm1d/2d, LayerNorm, Dropout, Embedding,
// MultiheadAttention, ReLU, GELU, SiLU (frontend/src/nn/layers.cpp, Linear and
// ReLU in module.cpp); SyncBatchNorm (frontend/src/distributed/
// sync_batch_norm.cpp: it talks to the default process group); containers: Sequential, ModuleList, ModuleDict,
// ParameterList (containers.cpp). Parameter and buffer names equal PyTorch's
// state_dict keys. Initialisers: kiln/init.h.
#pragma once

#include <array>
#include <functional>
#include <optional>
#include <initializer_list>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "kiln/functional.h"
#include "kiln/tensor.h"

namespace kiln::nn {

class SyncBatchNorm;

class Module {
public:
  Module();
  /// A copy shares the parameter and buffer tensors (as today's memberwise
  /// copy) and is a module of its own for kiln::compile's guards.
  Module(const Module &other);
  Module &operator=(const Module &other);
  virtual ~Module();
  /// The computation of a one-input, one-output module (most layers). The
  /// default throws kiln::Error: a module with several inputs or outputs
  /// overrides the vector form below instead.
  virtual Tensor forward(const Tensor &input);
  /// Several tensors in, several out: a model that takes token ids and a
  /// padding mask and returns logits and a loss. A virtual taking a vector
  /// (rather than LibTorch's templated forward(Args...)) so that such a
  /// module is called, contained and compiled through nn::Module& like any
  /// other (kiln::compile(module) calls this form). The default calls
  /// forward(inputs[0]) when there is exactly one input, else throws
  /// kiln::Error naming the count.
  virtual std::vector<Tensor> forward(const std::vector<Tensor> &inputs);
  Tensor operator()(const Tensor &input) { return forward(input); }
  std::vector<Tensor> operator()(const std::vector<Tensor> &inputs) { return forward(inputs); }
  /// Class name for printing ("Linear", "Sequential", ...).
  virtual std::string name() const = 0;
  /// The module whose forward records eager ops: this one, or for a wrapper
  /// that runs compiled code (kiln::CompiledModule, torch's `_orig_mod`) the
  /// module it wraps. Exporters (kiln::onnx::export_model) trace this one.
  virtual Module &eager_module() { return *this; }

  /// Parameters and buffers by dotted name, parameters first per module, in
  /// registration order (torch's state_dict). The tensors share storage with
  /// the module (detached views).
  std::vector<std::pair<std::string, Tensor>> state_dict() const;
  /// Result of load_state_dict: keys the module has but the dict lacks, and
  /// keys the dict has but the module lacks.
  struct LoadResult {
    std::vector<std::string> missing_keys;
    std::vector<std::string> unexpected_keys;
  };
  /// Copies values into parameters and buffers (dtype converted to the
  /// module's). Shape mismatches always throw kiln::Error naming the key and
  /// both shapes; with strict, missing or unexpected keys throw too (listing
  /// them), otherwise they are returned.
  LoadResult load_state_dict(const std::vector<std::pair<std::string, Tensor>> &state, bool strict = true);
  /// Buffers (non-parameter state such as running statistics), dotted names.
  std::vector<std::pair<std::string, Tensor>> named_buffers(bool recurse = true) const;
  std::vector<Tensor> buffers(bool recurse = true) const;
  /// Converts every floating point parameter and buffer to `dtype` in place
  /// (the Tensor handles stay valid, as nn.Module.to). Gradients are dropped.
  void to(DType dtype);
  /// Moves parameters and buffers (and parameters' gradients) to `device`
  /// in place: the Tensor handles stay valid (as nn.Module.to). Throws
  /// kiln::Error when `device` has no registered backend.
  void to(Device device);

  /// Parameters of this module and (recurse) its children, registration order.
  std::vector<Tensor> parameters(bool recurse = true) const;
  /// Same with dotted names: "0.weight", "encoder.fc.bias".
  std::vector<std::pair<std::string, Tensor>> named_parameters(bool recurse = true) const;
  std::vector<std::pair<std::string, std::shared_ptr<Module>>> named_children() const { return children_; }

  /// Sets training mode here and in all children (dropout/batch-norm behave differently).
  virtual void train(bool on = true);
  void eval() { train(false); }
  bool is_training() const { return training_; }
  /// Calls fn on every module (children first, then this one), as torch's apply.
  void apply(const std::function<void(Module &)> &fn);
  /// Clears (set_to_none) or zeroes the .grad of every parameter.
  void zero_grad(bool set_to_none = true);

protected:
  /// Registers `t` as parameter `name` (a leaf; requires_grad set as given).
  /// Throws kiln::Error on a duplicate or dotted name.
  Tensor &register_parameter(const std::string &name, Tensor t, bool requires_grad = true);
  /// Registers a buffer `name` (saved in state_dict, not trained).
  Tensor &register_buffer(const std::string &name, Tensor t);
  /// Registers an owned child.
  template <class M> std::shared_ptr<M> register_module(const std::string &name, std::shared_ptr<M> m) {
    add_child(name, m);
    return m;
  }
  /// Registers a child that is a member of this module (not owned).
  template <class M> M &register_module(const std::string &name, M &m) {
    add_child(name, std::shared_ptr<Module>(std::shared_ptr<Module>(), &m));
    return m;
  }
  /// Replaces the child registered as `name`, keeping its position (as
  /// assigning an existing key of torch's _modules). Throws if there is none.
  void replace_module(const std::string &name, std::shared_ptr<Module> m);

private:
  friend class SyncBatchNorm; // convert_sync_batchnorm replaces children (replace_module)
  void add_child(const std::string &name, std::shared_ptr<Module> m);
  std::vector<std::pair<std::string, Tensor>> params_;
  std::vector<std::pair<std::string, Tensor>> buffers_;
  std::vector<std::pair<std::string, std::shared_ptr<Module>>> children_;
  bool training_ = true;
};

/// y = x W^T + b. x: [N, in_features] (or [in_features]) -> [N, out_features].
/// Init as PyTorch: W, b ~ U(-1/sqrt(in), 1/sqrt(in)) (kaiming_uniform with
/// a = sqrt(5), He et al. 2015), drawn from the default generator.
class Linear : public Module {
public:
  Linear(int64_t in_features, int64_t out_features, bool bias = true);
  Tensor forward(const Tensor &input) override;
  std::string name() const override { return "Linear"; }
  Tensor weight;  ///< [out_features, in_features]
  Tensor bias;    ///< [out_features] (undefined without bias)
  int64_t in_features, out_features;
};

/// max(x, 0) elementwise; any shape.
class ReLU : public Module {
public:
  Tensor forward(const Tensor &input) override;
  std::string name() const override { return "ReLU"; }
};

/// Runs children in order; children named "0", "1", ...
class Sequential : public Module {
public:
  Sequential() = default;
  Sequential(std::initializer_list<std::shared_ptr<Module>> modules);
  void push_back(std::shared_ptr<Module> m);
  Tensor forward(const Tensor &input) override;
  std::string name() const override { return "Sequential"; }
  size_t size() const { return named_children().size(); }
};

// ---- options helpers ------------------------------------------------------------

/// Declares an option `name` of type T with a chained setter `name(v)` and a
/// getter `name()` (LibTorch's TORCH_ARG). Write the default after it:
/// `KILN_ARG(double, eps) = 1e-5;`.
#define KILN_ARG(T, name)                                                                          \
public:                                                                                            \
  auto &name(const T &new_##name) {                                                                \
    name##_ = new_##name;                                                                          \
    return *this;                                                                                  \
  }                                                                                                \
  const T &name() const { return name##_; }                                                        \
                                                                                                   \
private:                                                                                           \
  T name##_

/// A (height, width) pair: `3` means (3, 3), `{3, 5}` means (3, 5) (LibTorch's
/// ExpandingArray<2>). Converts to the std::array the functional ops take.
struct IntPair : std::array<int64_t, 2> {
  IntPair(int64_t v) : std::array<int64_t, 2>{{v, v}} {}
  IntPair(int64_t h, int64_t w) : std::array<int64_t, 2>{{h, w}} {}
  std::string str() const;  ///< "(3, 5)"
};

// ---- convolution ------------------------------------------------------------------

/// Options of Conv2d. Defaults: stride 1, padding 0, dilation 1, groups 1,
/// bias true. Only zero padding (padding_mode "zeros") exists.
struct Conv2dOptions {
  Conv2dOptions(int64_t in_channels, int64_t out_channels, IntPair kernel_size)
      : in_channels_(in_channels), out_channels_(out_channels), kernel_size_(kernel_size) {}
  KILN_ARG(int64_t, in_channels);
  KILN_ARG(int64_t, out_channels);
  KILN_ARG(IntPair, kernel_size);
  KILN_ARG(IntPair, stride) = 1;
  KILN_ARG(IntPair, padding) = 0;
  KILN_ARG(IntPair, dilation) = 1;
  KILN_ARG(int64_t, groups) = 1;
  KILN_ARG(bool, bias) = true;
};

/// 2-D cross-correlation (torch.nn.Conv2d). [N, C_in, H, W] (or unbatched
/// [C_in, H, W]) -> [N, C_out, H_out, W_out] with
/// H_out = (H + 2 padding - dilation (kH - 1) - 1) / stride + 1 (same for W).
/// weight [C_out, C_in / groups, kH, kW], bias [C_out]. Init as PyTorch:
/// kaiming_uniform_(weight, a = sqrt(5)) and bias ~ U(-1/sqrt(fan_in),
/// 1/sqrt(fan_in)), fan_in = C_in / groups * kH * kW (He et al. 2015).
/// Throws kiln::Error on non-positive sizes/stride/dilation, negative padding,
/// channels not divisible by groups, or an input whose rank or channel count
/// does not match (the message names Conv2d and the shapes).
class Conv2d : public Module {
public:
  explicit Conv2d(const Conv2dOptions &options);
  Conv2d(int64_t in_channels, int64_t out_channels, IntPair kernel_size)
      : Conv2d(Conv2dOptions(in_channels, out_channels, kernel_size)) {}
  Tensor forward(const Tensor &input) override;
  std::string name() const override { return "Conv2d"; }
  /// Redraws weight and bias with the default init.
  void reset_parameters();
  Conv2dOptions options;
  Tensor weight;  ///< [C_out, C_in / groups, kH, kW]
  Tensor bias;    ///< [C_out] (undefined without bias)
};

// ---- normalization ----------------------------------------------------------------

/// Options of BatchNorm1d/2d. Defaults: eps 1e-5, momentum 0.1 (nullopt =
/// cumulative moving average, momentum 1/num_batches_tracked), affine true,
/// track_running_stats true.
struct BatchNormOptions {
  explicit BatchNormOptions(int64_t num_features) : num_features_(num_features) {}
  KILN_ARG(int64_t, num_features);
  KILN_ARG(double, eps) = 1e-5;
  KILN_ARG(std::optional<double>, momentum) = 0.1;
  KILN_ARG(bool, affine) = true;
  KILN_ARG(bool, track_running_stats) = true;
};

/// Batch normalization (Ioffe & Szegedy 2015), PyTorch's _BatchNorm; use
/// BatchNorm1d or BatchNorm2d. y = (x - mean) / sqrt(var + eps) * weight + bias
/// per channel (dim 1). Training (or track_running_stats false): batch
/// statistics; with track_running_stats, running_mean/running_var are updated
/// as (1 - momentum) * running + momentum * batch (unbiased batch variance) and
/// num_batches_tracked counts batches. Eval: the running statistics.
/// State dict keys: weight, bias (affine), running_mean, running_var,
/// num_batches_tracked (track_running_stats). Throws kiln::Error naming the
/// module when num_features <= 0 or eps <= 0, when the input rank or channel
/// count is wrong, or when training sees one value per channel.
class BatchNormBase : public Module {
public:
  Tensor forward(const Tensor &input) override;
  /// running_mean = 0, running_var = 1, num_batches_tracked = 0.
  void reset_running_stats();
  /// reset_running_stats(), weight = 1, bias = 0.
  void reset_parameters();
  BatchNormOptions options;
  Tensor weight;               ///< [C], init 1 (undefined unless affine)
  Tensor bias;                 ///< [C], init 0 (undefined unless affine)
  Tensor running_mean;         ///< [C] buffer (undefined unless track_running_stats)
  Tensor running_var;          ///< [C] buffer
  Tensor num_batches_tracked;  ///< 0-d int64 buffer

protected:
  /// kind ("BatchNorm1d", ...) names the module in constructor errors.
  BatchNormBase(const BatchNormOptions &options, const char *kind);
  /// Throws unless the input rank fits the subclass.
  virtual void check_input_dim(const Tensor &input) const = 0;
};

/// BatchNorm over [N, C] or [N, C, L] (statistics over N, or N and L).
class BatchNorm1d : public BatchNormBase {
public:
  explicit BatchNorm1d(const BatchNormOptions &options) : BatchNormBase(options, "BatchNorm1d") {}
  explicit BatchNorm1d(int64_t num_features) : BatchNorm1d(BatchNormOptions(num_features)) {}
  std::string name() const override { return "BatchNorm1d"; }

protected:
  void check_input_dim(const Tensor &input) const override;
};

/// BatchNorm over [N, C, H, W] (statistics over N, H and W).
class BatchNorm2d : public BatchNormBase {
public:
  explicit BatchNorm2d(const BatchNormOptions &options) : BatchNormBase(options, "BatchNorm2d") {}
  explicit BatchNorm2d(int64_t num_features) : BatchNorm2d(BatchNormOptions(num_features)) {}
  std::string name() const override { return "BatchNorm2d"; }

protected:
  void check_input_dim(const Tensor &input) const override;
};

/// Batch normalization whose training statistics are those of the GLOBAL
/// batch: the union of every rank's input in the default process group
/// (torch.nn.SyncBatchNorm, also on the cpu, where PyTorch has none).
/// Input [N, C, *] (any rank >= 2; N may differ across ranks and be 0 on
/// some) -> the same shape and dtype; float32 and float64 (float16 and
/// bfloat16 are normalized in float32, as batch_norm). Options, parameters,
/// buffers and state dict keys are BatchNorm's (BatchNormOptions).
///
/// Training with a group of two or more ranks (after torch/nn/modules/
/// _functions.py, SyncBatchNorm.forward/backward):
///   forward: each rank's per-channel count n_r, mean m_r and biased
///   variance v_r are all-gathered and merged (Chan, Golub & LeVeque 1979,
///   as batch_norm_gather_stats_with_counts): N = sum n_r, mean = sum n_r m_r
///   / N, var = sum n_r (v_r + (m_r - mean)^2) / N; y = (x - mean) /
///   sqrt(var + eps) * weight + bias; running_mean/running_var move towards
///   mean and var * N / (N - 1) (unbiased) with BatchNorm's momentum rule.
///   backward: sum(dy) and sum(dy * (x - mean)) per channel are
///   all-reduced, then dx = (dy - sum_dy / N - (x - mean) * sum_dy_xmu /
///   (N (var + eps))) * weight / sqrt(var + eps), so every rank's input
///   gradient is that of BatchNorm on the global batch with the ranks' losses
///   summed. dweight and dbias stay per rank (DistributedDataParallel
///   averages them, as in PyTorch).
/// Every rank must call forward (and backward) the same number of times in
/// the same order: they are collectives (so every rank's output needs a
/// gradient in a backward that reaches it). With a group of one rank, in eval
/// mode, or with batch statistics in eval (track_running_stats false) it is
/// BatchNorm, without communication.
///
/// Throws kiln::Error naming SyncBatchNorm for an input that is undefined,
/// of rank < 2, with a channel count other than num_features, or not
/// floating point; when training fewer than 2 values per channel over all
/// ranks; and in training when no process group is initialized (call
/// kiln::distributed::init_process_group() first, as PyTorch 1.x fails there;
/// PyTorch 2 falls back to BatchNorm); a failed collective is a kiln::Error
/// naming it.
class SyncBatchNorm : public BatchNormBase {
public:
  explicit SyncBatchNorm(const BatchNormOptions &options) : BatchNormBase(options, "SyncBatchNorm") {}
  explicit SyncBatchNorm(int64_t num_features) : SyncBatchNorm(BatchNormOptions(num_features)) {}
  Tensor forward(const Tensor &input) override;
  std::string name() const override { return "SyncBatchNorm"; }

  /// torch.nn.SyncBatchNorm.convert_sync_batchnorm: `module` with every
  /// BatchNorm1d/BatchNorm2d in it (itself included) replaced by a
  /// SyncBatchNorm with the same options, training mode and requires_grad
  /// flags, and copies of its parameters' and buffers' values (dtype and
  /// device kept). Children are replaced where they are registered
  /// (Sequential, ModuleList, ModuleDict, any register_module): a module
  /// that calls a batch norm through a member of its own keeps calling
  /// that member. The parameters are new tensors: convert before making the
  /// optimizer and DistributedDataParallel. Returns `module` itself unless
  /// it is a BatchNorm. Needs no process group.
  static std::shared_ptr<Module> convert_sync_batchnorm(std::shared_ptr<Module> module);

protected:
  void check_input_dim(const Tensor &input) const override;
};

/// Options of LayerNorm. Defaults: eps 1e-5, elementwise_affine true.
struct LayerNormOptions {
  explicit LayerNormOptions(Shape normalized_shape) : normalized_shape_(std::move(normalized_shape)) {}
  KILN_ARG(Shape, normalized_shape);
  KILN_ARG(double, eps) = 1e-5;
  KILN_ARG(bool, elementwise_affine) = true;
};

/// Layer normalization (Ba et al. 2016) over the trailing dims given by
/// normalized_shape: [*, *normalized_shape] -> same shape, biased variance.
/// weight (init 1) and bias (init 0) have shape normalized_shape when
/// elementwise_affine. Throws kiln::Error naming LayerNorm on an empty or
/// non-positive normalized_shape, eps <= 0, or an input whose trailing dims
/// differ.
class LayerNorm : public Module {
public:
  explicit LayerNorm(const LayerNormOptions &options);
  explicit LayerNorm(const Shape &normalized_shape) : LayerNorm(LayerNormOptions(normalized_shape)) {}
  Tensor forward(const Tensor &input) override;
  std::string name() const override { return "LayerNorm"; }
  void reset_parameters();
  LayerNormOptions options;
  Tensor weight;  ///< normalized_shape (undefined without elementwise_affine)
  Tensor bias;
};

// ---- dropout, embedding, activations ----------------------------------------------------

/// Dropout (Srivastava et al. 2014): in training, zeroes each element with
/// probability p and scales the rest by 1/(1-p); identity in eval mode. Any
/// shape. Default p = 0.5; throws kiln::Error unless 0 <= p <= 1.
class Dropout : public Module {
public:
  explicit Dropout(double p = 0.5);
  Tensor forward(const Tensor &input) override;
  std::string name() const override { return "Dropout"; }
  double p;
};

/// Options of Embedding. padding_idx (default none; negative counts from the
/// end): that row is initialised to zeros and receives no gradient.
struct EmbeddingOptions {
  EmbeddingOptions(int64_t num_embeddings, int64_t embedding_dim)
      : num_embeddings_(num_embeddings), embedding_dim_(embedding_dim) {}
  KILN_ARG(int64_t, num_embeddings);
  KILN_ARG(int64_t, embedding_dim);
  KILN_ARG(std::optional<int64_t>, padding_idx) = std::nullopt;
};

/// A lookup table (torch.nn.Embedding): int64 indices [*] -> [*, embedding_dim].
/// weight [num_embeddings, embedding_dim] ~ N(0, 1). Throws kiln::Error naming
/// Embedding on non-positive sizes, padding_idx outside
/// [-num_embeddings, num_embeddings), a non-integer input, or an index
/// outside [0, num_embeddings).
class Embedding : public Module {
public:
  explicit Embedding(const EmbeddingOptions &options);
  Embedding(int64_t num_embeddings, int64_t embedding_dim)
      : Embedding(EmbeddingOptions(num_embeddings, embedding_dim)) {}
  Tensor forward(const Tensor &input) override;
  std::string name() const override { return "Embedding"; }
  void reset_parameters();
  EmbeddingOptions options;
  Tensor weight;  ///< [num_embeddings, embedding_dim]
};

/// GELU (Hendrycks & Gimpel 2016); approximate "none" (exact erf, the
/// default) or "tanh". Any shape. Throws kiln::Error on another string.
class GELU : public Module {
public:
  explicit GELU(std::string approximate = "none");
  Tensor forward(const Tensor &input) override;
  std::string name() const override { return "GELU"; }
  std::string approximate;
};

/// x * sigmoid(x) (Elfwing et al. 2018). Any shape.
class SiLU : public Module {
public:
  Tensor forward(const Tensor &input) override;
  std::string name() const override { return "SiLU"; }
};

// ---- attention ----------------------------------------------------------------------

/// Options of MultiheadAttention. Defaults: dropout 0 (on the attention
/// weights, training only), bias true, batch_first true (PyTorch's default is
/// false; Kiln takes [N, L, E]).
struct MultiheadAttentionOptions {
  MultiheadAttentionOptions(int64_t embed_dim, int64_t num_heads) : embed_dim_(embed_dim), num_heads_(num_heads) {}
  KILN_ARG(int64_t, embed_dim);
  KILN_ARG(int64_t, num_heads);
  KILN_ARG(double, dropout) = 0.0;
  KILN_ARG(bool, bias) = true;
  KILN_ARG(bool, batch_first) = true;
};

/// Multi-head attention (Vaswani et al. 2017), torch.nn.MultiheadAttention:
/// q, k, v are projected by in_proj_weight/in_proj_bias (rows [0, E), [E, 2E),
/// [2E, 3E)), split into num_heads heads of E / num_heads, combined by
/// scaled_dot_product_attention and projected by out_proj. Shapes
/// (batch_first): query [N, L, E], key/value [N, S, E] -> [N, L, E]; without
/// batch_first [L, N, E] -> [L, N, E]; unbatched [L, E] -> [L, E].
/// Masks follow PyTorch's MHA (not sdpa): attn_mask [L, S] or
/// [N * num_heads, L, S], bool (true = NOT allowed to attend) or float
/// (added to the scores); key_padding_mask [N, S] bool (true = ignore that
/// key) or float; is_causal masks key j > query i. Fully masked rows give NaN
/// as in PyTorch. Init as PyTorch: xavier_uniform_ in_proj_weight, zero
/// biases, out_proj.weight as Linear. State dict keys: in_proj_weight,
/// in_proj_bias, out_proj.weight, out_proj.bias. Only the output is returned
/// (no attention weights). Throws kiln::Error naming MultiheadAttention when
/// embed_dim is not divisible by num_heads, dropout is outside [0, 1], or
/// the shapes of the inputs or masks do not fit.
class MultiheadAttention : public Module {
public:
  explicit MultiheadAttention(const MultiheadAttentionOptions &options);
  MultiheadAttention(int64_t embed_dim, int64_t num_heads)
      : MultiheadAttention(MultiheadAttentionOptions(embed_dim, num_heads)) {}
  /// Self-attention: forward(x, x, x).
  Tensor forward(const Tensor &x) override;
  Tensor forward(const Tensor &query, const Tensor &key, const Tensor &value, const Tensor &attn_mask = Tensor(),
                 bool is_causal = false, const Tensor &key_padding_mask = Tensor());
  std::string name() const override { return "MultiheadAttention"; }
  void reset_parameters();
  MultiheadAttentionOptions options;
  int64_t head_dim;
  Tensor in_proj_weight;             ///< [3E, E]
  Tensor in_proj_bias;               ///< [3E] (undefined without bias)
  std::shared_ptr<Linear> out_proj;  ///< E -> E
};

// ---- containers (frontend/src/nn/containers.cpp) -------------------------------------------

/// A list of submodules named "0", "1", ... (torch.nn.ModuleList). Holds
/// modules for a parent's forward to use; has no forward of its own
/// (calling it throws kiln::Error "ModuleList has no forward").
class ModuleList : public Module {
public:
  ModuleList() = default;
  ModuleList(std::initializer_list<std::shared_ptr<Module>> modules);
  /// Appends (and registers) `m`; throws on null.
  void push_back(std::shared_ptr<Module> m);
  void extend(const std::vector<std::shared_ptr<Module>> &modules);
  size_t size() const { return modules_.size(); }
  bool empty() const { return modules_.empty(); }
  /// Module i; negative i counts from the end. Throws kiln::Error when out of range.
  std::shared_ptr<Module> operator[](int64_t i) const;
  /// Module i cast to M; throws kiln::Error if it is not an M.
  template <class M> std::shared_ptr<M> at(int64_t i) const {
    auto m = std::dynamic_pointer_cast<M>((*this)[i]);
    KILN_CHECK(m != nullptr, "ModuleList: module ", i, " (", (*this)[i]->name(), ") is not of the requested type");
    return m;
  }
  std::vector<std::shared_ptr<Module>>::const_iterator begin() const { return modules_.begin(); }
  std::vector<std::shared_ptr<Module>>::const_iterator end() const { return modules_.end(); }
  Tensor forward(const Tensor &input) override;
  std::string name() const override { return "ModuleList"; }

private:
  std::vector<std::shared_ptr<Module>> modules_;
};

/// Submodules by key in insertion order (torch.nn.ModuleDict); keys are the
/// state dict prefixes. No forward (calling it throws kiln::Error).
class ModuleDict : public Module {
public:
  using Item = std::pair<std::string, std::shared_ptr<Module>>;
  ModuleDict() = default;
  ModuleDict(std::initializer_list<Item> items);
  /// Adds `m` under `key`, or replaces the module already there keeping its
  /// position (as d[key] = m). Throws on null, an empty key or one with '.'.
  void insert(const std::string &key, std::shared_ptr<Module> m);
  bool contains(const std::string &key) const;
  /// The module under `key`; throws kiln::Error naming the key if absent.
  std::shared_ptr<Module> at(const std::string &key) const;
  std::shared_ptr<Module> operator[](const std::string &key) const { return at(key); }
  template <class M> std::shared_ptr<M> at(const std::string &key) const {
    auto m = std::dynamic_pointer_cast<M>(at(key));
    KILN_CHECK(m != nullptr, "ModuleDict: module '", key, "' (", at(key)->name(), ") is not of the requested type");
    return m;
  }
  size_t size() const { return items_.size(); }
  bool empty() const { return items_.empty(); }
  std::vector<std::string> keys() const;
  std::vector<Item>::const_iterator begin() const { return items_.begin(); }
  std::vector<Item>::const_iterator end() const { return items_.end(); }
  Tensor forward(const Tensor &input) override;
  std::string name() const override { return "ModuleDict"; }

private:
  std::vector<Item> items_;
};

/// Parameters named "0", "1", ... (torch.nn.ParameterList). The handles
/// returned share their TensorImpl with the registered parameters. No forward.
class ParameterList : public Module {
public:
  ParameterList() = default;
  ParameterList(std::initializer_list<Tensor> params);
  /// Registers `p` (requires_grad set) as the next parameter; returns it.
  Tensor push_back(Tensor p);
  size_t size() const { return params_list_.size(); }
  bool empty() const { return params_list_.empty(); }
  /// Parameter i; negative counts from the end; throws when out of range.
  Tensor operator[](int64_t i) const;
  std::vector<Tensor>::const_iterator begin() const { return params_list_.begin(); }
  std::vector<Tensor>::const_iterator end() const { return params_list_.end(); }
  Tensor forward(const Tensor &input) override;
  std::string name() const override { return "ParameterList"; }

private:
  std::vector<Tensor> params_list_;
};


namespace utils {
/// Scales gradients in place so their total L2 norm is at most max_norm;
/// returns the total norm before clipping (torch.nn.utils.clip_grad_norm_).
/// Pass max_norm = infinity to only measure.
double clip_grad_norm_(const std::vector<Tensor> &parameters, double max_norm);
}  // namespace utils

}  // namespace kiln::nn
