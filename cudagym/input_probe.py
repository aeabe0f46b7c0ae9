"""The input probe, run by the trusted reference process: which input kinds a task's verification draws, and whether
the task is degenerate (the rule: :mod:`cudagym.tasks.degeneracy`; the verdict: :mod:`cudagym.tasks.input_verdict`).

An evaluator asks once per task and cache (:class:`~cudagym.tasks.degeneracy.VerdictStore`): the first verify of a
task (or, on cuda, its preparation ahead) probes a few input sets per kind in the reference process, which has the
task loaded; every later evaluation reads the stored verdict. ``cudagym tasks check`` stores the same verdicts.
"""

from __future__ import annotations

import logging
import secrets
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

from cudagym.harness.protocol import Shortcuts
from cudagym.tasks.degeneracy import KindProbe, VerdictStore, decide, task_verdict_key
from cudagym.tasks.input_verdict import InputVerdict
from cudagym.tasks.task import Task

if TYPE_CHECKING:
    from cudagym.eval_config import EvalConfig
    from cudagym.reference_process import ReferenceProcess

logger = logging.getLogger(__name__)

PROBE_SETS = 3
"""Input sets per kind: a shortcut *matters* when it passes on all of them; a kind *closes* it when it passes on
none."""


def declared_kinds(task: Task, config: EvalConfig) -> tuple[str, ...]:
    """The input kinds an evaluation declares: ``EvalConfig.input_kinds``, else the task's own."""
    return tuple(config.input_kinds or task.metadata.input_kinds or ("task",))


def verdict_key_for(task: Task, backend: str, config: EvalConfig) -> str:
    """The cache key of ``task``'s verdict as an evaluation with ``config`` sees it on ``backend``."""
    return task_verdict_key(task, backend, atol=config.atol, rtol=config.rtol, kinds=config.input_kinds)


def known_verdict(store: VerdictStore, task: Task, backend: str, config: EvalConfig) -> InputVerdict | None:
    """The stored verdict of ``task`` (None when it has not been probed with this cache yet)."""
    return store.read(verdict_key_for(task, backend, config))


def probe_verdict(
    ref: ReferenceProcess,
    declared: Sequence[str],
    atol: float,
    rtol: float,
    *,
    sets: int = PROBE_SETS,
    known: Mapping[str, KindProbe] | None = None,
) -> InputVerdict:
    """Decides the verdict with the reference process, which holds the task: ``sets`` input sets from secret seeds
    per kind it needs (``known``: kinds already probed, e.g. by the task checks). A candidate kind the reference fails
    on is unusable; a failure on a declared kind, or of the process, raises RuntimeError."""
    ready = dict(known or {})

    def probe(kind: str) -> KindProbe:
        if kind in ready:
            return ready[kind]
        seeds = [secrets.randbits(62) for _ in range(sets)]
        try:
            report = ref.call(Shortcuts(seeds=seeds, kinds=[kind] * sets, atol=atol, rtol=rtol))
        except RuntimeError as exc:
            if kind in declared or not ref.alive:
                raise
            logger.info("input kind %r is unusable for this task: %s", kind, exc)
            return KindProbe.failed(kind)
        return KindProbe.from_report(report)

    return decide(declared, probe)
