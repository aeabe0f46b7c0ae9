import cuda_extension
import torch.nn as nn


class ModelNew(nn.Module):
    """Row sums through a custom warp-per-row CUDA kernel."""

    def __init__(self):
        super().__init__()

    def forward(self, x):
        return cuda_extension.sum_last_dim_forward(x.contiguous())
