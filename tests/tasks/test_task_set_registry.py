"""``cudagym.tasks.load``: the new sets are registered, filters apply, unknown names are explained."""

from __future__ import annotations

from pathlib import Path

import pytest

import cudagym.tasks
from cudagym.tasks import registry
from cudagym.tasks.task import Task, TaskMetadata


def test_new_sets_are_registered() -> None:
    names = cudagym.tasks.registered_names()
    assert {"builtin", "kernelbench", "ops6k"} <= set(names)


def test_level_filter(kernelbench_dir: Path) -> None:
    level2 = cudagym.tasks.load("kernelbench", path=kernelbench_dir, level=2)
    assert len(level2) == 100
    assert {t.metadata.level for t in level2} == {2}
    both = cudagym.tasks.load("kernelbench", path=kernelbench_dir, level=[1, 2])
    assert len(both) == 200


def test_ids_filter(kernelbench_dir: Path) -> None:
    wanted = ["kernelbench/level2/1_Conv2D_ReLU_BiasAdd", "kernelbench/level1/19_ReLU"]
    tasks = cudagym.tasks.load("kernelbench", path=kernelbench_dir, ids=wanted)
    assert sorted(tasks.ids) == sorted(wanted)
    assert tasks.get("kernelbench/level1/19_ReLU").name == "19_ReLU"
    with pytest.raises(KeyError, match="unknown task ids"):
        cudagym.tasks.load("kernelbench", path=kernelbench_dir, ids=["kernelbench/level1/19_Relu"])


def test_names_and_ops_filters(kernelbench_dir: Path) -> None:
    conv3d = cudagym.tasks.load("kernelbench", path=kernelbench_dir, names="*Conv3d*")
    assert len(conv3d) > 5
    assert all("Conv3d" in t.name for t in conv3d)
    by_id = cudagym.tasks.load("kernelbench", path=kernelbench_dir, names=["kernelbench/level1/1?_*"])
    assert {t.metadata.extra["problem_id"] for t in by_id} == set(range(10, 20))
    relu = cudagym.tasks.load("kernelbench", path=kernelbench_dir, level=1, ops="torch.relu")
    assert "kernelbench/level1/19_ReLU" in relu.ids
    assert all("torch.relu" in t.metadata.ops for t in relu)
    convs = cudagym.tasks.load("kernelbench", path=kernelbench_dir, ops=["torch.nn.Conv*d"])
    assert len(convs) > 20
    assert all(any(op.startswith("torch.nn.Conv") for op in t.metadata.ops) for t in convs)


def test_filters_on_ops6k(ops6k_parquet: Path) -> None:
    tasks = cudagym.tasks.load("ops6k", path=ops6k_parquet, ops="torch.nn.*")
    assert tasks.ids == ("ops6k/0002", "ops6k/0003")
    assert cudagym.tasks.load("ops6k", path=ops6k_parquet, names="relu").ids == ("ops6k/0001",)
    assert len(cudagym.tasks.load("ops6k", path=ops6k_parquet, level=1)) == 0


def test_unknown_set_lists_names_and_closest_match() -> None:
    with pytest.raises(cudagym.tasks.TaskSetNotFound) as info:
        cudagym.tasks.load("kernelbnech")
    message = str(info.value)
    assert "no task set named 'kernelbnech'" in message
    assert "registered: " in message
    for name in ("builtin", "kernelbench", "ops6k"):
        assert name in message
    assert "Did you mean 'kernelbench'?" in message
    assert isinstance(info.value, KeyError)


def test_register_task_set_in_code(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(registry, "_LOADERS", dict(registry._LOADERS))
    seen = {}

    def loader(path: str | None = None, **options: object) -> list[Task]:
        seen.update(options, path=path)
        return [Task(id=f"mine/{i}", name=f"t{i}", source="", metadata=TaskMetadata(level=i)) for i in (1, 2)]

    cudagym.tasks.register_task_set("mine", loader)
    tasks = cudagym.tasks.load("mine", path="somewhere", level=2, flavour="x")
    assert tasks.ids == ("mine/2",)
    assert seen == {"path": "somewhere", "flavour": "x"}  # filters are not passed to the loader
    with pytest.raises(ValueError, match="already registered"):
        cudagym.tasks.register_task_set("mine", loader)
