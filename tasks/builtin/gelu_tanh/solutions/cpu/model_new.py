import cuda_extension
import torch.nn as nn


class ModelNew(nn.Module):
    """tanh-GELU through a custom vectorised OpenMP kernel."""

    def __init__(self):
        super().__init__()

    def forward(self, x):
        return cuda_extension.gelu_tanh_forward(x.contiguous())
