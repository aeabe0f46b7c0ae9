"""Fixtures for the task-set tests: the read-only KernelBench copy, Hub-schema parquet files built
from it, and a small Ops-6K sample in the dataset's schema (parquet, JSONL)."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from cudagym.tasks.kernelbench import ENV_VAR as KERNELBENCH_ENV
from cudagym.tasks.kernelbench import find_kernelbench_root, load_kernelbench
from cudagym.tasks.ops6k import ENV_VAR as OPS6K_ENV
from cudagym.tasks.task import Task

REPO_ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(autouse=True)
def _no_task_set_env(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every test starts without the data-location variables, so none depends on the caller's shell."""
    monkeypatch.delenv(KERNELBENCH_ENV, raising=False)
    monkeypatch.delenv(OPS6K_ENV, raising=False)


@pytest.fixture(scope="session")
def kernelbench_tasks(kernelbench_dir: Path) -> list[Task]:
    """Levels 1 and 2 of the KernelBench copy, loaded from its files."""
    return load_kernelbench(kernelbench_dir, level=(1, 2))


def make_hub_rows(root: Path, level: int, *, keep_suffix: bool = False) -> list[dict[str, Any]]:
    """The rows the Hub's ``level_{level}`` split holds for the files under ``root/level{level}``."""
    rows = []
    for file in sorted((root / f"level{level}").glob("*.py")):
        rows.append(
            {
                "code": file.read_text(),
                "level": level,
                "name": file.name if keep_suffix else file.stem,
                "problem_id": int(file.name.split("_", 1)[0]),
            }
        )
    return rows


def write_parquet(rows: list[dict[str, Any]], file: Path) -> Path:
    """Writes rows in the Hub's KernelBench schema (code: string, level/problem_id: int64, name: string)."""
    pa = pytest.importorskip("pyarrow")
    pq = pytest.importorskip("pyarrow.parquet")
    schema = pa.schema(
        [("code", pa.string()), ("level", pa.int64()), ("name", pa.string()), ("problem_id", pa.int64())]
    )
    file.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.Table.from_pylist(rows, schema=schema), file)
    return file


@pytest.fixture(name="hub_rows")
def _hub_rows_fixture() -> Callable[..., list[dict[str, Any]]]:
    """:func:`make_hub_rows`, for tests that build their own Hub-schema files."""
    return make_hub_rows


@pytest.fixture(name="write_hub_parquet")
def _write_hub_parquet_fixture() -> Callable[[list[dict[str, Any]], Path], Path]:
    """:func:`write_parquet`, for tests that build their own Hub-schema files."""
    return write_parquet


@pytest.fixture(scope="session")
def kernelbench_root(kernelbench_dir: Path) -> Path:
    """The folder that holds ``level1/`` ... inside :func:`kernelbench_dir`."""
    root = find_kernelbench_root(kernelbench_dir)
    assert root is not None
    return root


@pytest.fixture(scope="session")
def kernelbench_parquet_dir(kernelbench_root: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A folder in the Hub's layout, ``data/level_N-00000-of-00001.parquet``, for levels 1 and 2."""
    root = kernelbench_root
    out = tmp_path_factory.mktemp("kernelbench_hub")
    for level in (1, 2):
        write_parquet(make_hub_rows(root, level), out / "data" / f"level_{level}-00000-of-00001.parquet")
    return out


# --------------------------------------------------------------------------------------------- Ops-6K

_OPS6K_CODES = [
    """import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, alpha: float) -> None:
        super().__init__()
        self.alpha = alpha

    def forward(self, a, b):
        return torch.add(torch.mul(a, self.alpha), b)


def get_inputs():
    return [torch.randn(4, 8), torch.randn(4, 8)]


def get_init_inputs():
    return [2.0]
""",
    """import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, x):
        return torch.relu(x)


def get_inputs():
    return [torch.randn(16, 16)]


def get_init_inputs():
    return []
""",
    """import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, cin: int, cout: int) -> None:
        super().__init__()
        self.conv = nn.Conv2d(cin, cout, 3)
        self.act = nn.ReLU()

    def forward(self, x):
        return self.act(self.conv(x))


def get_inputs():
    return [torch.randn(2, 3, 8, 8)]


def get_init_inputs():
    return [3, 4]
""",
    """import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    def forward(self, a, b):
        return torch.sum(F.gelu(torch.matmul(a, b)), dim=-1)


def get_inputs():
    return [torch.randn(8, 16), torch.randn(16, 4)]


def get_init_inputs():
    return []
""",
]

OPS6K_ROWS: list[dict[str, Any]] = [
    {"code": _OPS6K_CODES[0], "ops": ["torch.add", "torch.mul"], "data_source": "torch#2"},
    {"code": _OPS6K_CODES[1], "ops": ["torch.relu"], "data_source": "torch#1"},
    {"code": _OPS6K_CODES[2], "ops": ["torch.nn.Conv2d", "torch.nn.ReLU"], "data_source": "torch#2"},
    {
        "code": _OPS6K_CODES[3],
        "ops": ["torch.matmul", "torch.nn.functional.gelu", "torch.sum"],
        "data_source": "torch#3",
    },
]


@pytest.fixture
def ops6k_rows() -> list[dict[str, Any]]:
    """Four rows in the Ops-6K schema (code, ops, data_source); fresh copies for each test."""
    return [dict(row, ops=list(row["ops"])) for row in OPS6K_ROWS]


@pytest.fixture
def ops6k_parquet(tmp_path: Path, ops6k_rows: list[dict[str, Any]]) -> Path:
    """The sample rows as ``data.parquet`` (``ops`` a list<string> column, as on the Hub)."""
    pa = pytest.importorskip("pyarrow")
    pq = pytest.importorskip("pyarrow.parquet")
    schema = pa.schema([("code", pa.string()), ("ops", pa.list_(pa.string())), ("data_source", pa.string())])
    file = tmp_path / "data.parquet"
    pq.write_table(pa.Table.from_pylist(ops6k_rows, schema=schema), file)
    return file


@pytest.fixture
def ops6k_jsonl(tmp_path: Path, ops6k_rows: list[dict[str, Any]]) -> Path:
    """The sample rows as JSONL, one object a line."""
    file = tmp_path / "ops6k.jsonl"
    file.write_text("".join(json.dumps(row) + "\n" for row in ops6k_rows))
    return file


@pytest.fixture
def no_datasets(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Makes ``import datasets`` fail, whether or not the package is installed."""
    import sys

    monkeypatch.setitem(sys.modules, "datasets", None)
    yield
