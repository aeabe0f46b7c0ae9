import cuda_extension
import torch.nn as nn


class ModelNew(nn.Module):
    """relu(x @ W^T + b) in one custom kernel; self.linear only holds W and b (it is never called)."""

    def __init__(self, in_features, out_features):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)

    def forward(self, x):
        return cuda_extension.gemm_bias_relu_forward(x.contiguous(), self.linear.weight, self.linear.bias)
