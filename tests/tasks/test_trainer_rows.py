"""Task sets as trainer rows: ``to_rows`` and ``to_hf_dataset`` give one row per task with the prompt an episode of
that task starts with (as ``ChatMessages`` shows it), its id and plain information."""

from __future__ import annotations

import pytest

from cudagym.envs import CudaKernelEnv
from cudagym.tasks import load, to_hf_dataset, to_rows
from cudagym.wrappers import ChatMessages, to_hf

INFO_KEYS = {"task_set", "name", "level", "ops", "source", "precision", "backend"}


def test_rows_hold_the_prompt_an_episode_starts_with() -> None:
    rows = to_rows("builtin", backend="cpu", max_turns=50, ids=["builtin/relu", "builtin/softmax"])
    assert [row["task_id"] for row in rows] == ["builtin/relu", "builtin/softmax"]
    env = ChatMessages(CudaKernelEnv(backend="cpu", max_turns=50))
    try:
        for row in rows:
            observation, _ = env.reset(options={"task_id": row["task_id"]})
            assert row["prompt"] == to_hf(observation)
            assert set(row["info"]) == INFO_KEYS and row["info"]["backend"] == "cpu"
            assert row["info"]["task_set"] == "builtin" and row["info"]["precision"] == "fp32"
    finally:
        env.close()


def test_a_dataset_of_every_builtin_task() -> None:
    pytest.importorskip("datasets")
    dataset = to_hf_dataset("builtin", backend="cpu")
    tasks = load("builtin")
    assert dataset.column_names == ["prompt", "task_id", "info"] and len(dataset) == len(tasks)
    assert dataset["task_id"] == list(tasks.ids)
    first = dataset[0]
    assert [m["role"] for m in first["prompt"]] == ["system", "user"]
    assert first["prompt"][1]["content"].startswith("## model.py\n") and "class Model" in first["prompt"][1]["content"]
    assert set(first["info"]) == INFO_KEYS and first["info"]["ops"] == list(tasks[0].metadata.ops)


def test_task_objects_and_options() -> None:
    tasks = load("builtin", ids="builtin/relu")
    assert [row["task_id"] for row in to_rows(tasks, backend="cpu")] == ["builtin/relu"]
    assert to_rows(list(tasks), backend="cpu")[0]["info"]["task_set"] == "custom"
    with pytest.raises(TypeError, match="options"):
        to_rows(tasks, backend="cpu", level=1)
    with pytest.raises(TypeError, match="unknown option"):
        to_rows("builtin", backend="cpu", levle=1)
