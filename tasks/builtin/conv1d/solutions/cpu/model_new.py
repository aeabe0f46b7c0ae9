import torch
import torch.nn as nn

import cuda_extension


class ModelNew(nn.Module):
    """Conv1d (stride 1) through a custom OpenMP kernel."""

    def __init__(self, in_channels, out_channels, kernel_size):
        super().__init__()
        self.conv = nn.Conv1d(in_channels, out_channels, kernel_size, padding=kernel_size // 2)

    def forward(self, x):
        return cuda_extension.conv1d_forward(x.contiguous(), self.conv.weight, self.conv.bias, self.conv.padding[0])
