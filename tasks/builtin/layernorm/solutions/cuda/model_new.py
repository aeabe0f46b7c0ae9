import cuda_extension
import torch.nn as nn


class ModelNew(nn.Module):
    """LayerNorm through a one-read CUDA kernel; self.ln only holds the weight and bias."""

    def __init__(self, normalized_dim):
        super().__init__()
        self.ln = nn.LayerNorm(normalized_dim, eps=1e-5)

    def forward(self, x):
        return cuda_extension.layernorm_forward(x.contiguous(), self.ln.weight, self.ln.bias, self.ln.eps)
