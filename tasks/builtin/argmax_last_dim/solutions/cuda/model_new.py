import torch
import torch.nn as nn

import cuda_extension


class ModelNew(nn.Module):
    """Row argmax through a warp-per-row CUDA kernel."""

    def __init__(self):
        super().__init__()

    def forward(self, x):
        return cuda_extension.argmax_last_dim_forward(x.contiguous())
