"""Task checks (``cudagym tasks check``): does each reference run, is it deterministic, and can a shortcut
pass its correctness check?

A task is *degenerate* when returning zeros, a constant, or one of its inputs passes the tolerance on
every input set drawn from the task's own distribution (KernelBench has such tasks: ReLU-like ops on
inputs in [0, 1), near-zero outputs), or when its output does not depend on its inputs. When the task
allows signed normal inputs (``input_kinds`` has "normal"), the check also reports whether those inputs
close the shortcut, since verification draws them too. Each reference runs in the trusted reference
process of the evaluator, on the chosen backend; the measured eager runtime is kept in the baseline cache.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import secrets
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from cudagym import bytecode
from cudagym.backends import Backend, find_toolchain
from cudagym.build import default_cache_dir
from cudagym.eval_config import resolve_bytecode, resolve_timing
from cudagym.evaluator import EvalConfig, ReferenceProcess
from cudagym.harness.timing import METHOD_REVISION
from cudagym.tasks.task import Task, module_constants, rewrite_constants


@dataclasses.dataclass(frozen=True)
class TaskCheck:
    """What the checks found for one task (``error`` is set when the reference could not run)."""

    task_id: str
    deterministic: bool = False
    finite: bool = False
    zeros_pass: bool = False
    constant_pass: bool = False
    input_pass: bool = False
    input_independent: bool = False
    closed_by_normal_inputs: bool = False
    eager_ms: float | None = None
    error: str = ""

    @property
    def degenerate(self) -> bool:
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
        suffix = " (signed normal inputs close it)" if self.closed_by_normal_inputs else ""
        return "DEGENERATE: " + ", ".join(problems) + suffix if self.degenerate else "FLAGGED: " + ", ".join(problems)

    @property
    def flagged(self) -> bool:
        return self.verdict != "ok"


def _sized(task: Task, backend: str, overrides: Mapping[str, Any]) -> str:
    source = task.source_for(backend)
    if not overrides:
        return source
    assigned = module_constants(source)
    present = {k: v for k, v in overrides.items() if k in assigned}
    return rewrite_constants(source, present) if present else source


def check_task(
    task: Task,
    backend: Backend,
    *,
    config: EvalConfig | None = None,
    runs: int = 3,
    overrides: Mapping[str, Any] | None = None,
    cache_dir: str | Path | None = None,
    reference: ReferenceProcess | None = None,
) -> TaskCheck:
    """Runs the checks for one task; ``overrides`` rewrites size constants (e.g. to shrink KernelBench)."""
    config = config or EvalConfig()
    folder = Path(cache_dir) if cache_dir else default_cache_dir()
    timing = resolve_timing(config.timing, backend, folder, find_toolchain().nvcc)  # the evaluator's method
    own = reference is None
    try:
        ref = reference or _reference_process(backend, config, folder)
        try:
            source = _sized(task, backend.name, overrides or {})
            ref.call(
                "load",
                source=source,
                device=backend.device,
                dtype=task.metadata.dtype,
                weight_seed=secrets.randbits(62),
                threads=backend.threads,
            )
            kinds = ["task"] * runs
            if "normal" in task.metadata.input_kinds:
                kinds += ["normal"] * runs
            report = ref.call(
                "check_task",
                seeds=[secrets.randbits(62) for _ in kinds],
                kinds=kinds,
                atol=task.metadata.atol,
                rtol=task.metadata.rtol,
                timing=dataclasses.asdict(timing),
            )["report"]
        finally:
            if own:
                ref.close()
    except (RuntimeError, ValueError, SyntaxError) as exc:
        return TaskCheck(task.id, error=str(exc).splitlines()[0][:300] if str(exc) else type(exc).__name__)
    on_task = slice(0, runs)
    on_normal = slice(runs, None)

    def always(name: str, part: slice) -> bool:
        values = report[name][part]
        return bool(values) and all(values)

    def never(name: str, part: slice) -> bool:
        return not any(report[name][part])

    shortcut_on_task = any(always(n, on_task) for n in ("zeros", "constant", "input"))
    closed = (
        shortcut_on_task
        and all(never(n, on_normal) for n in ("zeros", "constant", "input"))
        and bool(report["zeros"][on_normal])
    )
    result = TaskCheck(
        task.id,
        deterministic=bool(report["deterministic"]),
        finite=bool(report["finite"]),
        zeros_pass=always("zeros", on_task),
        constant_pass=always("constant", on_task),
        input_pass=always("input", on_task),
        input_independent=always("independent", slice(1, runs)),
        closed_by_normal_inputs=closed,
        eager_ms=report.get("eager_ms"),
    )
    _remember_eager(task, backend, report.get("eager_ms"), overrides or {}, folder)
    return result


def _remember_eager(
    task: Task, backend: Backend, eager_ms: float | None, overrides: Mapping[str, Any], cache_dir: Path
) -> None:
    if eager_ms is None:
        return
    folder = cache_dir / "eager"
    folder.mkdir(parents=True, exist_ok=True)
    detail = json.dumps([backend.device_name, sorted(overrides.items())], default=str)
    key = f"{task.fingerprint(backend.name)}-{backend.name}-{hashlib.sha256(detail.encode()).hexdigest()[:12]}"
    record = {
        "task": task.id,
        "device": backend.device_name,
        "torch": find_toolchain().torch_version,
        "overrides": dict(overrides),
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
    header = "task | deterministic | zeros pass | constant passes | input passes | ignores inputs | eager ms | verdict"
    rows = [f"| {header} |", "|---|---|---|---|---|---|---|---|"]
    for r in results:
        eager = f"{r.eager_ms:.4g}" if r.eager_ms is not None else "n/a"
        verdict = r.verdict if not r.error else f"error: {r.error}"
        rows.append(
            f"| {r.task_id} | {_yn(r.deterministic)} | {_yn(r.zeros_pass)} | {_yn(r.constant_pass)} | "
            f"{_yn(r.input_pass)} | {_yn(r.input_independent)} | {eager} | {verdict} |"
        )
    return "\n".join(rows)


def _yn(value: bool) -> str:
    return "yes" if value else "no"
