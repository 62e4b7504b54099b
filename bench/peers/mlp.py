"""bench/models/mlp.cpp in PyTorch: digits MLP 64-128-10, batch 512, AdamW 1e-3."""
import torch
from torch import nn

DESCRIPTION = "digits MLP 64-128-10, batch 512, AdamW 1e-3"


def make_model():
    return nn.Sequential(nn.Linear(64, 128), nn.ReLU(), nn.Linear(128, 10))


def make_batch():
    return torch.rand(512, 64), torch.randint(0, 10, (512,))
