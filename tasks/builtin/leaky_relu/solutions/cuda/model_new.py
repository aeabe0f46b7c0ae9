import cuda_extension
import torch.nn as nn


class ModelNew(nn.Module):
    """LeakyReLU (slope 0.01) on the GPU through a custom vectorised CUDA kernel."""

    def __init__(self):
        super().__init__()

    def forward(self, x):
        return cuda_extension.leaky_relu_forward(x.contiguous())
