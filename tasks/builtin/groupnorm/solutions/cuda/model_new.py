import torch
import torch.nn as nn

import cuda_extension


class ModelNew(nn.Module):
    """GroupNorm through a statistics kernel and a fused normalise+affine kernel."""

    def __init__(self, groups, channels):
        super().__init__()
        self.gn = nn.GroupNorm(groups, channels, eps=1e-5)

    def forward(self, x):
        return cuda_extension.groupnorm_forward(
            x.contiguous(), self.gn.weight, self.gn.bias, self.gn.num_groups, self.gn.eps
        )
