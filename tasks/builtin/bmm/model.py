import torch
import torch.nn as nn


class Model(nn.Module):
    """Batched matrix multiplication: y[i] = a[i] @ b[i]."""

    def __init__(self):
        super().__init__()

    def forward(self, a, b):
        return torch.bmm(a, b)


BATCH = 16
M = 128
K = 256
N = 256


def get_inputs():
    return [torch.randn(BATCH, M, K), torch.randn(BATCH, K, N)]


def get_init_inputs():
    return []
