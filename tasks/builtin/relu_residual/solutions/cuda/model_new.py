import cuda_extension
import torch.nn as nn


class ModelNew(nn.Module):
    """relu(x) + residual fused into one custom kernel."""

    def __init__(self):
        super().__init__()

    def forward(self, x, residual):
        return cuda_extension.relu_residual_forward(x.contiguous(), residual.contiguous())
