"""The Ops-6K task set (BytedTsinghua-SIA/CUDA-Agent-Ops-6K), CUDA Agent's training operators.

The Hugging Face dataset has one split, ``train``, of 6,000 rows with the columns

* ``code``: a self-contained PyTorch file (``Model``, ``get_inputs``, ``get_init_inputs``);
* ``ops``: the names of the operators the model composes (a list; pandas and pyarrow may hand it over
  as a numpy array);
* ``data_source``: ``"torch#N"``, N being the number of operators composed.

It loads from a local parquet or JSONL copy, or from the Hub through ``datasets``. Each row becomes a
task with

* id ``ops6k/{row:04d}``: the row's index in the file, so ids are stable as long as the row order is;
* name: the operators' short names joined by ``_`` (``torch.nn.Conv2d`` + ``torch.relu`` ->
  ``Conv2d_relu``), else the first class other than ``Model``, else ``row{row:04d}``;
* metadata: ``ops`` (the column, or derived from the code when the column is absent), ``level=None``,
  ``source="ops6k"``, ``requires`` (third-party imports), ``input_kinds=("task",)`` and
  ``extra={"data_source": str | None, "num_ops": int | None, "row": int}``.
"""

from __future__ import annotations

import ast
import json
import logging
import os
import re
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from cudagym import python_source
from cudagym.tasks.hub import require_datasets
from cudagym.tasks.kernelbench import derive_ops, read_parquet_rows
from cudagym.tasks.requirements import imported_packages
from cudagym.tasks.task import Task, TaskMetadata

HF_DATASET = "BytedTsinghua-SIA/CUDA-Agent-Ops-6K"
ENV_VAR = "CUDAGYM_OPS6K_PATH"
SOURCES = ("auto", "parquet", "jsonl", "hub")
MAX_NAME_LENGTH = 80

_NUM_OPS = re.compile(r"#\s*(\d+)\s*$")

logger = logging.getLogger(__name__)


def normalise_ops(value: Any) -> tuple[str, ...]:
    """The ``ops`` cell as a tuple of strings.

    Accepts a list or tuple, a numpy array (as pandas and some pyarrow paths return), a JSON-encoded
    list in a string, a single name, or None (no ops).
    """
    if value is None:
        return ()
    if isinstance(value, str):
        text = value.strip()
        if text.startswith("["):
            try:
                decoded = json.loads(text)
            except json.JSONDecodeError:
                decoded = None
            if isinstance(decoded, list):
                return tuple(str(v) for v in decoded)
        return (text,) if text else ()
    if hasattr(value, "tolist"):  # numpy arrays and scalars
        value = value.tolist()
        if not isinstance(value, list):
            value = [value]
    return tuple(str(v) for v in value)


def num_ops(data_source: str | None) -> int | None:
    """N from ``"torch#N"``; None when ``data_source`` has no such suffix."""
    if not data_source:
        return None
    match = _NUM_OPS.search(str(data_source))
    return int(match.group(1)) if match else None


def _first_class(code: str) -> str | None:
    try:
        tree = python_source.parse(code)
    except SyntaxError:
        return None
    names = [node.name for node in tree.body if isinstance(node, ast.ClassDef)]
    others = [n for n in names if n != "Model"]
    return others[0] if others else None


def _task_name(ops: tuple[str, ...], code: str, row: int) -> str:
    if ops:
        name = "_".join(op.rsplit(".", 1)[-1] for op in ops)
        return name if len(name) <= MAX_NAME_LENGTH else name[: MAX_NAME_LENGTH - 3] + "..."
    return _first_class(code) or f"row{row:04d}"


def ops6k_task(row: Mapping[str, Any], index: int) -> Task:
    """Builds the task of one dataset row.

    Args:
        row: a mapping with ``code`` and, optionally, ``ops`` and ``data_source``.
        index: the row's position in the dataset (its id).

    Returns:
        The task, with the id scheme of the module docstring.

    Raises:
        ValueError: the row has no ``code``.
    """
    code = row.get("code")
    if not isinstance(code, str):
        raise ValueError(
            f"Ops-6K row {index} has no `code` string; rows have code, ops, data_source (found: {sorted(row)})"
        )
    ops = normalise_ops(row["ops"]) if "ops" in row else derive_ops(code)
    data_source = row.get("data_source")
    data_source = None if data_source is None else str(data_source)
    metadata = TaskMetadata(
        level=None,
        ops=ops,
        source="ops6k",
        requires=imported_packages(code),
        input_kinds=("task",),
        extra={"data_source": data_source, "num_ops": num_ops(data_source), "row": index},
    )
    return Task(id=f"ops6k/{index:04d}", name=_task_name(ops, code, index), source=code, metadata=metadata)


def read_jsonl_rows(path: Path) -> list[dict[str, Any]]:
    """The rows of a JSONL file (one object per line, blank lines skipped) or of a JSON array file."""
    text = path.read_text()
    if text.lstrip().startswith("["):
        rows = json.loads(text)
    else:
        rows = []
        for number, line in enumerate(text.splitlines(), start=1):
            if not line.strip():
                continue
            try:
                rows.append(json.loads(line))
            except json.JSONDecodeError as exc:
                raise ValueError(f"{path}:{number}: not a JSON object: {exc}") from None
    if not all(isinstance(row, dict) for row in rows):
        raise ValueError(f"{path}: every row must be a JSON object")
    return rows


