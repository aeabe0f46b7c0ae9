import torch
import torch.nn as nn


class Model(nn.Module):
    """RMSNorm over the last dimension with a learned weight: x / sqrt(mean(x^2) + eps) * weight."""

    def __init__(self, dim):
        super().__init__()
        self.eps = 1e-6
        self.weight = nn.Parameter(torch.rand(dim) + 0.5)

    def forward(self, x):
        rms = torch.rsqrt(x.pow(2).mean(dim=-1, keepdim=True) + self.eps)
        return x * rms * self.weight


B = 3072
D = 2048


def get_inputs():
    return [torch.randn(B, D)]


def get_init_inputs():
    return [D]
