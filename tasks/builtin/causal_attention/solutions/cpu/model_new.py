import torch
import torch.nn as nn

import cuda_extension


class ModelNew(nn.Module):
    """Causal attention through a custom OpenMP kernel."""

    def __init__(self):
        super().__init__()

    def forward(self, q, k, v):
        return cuda_extension.causal_attention_forward(q.contiguous(), k.contiguous(), v.contiguous())
