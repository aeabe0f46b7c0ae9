"""The KernelBench task set (ScalingIntelligence/KernelBench), from a local copy or the Hugging Face Hub.

KernelBench ships one reference file per problem, ``KernelBench/level{L}/{problem_id}_{Name}.py``, in
the format cudagym uses (``Model``, ``get_inputs``, ``get_init_inputs``). The same problems are on the
Hub as the dataset ``ScalingIntelligence/KernelBench`` with splits ``level_1`` ... ``level_4`` and
columns ``code``, ``level``, ``name``, ``problem_id``; there ``name`` is the file stem *without*
``.py`` (some copies keep the suffix). Whichever way a problem is loaded it gets the same task:

* id ``kernelbench/level{L}/{problem_id}_{Name}``, e.g. ``kernelbench/level1/19_ReLU``;
* name: the file stem, e.g. ``19_ReLU``;
* metadata: ``level``, ``source="kernelbench"``, ``ops`` (torch operators read from the code, see
  :func:`derive_ops`), ``requires`` (third-party imports; level 4 always needs ``transformers``),
  ``input_kinds=("task",)`` (KernelBench draws inputs from ``torch.rand``, i.e. U[0, 1); where a shortcut passes on
  those, as for 19_ReLU, the input probe adds the kinds that close it: :mod:`cudagym.tasks.degeneracy`) and
  ``extra={"problem_id": int, "file": stem}``. Level 4 tasks build pretrained Hugging Face models;
  they are kept, flagged with ``extra["needs_weights"] = True`` (see :mod:`cudagym.tasks.requirements`).

Tasks are ordered by (level, problem_id), so ids and order do not depend on the source.
"""

from __future__ import annotations

import ast
import importlib.util
import logging
import os
import re
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from cudagym import python_source
from cudagym.tasks.hub import require_datasets
from cudagym.tasks.requirements import NEEDS_WEIGHTS_KEY, imported_packages
from cudagym.tasks.task import Task, TaskMetadata, for_precision

HF_DATASET = "ScalingIntelligence/KernelBench"
ENV_VAR = "CUDAGYM_KERNELBENCH_DIR"
LEVELS = (1, 2, 3, 4)
SOURCES = ("auto", "local", "parquet", "hub")

_LEVEL_DIR = re.compile(r"^level(\d+)$")
_PROBLEM_FILE = re.compile(r"^(\d+)_(.+)$")
_PARQUET_LEVEL = re.compile(r"level_?(\d+)")

logger = logging.getLogger(__name__)


# --------------------------------------------------------------------------------------------- ops


#: Calls that build tensors or parameters rather than compute (left out of ``ops``).
_NOT_OPS = frozenset(
    {
        "torch.nn.Parameter",
        "torch.nn.Module",
        "torch.nn.ModuleList",
        "torch.nn.ModuleDict",
        "torch.nn.Sequential",
        "torch.nn.ParameterList",
        "torch.nn.ParameterDict",
        "torch.nn.Identity",
        "torch.Size",
        "torch.device",
        "torch.no_grad",
    }
)
#: Top-level functions that make inputs, not part of the model.
_INPUT_FUNCTIONS = frozenset({"get_inputs", "get_init_inputs"})


def _import_aliases(tree: ast.Module) -> dict[str, str]:
    """Local name -> dotted module path for the torch imports (``F`` -> ``torch.nn.functional``)."""
    aliases = {"torch": "torch"}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] == "torch":
                    if alias.asname:
                        aliases[alias.asname] = alias.name
                    else:
                        aliases["torch"] = "torch"
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            if node.module.split(".")[0] == "torch":
                for alias in node.names:
                    aliases[alias.asname or alias.name] = f"{node.module}.{alias.name}"
    return aliases


def _dotted(node: ast.expr) -> list[str] | None:
    parts: list[str] = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if not isinstance(node, ast.Name):
        return None
    parts.append(node.id)
    return parts[::-1]


class _OpCollector(ast.NodeVisitor):
    """Collects torch calls in source order; in ``__init__`` only ``torch.nn`` module constructors."""

    def __init__(self, aliases: Mapping[str, str]) -> None:
        self.aliases = aliases
        self.ops: list[str] = []
        self._in_init = 0

    def visit_FunctionDef(self, node: ast.FunctionDef) -> None:
        self._in_init += node.name == "__init__"
        self.generic_visit(node)
        self._in_init -= node.name == "__init__"

    visit_AsyncFunctionDef = visit_FunctionDef  # type: ignore[assignment]

    def visit_Call(self, node: ast.Call) -> None:
        parts = _dotted(node.func)
        if parts and parts[0] in self.aliases:
            name = ".".join([self.aliases[parts[0]], *parts[1:]])
            is_module = name.startswith("torch.nn.") and name.rsplit(".", 1)[-1][:1].isupper()
            if name not in _NOT_OPS and (is_module or not self._in_init) and name not in self.ops:
                self.ops.append(name)
        self.generic_visit(node)