def _local_files(path: Path) -> list[Path]:
    """The data files of ``path``: the file itself, or a folder's parquet (else JSONL) files."""
    if path.is_file():
        return [path]
    for pattern in ("*.parquet", "data/*.parquet", "*.jsonl", "data/*.jsonl"):
        files = sorted(path.glob(pattern))
        if files:
            return files
    raise FileNotFoundError(f"no Ops-6K data in {path} (expected *.parquet or *.jsonl files)")


def _read_local(path: Path, source: str) -> list[dict[str, Any]]:
    if not path.exists():
        raise FileNotFoundError(f"Ops-6K path {path} does not exist")
    rows: list[dict[str, Any]] = []
    for file in _local_files(path):
        kind = source if source != "auto" else ("parquet" if file.suffix == ".parquet" else "jsonl")
        if kind == "parquet":
            rows.extend(read_parquet_rows(file))
        elif kind == "jsonl" and file.suffix in (".jsonl", ".json", ".ndjson"):
            rows.extend(read_jsonl_rows(file))
        else:
            raise ValueError(f"{file}: expected a .parquet, .jsonl or .json file (source={source!r})")
    return rows


def _tasks(rows: Iterable[Mapping[str, Any]]) -> list[Task]:
    return [ops6k_task(row, index) for index, row in enumerate(rows)]


HOW_TO_PASS = (
    f"pass path= (a parquet or JSONL copy of {HF_DATASET}) or dataset= (a datasets.Dataset or an iterable of rows "
    f"with code, ops, data_source), or set ${ENV_VAR}"
)
"""How to give Ops-6K without the Hub (said where the Hub cannot be reached)."""


def _dataset_rows(dataset: Any) -> Iterable[Mapping[str, Any]]:
    """The rows of ``dataset=``: its ``train`` split when it is a ``DatasetDict`` (or a dict of splits), else itself."""
    if isinstance(dataset, Mapping) and "code" not in dataset:
        if "train" not in dataset:
            raise ValueError(f"dataset= holds the splits {sorted(dataset)}; Ops-6K's rows are in 'train'")
        return dataset["train"]
    if isinstance(dataset, (str, bytes, Path)) or not isinstance(dataset, Iterable):
        raise TypeError(
            f"dataset= takes a datasets.Dataset or an iterable of rows, got {type(dataset).__name__} "
            "(a local file goes to path=)"
        )
    return dataset


def load_ops6k(path: str | Path | None = None, *, source: str = "auto", dataset: Any = None) -> list[Task]:
    """Loads the Ops-6K tasks (see the module docstring for ids and metadata).

    Args:
        path: a ``.parquet``, ``.jsonl`` or ``.json`` file in the dataset's schema, or a folder of them
            (a Hub snapshot with ``data/*.parquet`` works). Several files are read in name order and
            numbered as one sequence. Defaults to ``$CUDAGYM_OPS6K_PATH``.
        source: ``"auto"`` (a local path when one is given, else the Hub when ``datasets`` is
            installed), ``"parquet"``, ``"jsonl"`` or ``"hub"`` (``datasets.load_dataset``, split
            ``train``; needs network access).
        dataset: the rows as data already loaded, instead of ``path`` or the Hub: a ``datasets.Dataset`` in the
            dataset's schema (``code``, ``ops``, ``data_source``), a ``DatasetDict`` (its ``train`` split) or any
            iterable of such rows (dicts); ids number its rows in order.

    Other options are refused (TypeError); through ``cudagym.tasks.load`` the refusal names the valid ones.

    Returns:
        One task per row, in row order.

    Raises:
        FileNotFoundError: the path is missing or holds no data, or no source is given.
        ImportError: the Hub is asked for and ``datasets`` is not installed.
        HubUnreachable: (``cudagym.tasks.hub``) the Hub is asked for, or ``"auto"`` falls back to it, and cannot be
            reached (offline mode, no connection): raised at once; the message says how to pass the data instead.
        ValueError: an unknown ``source`` or malformed rows.
        TypeError: ``dataset`` is not data, or is given with ``path``.
    """
    if source not in SOURCES:
        raise ValueError(f"unknown Ops-6K source {source!r}; expected one of {', '.join(SOURCES)}")
    if dataset is not None:
        if path is not None:
            raise TypeError("give Ops-6K as path= or as dataset=, not both")
        tasks = _tasks(_dataset_rows(dataset))
        logger.info("Ops-6K: %d task(s) from dataset=", len(tasks))
        return tasks
    if source != "hub":
        if path is None and os.environ.get(ENV_VAR):
            path = os.environ[ENV_VAR]
        if path is not None:
            tasks = _tasks(_read_local(Path(path).expanduser(), source))
            logger.info("Ops-6K: %d task(s) from %s", len(tasks), path)
            return tasks
        if source != "auto":
            raise FileNotFoundError(f"source={source!r} needs path= (or ${ENV_VAR})")
    try:
        load_dataset = require_datasets(HOW_TO_PASS)
    except ImportError as exc:
        if source == "hub":
            raise
        raise FileNotFoundError(
            f"no Ops-6K source: pass path= (a parquet or JSONL copy of {HF_DATASET}) or dataset=, set ${ENV_VAR}, "
            "or use source='hub' (needs `pip install datasets` and network access)"
        ) from exc
    return _tasks(load_dataset(HF_DATASET, split="train"))
