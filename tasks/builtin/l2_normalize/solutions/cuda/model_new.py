import torch
import torch.nn as nn

import cuda_extension


class ModelNew(nn.Module):
    """Row L2 normalisation through a one-read CUDA kernel."""

    def __init__(self):
        super().__init__()

    def forward(self, x):
        return cuda_extension.l2_normalize_forward(x.contiguous())
