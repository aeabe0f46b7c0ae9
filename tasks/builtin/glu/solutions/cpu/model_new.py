import cuda_extension
import torch.nn as nn


class ModelNew(nn.Module):
    """GLU (split, sigmoid, multiply) fused into one custom kernel."""

    def __init__(self):
        super().__init__()

    def forward(self, x):
        return cuda_extension.glu_forward(x.contiguous())
