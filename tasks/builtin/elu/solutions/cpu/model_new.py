import cuda_extension
import torch.nn as nn


class ModelNew(nn.Module):
    """ELU through a custom vectorised OpenMP kernel."""

    def __init__(self):
        super().__init__()

    def forward(self, x):
        return cuda_extension.elu_forward(x.contiguous())
