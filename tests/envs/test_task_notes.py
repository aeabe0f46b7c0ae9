"""What ``reset`` says beyond the instructions: a task whose tensors cannot fit the backend's memory gets a warning in
the log, in ``info`` and at the top of the first observation (never an exception); the estimate is cheap and cached."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from cudagym import footprint
from cudagym.envs import CudaKernelEnv
from cudagym.tasks import Task, TaskMetadata, TaskSet

SOURCE = """import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, features):
        super().__init__()
        self.linear = nn.Linear(features, 2 * features)

    def forward(self, x, shift):
        return torch.relu(self.linear(x)) + shift[:, None]


batch_size = 100
features = 10


def get_inputs():
    return [torch.randn(batch_size, features), torch.randint(0, 4, (batch_size,))]


def get_init_inputs():
    return [features]
"""
TASK = Task(id="notes/linear_relu", name="linear relu", source=SOURCE, metadata=TaskMetadata())


def test_the_estimate_runs_on_meta_and_is_cached(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(footprint, "_KNOWN", {})
    found = footprint.task_bytes(TASK, "cpu", tmp_path)
    # inputs: 100x10 floats and 100 int64 indices; output: 100x20 floats (the model ran on meta: shapes only)
    assert found == footprint.TaskBytes(input_bytes=100 * 10 * 4 + 100 * 8, output_bytes=100 * 20 * 4)
    assert len(list((tmp_path / "footprints").glob("*.json"))) == 1
    monkeypatch.setattr(footprint, "_KNOWN", {})
    monkeypatch.setattr(footprint, "_estimate", lambda *_: pytest.fail("the cached estimate was not used"))
    assert footprint.task_bytes(TASK, "cpu", tmp_path) == found


def test_a_model_meta_cannot_run_counts_its_inputs_and_extra_packages_give_none(tmp_path: Path) -> None:
    broken = SOURCE.replace("+ shift[:, None]", "+ shift[:, None].cpu().numpy()")
    bytes_only_inputs = footprint.task_bytes(Task(id="notes/numpy", name="n", source=broken), "cpu", tmp_path)
    assert bytes_only_inputs is not None and bytes_only_inputs.output_bytes is None
    assert bytes_only_inputs.total == 100 * 10 * 4 + 100 * 8
    needs = Task(id="notes/hf", name="hf", source=SOURCE, metadata=TaskMetadata(requires=("transformers",)))
    assert footprint.task_bytes(needs, "cpu", tmp_path) is None


def test_reset_warns_when_the_tensors_cannot_fit(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setattr(footprint, "available_memory", lambda backend: 1000)
    env = CudaKernelEnv(TaskSet("notes", [TASK]), backend="cpu", cache_dir=str(tmp_path))
    try:
        with caplog.at_level(logging.WARNING, logger="cudagym.task_notes"):
            obs, info = env.reset()
        warning = info["memory_warning"]
        assert warning and "needs at least" in warning and "batch_size=100, features=10" in warning
        assert obs.startswith(f"Note: {warning}") and warning in caplog.text
        assert info["input_kinds"] is None and info["degenerate"] is None  # never probed with this cache
    finally:
        env.close()
    monkeypatch.setattr(footprint, "available_memory", lambda backend: 10**12)
    env = CudaKernelEnv(TaskSet("notes", [TASK]), backend="cpu", cache_dir=str(tmp_path))
    try:
        obs, info = env.reset()
        assert info["memory_warning"] is None and obs.startswith("# Task: linear relu")
    finally:
        env.close()


def test_available_memory_reads_the_host() -> None:
    from cudagym.backends import resolve_backend

    available = footprint.available_memory(resolve_backend("cpu"))
    assert available is not None and available > 0
