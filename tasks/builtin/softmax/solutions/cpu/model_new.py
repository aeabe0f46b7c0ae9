import cuda_extension
import torch.nn as nn


class ModelNew(nn.Module):
    """Row-wise softmax through a custom OpenMP kernel."""

    def __init__(self):
        super().__init__()

    def forward(self, x):
        return cuda_extension.softmax_forward(x.contiguous())
