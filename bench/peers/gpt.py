"""bench/models/gpt.cpp (examples/models/gpt.h) in PyTorch: GPT 2 layers, d_model 128, 4 heads,
vocab 96, context 64, dropout 0; tokens [16, 64], next-token cross-entropy, AdamW 1e-3."""
import math

import torch
from torch import nn
import torch.nn.functional as F

DESCRIPTION = "GPT 2 layers, d_model 128, 4 heads, vocab 96, dropout 0; tokens [16, 64], AdamW 1e-3"
VOCAB, BATCH, CONTEXT, LAYERS, D, HEADS = 96, 16, 64, 2, 128, 4


class Block(nn.Module):
    """Pre-LN transformer block of width d with h heads (causal attention, tanh GELU MLP)."""

    def __init__(self, d=D, h=HEADS):
        super().__init__()
        self.heads = h
        self.ln_1, self.ln_2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.q, self.k, self.v, self.out = (nn.Linear(d, d) for _ in range(4))
        self.fc, self.proj = nn.Linear(d, 4 * d), nn.Linear(4 * d, d)

    def forward(self, x):
        B, T, d = x.shape
        h = self.ln_1(x)
        heads = lambda t: t.view(B, T, self.heads, d // self.heads).transpose(1, 2)  # noqa: E731
        y = F.scaled_dot_product_attention(heads(self.q(h)), heads(self.k(h)), heads(self.v(h)), is_causal=True)
        x = x + self.out(y.transpose(1, 2).reshape(B, T, d))
        return x + self.proj(F.gelu(self.fc(self.ln_2(x)), approximate="tanh"))


class GPT(nn.Module):
    """examples/models/gpt.h in PyTorch: token [B, T] -> logits [B, T, vocab]
    (also bench/gpu/torch_peer.py's model, at GPT-2 sizes on the GPU)."""

    def __init__(self, vocab=VOCAB, context=CONTEXT, layers=LAYERS, d=D, heads=HEADS):
        super().__init__()
        self.wte, self.wpe = nn.Embedding(vocab, d), nn.Embedding(context, d)
        self.h = nn.ModuleList(Block(d, heads) for _ in range(layers))
        self.ln_f, self.lm_head = nn.LayerNorm(d), nn.Linear(d, vocab, bias=False)
        for m in self.modules():  # nanoGPT's init, as examples/models/gpt.h
            if isinstance(m, (nn.Linear, nn.Embedding)):
                nn.init.normal_(m.weight, 0.0, 0.02)
            if isinstance(m, nn.Linear) and m.bias is not None:
                nn.init.zeros_(m.bias)
        for b in self.h:
            for w in (b.out.weight, b.proj.weight):
                nn.init.normal_(w, 0.0, 0.02 / math.sqrt(2 * layers))

    def forward(self, idx):
        x = self.wte(idx) + self.wpe(torch.arange(idx.size(1), device=idx.device))
        for block in self.h:
            x = block(x)
        return self.lm_head(self.ln_f(x))


def make_model():
    return GPT()


def make_batch():
    return torch.randint(0, VOCAB, (BATCH, CONTEXT)), torch.randint(0, VOCAB, (BATCH, CONTEXT))
