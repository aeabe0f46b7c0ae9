"""The input probe's decision and its cache: which input kinds close a task's shortcuts (see
:mod:`cudagym.tasks.input_verdict`).

:func:`decide` is the rule. It asks a probe, for one input kind at a time, which shortcuts pass on a few input sets
of that kind (the trusted reference process answers: ``cudagym.input_probe``, ``cudagym tasks check``):

1. the declared kinds (the task's ``input_kinds``, or the evaluation's) are probed; a shortcut *matters* when it
   passes on every set of one of them;
2. a shortcut is *closed* by a kind on whose sets it never came near passing (it failed even at four times the
   tolerance, so that other seeds reject it too), provided the reference's outputs there are finite;
3. while a shortcut that matters is open, the candidate kinds (:data:`CANDIDATE_KINDS`, in order) are probed and
   each one that closes an open shortcut is added;
4. what stays open makes the task degenerate.

Nothing the agent writes enters the decision: it depends on the reference's source at its sizes, its dtype, the
tolerances and the declared kinds, which form the cache key (:func:`verdict_key`). The verdict does not depend on the
device (the same function on the same distributions), so one verdict serves every backend that evaluates the same
source. :class:`VerdictStore` keeps verdicts as JSON under ``<cache_dir>/inputs/``, so an evaluation probes a task
once per cache, and ``cudagym.tasks.load`` marks the tasks it returns with what is stored (:func:`annotate`).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
import os
import threading
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path

from cudagym.harness.protocol import ShortcutReport
from cudagym.tasks.input_verdict import SHORTCUTS, InputVerdict
from cudagym.tasks.task import Task

logger = logging.getLogger(__name__)

CANDIDATE_KINDS = ("normal", "large")
"""Kinds the probe may add, in the order it tries them: signed values first, then large magnitudes (which close
shortcuts of outputs that stay below the tolerance on unit-scale inputs, such as a softmax over many elements)."""

PROBE_REVISION = 1
"""Part of every cache key: bump it when the rule or the probe changes, so that stored verdicts are decided again."""

EVALUATED_BACKENDS = ("cpu", "cuda")
"""The backends whose evaluated source (``Task.source_for``) :func:`annotate` looks up."""


@dataclasses.dataclass(frozen=True)
class KindProbe:
    """Which shortcuts passed on the probe's input sets of one kind.

    Attributes:
        kind: the input kind.
        always: the shortcuts that passed on every set.
        near: the shortcuts that came near passing (passed at four times the tolerance) on at least one set.
        usable: the reference ran on every set and its outputs were finite (a kind that is not usable is never added).
    """

    kind: str
    always: frozenset[str] = frozenset()
    near: frozenset[str] = frozenset()
    usable: bool = True

    def closes(self, shortcut: str) -> bool:
        """Whether drawing this kind rejects ``shortcut`` by a margin on every set."""
        return self.usable and shortcut not in self.near

    @classmethod
    def from_report(cls, report: ShortcutReport) -> KindProbe:
        """From the reference's per-set report (``shortcut_report`` in ``cudagym/harness/shortcuts.py``) of sets that
        are all of one kind; ``independent`` is judged from the second set on (the first has no predecessor)."""
        kinds = set(report.kinds)
        if len(kinds) != 1:
            raise ValueError(f"a probe is of one input kind, the report has {sorted(kinds)}")
        always, near = set(), set()
        for name in SHORTCUTS:
            skip = 1 if name == "independent" else 0
            passed, close = report.passes[name][skip:], report.near[name][skip:]
            if passed and all(passed):
                always.add(name)
            if any(close):
                near.add(name)
        finite = report.finite_sets
        return cls(kinds.pop(), frozenset(always), frozenset(near), bool(finite) and all(finite))

    @classmethod
    def failed(cls, kind: str) -> KindProbe:
        """A kind the reference could not run on."""
        return cls(kind, usable=False)


def decide(declared: Sequence[str], probe: Callable[[str], KindProbe]) -> InputVerdict:
    """The verdict of the module docstring's rule; ``probe(kind)`` is called once per kind it needs."""
    kinds = tuple(dict.fromkeys(declared)) or ("task",)
    probes = [probe(kind) for kind in kinds]
    shortcuts = tuple(name for name in SHORTCUTS if any(name in p.always for p in probes))
    unclosed = [name for name in shortcuts if not any(p.closes(name) for p in probes)]
    added: list[str] = []
    unusable: list[str] = []
    for kind in CANDIDATE_KINDS:
        if not unclosed:
            break
        if kind in kinds:
            continue
        found = probe(kind)
        if not found.usable:
            unusable.append(kind)
            continue
        closed = [name for name in unclosed if found.closes(name)]
        if closed:
            added.append(kind)
            unclosed = [name for name in unclosed if name not in closed]
    return InputVerdict(
        kinds=(*added, *kinds),
        added=tuple(added),
        shortcuts=shortcuts,
        unclosed=tuple(unclosed),
        unusable=tuple(unusable),
    )


