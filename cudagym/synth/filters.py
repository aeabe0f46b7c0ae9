"""The execution filters: each candidate runs in the trusted reference process, through the checks of
``cudagym tasks check`` (``cudagym.tasks.checks``), then through torch.compile.

A candidate is dropped, with its :class:`~cudagym.synth.records.DropReason`, when it does not execute on the backend,
gives two different outputs for one input (nondeterministic), gives NaN or Inf, is degenerate on its own inputs
(zeros, a constant or one of its inputs passes the correctness check, or its output ignores its inputs), has an eager
time outside ``[min_ms, max_ms]`` on this device, or fails under torch.compile. The numbers that decide come from the
reference process, which runs only the generated reference code (never an agent's).
"""

from __future__ import annotations

import collections
import contextlib
import dataclasses
import logging
import secrets
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from cudagym import bytecode
from cudagym.backends import Backend, find_toolchain
from cudagym.build import default_cache_dir
from cudagym.eval_config import resolve_bytecode, resolve_timing
from cudagym.evaluator import EvalConfig
from cudagym.fault_text import says_out_of_memory
from cudagym.gpu_lock import shared_slot, timing_slot, warmup_slot_spec
from cudagym.harness.protocol import Baseline, CompileDone, CompileReference, Drop, Prepare
from cudagym.harness.timing import TimingConfig
from cudagym.reference_process import ReferenceProcess
from cudagym.synth.memory_budget import MemoryBudget
from cudagym.synth.records import DropReason, Verdict
from cudagym.tasks.checks import DeviceSlots, TaskCheck, check_task, remember_eager
from cudagym.tasks.task import Task

logger = logging.getLogger(__name__)

WINDOWS: dict[str, tuple[float, float]] = {"cuda": (1.0, 100.0), "cpu": (0.5, 50.0)}
"""The eager-time window per backend, in ms: CUDA Agent's 1-100 ms on a GPU; on cpu a scaled one, so that a CI run
keeps its tasks small."""
COMPILE_KEY = "synth-compile"
SYNTH_EVAL_CONFIG = EvalConfig(
    timing=TimingConfig(
        warmup=2, warmup_seconds=0.05, warmup_max_seconds=0.2, min_reps=5, max_reps=50, budget_seconds=0.2
    )
)
"""The evaluation settings the filters use by default: short timing (about 0.25-0.5 s per measurement), enough to
place a task in a window a hundred times wide, and what keeps a thousand tasks within minutes on one GPU (timing
holds the device alone: it is the part of a candidate that workers cannot overlap)."""


@dataclasses.dataclass(frozen=True)
class FilterConfig:
    """How the execution filters judge.

    Attributes:
        min_ms, max_ms: the eager-time window (ms).
        runs: input sets per distribution for the determinism and shortcut checks.
        check_compile: run torch.compile on each candidate (and record its time).
        eval: the evaluation settings the reference process runs with (timing, tolerances, timeouts).
    """

    min_ms: float
    max_ms: float
    runs: int = 2
    check_compile: bool = True
    eval: EvalConfig = SYNTH_EVAL_CONFIG

    def __post_init__(self) -> None:
        if not 0 < self.min_ms < self.max_ms:
            raise ValueError(f"the eager-time window must satisfy 0 < min_ms < max_ms, got {self.min_ms}-{self.max_ms}")
        if self.runs < 1:
            raise ValueError(f"runs must be >= 1, got {self.runs}")

    @classmethod
    def for_backend(cls, backend: str, **options: object) -> FilterConfig:
        """The default window of ``backend`` (:data:`WINDOWS`), with ``options`` overriding fields."""
        low, high = WINDOWS[backend]
        return cls(**{"min_ms": low, "max_ms": high, **options})  # type: ignore[arg-type]


def verdict_of_checks(check: TaskCheck) -> Verdict:
    """The verdict of the task checks alone (execution, finiteness, determinism, shortcuts), whatever the time."""
    if check.error:
        if says_out_of_memory(check.error):
            return Verdict(DropReason.OUT_OF_MEMORY, check.error)
        return Verdict(DropReason.DOES_NOT_EXECUTE, check.error)
    if not check.finite:  # first: NaN differs from itself, so a NaN output also reads as nondeterministic
        return Verdict(DropReason.NOT_FINITE, "NaN or Inf in the output", check.eager_ms)
    if not check.deterministic:
        return Verdict(DropReason.NONDETERMINISTIC, "two runs on the same input differ", check.eager_ms)
    if check.degenerate:
        return Verdict(DropReason.DEGENERATE, check.verdict, check.eager_ms)
    return Verdict(eager_ms=check.eager_ms)


