import cuda_extension
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    """gelu(x + bias) + residual fused into one custom kernel."""

    def __init__(self, features):
        super().__init__()
        self.bias = nn.Parameter(torch.zeros(features))

    def forward(self, x, residual):
        return cuda_extension.bias_gelu_residual_forward(x.contiguous(), self.bias, residual.contiguous())
