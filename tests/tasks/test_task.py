"""A task's expected tiers: the backend's, and a device's where its measured tier differs."""

from __future__ import annotations

from cudagym.tasks import load
from cudagym.tasks.task import Task


def test_a_device_key_overrides_the_backend_tier_on_that_device_only() -> None:
    task = Task(id="t/x", name="x", source="", expected_tiers={"cpu": 1, "cuda": 3, "cuda:H100": 2})
    assert task.expected_tier("cuda", "NVIDIA H200") == 3
    assert task.expected_tier("cuda", "NVIDIA H100 80GB HBM3") == 2
    assert task.expected_tier("cuda", "NVIDIA H100H") == 3  # a word of the name, not a part of one
    assert task.expected_tier("cuda") == 3
    assert task.expected_tier("cpu", "NVIDIA H100 80GB HBM3") == 1  # the device key is cuda's
    assert task.expected_tier("rocm", "MI300X") == 1  # nothing known: correct is what is expected


def test_builtin_tasks_read_device_keys_from_task_toml() -> None:
    argmax = load("builtin", ids=["builtin/argmax_last_dim"])[0]
    assert argmax.expected_tiers["cuda:H100"] == 2
    assert argmax.expected_tier("cuda", "NVIDIA H200") == 3
    assert argmax.expected_tier("cuda", "NVIDIA H100 80GB HBM3") == 2
    for task in load("builtin"):
        for key, tier in task.expected_tiers.items():
            backend, _, device = key.partition(":")
            assert backend in ("cpu", "cuda") and 1 <= tier <= 3, (task.id, key)
            if device:
                assert tier <= task.expected_tiers[backend], (task.id, key)  # a device key only says what is lower
