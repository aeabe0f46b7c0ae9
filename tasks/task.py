"""The task model: one PyTorch reference module to be made faster, with what the evaluator needs to know.

A task's ``source`` is a file in KernelBench's format: ``class Model(nn.Module)``, ``get_inputs()`` and
``get_init_inputs()``, with problem sizes as module-level constants. A task may carry a size profile per
backend (``metadata.sizes``): the constants to use on the CPU backend and on the GPU, so that one task
is quick on a laptop core and still takes milliseconds on an H200. ``source_for(backend)`` gives the
text with those constants rewritten; that text is what the workspace's ``model.py`` holds and what is
evaluated, so the agent always sees the sizes it is timed on.
"""

from __future__ import annotations

import ast
import dataclasses
import hashlib
from collections.abc import Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from types import MappingProxyType
from typing import Any

from cudagym import python_source
from cudagym.tasks.input_verdict import InputVerdict

DEFAULT_TOLERANCE = 1e-2
PRECISIONS = {"fp32": "float32", "bf16": "bfloat16", "fp16": "float16"}
"""Precision tracks and the dtype the reference and its inputs use in each."""


def _frozen(mapping: Mapping[str, Any] | None) -> Mapping[str, Any]:
    return MappingProxyType(dict(mapping or {}))


@dataclasses.dataclass(frozen=True)
class TaskMetadata:
    """What is known about a task besides its source.

    Attributes:
        level: difficulty level where the set has one (KernelBench 1-4), else None.
        ops: operator names the reference composes (Ops-6K's ``ops``; ours name the torch ops).
        source: the task set it came from ("builtin", "kernelbench", "ops6k", ...).
        atol, rtol: correctness tolerances (CUDA Agent's 1e-2 by default).
        dtype: the floating dtype the reference computes in (and its inputs are cast to).
        precision: the track: "fp32" (the default: outputs are also held to a float64 twin of the reference, within
            what fp32 arithmetic meets), "bf16" or "fp16" (reference and inputs in that dtype, outputs judged by the
            tolerance against that reference). A track other than fp32 sets ``dtype`` (see :func:`for_precision`).
        sizes: per-backend overrides of the module-level size constants, e.g.
            ``{"cpu": {"N": 4096}, "cuda": {"N": 16777216}}``.
        requires: extra Python packages the reference needs (e.g. "transformers").
        input_kinds: input distributions verification may draw from beyond the task's own
            ("task" always; "normal" adds signed standard-normal inputs where the task allows; "large" adds such
            inputs times a magnitude of 1e2-1e3, where the reference stays finite and meaningful on them). The input
            probe adds kinds where a shortcut passes on these (``input_verdicts``).
        extra: anything else a loader wants to keep (e.g. Ops-6K's ``data_source``; ``size_overrides``: the
            constants ``load(..., sizes=)`` rewrote).
        input_verdicts: backend name -> what the input probe decided for the task as evaluated there (the input
            kinds verification draws, and whether the task is degenerate; see :mod:`cudagym.tasks.degeneracy`), where
            a check or an evaluation stored one in the cache; ``cudagym.tasks.load`` fills it. Knowledge about the
            task, not part of it: left out of equality and of the fingerprint.
    """

    level: int | None = None
    ops: tuple[str, ...] = ()
    source: str = "builtin"
    atol: float = DEFAULT_TOLERANCE
    rtol: float = DEFAULT_TOLERANCE
    dtype: str = "float32"
    precision: str = "fp32"
    sizes: Mapping[str, Mapping[str, Any]] = dataclasses.field(default_factory=dict)
    requires: tuple[str, ...] = ()
    input_kinds: tuple[str, ...] = ("task",)
    extra: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    input_verdicts: Mapping[str, InputVerdict] = dataclasses.field(default_factory=dict, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "ops", tuple(self.ops))
        object.__setattr__(self, "requires", tuple(self.requires))
        object.__setattr__(self, "input_kinds", tuple(self.input_kinds))
        object.__setattr__(self, "sizes", _frozen({k: _frozen(v) for k, v in dict(self.sizes).items()}))
        object.__setattr__(self, "extra", _frozen(self.extra))
        object.__setattr__(self, "input_verdicts", _frozen(self.input_verdicts))
        if self.atol < 0 or self.rtol < 0:
            raise ValueError(f"tolerances must be >= 0, got atol={self.atol}, rtol={self.rtol}")
        if self.precision not in PRECISIONS:
            raise ValueError(f"unknown precision {self.precision!r}; expected one of {', '.join(PRECISIONS)}")
        if self.precision != "fp32":
            object.__setattr__(self, "dtype", PRECISIONS[self.precision])


