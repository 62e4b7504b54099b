"""bench/models/cnn.cpp (examples/models/cnn.h) in PyTorch: DigitsCNN C=16 on [128, 1, 8, 8]."""
import torch
from torch import nn
import torch.nn.functional as F

DESCRIPTION = "DigitsCNN (C=16): conv-BN-ReLU, residual block, max/avg pool; [128, 1, 8, 8], AdamW 1e-3"


class ConvBN(nn.Module):
    def __init__(self, cin, cout, relu):
        super().__init__()
        self.conv, self.bn, self.relu = nn.Conv2d(cin, cout, 3, padding=1, bias=False), nn.BatchNorm2d(cout), relu

    def forward(self, x):
        y = self.bn(self.conv(x))
        return F.relu(y) if self.relu else y


class ResidualBlock(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.conv1, self.conv2 = ConvBN(c, c, True), ConvBN(c, c, False)

    def forward(self, x):
        return F.relu(x + self.conv2(self.conv1(x)))


class DigitsCNN(nn.Module):
    def __init__(self, c=16):
        super().__init__()
        self.stem, self.block = ConvBN(1, c, True), ResidualBlock(c)
        self.widen, self.head = ConvBN(c, 2 * c, True), nn.Linear(2 * c, 10)

    def forward(self, x):
        h = F.max_pool2d(self.block(self.stem(x)), 2)
        return self.head(F.avg_pool2d(self.widen(h), 4).flatten(1))


def make_model():
    return DigitsCNN(16)


def make_batch():
    return torch.rand(128, 1, 8, 8), torch.randint(0, 10, (128,))
