import torch
import torch.nn as nn

import cuda_extension


class ModelNew(nn.Module):
    """clamp(gelu(x * w + b), max=1.5) fused into one CUDA kernel."""

    def __init__(self, features):
        super().__init__()
        self.w = nn.Parameter(torch.ones(features))
        self.b = nn.Parameter(torch.zeros(features))

    def forward(self, x):
        return cuda_extension.affine_gelu_clamp_forward(x.contiguous(), self.w, self.b, 1.5)
