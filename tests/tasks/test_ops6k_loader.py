"""Ops-6K loader: parquet and JSONL copies in the dataset's schema, and the (mocked) Hub."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import cudagym.tasks
from cudagym.tasks import ops6k
from cudagym.tasks.ops6k import load_ops6k, normalise_ops, num_ops
from cudagym.tasks.task import Task


def _summary(tasks: list[Task]) -> list[tuple[Any, ...]]:
    return [(t.id, t.name, t.source, t.metadata, dict(t.metadata.extra)) for t in tasks]


def _check_sample(tasks: list[Task], rows: list[dict[str, Any]]) -> None:
    assert [t.id for t in tasks] == ["ops6k/0000", "ops6k/0001", "ops6k/0002", "ops6k/0003"]
    for index, (task, row) in enumerate(zip(tasks, rows, strict=True)):
        assert task.source == row["code"]
        assert task.metadata.ops == tuple(row["ops"])
        assert task.metadata.level is None
        assert task.metadata.source == "ops6k"
        assert task.metadata.input_kinds == ("task",)
        assert dict(task.metadata.extra) == {
            "data_source": row["data_source"],
            "num_ops": int(row["data_source"].split("#")[1]),
            "row": index,
        }
    assert [t.name for t in tasks] == ["add_mul", "relu", "Conv2d_ReLU", "matmul_gelu_sum"]
    assert [t.metadata.extra["num_ops"] for t in tasks] == [2, 1, 2, 3]


def test_parquet(ops6k_parquet: Path, ops6k_rows: list[dict[str, Any]]) -> None:
    _check_sample(load_ops6k(ops6k_parquet), ops6k_rows)


def test_jsonl_gives_the_same_tasks(ops6k_jsonl: Path, ops6k_parquet: Path, ops6k_rows: list[dict[str, Any]]) -> None:
    tasks = load_ops6k(ops6k_jsonl)
    _check_sample(tasks, ops6k_rows)
    assert _summary(tasks) == _summary(load_ops6k(ops6k_parquet))


def test_json_array_and_snapshot_folder(tmp_path: Path, ops6k_parquet: Path, ops6k_rows: list[dict[str, Any]]) -> None:
    array = tmp_path / "rows.json"
    array.write_text(json.dumps(ops6k_rows))
    _check_sample(load_ops6k(array), ops6k_rows)
    snapshot = tmp_path / "snapshot"
    (snapshot / "data").mkdir(parents=True)
    (snapshot / "data" / "train-00000-of-00001.parquet").write_bytes(ops6k_parquet.read_bytes())
    _check_sample(load_ops6k(snapshot), ops6k_rows)


def test_env_var_through_the_registry(
    ops6k_jsonl: Path, ops6k_rows: list[dict[str, Any]], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(ops6k.ENV_VAR, str(ops6k_jsonl))
    tasks = cudagym.tasks.load("ops6k")
    assert tasks.name == "ops6k"
    _check_sample(list(tasks), ops6k_rows)


def test_mocked_hub_with_numpy_ops(ops6k_rows: list[dict[str, Any]], monkeypatch: pytest.MonkeyPatch) -> None:
    calls = []

    def fake_load_dataset(name: str, *, split: str) -> list[dict[str, Any]]:
        calls.append((name, split))
        return [dict(row, ops=np.array(row["ops"])) for row in ops6k_rows]

    monkeypatch.setattr(ops6k, "require_datasets", lambda *_: fake_load_dataset)
    tasks = load_ops6k(source="hub")
    assert calls == [(ops6k.HF_DATASET, "train")]
    _check_sample(tasks, ops6k_rows)
    assert all(type(op) is str for t in tasks for op in t.metadata.ops)


def test_normalise_ops_and_num_ops() -> None:
    assert normalise_ops(np.array(["torch.add", "torch.mul"])) == ("torch.add", "torch.mul")
    assert normalise_ops(("torch.add",)) == ("torch.add",)
    assert normalise_ops('["torch.add", "torch.mul"]') == ("torch.add", "torch.mul")
    assert normalise_ops("torch.relu") == ("torch.relu",)
    assert normalise_ops(None) == normalise_ops("") == ()
    assert num_ops("torch#5") == 5
    assert num_ops("transformers#12") == 12
    assert num_ops("torch") is None
    assert num_ops(None) is None


def test_rows_without_ops_or_data_source(tmp_path: Path, ops6k_rows: list[dict[str, Any]]) -> None:
    file = tmp_path / "bare.jsonl"
    file.write_text(json.dumps({"code": ops6k_rows[3]["code"]}) + "\n\n")
    (task,) = load_ops6k(file)
    assert task.metadata.ops == ("torch.sum", "torch.nn.functional.gelu", "torch.matmul")
    assert dict(task.metadata.extra) == {"data_source": None, "num_ops": None, "row": 0}


def test_errors_say_what_to_do(tmp_path: Path, no_datasets: None) -> None:
    with pytest.raises(FileNotFoundError, match=r"CUDAGYM_OPS6K_PATH.*source='hub'"):
        load_ops6k()
    with pytest.raises(ImportError, match="pip install datasets"):
        load_ops6k(source="hub")
    with pytest.raises(FileNotFoundError, match="does not exist"):
        load_ops6k(tmp_path / "missing.parquet")
    with pytest.raises(FileNotFoundError, match="no Ops-6K data"):
        load_ops6k(tmp_path)
    with pytest.raises(ValueError, match="unknown Ops-6K source"):
        load_ops6k(tmp_path, source="csv")
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps({"ops": ["torch.relu"]}) + "\n")
    with pytest.raises(ValueError, match="no `code`"):
        load_ops6k(bad)
    bad.write_text("{not json\n")
    with pytest.raises(ValueError, match=r"bad.jsonl:1"):
        load_ops6k(bad)
