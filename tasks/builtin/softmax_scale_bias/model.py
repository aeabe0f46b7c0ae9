import torch
import torch.nn as nn


class Model(nn.Module):
    """Scaled logits, additive per-position bias, softmax: y = softmax(x * 0.125 + bias, dim=-1)."""

    def __init__(self, dim):
        super().__init__()
        self.bias = nn.Parameter(torch.randn(dim))
        self.scale = 0.125

    def forward(self, x):
        return torch.softmax(x * self.scale + self.bias, dim=-1)


B = 4096
D = 1024


def get_inputs():
    return [torch.randn(B, D) * 16.0]


def get_init_inputs():
    return [D]