@dataclasses.dataclass(frozen=True)
class Task:
    """One optimisation problem.

    Attributes:
        id: unique and stable within its set, e.g. ``"builtin/relu"`` or ``"kernelbench/level1/19_ReLU"``.
        name: human-readable name.
        source: the reference file's text (``Model``, ``get_inputs``, ``get_init_inputs``).
        metadata: see :class:`TaskMetadata`.
        solutions: backend name -> directory holding a reference solution in workspace layout
            (``kernels/...`` and ``model_new.py``), for the tasks that ship one.
        expected_tiers: backend name -> the tier that reference solution is known to reach; a key
            ``"<backend>:<device>"`` (``"cuda:H100"``) holds the tier measured on that device where it differs, since
            a tier 3 rests on a margin over torch.compile that the device decides (:meth:`expected_tier`).
    """

    id: str
    name: str
    source: str
    metadata: TaskMetadata = dataclasses.field(default_factory=TaskMetadata)
    solutions: Mapping[str, Path] = dataclasses.field(default_factory=dict)
    expected_tiers: Mapping[str, int] = dataclasses.field(default_factory=dict)

    def __post_init__(self) -> None:
        if not self.id:
            raise ValueError("a task needs a non-empty id")
        object.__setattr__(self, "solutions", _frozen(self.solutions))
        object.__setattr__(self, "expected_tiers", _frozen(self.expected_tiers))

    def expected_tier(self, backend: str, device_name: str = "") -> int:
        """The tier the reference solution for ``backend`` is known to reach on the device called ``device_name``
        (``"NVIDIA H100 80GB HBM3"``): the tier of a ``"<backend>:<device>"`` key whose device is one of the name's
        words, else the backend's, else 1 (correct)."""
        words = set(device_name.split())
        for key, tier in self.expected_tiers.items():
            named, _, device = key.partition(":")
            if named == backend and device in words:
                return tier
        return self.expected_tiers.get(backend, 1)

    def source_for(self, backend: str) -> str:
        """The reference source with the backend's size constants written in (see module doc)."""
        sizes = self.metadata.sizes.get(backend)
        if not sizes:
            return self.source
        return rewrite_constants(self.source, sizes)

    def fingerprint(self, backend: str) -> str:
        """A short content hash of what is evaluated on ``backend`` (keys caches of baselines)."""
        blob = f"{self.source_for(backend)}\0{self.metadata.dtype}".encode()
        return hashlib.sha256(blob).hexdigest()[:16]


def for_precision(task: Task, precision: str) -> Task:
    """The task on the ``precision`` track ("fp32", "bf16" or "fp16"; see :class:`TaskMetadata`).

    fp32 gives the task as it is. Another track gets its own id (``<id>@bf16``), name and fingerprint, the reference's
    dtype, and a first line in its source that says so (``model.py`` is what the agent reads); the shipped solutions
    and their expected tiers are fp32 kernels and stay with the fp32 task.
    """
    if precision not in PRECISIONS:
        raise ValueError(f"unknown precision {precision!r}; expected one of {', '.join(PRECISIONS)}")
    if precision == task.metadata.precision:
        return task
    if task.metadata.precision != "fp32":
        raise ValueError(f"task {task.id!r} is on the {task.metadata.precision} track already")
    if precision == "fp32":
        return task
    dtype = PRECISIONS[precision]
    header = (
        f"# Precision track {precision}: the reference Model's weights and inputs are cast to torch.{dtype}, "
        f"and outputs must be torch.{dtype}.\n"
    )
    return dataclasses.replace(
        task,
        id=f"{task.id}@{precision}",
        name=f"{task.name} [{precision}]",
        source=header + task.source,
        metadata=dataclasses.replace(task.metadata, precision=precision, dtype=dtype, input_verdicts={}),
        solutions={},
        expected_tiers={},
    )


