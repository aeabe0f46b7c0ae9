import cuda_extension
import torch.nn as nn


class ModelNew(nn.Module):
    """Row standardisation + ReLU in one custom kernel (one read of each row from memory)."""

    def __init__(self):
        super().__init__()
        self.eps = 1e-5

    def forward(self, x):
        return cuda_extension.row_standardize_relu_forward(x.contiguous(), self.eps)
