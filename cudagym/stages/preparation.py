"""A task prepared ahead of its first cycle (``Tuning.prepare_ahead``), in a background thread: spare
candidates, the precompiled header, the reference process with the task loaded, the reference's torch.compile (in
the reference process's background), the input verdict and the baselines (timed in a thread of their own,
``baselines.time_ahead``). What it reached and when is ``LocalEvaluator.ahead_marks``; why it stopped early,
``LocalEvaluator.ahead_error`` (the stages redo what it missed)."""

from __future__ import annotations

import logging
import secrets
import threading
import time
from typing import TYPE_CHECKING

from cudagym.gpu_lock import warmup_slot_spec
from cudagym.harness.protocol import CompileReference
from cudagym.stages import baselines
from cudagym.stages.candidates import unchecked_inputs
from cudagym.tasks.task import Task

if TYPE_CHECKING:
    from cudagym.evaluator import LocalEvaluator

logger = logging.getLogger("cudagym.evaluator")
_AHEAD = threading.local()  # ``active`` in the threads that prepare tasks ahead


def preparing() -> bool:
    """Whether the calling thread is one that prepares a task ahead."""
    return getattr(_AHEAD, "active", False)


def start(ev: LocalEvaluator) -> None:
    """Prepares the current task in a background thread (``Tuning.prepare_ahead``), after the one before."""
    if not ev.prepares_ahead or ev._closing:
        return
    previous, task = ev._ahead, ev.task
    ev._ahead = threading.Thread(target=prepare, args=(ev, previous, task), name="cudagym-prepare", daemon=True)
    ev._ahead.start()


def prepare(ev: LocalEvaluator, previous: threading.Thread | None, task: Task) -> None:
    """What the first compile, verify and profile of ``task`` would otherwise wait for: spare candidates,
    the precompiled header, the reference process with the task loaded, the reference's torch.compile
    (begun in the reference process's background, so that a first verify is served meanwhile), the input
    verdict (``input_verdict``) and the baselines (timed by a thread of their own once torch.compile is built; a
    profile waits for them). Stops early when the task changed or the evaluator closes."""
    _AHEAD.active = True  # this thread prepares: it never waits for a preparation (its successor waits for it)
    if previous is not None:
        previous.join()
    try:
        if ev._closing or ev.task is not task:
            return
        ev.ahead_marks, ev._ahead_start = {}, time.monotonic()
        ev.pool.fill()
        threading.Thread(target=prepare_header, args=(ev,), name="cudagym-pch", daemon=True).start()
        # the hold kernel's build (a second or two, once per cache): beside the reference, not in a timing slot
        threading.Thread(target=lambda: ev.timing, name="cudagym-hold", daemon=True).start()
        ref = ev.reference()
        mark(ev, "reference_loaded")
        if ev._closing or ev.task is not task:
            return
        if baselines.cached(ev) is not None:
            ev.input_verdict()
            mark(ev, "input_verdict")
            return
        key = f"ahead-{secrets.token_hex(4)}"  # its own name: a later preparation never reuses it
        unchecked_inputs(ev, ref, key)
        if ev.config.compile_baseline:  # in the reference's background: a first verify need not wait
            slot = warmup_slot_spec(ev.backend, ev.cache_dir)
            ref.call(CompileReference(key=key, background=True, slot=slot))
        mark(ev, "compile_started")
        ev.input_verdict()  # served beside the compile, which runs in the reference's background
        mark(ev, "input_verdict")
        ev._baselining = threading.Thread(
            target=baselines.time_ahead, args=(ev, ref, task, key), name="cudagym-baselines", daemon=True
        )
        ev._baselining.start()
    except Exception as exc:  # the stages start what is missing and report their own errors
        if ev._closing or ev.task is not task:  # ended by the close or the task's change (which kill what it started)
            logger.debug("preparing %s ahead stopped: %s", task.id, exc)
            return
        ev.ahead_error = f"{type(exc).__name__}: {exc}"
        logger.warning("preparing %s ahead failed (the stages do it themselves): %s", task.id, ev.ahead_error)


def mark(ev: LocalEvaluator, step: str) -> None:
    """Notes when ``step`` of the preparation was done (seconds after it began)."""
    ev.ahead_marks[step] = round(time.monotonic() - ev._ahead_start, 3)


def prepare_header(ev: LocalEvaluator) -> None:
    """Builds the binding headers' precompiled header (once per toolchain, about 20 s on a fresh cache)
    while the agent writes its first files; a compile that needs it meanwhile waits for this build."""
    try:
        ev.builder.precompiled_header()
    except Exception as exc:  # the compile builds it again and reports its own error
        ev.ahead_error = f"precompiled header: {type(exc).__name__}: {exc}"
        logger.warning("building the precompiled header ahead failed (the compile tries again): %s", exc)


def join(ev: LocalEvaluator) -> None:
    """Waits for the preparation ahead (the reference process serves one caller at a time); a thread that prepares
    never waits (its successor waits for it)."""
    ahead = ev._ahead
    if ahead is not None and not preparing():
        ahead.join()
