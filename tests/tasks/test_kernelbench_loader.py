"""KernelBench loader: local files, Hub-schema parquet and (mocked) Hub give the same tasks."""

from __future__ import annotations

import re
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import cudagym.tasks
from cudagym.tasks import kernelbench
from cudagym.tasks.kernelbench import derive_ops, kernelbench_task, load_kernelbench
from cudagym.tasks.requirements import missing_requirements, requirement_notes
from cudagym.tasks.task import Task

ID_PATTERN = re.compile(r"^kernelbench/level(\d)/(\d+)_(.+)$")


def _summary(tasks: list[Task]) -> list[tuple[Any, ...]]:
    return [(t.id, t.name, t.source, t.metadata) for t in tasks]


def test_local_copy_gives_100_tasks_per_level(kernelbench_tasks: list[Task]) -> None:
    by_level = {1: 0, 2: 0}
    for task in kernelbench_tasks:
        by_level[task.metadata.level] += 1
        match = ID_PATTERN.match(task.id)
        assert match, task.id
        assert int(match.group(1)) == task.metadata.level
        assert int(match.group(2)) == task.metadata.extra["problem_id"]
        assert task.name == task.metadata.extra["file"] == task.id.rsplit("/", 1)[1]
        assert task.metadata.source == "kernelbench"
        assert task.metadata.input_kinds == ("task",)
        assert "class Model" in task.source
    assert by_level == {1: 100, 2: 100}
    assert len({t.id for t in kernelbench_tasks}) == 200
    order = [(t.metadata.level, t.metadata.extra["problem_id"]) for t in kernelbench_tasks]
    assert order == sorted(order)


def test_spot_checks(kernelbench_root: Path, kernelbench_tasks: list[Task]) -> None:
    tasks = {t.id: t for t in kernelbench_tasks}
    relu = tasks["kernelbench/level1/19_ReLU"]
    assert relu.name == "19_ReLU"
    assert relu.metadata.level == 1
    assert relu.metadata.ops == ("torch.relu",)
    assert relu.metadata.requires == ()
    assert dict(relu.metadata.extra) == {"problem_id": 19, "file": "19_ReLU"}
    assert relu.source == (kernelbench_root / "level1" / "19_ReLU.py").read_text()
    matmul = tasks["kernelbench/level1/1_Square_matrix_multiplication_"]
    assert matmul.metadata.ops == ("torch.matmul",)
    fused = tasks["kernelbench/level2/1_Conv2D_ReLU_BiasAdd"]
    assert fused.metadata.level == 2
    assert fused.metadata.ops[:2] == ("torch.nn.Conv2d", "torch.relu")


def test_parent_folder_and_level_folder(kernelbench_root: Path, tmp_path: Path) -> None:
    (tmp_path / "KernelBench").mkdir()
    (tmp_path / "KernelBench" / "level1").symlink_to(kernelbench_root / "level1", target_is_directory=True)
    tasks = load_kernelbench(tmp_path)
    assert len(tasks) == 100
    assert "kernelbench/level1/19_ReLU" in {t.id for t in tasks}
    # ... or one level's folder.
    assert [t.id for t in load_kernelbench(kernelbench_root / "level2")][:1] == [
        "kernelbench/level2/1_Conv2D_ReLU_BiasAdd"
    ]
    assert load_kernelbench(kernelbench_root / "level2", level=1) == []


def test_hub_parquet_gives_the_same_tasks(kernelbench_parquet_dir: Path, kernelbench_tasks: list[Task]) -> None:
    from_parquet = load_kernelbench(kernelbench_parquet_dir)
    assert _summary(from_parquet) == _summary(kernelbench_tasks)
    # ... and a single split file, through the registry.
    level2 = cudagym.tasks.load("kernelbench", path=kernelbench_parquet_dir / "data" / "level_2-00000-of-00001.parquet")
    assert _summary(list(level2)) == _summary([t for t in kernelbench_tasks if t.metadata.level == 2])


def test_parquet_names_with_py_suffix_give_the_same_ids(
    kernelbench_root: Path,
    kernelbench_tasks: list[Task],
    tmp_path: Path,
    hub_rows: Callable[..., list[dict[str, Any]]],
    write_hub_parquet: Callable[..., Path],
) -> None:
    write_hub_parquet(hub_rows(kernelbench_root, 1, keep_suffix=True), tmp_path / "level_1.parquet")
    tasks = load_kernelbench(tmp_path, source="parquet")
    assert _summary(tasks) == _summary([t for t in kernelbench_tasks if t.metadata.level == 1])


def test_mocked_hub_gives_the_same_tasks(
    kernelbench_root: Path,
    kernelbench_tasks: list[Task],
    monkeypatch: pytest.MonkeyPatch,
    hub_rows: Callable[..., list[dict[str, Any]]],
) -> None:
    calls = []

    def fake_load_dataset(name: str, *, split: str) -> list[dict[str, Any]]:
        calls.append((name, split))
        level = int(split.removeprefix("level_"))
        return hub_rows(kernelbench_root, level) if level in (1, 2) else []

    monkeypatch.setattr(kernelbench, "require_datasets", lambda *_: fake_load_dataset)
    tasks = load_kernelbench(source="hub", level=(1, 2))
    assert calls == [(kernelbench.HF_DATASET, "level_1"), (kernelbench.HF_DATASET, "level_2")]
    assert _summary(tasks) == _summary(kernelbench_tasks)


