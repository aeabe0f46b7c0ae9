import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    """Applies LeakyReLU with negative slope 0.01 elementwise."""

    def __init__(self):
        super().__init__()

    def forward(self, x):
        return F.leaky_relu(x, negative_slope=0.01)


N = 6291456


def get_inputs():
    return [torch.randn(N)]


def get_init_inputs():
    return []
