import torch
import torch.nn as nn


class Model(nn.Module):
    """1-D convolution, kernel 5, stride 1, padding 2, with bias."""

    def __init__(self, in_channels, out_channels, kernel_size):
        super().__init__()
        self.conv = nn.Conv1d(in_channels, out_channels, kernel_size, padding=kernel_size // 2)

    def forward(self, x):
        return self.conv(x)


N = 4
C_IN = 64
C_OUT = 128
L = 1024


def get_inputs():
    return [torch.randn(N, C_IN, L)]


def get_init_inputs():
    return [C_IN, C_OUT, 5]
