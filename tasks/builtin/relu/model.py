import torch
import torch.nn as nn


class Model(nn.Module):
    """Applies ReLU elementwise: y = max(x, 0)."""

    def __init__(self):
        super().__init__()

    def forward(self, x):
        return torch.relu(x)


N = 6291456


def get_inputs():
    return [torch.randn(N)]


def get_init_inputs():
    return []
