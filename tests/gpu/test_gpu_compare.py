"""The trusted comparison on the device (``cudagym/harness/compare.py``): a passing output is read chunk by chunk
on cuda too, and gives the full path's fields, field for field (the cpu twin: ``tests/harness/test_compare.py``)."""

from __future__ import annotations

import json

import pytest
import torch

from cudagym.backends import query_gpu
from cudagym.harness import compare

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(query_gpu() is None, reason="no NVIDIA GPU visible (nvidia-smi)"),
]


def _both_paths(monkeypatch: pytest.MonkeyPatch, run: object) -> tuple[str, str]:
    """``run()`` chunk by chunk (small chunks: many parts), then by the full path alone, as JSON."""
    monkeypatch.setitem(compare.CHUNK_ELEMENTS, "cuda", 1000)
    chunked = json.dumps(run(), sort_keys=True)  # type: ignore[operator]
    monkeypatch.setattr(compare, "_passing_figures", lambda *args: None)
    monkeypatch.setattr(compare, "_within_bound", lambda *args: None)
    return chunked, json.dumps(run(), sort_keys=True)  # type: ignore[operator]


@pytest.mark.parametrize("case", ["noise", "below", "mismatch", "nan"])
def test_the_chunked_comparison_on_the_device_gives_the_full_paths_fields(
    case: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    gen = torch.Generator(device="cuda").manual_seed(7)
    a = torch.randn(96, 128, device="cuda", generator=gen)
    b = torch.randn(128, 80, device="cuda", generator=gen) / 16
    exp64 = a.double() @ b.double()
    monkeypatch.setattr(torch.backends.cuda.matmul, "allow_tf32", False)  # the fp32 reference in plain fp32
    exp32 = a @ b
    act = exp32 + exp32 * 1e-7
    if case == "below":
        act = (exp64 - exp64.abs() * 3e-7).float()
    elif case == "mismatch":
        act = act.clone()
        act[50, 3] += 1.0
    elif case == "nan":
        act = act.clone()
        act[5, 5] = float("nan")
    tolerance = _both_paths(monkeypatch, lambda: compare.compare_outputs(exp32, act, 1e-3, 1e-3, 0))
    assert tolerance[0] == tolerance[1]
    monkeypatch.undo()
    precision = _both_paths(monkeypatch, lambda: compare.compare_precision([exp32], [exp64], [act], "fp32"))
    assert precision[0] == precision[1]
    assert json.loads(tolerance[0])["passed"] == (case in ("noise", "below"))
