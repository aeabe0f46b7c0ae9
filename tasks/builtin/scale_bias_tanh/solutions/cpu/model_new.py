import cuda_extension
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    """tanh(x * scale + bias) fused into one custom kernel."""

    def __init__(self, features):
        super().__init__()
        self.scale = nn.Parameter(torch.ones(features))
        self.bias = nn.Parameter(torch.zeros(features))

    def forward(self, x):
        return cuda_extension.scale_bias_tanh_forward(x.contiguous(), self.scale, self.bias)
