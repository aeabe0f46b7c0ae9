import torch
import torch.nn as nn

import cuda_extension


class ModelNew(nn.Module):
    """rmsnorm(x) * weight * silu(gate) through a custom OpenMP kernel."""

    def __init__(self, dim):
        super().__init__()
        self.eps = 1e-6
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x, gate):
        return cuda_extension.rmsnorm_swiglu_forward(x.contiguous(), gate.contiguous(), self.weight, self.eps)
