import torch
import torch.nn as nn

import cuda_extension


class ModelNew(nn.Module):
    """Batched matmul through one 3xTF32 tensor-core (fp32-level accuracy) CUDA kernel."""

    def __init__(self):
        super().__init__()

    def forward(self, a, b):
        return cuda_extension.bmm_forward(a.contiguous(), b.contiguous())