def verdict_of_window(eager_ms: float | None, config: FilterConfig) -> Verdict:
    """Whether the eager time ``eager_ms`` lies in the window."""
    if eager_ms is None:
        return Verdict(DropReason.DOES_NOT_EXECUTE, "no eager time measured")
    if eager_ms < config.min_ms:
        return Verdict(DropReason.TOO_FAST, f"eager {eager_ms:.3g} ms < {config.min_ms} ms", eager_ms)
    if eager_ms > config.max_ms:
        return Verdict(DropReason.TOO_SLOW, f"eager {eager_ms:.3g} ms > {config.max_ms} ms", eager_ms)
    return Verdict(eager_ms=eager_ms)


def verdict_of_check(check: TaskCheck, config: FilterConfig) -> Verdict:
    """The verdict the task checks give, with the eager time they measured, before torch.compile."""
    verdict = verdict_of_checks(check)
    return verdict if not verdict.passed else verdict_of_window(check.eager_ms, config)


class ExecutionFilter:
    """Judges candidates in one trusted reference process of its own (restarted when it dies).

    Args:
        backend: where the references run.
        config: the filters' settings.
        cache_dir: the cache the checks write their verdicts and eager times to (default: cudagym's).
        budget: the device memory this worker shares with the others (``memory_budget``; None: not shared out).
    """

    def __init__(
        self,
        backend: Backend,
        config: FilterConfig,
        cache_dir: str | Path | None = None,
        budget: MemoryBudget | None = None,
    ) -> None:
        self.backend = backend
        self.config = config
        self.budget = budget
        self.cache_dir = Path(cache_dir) if cache_dir else default_cache_dir()
        self.timing = resolve_timing(config.eval.timing, backend, self.cache_dir, find_toolchain().nvcc)
        # the device's shared slot as the reference process takes it for torch.compile's first run ("" where slots
        # do not lock)
        self._shared_slot = warmup_slot_spec(backend, self.cache_dir)
        self._reference: ReferenceProcess | None = None

    def _process(self) -> ReferenceProcess:
        if self._reference is None or not self._reference.alive:
            if self._reference is not None:
                self._reference.close()
            env = bytecode.child_env(resolve_bytecode(self.config.eval, self.cache_dir))
            self._reference = ReferenceProcess(
                self.backend, self.config.eval, preload_compiler=self.config.check_compile, env=env
            )
        return self._reference

    def judge(self, task: Task, footprint: int | None = None) -> Verdict:
        """The task's verdict: the checks, then torch.compile's code generation, then the timings, then the window.

        A candidate holds the device's exclusive slot once, for its eager and its torch.compile timing together:
        every exclusive hold makes the other workers' device work wait until the shared holders have drained, so
        one hold per candidate instead of two is what lets many workers share one GPU. The price: code generation
        runs before the eager time is known, so a candidate outside the window costs its torch.compile too (the
        composer sizes candidates for the window, so such drops are few).

        Device memory is shared by every worker's reference process. With a budget the judgement holds
        ``footprint`` bytes of it (None: the whole budget); a task that runs out of memory all the same is judged
        once more holding the whole budget, and dropped as ``out_of_memory`` only if it runs out alone. Without one,
        it is judged once more after giving back what its process holds. Either way the process gives its cached
        memory back after every judgement, so that one task's peak does not stay reserved while the others run."""
        verdict = self._judge_held(task, footprint)
        if verdict.reason is not DropReason.OUT_OF_MEMORY:
            return verdict
        alone = self.budget is not None
        logger.info("synth: %s ran out of device memory; judged again%s", task.id, " alone" if alone else " once")
        again = self._judge_held(task, None).adding(verdict.seconds)
        if alone and again.reason is DropReason.OUT_OF_MEMORY:
            detail = f"out of device memory with no other candidate on it: {again.detail}"
            return dataclasses.replace(again, detail=detail)
        return again

    def _judge_held(self, task: Task, footprint: int | None) -> Verdict:
        """One judgement in the budget's hold of ``footprint`` bytes (None: all of it), the memory given back inside."""
        if self.budget is None:
            hold: contextlib.AbstractContextManager[float | None] = contextlib.nullcontext()
        else:
            hold = self.budget.hold(footprint) if footprint is not None else self.budget.alone()
        with hold as waited:
            try:
                verdict = self._judge_once(task)
            finally:
                self._release()
        return verdict if waited is None else verdict.adding({"memory_wait": waited})

    def _judge_once(self, task: Task) -> Verdict:
        verdict = self._check(task)
        return self._compile_and_time(task, verdict) if verdict.passed else verdict

    def _check(self, task: Task) -> Verdict:
        """The task checks in the device's shared slot (no timing: that comes in :meth:`_compile_and_time`)."""
        reference = self._process()
        backend, cache = self.backend, self.cache_dir
        waits: collections.Counter[str] = collections.Counter()
        slots = DeviceSlots(work=lambda: _waited(shared_slot(backend, cache, label="synth check"), waits, "check_wait"))
        start = time.monotonic()
        check = check_task(
            task,
            backend,
            config=self.config.eval,
            runs=self.config.runs,
            cache_dir=cache,
            reference=reference,
            slots=slots,
        )
        return verdict_of_checks(check).adding({"check": time.monotonic() - start, **waits})

    def _compile_and_time(self, task: Task, verdict: Verdict) -> Verdict:
        """A fresh input set in the device's shared slot; torch.compile's code generation outside any slot (CPU work:
        no other worker's timing waits for it), its first run in the shared slot, which the reference process takes
        once the code exists (``harness/compile_backend.py``); then eager and torch.compile timed in one hold of the
        exclusive slot (the baselines an agent is measured by); then the window and the compile verdicts."""
        reference = self._process()
        waits: collections.Counter[str] = collections.Counter()
        timing = dataclasses.asdict(self.timing)
        compile_error: str | None = None
        compiled_ms: float | None = None
        start = time.monotonic()
        try:
            with _waited(shared_slot(self.backend, self.cache_dir, label="synth inputs"), waits, "compile_wait"):
                reference.call(Prepare(key=COMPILE_KEY, seed=secrets.randbits(62), kind="task"))
            if self.config.check_compile:
                try:
                    reference.call(CompileReference(key=COMPILE_KEY, slot=self._shared_slot))
                except RuntimeError as exc:
                    compile_error = _first_line(exc)
                if reference.alive:
                    waits["compile_wait"] += reference.call(CompileDone()).seconds.get("slot", 0.0)
            compiled_at = time.monotonic()
            if compile_error is not None and not reference.alive:  # torch.compile took the process down with it
                phases = {**verdict.seconds, "compile": compiled_at - start, **waits}
                return Verdict(DropReason.COMPILE_FAILS, compile_error).adding(phases)
            with _waited(timing_slot(self.backend, self.cache_dir, label="synth timing"), waits, "timing_wait"):
                eager_ms = reference.call(Baseline(key=COMPILE_KEY, mode="eager", timing=timing)).median_ms
                if self.config.check_compile and compile_error is None:
                    try:
                        compiled_ms = reference.call(Baseline(key=COMPILE_KEY, mode="compile", timing=timing)).median_ms
                    except RuntimeError as exc:
                        compile_error = _first_line(exc)
        except RuntimeError as exc:  # the reference ran before: what fails now is the device (memory) or the process
            detail = _first_line(exc)
            reason = DropReason.OUT_OF_MEMORY if says_out_of_memory(detail) else DropReason.DOES_NOT_EXECUTE
            return Verdict(reason, detail).adding({**verdict.seconds, "compile": time.monotonic() - start, **waits})
        phases = {"compile": compiled_at - start, "timing": time.monotonic() - compiled_at, **waits}
        remember_eager(task, self.backend, eager_ms, self.cache_dir)
        window = verdict_of_window(eager_ms, self.config).adding({**verdict.seconds, **phases})
        if not window.passed:
            return window
        if compile_error is not None:
            return dataclasses.replace(window, reason=DropReason.COMPILE_FAILS, detail=compile_error)
        return dataclasses.replace(window, compile_ms=compiled_ms)

    def _release(self) -> None:
        """Drops the input set and compiled model of :meth:`_compile_and_time` and gives the device memory the
        reference process caches beyond ``KEEP_CACHED`` back (its ``drop``): after every judgement, and before a
        judgement is repeated."""
        if self._reference is None or not self._reference.alive:
            return
        try:
            self._reference.call(Drop(key=COMPILE_KEY))
        except RuntimeError as exc:
            logger.warning("synth: the reference process could not give its memory back: %s", exc)

    def close(self) -> None:
        if self._reference is not None:
            self._reference.close()
            self._reference = None


def _first_line(exc: BaseException) -> str:
    return str(exc).splitlines()[0][:300] if str(exc) else type(exc).__name__


@contextlib.contextmanager
def _waited(slot: contextlib.AbstractContextManager[Any], waits: collections.Counter[str], phase: str) -> Iterator[Any]:
    """``slot`` held for the block, its wait (``gpu_lock.Slot.waited_s``) added to ``waits[phase]``."""
    with slot as held:
        waits[phase] += getattr(held, "waited_s", 0.0)
        yield held
