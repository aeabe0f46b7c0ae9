"""Task checks (``cudagym tasks check``): does each reference run, is it deterministic, and can a shortcut
pass its correctness check?

A task is *degenerate on its own inputs* when returning zeros, a constant, or one of its inputs passes the tolerance
on every input set drawn from the task's own distribution (KernelBench has such tasks: ReLU-like ops on inputs in
[0, 1), near-zero outputs), or when its output does not depend on its inputs. The check then runs the input probe
(``cudagym.input_probe``): which input kinds close the shortcut (verification draws them), or that none does (the
task stays degenerate and its tier is capped). The verdict is stored in the cache's verdict store, where evaluations
and ``cudagym.tasks.load`` find it. Each reference runs in the trusted reference process of the evaluator, on the
chosen backend, at the sizes the task was loaded with (``load(..., sizes=)``, ``--sizes``); the measured eager
runtime is kept in the cache under ``eager/``.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import secrets
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from cudagym import bytecode
from cudagym.backends import Backend, find_toolchain
from cudagym.build import default_cache_dir
from cudagym.eval_config import resolve_bytecode, resolve_timing
from cudagym.evaluator import EvalConfig, ReferenceProcess
from cudagym.harness.protocol import Baseline, CheckTask, Drop, Load
from cudagym.harness.timing import METHOD_REVISION
from cudagym.input_probe import declared_kinds, probe_verdict, verdict_key_for
from cudagym.tasks.degeneracy import KindProbe, VerdictStore
from cudagym.tasks.input_verdict import DEGENERATE_MAX_TIER, KIND_NAMES, InputVerdict
from cudagym.tasks.task import Task

CHECKED_KINDS = ("task", "normal")
"""The declared input kinds whose sets the determinism and finiteness checks run on; other declared kinds
(``large``) are probed for shortcuts only."""


@dataclasses.dataclass(frozen=True)
class TaskCheck:
    """What the checks found for one task (``error`` is set when the reference could not run).

    The ``*_pass`` and ``input_independent`` fields are about the task's own input distribution; ``inputs`` is the
    input probe's verdict (the kinds verification draws, and whether the task stays degenerate under all of them).
    """

    task_id: str
    deterministic: bool = False
    finite: bool = False
    zeros_pass: bool = False
    constant_pass: bool = False
    input_pass: bool = False
    input_independent: bool = False
    inputs: InputVerdict | None = None
    eager_ms: float | None = None
    error: str = ""

    @property
    def degenerate(self) -> bool:
        """A shortcut passes on the task's own inputs (whether another input kind closes it: ``inputs``)."""
        return self.zeros_pass or self.constant_pass or self.input_pass or self.input_independent

    @property
    def verdict(self) -> str:
        if self.error:
            return "error"
        problems = [
            name
            for name, bad in (
                ("zeros pass", self.zeros_pass),
                ("a constant passes", self.constant_pass),
                ("an input passes", self.input_pass),
                ("output ignores inputs", self.input_independent),
                ("nondeterministic", not self.deterministic),
                ("NaN/Inf in output", not self.finite),
            )
            if bad
        ]
        if not problems:
            return "ok"
        suffix = self._closure() if self.degenerate else ""
        return "DEGENERATE: " + ", ".join(problems) + suffix if self.degenerate else "FLAGGED: " + ", ".join(problems)

    def _closure(self) -> str:
        """What the input probe found for the shortcuts: which kinds close them, or that none does."""
        if self.inputs is None:
            return ""
        if self.inputs.degenerate:
            return f" (no input kind closes it: the tier is capped at {DEGENERATE_MAX_TIER})"
        if self.inputs.added:
            drawn = " and ".join(KIND_NAMES.get(kind, kind) for kind in self.inputs.added)
            return f" ({drawn} close it: verification draws them)"
        return " (the declared input kinds close it)"

    @property
    def flagged(self) -> bool:
        return self.verdict != "ok"


@dataclasses.dataclass(frozen=True)
class DeviceSlots:
    """How a check shares the device (``cudagym.gpu_lock``'s slots): ``work`` for its untimed device work, ``timing``
    for the eager timing, which wants the device alone. ``timing`` None: the check measures no eager time
    (``eager_ms`` is None), for a caller that times eager later in a hold of the exclusive slot it shares with other
    timings (and records it with :func:`remember_eager`)."""

    work: Callable[[], contextlib.AbstractContextManager[Any]]
    timing: Callable[[], contextlib.AbstractContextManager[Any]] | None = None


