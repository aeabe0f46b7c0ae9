import torch
import torch.nn as nn

import cuda_extension


class ModelNew(nn.Module):
    """Row prefix sums through a CUB block-scan CUDA kernel."""

    def __init__(self):
        super().__init__()

    def forward(self, x):
        return cuda_extension.cumsum_forward(x.contiguous())
