import torch
import torch.nn as nn


class Model(nn.Module):
    """LayerNorm over the last dimension, with a learned weight and bias."""

    def __init__(self, normalized_dim):
        super().__init__()
        self.ln = nn.LayerNorm(normalized_dim, eps=1e-5)
        with torch.no_grad():  # non-trivial affine parameters, so a solution has to apply them
            self.ln.weight.uniform_(0.5, 1.5)
            self.ln.bias.uniform_(-0.5, 0.5)

    def forward(self, x):
        return self.ln(x)


B = 3072
D = 2048


def get_inputs():
    return [torch.randn(B, D) * 2.0 + 0.5]


def get_init_inputs():
    return [D]
