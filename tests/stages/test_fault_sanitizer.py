"""Which CUDA faults ``compute-sanitizer`` is asked to locate (``stages.faults.cuda_fault``, where the env's
``fault_sanitizer`` asks for it): an access fault gets a run of its own under the tool; running out of device memory
does not (no access went astray, and a run under memcheck would only ask the device for more of what it lacked)."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from cudagym.evaluator import EvalConfig
from cudagym.results import CompileResult, KernelResources, Stage, Status
from cudagym.stages import faults

COMPILED = CompileResult(Stage.COMPILE, Status.OK, "", 0.0, kernels=(KernelResources("relu_kernel"),))


@pytest.fixture
def sanitizer_runs(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    runs: list[str] = []
    monkeypatch.setattr(faults, "sanitizes_faults", lambda config, backend: True)
    monkeypatch.setattr(faults, "sanitize", lambda ev, workspace, compiled: runs.append("run") or "finding")
    return runs


def fault_of(output: str) -> Any:
    ev = SimpleNamespace(config=EvalConfig(fault_sanitizer=True), backend=SimpleNamespace(is_cuda=True))
    return faults.cuda_fault(ev, None, COMPILED, SimpleNamespace(messages=[]), output)  # type: ignore[arg-type]


def test_an_access_fault_is_located(sanitizer_runs: list[str]) -> None:
    fault = fault_of("RuntimeError: CUDA error: an illegal memory access was encountered")
    assert fault.kind == "illegal memory access" and fault.sanitizer == "finding"
    assert fault.kernels == ("relu_kernel",)
    assert sanitizer_runs == ["run"]


def test_running_out_of_device_memory_is_not_sent_to_the_sanitizer(sanitizer_runs: list[str]) -> None:
    fault = fault_of("RuntimeError: CUDA error: out of memory")
    assert fault.kind == "out of memory" and fault.sanitizer == ""
    assert fault.kernels == ("relu_kernel",)
    assert sanitizer_runs == []