def derive_ops(source: str) -> tuple[str, ...]:
    """The torch operators a reference composes, read from its code without running it.

    Counted: calls that resolve (through the file's imports) into ``torch``, written with the full
    dotted name: ``torch.matmul``, ``torch.relu``, ``torch.nn.functional.gelu`` (for ``F.gelu``),
    ``torch.nn.Conv2d`` (for ``nn.Conv2d(...)``). Inside ``__init__`` only ``torch.nn`` module
    constructors count (parameter initialisation is not an operator); ``get_inputs`` and
    ``get_init_inputs`` are skipped, and so are containers and constructors such as ``nn.Parameter``
    or ``nn.Sequential``. Tensor methods (``x.sum()``) and Python operators (``a + b``) are not
    recognised. The result is deterministic: distinct names in order of first appearance.

    Args:
        source: the reference file's text.

    Returns:
        Operator names; empty when the source does not parse.
    """
    try:
        tree = python_source.parse(source)
    except SyntaxError:
        return ()
    collector = _OpCollector(_import_aliases(tree))
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name in _INPUT_FUNCTIONS:
            continue
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            continue
        collector.visit(node)
    return tuple(collector.ops)


# ------------------------------------------------------------------------------------------- tasks


def _stem(name: str) -> str:
    name = Path(str(name)).name
    return name[: -len(".py")] if name.endswith(".py") else name


def kernelbench_task(code: str, *, level: int, name: str, problem_id: int | None = None) -> Task:
    """Builds one KernelBench task from a row of the dataset or a file of the repository.

    Args:
        code: the reference file's text.
        level: the KernelBench level (1-4).
        name: the file name or stem, with or without ``.py`` and with or without the numeric prefix
            (``"19_ReLU.py"``, ``"19_ReLU"`` and, given ``problem_id=19``, ``"ReLU"`` are the same).
        problem_id: the problem's number; read from the name's prefix when None.

    Returns:
        The task, with the id scheme of the module docstring.

    Raises:
        ValueError: no problem id can be found, or the name's prefix disagrees with ``problem_id``.
    """
    stem = _stem(name)
    match = _PROBLEM_FILE.match(stem)
    if match:
        prefix_id, short = int(match.group(1)), match.group(2)
        if problem_id is not None and int(problem_id) != prefix_id:
            raise ValueError(
                f"KernelBench level {level}: name {name!r} says problem {prefix_id}, but problem_id is {problem_id}"
            )
        pid = prefix_id
    elif problem_id is not None:
        pid, short = int(problem_id), stem
    else:
        raise ValueError(f"KernelBench level {level}: cannot read a problem id from name {name!r}")
    level = int(level)
    file_stem = f"{pid}_{short}"
    requires = list(imported_packages(code))
    extra: dict[str, Any] = {"problem_id": pid, "file": file_stem}
    if level == 4:
        if "transformers" not in requires:
            requires.insert(0, "transformers")
        extra[NEEDS_WEIGHTS_KEY] = True
    metadata = TaskMetadata(
        level=level,
        ops=derive_ops(code),
        source="kernelbench",
        requires=tuple(requires),
        input_kinds=("task",),
        extra=extra,
    )
    return Task(id=f"kernelbench/level{level}/{file_stem}", name=file_stem, source=code, metadata=metadata)


# ----------------------------------------------------------------------------------------- sources


def _level_filter(level: int | Sequence[int] | None, include_level4: bool) -> Callable[[int], bool]:
    """A predicate saying whether a level is to be read."""
    if level is None:
        levels = None
    elif isinstance(level, (int, str)):
        levels = {int(level)}
    else:
        levels = {int(lv) for lv in level}

    def keep(lv: int) -> bool:
        return (levels is None or lv in levels) and (include_level4 or lv != 4)

    return keep


def find_kernelbench_root(path: str | Path) -> Path | None:
    """The folder holding ``level1/`` ... under ``path`` (``path`` itself or ``path/KernelBench``)."""
    path = Path(path)
    for candidate in (path, path / "KernelBench"):
        if candidate.is_dir() and any(child.is_dir() and _LEVEL_DIR.match(child.name) for child in candidate.iterdir()):
            return candidate
    return None


def _parquet_files(path: Path) -> list[Path]:
    if path.is_file():
        return [path]
    return sorted(path.glob("level_*.parquet")) or sorted(path.glob("data/level_*.parquet"))


