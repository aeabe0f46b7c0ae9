import cuda_extension
import torch.nn as nn


class ModelNew(nn.Module):
    """Sigmoid through a custom vectorised OpenMP kernel."""

    def __init__(self):
        super().__init__()

    def forward(self, x):
        return cuda_extension.sigmoid_forward(x.contiguous())
