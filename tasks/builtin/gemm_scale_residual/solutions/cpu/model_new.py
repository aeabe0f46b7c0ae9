import torch
import torch.nn as nn

import cuda_extension


class ModelNew(nn.Module):
    """(x @ W^T + b) * scale + x through a custom OpenMP kernel."""

    def __init__(self, features, scale):
        super().__init__()
        self.linear = nn.Linear(features, features)
        self.scale = scale

    def forward(self, x):
        return cuda_extension.gemm_scale_residual_forward(
            x.contiguous(), self.linear.weight, self.linear.bias, self.scale
        )
