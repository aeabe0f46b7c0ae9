"""The trusted comparison on the device (``cudagym/harness/compare.py``): a passing output is read chunk by chunk
on cuda too, or by the reference process's comparison kernels (``gpulib``), and gives the full path's fields, field for
field (the cpu twin: ``tests/harness/test_compare.py``)."""

from __future__ import annotations

import json

import pytest
import torch

from cudagym.backends import query_gpu
from cudagym.harness import compare, gpulib

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


@pytest.fixture(scope="module")
def kernels(tmp_path_factory: pytest.TempPathFactory) -> gpulib.GpuLib:
    """The reference process's comparison kernels (``gpulib``), built for this device."""
    major, minor = torch.cuda.get_device_capability()
    library = gpulib.build(tmp_path_factory.mktemp("gpulib"), f"sm_{major}{minor}")
    return gpulib.GpuLib(library, torch.cuda.current_device())


def test_the_comparison_kernels_pass_the_self_check_every_reference_process_runs(kernels: gpulib.GpuLib) -> None:
    assert compare.fused_agrees(kernels, "cuda")
    assert compare.fused_agrees(kernels, "cuda", length=(1 << 26) + 5)  # many elements per thread of the grid


@pytest.mark.parametrize("case", ["noise", "below", "mismatch", "nan", "ties", "last element", "non-contiguous"])
def test_the_comparison_kernels_give_the_full_paths_fields(
    case: str, kernels: gpulib.GpuLib, monkeypatch: pytest.MonkeyPatch
) -> None:
    gen = torch.Generator(device="cuda").manual_seed(11)
    exp64 = torch.randn(5000, 1001, device="cuda", generator=gen, dtype=torch.float64)
    exp32 = exp64.float()
    act = exp32 + exp32 * 1e-7
    flat = act.view(-1)
    if case == "below":
        act = (exp64 - exp64.abs() * 3e-7).float()
    elif case == "mismatch":
        flat[2_500_000] += 1.0
    elif case == "nan":
        flat[4_999_999] = float("nan")
    elif case == "ties":  # the largest excess at three places: the first is the worst
        exp32.view(-1)[[17, 3_000_000, 5_000_000]] = 0.0
        flat[[17, 3_000_000, 5_000_000]] = 4e-4
    elif case == "last element":  # the largest excess in the very last element the grid reads
        exp32.view(-1)[-1] = 0.0
        flat[-1] = 5e-4
    elif case == "non-contiguous":  # the kernels do not take it: the chunked torch path answers
        exp32, exp64, act = exp32.t(), exp64.t(), act.t()
    with_kernels = json.dumps(compare.compare_outputs(exp32, act, 1e-3, 1e-3, 0, kernels), sort_keys=True)
    precise = json.dumps(compare.compare_precision([exp32], [exp64], [act], "fp32", kernels), sort_keys=True)
    monkeypatch.setattr(compare, "_passing_figures", lambda *args: None)
    monkeypatch.setattr(compare, "_within_bound", lambda *args: None)
    assert with_kernels == json.dumps(compare.compare_outputs(exp32, act, 1e-3, 1e-3, 0), sort_keys=True)
    assert precise == json.dumps(compare.compare_precision([exp32], [exp64], [act], "fp32"), sort_keys=True)
    fields = json.loads(with_kernels)
    assert fields["passed"] == (case not in ("mismatch", "nan"))
    if case == "ties":
        assert fields["worst_index"] == [0, 17]
    if case == "last element":
        assert fields["worst_index"] == [4999, 1000]
