// tiny_models.h - small models shared by the compile tests: a pre-norm GPT
// block and a two-block character-level GPT (test-only code).
#pragma once

#include "kiln/kiln.h"

namespace kiln::test_models {

/// A pre-norm GPT block: x + drop(proj(attn(ln1(x)))), then
/// + drop(fc2(gelu(fc1(ln2(x))))); `dropout` on both residual branches and
/// `attn_dropout` on the attention weights (0: none, no random draws).
struct TinyBlock : nn::Module {
  int64_t C, H;
  double p, attn_p;
  std::shared_ptr<nn::LayerNorm> ln1, ln2;
  std::shared_ptr<nn::Linear> q, k, v, proj, fc1, fc2;
  TinyBlock(int64_t channels, int64_t heads, double dropout = 0.0, double attn_dropout = 0.0)
      : C(channels), H(heads), p(dropout), attn_p(attn_dropout) {
    ln1 = register_module("ln1", std::make_shared<nn::LayerNorm>(Shape{C}));
    q = register_module("q", std::make_shared<nn::Linear>(C, C));
    k = register_module("k", std::make_shared<nn::Linear>(C, C));
    v = register_module("v", std::make_shared<nn::Linear>(C, C));
    proj = register_module("proj", std::make_shared<nn::Linear>(C, C));
    ln2 = register_module("ln2", std::make_shared<nn::LayerNorm>(Shape{C}));
    fc1 = register_module("fc1", std::make_shared<nn::Linear>(C, 4 * C));
    fc2 = register_module("fc2", std::make_shared<nn::Linear>(4 * C, C));
    // Non-trivial LayerNorm affine parameters (so their gradients matter).
    NoGradGuard no_grad;
    ln1->weight.copy_(randn({C}) * 0.1 + 1.0);
    ln1->bias.copy_(randn({C}) * 0.1);
    ln2->weight.copy_(randn({C}) * 0.1 + 1.0);
    ln2->bias.copy_(randn({C}) * 0.1);
  }
  Tensor forward(const Tensor &x) override {
    const int64_t B = x.size(0), T = x.size(1), D = C / H;
    auto heads = [&](const Tensor &t) { return t.reshape({B, T, H, D}).transpose(1, 2); };  // [B, H, T, D]
    Tensor h = ln1->forward(x);
    Tensor a = nn::functional::scaled_dot_product_attention(heads(q->forward(h)), heads(k->forward(h)),
                                                            heads(v->forward(h)), Tensor(), is_training() ? attn_p : 0.0,
                                                            /*is_causal=*/true);
    Tensor y = x + nn::functional::dropout(proj->forward(a.transpose(1, 2).reshape({B, T, C})), p, is_training());
    return y + nn::functional::dropout(fc2->forward(gelu(fc1->forward(ln2->forward(y)), "tanh")), p, is_training());
  }
  std::string name() const override { return "TinyBlock"; }
};

/// A tiny character-level GPT: token + position embeddings, two TinyBlocks,
/// final LayerNorm and a linear head -> logits [B*T, V].
struct TinyGPT : nn::Module {
  int64_t V, T, C;
  std::shared_ptr<nn::Embedding> tok;
  Tensor pos;
  std::shared_ptr<TinyBlock> b1, b2;
  std::shared_ptr<nn::LayerNorm> ln;
  std::shared_ptr<nn::Linear> head;
  TinyGPT(int64_t vocab, int64_t context, int64_t channels) : V(vocab), T(context), C(channels) {
    tok = register_module("tok", std::make_shared<nn::Embedding>(V, C));
    pos = register_parameter("pos", randn({T, C}) * 0.1);
    b1 = register_module("b1", std::make_shared<TinyBlock>(C, 2));
    b2 = register_module("b2", std::make_shared<TinyBlock>(C, 2));
    ln = register_module("ln", std::make_shared<nn::LayerNorm>(Shape{C}));
    head = register_module("head", std::make_shared<nn::Linear>(C, V));
  }
  Tensor forward(const Tensor &ids) override {
    Tensor x = tok->forward(ids) + pos;
    x = b2->forward(b1->forward(x));
    return head->forward(ln->forward(x)).reshape({-1, V});
  }
  std::string name() const override { return "TinyGPT"; }
};

}  // namespace kiln::test_models
