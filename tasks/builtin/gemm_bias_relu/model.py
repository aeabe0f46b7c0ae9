import torch
import torch.nn as nn


class Model(nn.Module):
    """Linear layer followed by ReLU: y = relu(x @ W^T + b)."""

    def __init__(self, in_features, out_features):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)

    def forward(self, x):
        return torch.relu(self.linear(x))


M = 256
K = 1024
N = 1024


def get_inputs():
    return [torch.randn(M, K)]


def get_init_inputs():
    return [K, N]
