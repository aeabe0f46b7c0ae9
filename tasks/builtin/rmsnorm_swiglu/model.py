import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    """RMSNorm of x gated by SiLU of a second input: y = rmsnorm(x) * weight * silu(gate)."""

    def __init__(self, dim):
        super().__init__()
        self.eps = 1e-6
        self.weight = nn.Parameter(torch.rand(dim) + 0.5)

    def forward(self, x, gate):
        normed = x * torch.rsqrt(x.pow(2).mean(dim=-1, keepdim=True) + self.eps) * self.weight
        return normed * F.silu(gate)


B = 3072
D = 2048


def get_inputs():
    return [torch.randn(B, D), torch.randn(B, D)]


def get_init_inputs():
    return [D]