def verdict_key(source: str, dtype: str, atol: float, rtol: float, declared: Sequence[str]) -> str:
    """The cache key of a verdict: what the decision depends on (see the module docstring), 24 hex digits."""
    blob = json.dumps([source, dtype, float(atol), float(rtol), list(declared), PROBE_REVISION])
    return hashlib.sha256(blob.encode()).hexdigest()[:24]


def task_verdict_key(
    task: Task,
    backend: str,
    *,
    atol: float | None = None,
    rtol: float | None = None,
    kinds: Sequence[str] | None = None,
) -> str:
    """The key of ``task`` as evaluated on ``backend``; ``atol``, ``rtol`` and ``kinds`` override the task's own
    (as ``EvalConfig`` does)."""
    meta = task.metadata
    return verdict_key(
        task.source_for(backend),
        meta.dtype,
        meta.atol if atol is None else atol,
        meta.rtol if rtol is None else rtol,
        tuple(kinds or meta.input_kinds or ("task",)),
    )


class VerdictStore:
    """Verdicts as JSON files under ``<cache_dir>/inputs/``, written whole (a temporary file renamed over the old),
    with the ones read or written kept in memory."""

    def __init__(self, cache_dir: str | Path) -> None:
        self.folder = Path(cache_dir) / "inputs"
        self._known: dict[str, InputVerdict] = {}
        self._lock = threading.Lock()

    def read(self, key: str) -> InputVerdict | None:
        """The stored verdict of ``key``, or None (none stored, or a file that does not parse)."""
        with self._lock:
            if key in self._known:
                return self._known[key]
        try:
            data = json.loads((self.folder / f"{key}.json").read_text())
            verdict = InputVerdict.from_dict(data["verdict"])
        except (OSError, ValueError, KeyError, TypeError):
            return None
        with self._lock:
            self._known[key] = verdict
        return verdict

    def write(self, key: str, verdict: InputVerdict, task_id: str) -> None:
        """Stores ``verdict`` for ``key`` (``task_id`` is kept for whoever reads the file)."""
        self.folder.mkdir(parents=True, exist_ok=True)
        tmp = self.folder / f".{key}.{os.getpid()}.{threading.get_ident()}.tmp"
        tmp.write_text(json.dumps({"task": task_id, "revision": PROBE_REVISION, "verdict": verdict.to_dict()}))
        os.replace(tmp, self.folder / f"{key}.json")
        with self._lock:
            self._known[key] = verdict
        if verdict.degenerate:
            logger.warning("task %s is degenerate: %s", task_id, verdict.describe())


def annotate(task: Task, store: VerdictStore) -> Task:
    """``task`` with ``metadata.input_verdicts`` holding the stored verdict of each backend's evaluated source (with
    the task's own tolerances and kinds); the task as it is when none is stored."""
    found: dict[str, InputVerdict] = {}
    for backend in EVALUATED_BACKENDS:
        verdict = store.read(task_verdict_key(task, backend))
        if verdict is not None:
            found[backend] = verdict
    if not found:
        return task
    return dataclasses.replace(task, metadata=dataclasses.replace(task.metadata, input_verdicts=found))


def annotate_all(tasks: Iterable[Task], cache_dir: str | Path | None = None) -> list[Task]:
    """:func:`annotate` for every task, from the store of ``cache_dir`` (default: cudagym's cache directory)."""
    if cache_dir is None:
        from cudagym.build import default_cache_dir

        cache_dir = default_cache_dir()
    store = VerdictStore(cache_dir)
    return [annotate(task, store) for task in tasks]
