import torch
import torch.nn as nn

import cuda_extension


class ModelNew(nn.Module):
    """softmax(x * scale + bias) fused into one one-read CUDA kernel."""

    def __init__(self, dim):
        super().__init__()
        self.bias = nn.Parameter(torch.zeros(dim))
        self.scale = 0.125

    def forward(self, x):
        return cuda_extension.softmax_scale_bias_forward(x.contiguous(), self.bias, self.scale)
