import torch
import torch.nn as nn

import cuda_extension


class ModelNew(nn.Module):
    """gelu(x @ W^T + b) in one TF32 tensor-core CUDA kernel; self.linear only holds W and b (it is never called)."""

    def __init__(self, in_features, out_features):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)

    def forward(self, x):
        return cuda_extension.gemm_bias_gelu_forward(x.contiguous(), self.linear.weight, self.linear.bias)