def _iter_level_dir(level_dir: Path, level: int) -> Iterator[Task]:
    for file in sorted(level_dir.glob("*.py")):
        if _PROBLEM_FILE.match(file.stem):
            yield kernelbench_task(file.read_text(), level=level, name=file.name)


def _iter_local(root: Path, keep: Callable[[int], bool]) -> Iterator[Task]:
    for level_dir in sorted(root.iterdir()):
        match = _LEVEL_DIR.match(level_dir.name)
        if level_dir.is_dir() and match and keep(int(match.group(1))):
            yield from _iter_level_dir(level_dir, int(match.group(1)))


def read_parquet_rows(path: Path) -> list[dict[str, Any]]:
    """The rows of a parquet file as dicts (list columns as Python lists). Needs ``pyarrow``."""
    try:
        import pyarrow.parquet as pq
    except ImportError as exc:  # pragma: no cover - pyarrow is in the test extra
        raise ImportError(f"reading {path} needs pyarrow; install it with `pip install pyarrow`") from exc
    return pq.read_table(path).to_pylist()


def _iter_rows(rows: Iterable[Mapping[str, Any]], where: str, default_level: int | None) -> Iterator[Task]:
    for index, row in enumerate(rows):
        missing = [key for key in ("code", "name") if key not in row]
        if missing:
            raise ValueError(
                f"{where}: row {index} lacks the column(s) {missing}; KernelBench rows have "
                f"code, level, name, problem_id (found: {sorted(row)})"
            )
        level = row.get("level", default_level)
        if level is None:
            raise ValueError(f"{where}: row {index} has no level, and none can be read from the file name")
        pid = row.get("problem_id")
        yield kernelbench_task(
            row["code"], level=int(level), name=row["name"], problem_id=None if pid is None else int(pid)
        )


def _iter_parquet(path: Path, keep: Callable[[int], bool]) -> Iterator[Task]:
    files = _parquet_files(path)
    if not files:
        raise FileNotFoundError(
            f"no KernelBench parquet files in {path} (expected level_N*.parquet or data/level_N-00000-of-00001.parquet)"
        )
    for file in files:
        match = _PARQUET_LEVEL.search(file.name)
        file_level = int(match.group(1)) if match else None
        if file_level is not None and not keep(file_level):
            continue
        for task in _iter_rows(read_parquet_rows(file), str(file), file_level):
            if keep(task.metadata.level or 0):
                yield task


def _hub_available() -> bool:
    return importlib.util.find_spec("datasets") is not None


HOW_TO_PASS = (
    "pass path= (a KernelBench checkout or the Hub's parquet files) or dataset= (a datasets.Dataset, a DatasetDict of "
    f"level_N splits, or an iterable of rows with code, level, name, problem_id), or set ${ENV_VAR}"
)
"""How to give KernelBench without the Hub (said where the Hub cannot be reached)."""


def _iter_hub(keep: Callable[[int], bool]) -> Iterator[Task]:
    load_dataset = require_datasets(HOW_TO_PASS)
    for level in LEVELS:
        if not keep(level):
            continue
        split = load_dataset(HF_DATASET, split=f"level_{level}")
        yield from _iter_rows(split, f"{HF_DATASET}[level_{level}]", level)


def _iter_dataset(dataset: Any, keep: Callable[[int], bool]) -> Iterator[Task]:
    """The tasks of ``dataset=``: a ``datasets.DatasetDict`` (or any mapping) of ``level_N`` splits, else one split
    (a ``datasets.Dataset``) or any iterable of rows."""
    if isinstance(dataset, Mapping) and "code" not in dataset:
        for split, rows in sorted(dataset.items()):
            match = _PARQUET_LEVEL.search(str(split))
            split_level = int(match.group(1)) if match else None
            if split_level is None or keep(split_level):
                yield from (t for t in _iter_rows(rows, f"dataset[{split!r}]", split_level) if keep(t.metadata.level))
        return
    if isinstance(dataset, (str, bytes, Path)) or not isinstance(dataset, Iterable):
        raise TypeError(
            f"dataset= takes a datasets.Dataset, a DatasetDict or an iterable of rows, got {type(dataset).__name__} "
            "(a local folder or parquet file goes to path=)"
        )
    yield from (task for task in _iter_rows(dataset, "dataset=", None) if keep(task.metadata.level or 0))


