"""The transport helpers that do not need a GPU: poisoning, NaN-aware equality, input descriptions.

The CUDA IPC path itself (shared buffers, mapping in the candidate) runs in tests/gpu.
"""

from __future__ import annotations

import torch

from cudagym.harness.transfer import encode_items, poison, same_values


def test_poisoned_buffers_differ_from_the_expected_values_everywhere() -> None:
    expected = {
        torch.float32: torch.randn(64),
        torch.int64: torch.arange(64),
        torch.bool: torch.arange(64) % 3 == 0,
        torch.uint8: torch.arange(64, dtype=torch.uint8) * 4,
    }
    for dtype, values in expected.items():
        buffer = torch.empty_like(values)
        poison(buffer, values)
        if dtype.is_floating_point:
            assert torch.isnan(buffer).all()
        else:
            assert (buffer != values).all(), dtype


def test_same_values_treats_nan_as_equal_and_checks_dtype_and_shape() -> None:
    a = torch.tensor([1.0, float("nan"), 3.0])
    assert same_values(a, a.clone())
    assert not same_values(a, torch.tensor([1.0, float("nan"), 3.5]))
    assert not same_values(a, a.double())
    assert not same_values(a, a.reshape(3, 1))
    assert same_values(torch.arange(4), torch.arange(4))


def test_inputs_are_described_as_tensors_or_json_values() -> None:
    described = encode_items([torch.ones(2), 3, 0.5, None, "mean"], lambda t: {"shape": list(t.shape)})
    assert described == [{"tensor": {"shape": [2]}}, {"value": 3}, {"value": 0.5}, {"value": None}, {"value": "mean"}]
    assert encode_items([torch.ones(2), object()], lambda t: {}) is None  # such a set travels as a file
