"""bench/models/mixer.cpp in PyTorch: MLP-Mixer, 4x4 patches of 3x32x32, 64 tokens, 128 channels,
4 blocks; batch 64, AdamW 1e-3."""
import torch
from torch import nn

DESCRIPTION = "MLP-Mixer, 4x4 patches of 3x32x32, 64 tokens, 128 channels, 4 blocks; batch 64, AdamW 1e-3"
PATCH, TOKENS, CHANNELS, BLOCKS = 4, 64, 128, 4


def mlp(d, hidden):
    return nn.Sequential(nn.Linear(d, hidden), nn.GELU(), nn.Linear(hidden, d))


class MixerBlock(nn.Module):
    def __init__(self):
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(CHANNELS), nn.LayerNorm(CHANNELS)
        self.token_mlp, self.channel_mlp = mlp(TOKENS, 2 * TOKENS), mlp(CHANNELS, 4 * CHANNELS)

    def forward(self, x):
        h = x + self.token_mlp(self.ln1(x).transpose(1, 2)).transpose(1, 2)
        return h + self.channel_mlp(self.ln2(h))


class Mixer(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = nn.Linear(3 * PATCH * PATCH, CHANNELS)
        self.blocks = nn.Sequential(*(MixerBlock() for _ in range(BLOCKS)))
        self.ln, self.head = nn.LayerNorm(CHANNELS), nn.Linear(CHANNELS, 10)

    def forward(self, images):
        B, n = images.size(0), 32 // PATCH
        patches = images.reshape(B, 3, n, PATCH, n, PATCH).permute(0, 2, 4, 1, 3, 5)
        x = self.embed(patches.reshape(B, TOKENS, 3 * PATCH * PATCH))
        return self.head(self.ln(self.blocks(x)).mean(1))


def make_model():
    return Mixer()


def make_batch():
    return torch.randn(64, 3, 32, 32), torch.randint(0, 10, (64,))
