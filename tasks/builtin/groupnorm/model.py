import torch
import torch.nn as nn


class Model(nn.Module):
    """GroupNorm with learned per-channel affine parameters on an NCHW tensor."""

    def __init__(self, groups, channels):
        super().__init__()
        self.gn = nn.GroupNorm(groups, channels, eps=1e-5)
        with torch.no_grad():  # non-trivial affine parameters
            self.gn.weight.uniform_(0.5, 1.5)
            self.gn.bias.uniform_(-0.5, 0.5)

    def forward(self, x):
        return self.gn(x)


N = 16
G = 32
C = 256
H = 32
W = 32


def get_inputs():
    return [torch.randn(N, C, H, W) * 2.0 + 1.0]


def get_init_inputs():
    return [G, C]
