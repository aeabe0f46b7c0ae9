import torch
import torch.nn as nn

import cuda_extension


class ModelNew(nn.Module):
    """Row-wise log-softmax through a one-read CUDA kernel."""

    def __init__(self):
        super().__init__()

    def forward(self, x):
        return cuda_extension.log_softmax_forward(x.contiguous())
