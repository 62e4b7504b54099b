"""bench/models/gpt.cpp (examples/models/gpt.h) in PyTorch: GPT 2 layers, d_model 128, 4 heads,
vocab 96, context 64, dropout 0; tokens [16, 64], next-token cross-entropy, AdamW 1e-3."""
import math

import torch
from torch import nn
import torch.nn.functional as F

DESCRIPTION = "GPT 2 layers, d_model 128, 4 heads, vocab 96, dropout 0; tokens [16, 64], AdamW 1e-3"
VOCAB, BATCH, CONTEXT, LAYERS, D, HEADS = 96, 16, 64, 2, 128, 4


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.ln_1, self.ln_2 = nn.LayerNorm(D), nn.LayerNorm(D)
        self.q, self.k, self.v, self.out = (nn.Linear(D, D) for _ in range(4))
        self.fc, self.proj = nn.Linear(D, 4 * D), nn.Linear(4 * D, D)

    def forward(self, x):
        B, T, _ = x.shape
        h = self.ln_1(x)
        heads = lambda t: t.view(B, T, HEADS, D // HEADS).transpose(1, 2)  # noqa: E731
        y = F.scaled_dot_product_attention(heads(self.q(h)), heads(self.k(h)), heads(self.v(h)), is_causal=True)
        x = x + self.out(y.transpose(1, 2).reshape(B, T, D))
        return x + self.proj(F.gelu(self.fc(self.ln_2(x)), approximate="tanh"))


class GPT(nn.Module):
    def __init__(self):
        super().__init__()
        self.wte, self.wpe = nn.Embedding(VOCAB, D), nn.Embedding(CONTEXT, D)
        self.h = nn.ModuleList(Block() for _ in range(LAYERS))
        self.ln_f, self.lm_head = nn.LayerNorm(D), nn.Linear(D, VOCAB, bias=False)
        for m in self.modules():  # nanoGPT's init, as examples/models/gpt.h
            if isinstance(m, (nn.Linear, nn.Embedding)):
                nn.init.normal_(m.weight, 0.0, 0.02)
            if isinstance(m, nn.Linear) and m.bias is not None:
                nn.init.zeros_(m.bias)
        for b in self.h:
            for w in (b.out.weight, b.proj.weight):
                nn.init.normal_(w, 0.0, 0.02 / math.sqrt(2 * LAYERS))

    def forward(self, idx):
        x = self.wte(idx) + self.wpe(torch.arange(idx.size(1)))
        for block in self.h:
            x = block(x)
        return self.lm_head(self.ln_f(x))


def make_model():
    return GPT()


def make_batch():
    return torch.randint(0, VOCAB, (BATCH, CONTEXT)), torch.randint(0, VOCAB, (BATCH, CONTEXT))
