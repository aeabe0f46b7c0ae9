import torch
import torch.nn as nn

import cuda_extension


class ModelNew(nn.Module):
    """Scaled dot-product attention through a custom OpenMP kernel."""

    def __init__(self):
        super().__init__()

    def forward(self, q, k, v):
        return cuda_extension.sdpa_forward(q.contiguous(), k.contiguous(), v.contiguous())