def check_task(
    task: Task,
    backend: Backend,
    *,
    config: EvalConfig | None = None,
    runs: int = 3,
    cache_dir: str | Path | None = None,
    reference: ReferenceProcess | None = None,
    slots: DeviceSlots | None = None,
) -> TaskCheck:
    """Runs the checks for one task (at the sizes it was loaded with) and stores its input verdict. With ``slots``,
    the eager time is measured in a request of its own inside ``slots.timing`` and the rest inside ``slots.work``,
    so that only the timing keeps other processes off the device (the synthesis filters check many tasks at once)."""
    config = config or EvalConfig()
    folder = Path(cache_dir) if cache_dir else default_cache_dir()
    timing = resolve_timing(config.timing, backend, folder, find_toolchain().nvcc)  # the evaluator's method
    atol = config.atol if config.atol is not None else task.metadata.atol
    rtol = config.rtol if config.rtol is not None else task.metadata.rtol
    declared = declared_kinds(task, config)
    own = reference is None
    try:
        ref = reference or _reference_process(backend, config, folder)
        try:
            ref.call(
                Load(
                    source=task.source_for(backend.name),
                    device=backend.device,
                    dtype=task.metadata.dtype,
                    weight_seed=secrets.randbits(62),
                    threads=backend.threads,
                )
            )
            checked = [kind for kind in declared if kind in CHECKED_KINDS] or [declared[0]]
            kinds = [kind for kind in checked for _ in range(runs)]
            seeds = [secrets.randbits(62) for _ in kinds]
            timed_here = None if slots is not None else dataclasses.asdict(timing)
            with slots.work() if slots is not None else contextlib.nullcontext():
                report = ref.call(CheckTask(seeds=seeds, kinds=kinds, atol=atol, rtol=rtol, timing=timed_here))
                known = {kind: KindProbe.from_report(report.part(kind)) for kind in checked}
                inputs = probe_verdict(ref, declared, atol, rtol, sets=runs, known=known)
            if slots is not None:
                if slots.timing is not None:
                    with slots.timing():
                        eager = ref.call(Baseline(key="check", mode="eager", timing=dataclasses.asdict(timing)))
                    report = dataclasses.replace(report, eager_ms=eager.median_ms)
                ref.call(Drop(key="check"))
        finally:
            if own:
                ref.close()
    except (RuntimeError, ValueError, SyntaxError) as exc:
        return TaskCheck(task.id, error=str(exc).splitlines()[0][:300] if str(exc) else type(exc).__name__)
    VerdictStore(folder).write(verdict_key_for(task, backend.name, config), inputs, task.id)
    own_kind = report.part(declared[0]).passes
    result = TaskCheck(
        task.id,
        deterministic=report.deterministic,
        finite=report.finite,
        zeros_pass=all(own_kind["zeros"]),
        constant_pass=all(own_kind["constant"]),
        input_pass=all(own_kind["input"]),
        input_independent=len(own_kind["independent"]) > 1 and all(own_kind["independent"][1:]),
        inputs=inputs,
        eager_ms=report.eager_ms,
    )
    remember_eager(task, backend, report.eager_ms, folder)
    return result


def remember_eager(task: Task, backend: Backend, eager_ms: float | None, cache_dir: Path) -> None:
    """Keeps ``task``'s measured eager time on this device in the cache (``eager/``); None keeps nothing."""
    if eager_ms is None:
        return
    folder = cache_dir / "eager"
    folder.mkdir(parents=True, exist_ok=True)
    key = f"{task.fingerprint(backend.name)}-{backend.name}"
    record = {
        "task": task.id,
        "device": backend.device_name,
        "torch": find_toolchain().torch_version,
        "sizes": dict(task.metadata.extra.get("size_overrides", {})),
        "eager_ms": eager_ms,
        "timing_revision": METHOD_REVISION,
    }
    tmp = folder / f".{key}.{os.getpid()}.tmp"
    tmp.write_text(json.dumps(record))
    os.replace(tmp, folder / f"{key}.json")


def _reference_process(backend: Backend, config: EvalConfig, cache_dir: Path) -> ReferenceProcess:
    """A reference process as the evaluator starts one on ``cache_dir`` (with its bytecode cache)."""
    return ReferenceProcess(backend, config, env=bytecode.child_env(resolve_bytecode(config, cache_dir)))


def check_tasks(tasks: Iterable[Task], backend: Backend, **options: Any) -> list[TaskCheck]:
    """Checks several tasks, reusing one reference process."""
    config = options.pop("config", None) or EvalConfig()
    folder = Path(options["cache_dir"]) if options.get("cache_dir") else default_cache_dir()
    reference = _reference_process(backend, config, folder)
    results = []
    try:
        for task in tasks:
            if not reference.alive:
                reference.close()
                reference = _reference_process(backend, config, folder)
            results.append(check_task(task, backend, config=config, reference=reference, **options))
    finally:
        reference.close()
    return results


def format_report(results: list[TaskCheck]) -> str:
    """A Markdown table of the checks."""
    header = (
        "task | deterministic | zeros pass | constant passes | input passes | ignores inputs | inputs verified | "
        "eager ms | verdict"
    )
    rows = [f"| {header} |", "|---|---|---|---|---|---|---|---|---|"]
    for r in results:
        eager = f"{r.eager_ms:.4g}" if r.eager_ms is not None else "n/a"
        verdict = r.verdict if not r.error else f"error: {r.error}"
        drawn = ", ".join(r.inputs.kinds) if r.inputs is not None else "n/a"
        rows.append(
            f"| {r.task_id} | {_yn(r.deterministic)} | {_yn(r.zeros_pass)} | {_yn(r.constant_pass)} | "
            f"{_yn(r.input_pass)} | {_yn(r.input_independent)} | {drawn} | {eager} | {verdict} |"
        )
    return "\n".join(rows)


def _yn(value: bool) -> str:
    return "yes" if value else "no"
