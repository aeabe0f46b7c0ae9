import cuda_extension
import torch.nn as nn


class ModelNew(nn.Module):
    """ReLU on the GPU through a custom vectorised CUDA kernel."""

    def __init__(self):
        super().__init__()

    def forward(self, x):
        return cuda_extension.relu_forward(x.contiguous())
