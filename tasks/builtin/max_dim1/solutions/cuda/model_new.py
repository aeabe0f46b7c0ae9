import torch
import torch.nn as nn

import cuda_extension


class ModelNew(nn.Module):
    """Max over dim 1 through a custom CUDA kernel."""

    def __init__(self):
        super().__init__()

    def forward(self, x):
        return cuda_extension.max_dim1_forward(x.contiguous())