def with_sizes(task: Task, sizes: Mapping[str, Any]) -> Task:
    """The task with the module-level size constants of ``sizes`` that its source assigns rewritten (the others
    are not its own: a task set's tasks name their sizes differently).

    The values win over the task's per-backend size profile (``metadata.sizes``) and are kept in
    ``metadata.extra["size_overrides"]``; the id stays, the fingerprint follows the source (so baselines and input
    verdicts are the sized task's own). A task that assigns none of the names is returned as it is.
    """
    assigned = module_constants(task.source)
    present = {name: value for name, value in sizes.items() if name in assigned}
    if not present:
        return task
    profiles = {
        backend: {name: value for name, value in profile.items() if name not in present}
        for backend, profile in task.metadata.sizes.items()
    }
    extra = {**task.metadata.extra, "size_overrides": {**task.metadata.extra.get("size_overrides", {}), **present}}
    # the verdicts were about the other sizes' source
    metadata = dataclasses.replace(task.metadata, sizes=profiles, extra=extra, input_verdicts={})
    return dataclasses.replace(task, source=rewrite_constants(task.source, present), metadata=metadata)


def module_constants(source: str) -> dict[str, ast.Assign]:
    """The simple top-level ``NAME = ...`` assignments of a module, by name."""
    return {
        node.targets[0].id: node
        for node in python_source.parse(source).body
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name)
    }


def rewrite_constants(source: str, values: Mapping[str, Any]) -> str:
    """Replaces module-level ``NAME = ...`` assignments by ``NAME = repr(value)``.

    Only simple top-level assignments to a single name are rewritten; every name in ``values`` must
    have one, so a size profile can never silently fail to apply.
    """
    lines = source.splitlines(keepends=True)
    found = {name: node for name, node in module_constants(source).items() if name in values}
    missing = sorted(set(values) - set(found))
    if missing:
        raise ValueError(f"size constants not assigned at module level in the task source: {missing}")
    for name, node in sorted(found.items(), key=lambda item: -item[1].lineno):
        start, end = node.lineno - 1, (node.end_lineno or node.lineno) - 1
        newline = "\n" if lines[end].endswith("\n") else ""
        lines[start : end + 1] = [f"{name} = {values[name]!r}{newline}"]
    return "".join(lines)


class TaskSet(Sequence[Task]):
    """An ordered, immutable collection of tasks with lookup by id."""

    def __init__(self, name: str, tasks: Iterable[Task]) -> None:
        self.name = name
        self._tasks = tuple(tasks)
        self._by_id: dict[str, Task] = {}
        for task in self._tasks:
            if task.id in self._by_id:
                raise ValueError(f"task set {name!r} has two tasks with id {task.id!r}")
            self._by_id[task.id] = task

    def __len__(self) -> int:
        return len(self._tasks)

    def __getitem__(self, index):  # type: ignore[override]
        if isinstance(index, slice):
            return TaskSet(self.name, self._tasks[index])
        return self._tasks[index]

    def __iter__(self) -> Iterator[Task]:
        return iter(self._tasks)

    def __repr__(self) -> str:
        return f"TaskSet({self.name!r}, {len(self)} tasks)"

    @property
    def ids(self) -> tuple[str, ...]:
        return tuple(self._by_id)

    def get(self, task_id: str) -> Task:
        """The task with this id; a KeyError names the closest ids when there is none."""
        try:
            return self._by_id[task_id]
        except KeyError:
            import difflib

            close = difflib.get_close_matches(task_id, self._by_id, n=3)
            hint = f" Did you mean: {', '.join(close)}?" if close else ""
            raise KeyError(f"no task {task_id!r} in task set {self.name!r}.{hint}") from None

    def find(self, query: str) -> Task:
        """The task a user means by ``query``: its id, else the one task whose id ends in ``/query`` or whose name
        is ``query`` (``softmax`` for ``builtin/softmax``; case is ignored where nothing matches exactly). A
        KeyError names every match when several do, and the closest ids when none does."""
        if query in self._by_id:
            return self._by_id[query]
        for fold in (str, str.casefold):
            wanted = fold(query)
            matches = [t for t in self._tasks if fold(t.name) == wanted or fold(t.id).endswith("/" + wanted)]
            if len(matches) == 1:
                return matches[0]
            if matches:
                names = ", ".join(t.id for t in matches)
                raise KeyError(f"{query!r} is ambiguous in task set {self.name!r}: it matches {names}; give the id")
        return self.get(query)
