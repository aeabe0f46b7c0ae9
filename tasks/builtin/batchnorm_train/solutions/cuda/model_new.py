import torch
import torch.nn as nn

import cuda_extension


class ModelNew(nn.Module):
    """Batch norm (batch statistics) through a partial-sums kernel and a fused normalise+affine kernel."""

    def __init__(self, channels):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(channels))
        self.bias = nn.Parameter(torch.zeros(channels))
        self.eps = 1e-5

    def forward(self, x):
        return cuda_extension.batchnorm_train_forward(x.contiguous(), self.weight, self.bias, self.eps)
