import torch
import torch.nn as nn

import cuda_extension


class ModelNew(nn.Module):
    """RMSNorm through a one-read CUDA kernel."""

    def __init__(self, dim):
        super().__init__()
        self.eps = 1e-6
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x):
        return cuda_extension.rmsnorm_forward(x.contiguous(), self.weight, self.eps)
