import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    """Causal scaled dot-product attention: each query attends to keys at or before its position."""

    def __init__(self):
        super().__init__()

    def forward(self, q, k, v):
        return F.scaled_dot_product_attention(q, k, v, is_causal=True)


B = 1
H = 8
S = 512
DH = 64


def get_inputs():
    return [torch.randn(B, H, S, DH) * 3.0, torch.randn(B, H, S, DH), torch.randn(B, H, S, DH)]


def get_init_inputs():
    return []
