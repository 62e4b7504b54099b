"""bench/models/bert.cpp in PyTorch: BERT-style encoder, 2 post-LN layers, d_model 128, 4 heads,
vocab 1000; ids [16, 64] padded, masked-token cross-entropy (ignore_index -100), AdamW 1e-3."""
import torch
from torch import nn
import torch.nn.functional as F

DESCRIPTION = ("BERT-style encoder, 2 post-LN layers, d_model 128, 4 heads, vocab 1000; ids [16, 64] padded, "
               "masked-token cross-entropy (ignore_index -100), AdamW 1e-3")
VOCAB, BATCH, LEN, D, HEADS, LAYERS, PAD, MASK = 1000, 16, 64, 128, 4, 2, 0, 1


class EncoderLayer(nn.Module):
    def __init__(self):
        super().__init__()
        self.attn = nn.MultiheadAttention(D, HEADS, batch_first=True)
        self.ln1, self.ln2 = nn.LayerNorm(D), nn.LayerNorm(D)
        self.fc1, self.fc2 = nn.Linear(D, 4 * D), nn.Linear(4 * D, D)

    def forward(self, x, key_padding_mask):
        h = self.ln1(x + self.attn(x, x, x, key_padding_mask=key_padding_mask, need_weights=False)[0])
        return self.ln2(h + self.fc2(F.gelu(self.fc1(h))))


class Encoder(nn.Module):
    def __init__(self):
        super().__init__()
        self.tok, self.pos = nn.Embedding(VOCAB, D, padding_idx=PAD), nn.Embedding(LEN, D)
        self.ln, self.head = nn.LayerNorm(D), nn.Linear(D, VOCAB)
        self.layers = nn.ModuleList(EncoderLayer() for _ in range(LAYERS))

    def forward(self, ids):
        padding = ids == PAD
        x = self.ln(self.tok(ids) + self.pos(torch.arange(ids.size(1))))
        for layer in self.layers:
            x = layer(x, padding)
        return self.head(x)


def make_model():
    return Encoder()


def make_batch():
    """Row b padded after 32 + (b * 13) % 33 tokens; 15% of the real tokens masked and predicted."""
    ids = torch.randint(2, VOCAB, (BATCH, LEN))
    real = torch.arange(LEN)[None, :] < (32 + (torch.arange(BATCH) * 13) % 33)[:, None]
    picked = real & (torch.rand(BATCH, LEN) < 0.15)
    target = torch.where(picked, ids, torch.full_like(ids, -100))
    ids = torch.where(picked, torch.full_like(ids, MASK), torch.where(real, ids, torch.full_like(ids, PAD)))
    return ids, target
