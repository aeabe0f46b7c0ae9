import cuda_extension
import torch.nn as nn


class ModelNew(nn.Module):
    """clamp(sigmoid(x) * x, -0.2, 2.0) fused into one custom kernel."""

    def __init__(self):
        super().__init__()

    def forward(self, x):
        return cuda_extension.silu_clamp_forward(x.contiguous(), -0.2, 2.0)
