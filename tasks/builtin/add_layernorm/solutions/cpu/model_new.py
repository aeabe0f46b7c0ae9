import torch
import torch.nn as nn

import cuda_extension


class ModelNew(nn.Module):
    """LayerNorm(x + residual) through a custom OpenMP kernel."""

    def __init__(self, dim):
        super().__init__()
        self.ln = nn.LayerNorm(dim, eps=1e-5)

    def forward(self, x, residual):
        return cuda_extension.add_layernorm_forward(
            x.contiguous(), residual.contiguous(), self.ln.weight, self.ln.bias, self.ln.eps
        )