def test_env_var_and_level_option(kernelbench_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(kernelbench.ENV_VAR, str(kernelbench_dir))
    assert len(load_kernelbench(level=2)) == 100
    tasks = cudagym.tasks.load("kernelbench", level=1)
    assert len(tasks) == 100 and {t.metadata.level for t in tasks} == {1}


_LEVEL4_CODE = """import torch
import torch.nn as nn
from transformers import AutoConfig, AutoModelForCausalLM


class Model(nn.Module):
    def __init__(self, model_name, config):
        super().__init__()
        self.model = AutoModelForCausalLM.from_pretrained(model_name, config=config)

    def forward(self, x):
        return self.model(x).logits


model_name = "gpt2"
config = AutoConfig.from_pretrained(model_name)


def get_inputs():
    return [torch.randint(0, 50257, (1, 8))]


def get_init_inputs():
    return [model_name, config]
"""

_TINY_CODE = """import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, x):
        return torch.tanh(x)


def get_inputs():
    return [torch.rand(8)]


def get_init_inputs():
    return []
"""


def _write_level4_copy(root: Path) -> Path:
    (root / "level1").mkdir(parents=True)
    (root / "level4").mkdir()
    (root / "level1" / "1_Tanh.py").write_text(_TINY_CODE)
    (root / "level1" / "notes.py").write_text("# not a problem file\n")
    (root / "level4" / "1_gpt2_bs1_seq8.py").write_text(_LEVEL4_CODE)
    return root


def test_level4_is_kept_and_flagged(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    tasks = {t.id: t for t in load_kernelbench(_write_level4_copy(tmp_path))}
    assert sorted(tasks) == ["kernelbench/level1/1_Tanh", "kernelbench/level4/1_gpt2_bs1_seq8"]
    big = tasks["kernelbench/level4/1_gpt2_bs1_seq8"]
    assert big.metadata.level == 4
    assert big.metadata.requires == ("transformers",)
    assert big.metadata.extra["needs_weights"] is True
    assert tasks["kernelbench/level1/1_Tanh"].metadata.requires == ()

    monkeypatch.setitem(sys.modules, "transformers", None)  # not importable, installed or not
    assert missing_requirements(big) == ["transformers"]
    notes = requirement_notes(big)
    assert any("pip install transformers" in note for note in notes)
    assert any("weights" in note for note in notes)
    assert missing_requirements(tasks["kernelbench/level1/1_Tanh"]) == []
    assert requirement_notes(tasks["kernelbench/level1/1_Tanh"]) == []

    without = load_kernelbench(tmp_path, include_level4=False)
    assert [t.id for t in without] == ["kernelbench/level1/1_Tanh"]


def test_task_names_are_normalised() -> None:
    ids = {
        kernelbench_task(_TINY_CODE, level=1, name="19_ReLU.py").id,
        kernelbench_task(_TINY_CODE, level=1, name="19_ReLU").id,
        kernelbench_task(_TINY_CODE, level=1, name="19_ReLU", problem_id=19).id,
        kernelbench_task(_TINY_CODE, level=1, name="ReLU", problem_id=19).id,
        kernelbench_task(_TINY_CODE, level=1, name="KernelBench/level1/19_ReLU.py").id,
    }
    assert ids == {"kernelbench/level1/19_ReLU"}
    with pytest.raises(ValueError, match="says problem 19"):
        kernelbench_task(_TINY_CODE, level=1, name="19_ReLU", problem_id=20)
    with pytest.raises(ValueError, match="problem id"):
        kernelbench_task(_TINY_CODE, level=1, name="ReLU")


def test_derive_ops_resolves_aliases_and_skips_inputs() -> None:
    code = """import torch
import torch as T
from torch import nn
import torch.nn.functional as F
from torch.nn.functional import softmax as sm


class Helper(nn.Module):
    def forward(self, x):
        return F.gelu(x)


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(4, 4))
        self.conv = nn.Conv2d(3, 3, 1)
        self.layers = nn.Sequential(nn.ReLU(), Helper())

    def forward(self, x):
        y = T.relu(torch.matmul(x, self.weight))
        return sm(torch.nn.functional.gelu(y) + torch.relu(y), dim=-1)


def get_inputs():
    return [torch.rand(4, 4)]


def get_init_inputs():
    return []
"""
    assert derive_ops(code) == (
        "torch.nn.functional.gelu",
        "torch.nn.Conv2d",
        "torch.nn.ReLU",
        "torch.relu",
        "torch.matmul",
        "torch.nn.functional.softmax",
    )
    assert derive_ops("def broken(:") == ()


def test_errors_say_what_to_do(tmp_path: Path, no_datasets: None, write_hub_parquet: Callable[..., Path]) -> None:
    with pytest.raises(FileNotFoundError, match=r"CUDAGYM_KERNELBENCH_DIR.*source='hub'"):
        load_kernelbench()
    with pytest.raises(ImportError, match="pip install datasets"):
        load_kernelbench(source="hub")
    with pytest.raises(FileNotFoundError, match="does not exist"):
        load_kernelbench(tmp_path / "missing")
    with pytest.raises(FileNotFoundError, match="neither"):
        load_kernelbench(tmp_path)
    with pytest.raises(FileNotFoundError, match="not a KernelBench folder"):
        load_kernelbench(tmp_path, source="local")
    with pytest.raises(ValueError, match="unknown KernelBench source"):
        load_kernelbench(tmp_path, source="ftp")
    rows = [{"code": "x = 1", "level": 1, "name": "Nameless", "problem_id": None}]
    bad = write_hub_parquet(rows, tmp_path / "level_1.parquet")
    with pytest.raises(ValueError, match="problem id"):
        load_kernelbench(bad)
