import cuda_extension
import torch.nn as nn


class ModelNew(nn.Module):
    """Row-wise softmax through a one-read CUDA kernel."""

    def __init__(self):
        super().__init__()

    def forward(self, x):
        return cuda_extension.softmax_forward(x.contiguous())