def _from_path(path: Path, source: str, keep: Callable[[int], bool]) -> Iterator[Task]:
    if not path.exists():
        raise FileNotFoundError(f"KernelBench path {path} does not exist")
    if source in ("auto", "local"):
        root = find_kernelbench_root(path) if path.is_dir() else None
        if root is not None:
            return _iter_local(root, keep)
        match = _LEVEL_DIR.match(path.name)
        if path.is_dir() and match:  # one level's folder, e.g. KernelBench/level1
            level = int(match.group(1))
            return _iter_level_dir(path, level) if keep(level) else iter(())
        if source == "local":
            raise FileNotFoundError(
                f"{path} is not a KernelBench folder: no level1/ ... level4/ in it or in {path / 'KernelBench'}"
            )
    if path.is_file() and path.suffix != ".parquet":
        raise ValueError(f"{path}: expected a KernelBench folder or a .parquet file")
    if path.is_dir() and not _parquet_files(path):
        raise FileNotFoundError(f"{path} holds neither KernelBench's level1/ ... folders nor level_N*.parquet files")
    return _iter_parquet(path, keep)


def load_kernelbench(
    path: str | Path | None = None,
    *,
    source: str = "auto",
    level: int | Sequence[int] | None = None,
    include_level4: bool = True,
    precision: str = "fp32",
    dataset: Any = None,
) -> list[Task]:
    """Loads KernelBench tasks (see the module docstring for ids and metadata).

    Args:
        path: a KernelBench checkout (a folder with ``level1/`` ..., its parent holding
            ``KernelBench/``, or one ``level{L}/`` folder), a ``.parquet`` file in the Hub's schema,
            or a folder of ``level_N*.parquet`` (else ``data/level_N-00000-of-00001.parquet``) files.
            Defaults to ``$CUDAGYM_KERNELBENCH_DIR``.
        source: ``"auto"`` (a local path when one is given, else the Hub when ``datasets`` is installed),
            ``"local"`` (a folder in the repository's layout), ``"parquet"`` or ``"hub"``
            (``datasets.load_dataset("ScalingIntelligence/KernelBench")``, needs network access).
        level: read only these levels (1-4). ``cudagym.tasks.load`` filters by level itself, so this
            matters only when the loader is called directly (it saves reading other levels).
        include_level4: keep level 4 (whole Hugging Face models; they need ``transformers`` and
            downloadable weights and are flagged in their metadata).
        precision: the track, "fp32" (default), "bf16" or "fp16" (``cudagym.tasks.task.for_precision``: ids
            ``kernelbench/level1/19_ReLU@bf16``).
        dataset: the problems as data already loaded, instead of ``path`` or the Hub: a ``datasets.Dataset`` in the
            Hub's schema (``code``, ``level``, ``name``, ``problem_id``; e.g. one ``load_dataset`` split you made or
            cached), a ``DatasetDict`` (or a dict) of ``level_N`` splits, or any iterable of such rows (dicts).

    Other options are refused (TypeError); through ``cudagym.tasks.load`` the refusal names the valid ones, and
    ``sizes=`` there shrinks the problems (KernelBench's level-1 sizes make tensors of several GB).

    Returns:
        Tasks ordered by (level, problem_id).

    Raises:
        FileNotFoundError: the path is missing or has no KernelBench files, or no source is given.
        ImportError: the Hub is asked for and ``datasets`` is not installed.
        HubUnreachable: (``cudagym.tasks.hub``) the Hub is asked for, or ``"auto"`` falls back to it, and cannot be
            reached (offline mode, no connection): raised at once; the message says how to pass the data instead.
        ValueError: an unknown ``source``, or malformed rows.
        TypeError: ``dataset`` is not data (a path given as ``dataset=``), or is given with ``path``.
    """
    if source not in SOURCES:
        raise ValueError(f"unknown KernelBench source {source!r}; expected one of {', '.join(SOURCES)}")
    keep = _level_filter(level, include_level4)
    if dataset is not None:
        if path is not None:
            raise TypeError("give KernelBench as path= or as dataset=, not both")
        tasks = list(_iter_dataset(dataset, keep))
        logger.info("KernelBench: %d task(s) from dataset=", len(tasks))
    elif source == "hub":
        tasks = list(_iter_hub(keep))
    else:
        if path is None and os.environ.get(ENV_VAR):
            path = os.environ[ENV_VAR]
        if path is not None:
            tasks = list(_from_path(Path(path).expanduser(), source, keep))
        elif source == "auto" and _hub_available():
            tasks = list(_iter_hub(keep))
        else:
            raise FileNotFoundError(
                "no KernelBench source: pass path= (a KernelBench checkout or the Hub's parquet files) or dataset=, "
                f"set ${ENV_VAR}, or use source='hub' (needs `pip install datasets` and network access)"
            )
        logger.info("KernelBench: %d task(s) from %s", len(tasks), path if path is not None else "the Hub")
    tasks.sort(key=lambda t: (t.metadata.level, t.metadata.extra["problem_id"]))
    return [for_precision(task, precision) for task in tasks]
