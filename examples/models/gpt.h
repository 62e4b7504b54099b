// examples/models/gpt.h - the character-level GPT of kiln-train-gpt (a
// pre-LayerNorm transformer, as nanoGPT), shared with the model zoo
// (bench/models/gpt.cpp) so both run the same model.
//
// GPT: int64 token ids [B, T] (T <= context) -> logits [B, T, vocab].
// Learned token + position embeddings, dropout, L blocks of
// x + attn(ln1(x)), x + mlp(ln2(x)) (causal scaled_dot_product_attention,
// MLP D -> 4D -> D with GELU "tanh"), a final LayerNorm and a linear head.
// Weights ~ N(0, 0.02) (the residual projections 0.02 / sqrt(2 L)), biases 0,
// as nanoGPT. Throws kiln::Error for a sequence longer than the context.
#pragma once

#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "kiln/kiln.h"

namespace kiln::models {

namespace F = kiln::nn::functional;

/// Causal multi-head self-attention: separate q/k/v projections (no slicing
/// of a fused qkv, which kiln::compile does not capture), heads of D / H.
class CausalSelfAttention : public nn::Module {
public:
  CausalSelfAttention(int64_t d_model, int64_t heads, double dropout)
      : heads_(heads), p_(dropout) {
    q_ = register_module("q_proj", std::make_shared<nn::Linear>(d_model, d_model));
    k_ = register_module("k_proj", std::make_shared<nn::Linear>(d_model, d_model));
    v_ = register_module("v_proj", std::make_shared<nn::Linear>(d_model, d_model));
    out_ = register_module("out_proj", std::make_shared<nn::Linear>(d_model, d_model));
    drop_ = register_module("resid_drop", std::make_shared<nn::Dropout>(dropout));
  }
  Tensor forward(const Tensor &x) override {
    const int64_t B = x.size(0), T = x.size(1), D = x.size(2), hd = D / heads_;
    auto split_heads = [&](const Tensor &t) { return t.view({B, T, heads_, hd}).transpose(1, 2); };  // [B, H, T, hd]
    Tensor q = split_heads(q_->forward(x)), k = split_heads(k_->forward(x)), v = split_heads(v_->forward(x));
    Tensor y = F::scaled_dot_product_attention(q, k, v, Tensor(), is_training() ? p_ : 0.0, /*is_causal=*/true);
    y = y.transpose(1, 2).reshape({B, T, D});
    return drop_->forward(out_->forward(y));
  }
  std::string name() const override { return "CausalSelfAttention"; }
  std::shared_ptr<nn::Linear> out_proj() const { return out_; }

private:
  int64_t heads_;
  double p_;
  std::shared_ptr<nn::Linear> q_, k_, v_, out_;
  std::shared_ptr<nn::Dropout> drop_;
};

/// D -> 4D -> GELU(tanh) -> D -> dropout.
class MLP : public nn::Module {
public:
  MLP(int64_t d_model, double dropout) {
    fc_ = register_module("fc", std::make_shared<nn::Linear>(d_model, 4 * d_model));
    act_ = register_module("act", std::make_shared<nn::GELU>("tanh"));
    proj_ = register_module("proj", std::make_shared<nn::Linear>(4 * d_model, d_model));
    drop_ = register_module("drop", std::make_shared<nn::Dropout>(dropout));
  }
  Tensor forward(const Tensor &x) override { return drop_->forward(proj_->forward(act_->forward(fc_->forward(x)))); }
  std::string name() const override { return "MLP"; }
  std::shared_ptr<nn::Linear> proj() const { return proj_; }

private:
  std::shared_ptr<nn::Linear> fc_, proj_;
  std::shared_ptr<nn::GELU> act_;
  std::shared_ptr<nn::Dropout> drop_;
};

/// Pre-LayerNorm transformer block.
class Block : public nn::Module {
public:
  Block(int64_t d_model, int64_t heads, double dropout) {
    ln1_ = register_module("ln_1", std::make_shared<nn::LayerNorm>(Shape{d_model}));
    attn_ = register_module("attn", std::make_shared<CausalSelfAttention>(d_model, heads, dropout));
    ln2_ = register_module("ln_2", std::make_shared<nn::LayerNorm>(Shape{d_model}));
    mlp_ = register_module("mlp", std::make_shared<MLP>(d_model, dropout));
  }
  Tensor forward(const Tensor &x) override {
    Tensor h = x + attn_->forward(ln1_->forward(x));
    return h + mlp_->forward(ln2_->forward(h));
  }
  std::string name() const override { return "Block"; }
  std::vector<Tensor> residual_projections() const { return {attn_->out_proj()->weight, mlp_->proj()->weight}; }

private:
  std::shared_ptr<nn::LayerNorm> ln1_, ln2_;
  std::shared_ptr<CausalSelfAttention> attn_;
  std::shared_ptr<MLP> mlp_;
};

/// int64 token ids [B, T] -> logits [B, T, vocab].
class GPT : public nn::Module {
public:
  GPT(int64_t vocab, int64_t context, int64_t layers, int64_t d_model, int64_t heads, double dropout)
      : context_(context) {
    wte_ = register_module("wte", std::make_shared<nn::Embedding>(vocab, d_model));
    wpe_ = register_module("wpe", std::make_shared<nn::Embedding>(context, d_model));
    drop_ = register_module("drop", std::make_shared<nn::Dropout>(dropout));
    blocks_ = register_module("h", std::make_shared<nn::ModuleList>());
    for (int64_t i = 0; i < layers; ++i) blocks_->push_back(std::make_shared<Block>(d_model, heads, dropout));
    ln_f_ = register_module("ln_f", std::make_shared<nn::LayerNorm>(Shape{d_model}));
    head_ = register_module("lm_head", std::make_shared<nn::Linear>(d_model, vocab, /*bias=*/false));
    // nanoGPT's init: N(0, 0.02) weights, zero biases, LayerNorm 1/0, and
    // N(0, 0.02 / sqrt(2 L)) for the projections that write the residual.
    apply([](nn::Module &m) {
      if (auto *lin = dynamic_cast<nn::Linear *>(&m)) {
        nn::init::normal_(lin->weight, 0.0, 0.02);
        if (lin->bias.defined()) nn::init::zeros_(lin->bias);
      } else if (auto *emb = dynamic_cast<nn::Embedding *>(&m)) {
        nn::init::normal_(emb->weight, 0.0, 0.02);
      }
    });
    for (int64_t i = 0; i < layers; ++i)
      for (Tensor w : blocks_->at<Block>(i)->residual_projections())
        nn::init::normal_(w, 0.0, 0.02 / std::sqrt(2.0 * static_cast<double>(layers)));
  }
  Tensor forward(const Tensor &idx) override {
    const int64_t T = idx.size(1);
    KILN_CHECK(T <= context_, "GPT: sequence of ", T, " tokens is longer than the context ", context_);
    Tensor x = wte_->forward(idx) + wpe_->forward(arange(T, kInt64, idx.device()));  // [B, T, D] + [T, D]
    x = drop_->forward(x);
    for (const auto &block : *blocks_) x = block->forward(x);
    return head_->forward(ln_f_->forward(x));
  }
  std::string name() const override { return "GPT"; }

private:
  int64_t context_;
  std::shared_ptr<nn::Embedding> wte_, wpe_;
  std::shared_ptr<nn::Dropout> drop_;
  std::shared_ptr<nn::ModuleList> blocks_;
  std::shared_ptr<nn::LayerNorm> ln_f_;
  std::shared_ptr<nn::Linear> head_;
};

}  // namespace kiln::models
