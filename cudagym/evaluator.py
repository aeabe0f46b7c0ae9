"""The evaluator: compile, verify, profile and submit for one task on one backend.

Trust layout (design.md, Evaluation):

* the environment's process builds the extension (it runs compilers, never the agent's code);
* a long-lived **reference process** runs only the task's reference: it draws inputs from secret seeds,
  keeps the reference outputs in its own memory, compares, and times the baselines;
* a fresh **candidate process** per stage loads the agent's extension and ``model_new.py``, reads the
  inputs and weights from files, and writes its outputs to files. It never holds a seed, a reference
  output or a verdict, and it is discarded after the stage (a crash or a CUDA fault taints nothing).

Every method returns a result object; nothing here raises at the agent.

``LocalEvaluator`` holds what the stages share (the task, the reference process, the candidate pool, the builders,
the caches, the device's slots); each stage's body is a module of ``cudagym.stages``.
"""

from __future__ import annotations

import contextlib
import logging
import secrets
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol, TypeVar

from cudagym import bytecode
from cudagym.backends import Backend
from cudagym.baseline_cache import BaselineCache
from cudagym.build import Builder, default_cache_dir
from cudagym.candidate_pool import CandidatePool
from cudagym.eval_config import EvalConfig, resolve_timing, resolve_tuning
from cudagym.gpu_lock import shared_slot, shared_slot_if_free, timing_slot, warmup_slot_env
from cudagym.harness.protocol import CandidateJob, Load, Memory
from cudagym.harness.timing import TimingConfig
from cudagym.inline_build import InlineBuilder
from cudagym.input_probe import declared_kinds, probe_verdict, verdict_key_for
from cudagym.integrity.policy import IntegrityPolicy
from cudagym.memory_slots import memory_slot
from cudagym.reference_process import ReferenceProcess
from cudagym.results import (
    CompileResult,
    IntegrityFinding,
    ProfileResult,
    Stage,
    StageResult,
    SubmitResult,
    VerifyResult,
)
from cudagym.stage_memo import FailureMemo
from cudagym.stages import baselines as baseline_times
from cudagym.stages import candidates, compilation, preparation, profiling, submission, verification
from cudagym.stages.baselines import Baselines
from cudagym.stages.compilation import is_single_file, single_file_digest
from cudagym.stages.submission import merge_findings
from cudagym.stages.verification import describe_check
from cudagym.tasks.degeneracy import VerdictStore
from cudagym.tasks.input_verdict import InputVerdict
from cudagym.tasks.task import Task
from cudagym.workspace import Workspace

__all__ = [
    "Baselines",
    "EvalConfig",
    "Evaluator",
    "LocalEvaluator",
    "ReferenceProcess",
    "describe_check",
    "is_single_file",
    "merge_findings",
    "single_file_digest",
]

logger = logging.getLogger(__name__)
_R = TypeVar("_R", bound=StageResult)
EXIT_SLOT_S = 10.0  # how long a process's end waits for the device's shared slot before it ends anyway


class Evaluator(Protocol):
    """What the environment needs from an evaluator; the CUDA backend and the shared evaluation service
    implement the same four calls."""

    def compile(self, workspace: Workspace) -> CompileResult: ...
    def verify(self, workspace: Workspace) -> VerifyResult: ...
    def profile(self, workspace: Workspace, *, ncu: bool = False) -> ProfileResult: ...
    def submit(self, workspace: Workspace) -> SubmitResult: ...
    def retarget(self, task: Task) -> None: ...
    def close(self) -> None: ...


class LocalEvaluator:
    """Evaluates one task's workspaces on this machine (see the module docstring)."""

    def __init__(
        self,
        task: Task,
        backend: Backend,
        config: EvalConfig | None = None,
        *,
        cache_dir: str | Path | None = None,
        builder: Builder | None = None,
    ) -> None:
        self.task = task
        self.backend = backend
        self.config = config or EvalConfig()
        self.cache_dir = Path(cache_dir) if cache_dir else default_cache_dir()
        # the throughput machinery, every "auto" answered once for this backend and cache (``cudagym.tuning``)
        self.tuning = resolve_tuning(self.config, backend, self.cache_dir)
        self.builder = builder or Builder(backend, cache_dir=self.cache_dir, options=self.config.build)
        self.inline_builder = InlineBuilder(self.builder)
        self.verdicts = VerdictStore(self.cache_dir)  # the input probe's verdicts (``input_verdict``)
        self._reference: ReferenceProcess | None = None
        self._loaded_task: str | None = None  # the task the reference process holds
        self._ahead: threading.Thread | None = None
        self._baselining: threading.Thread | None = None  # the baselines timed ahead (``baselines.time_ahead``)
        self._closing = False
        self.ahead_error = ""  # why the last preparation ahead stopped early (the stages redo what it missed)
        # seconds after the last preparation began at which each of its steps was done (``preparation.mark``):
        # the timeline a first cycle's waits are read against (benchmarks/step_latency.py prints it)
        self.ahead_marks: dict[str, float] = {}
        self._ahead_start = time.monotonic()
        self._eval_mode = False
        # single-file solutions compiled: their digest -> (load_inline request key -> library built for it)
        self._inline_builds: dict[str, dict[str, str]] = {}
        self._peak_bandwidth: float | None = None
        self._timing: TimingConfig | None = None  # ``config.timing`` with the hold kernel (``timing``)
        self._timing_lock = threading.Lock()
        # where the children read (and the trusted ones write) imported modules' bytecode; None: the installation's
        self.bytecode_dir = self.tuning.bytecode_dir
        # a folder that holds nothing yet is compiled on every core at once, beside the reference's own imports
        self.bytecode_filler: bytecode.Filler | None = None
        if self.bytecode_dir is not None and not bytecode.filled(self.bytecode_dir):
            self.bytecode_filler = bytecode.Filler(self.bytecode_dir)
            threading.Thread(target=self.bytecode_filler.run, name="cudagym-bytecode", daemon=True).start()
        self.pool = CandidatePool(
            backend,
            self.config.limits,
            self.tuning.prestart,
            self._child_env(),
            fork_server=self.tuning.fork_server,
            ending=lambda: shared_slot_if_free(backend, self.cache_dir, EXIT_SLOT_S, label="candidate exit"),
        )
        # timeouts and crashes of candidates, by content: unchanged files are not run into them again
        self.memo = FailureMemo()
        preparation.start(self)  # the task prepared ahead (``cudagym.stages.preparation``)

    # -- what the stages share -----------------------------------------------------------------------

    @property
    def prepares_ahead(self) -> bool:
        return self.tuning.prepare_ahead

    @property
    def policy(self) -> IntegrityPolicy:
        """The integrity policy (``EvalConfig.policy``) with the task set's hints applied."""
        return self.config.policy.with_task_hints(self.task.metadata.extra.get("integrity_policy"))

    @property
    def atol(self) -> float:
        return self.config.atol if self.config.atol is not None else self.task.metadata.atol

    @property
    def rtol(self) -> float:
        return self.config.rtol if self.config.rtol is not None else self.task.metadata.rtol

    @property
    def timing(self) -> TimingConfig:
        """The timing settings sent to the children (``eval_config.resolve_timing``: ``config.timing`` with the
        kernel that holds the GPU before each start event on cuda), resolved once."""
        with self._timing_lock:
            if self._timing is None:
                nvcc = self.builder.toolchain.nvcc
                self._timing = resolve_timing(self.config.timing, self.backend, self.cache_dir, nvcc)
            return self._timing

    @property
    def baseline_cache(self) -> BaselineCache:
        return BaselineCache(self.cache_dir, self.backend, self.builder.toolchain.torch_version, self.config.timing)

    def _child_env(self) -> dict[str, str]:
        """Environment additions for candidate processes. On the cpu backend they see no GPU, also on a
        machine that has one: they need none, and the sandbox's namespaces apply only where none is seen."""
        env = warmup_slot_env(self.backend, self.cache_dir)
        env.update(bytecode.child_env(self.bytecode_dir))
        if not self.backend.is_cuda:
            env["CUDA_VISIBLE_DEVICES"] = ""
        elif self.backend.arch.startswith("sm_"):
            digits = self.backend.arch[3:]
            env["TORCH_CUDA_ARCH_LIST"] = f"{digits[:-1]}.{digits[-1]}"
        return env

    def _timing_slot(self, label: str, deadline: float | None = None) -> contextlib.AbstractContextManager[Any]:
        """Exclusive use of the device while timing: one timing job per GPU across the processes and
        threads of this machine (``cudagym/gpu_lock.py``); compiles never wait for it. Waiting past
        ``deadline`` raises (a harness error)."""
        timeout = max(1.0, deadline - time.monotonic()) if deadline else self.config.profile_timeout
        return timing_slot(self.backend, self.cache_dir, timeout=timeout, label=label)

    def _shared_slot(self, label: str, deadline: float | None = None) -> contextlib.AbstractContextManager[Any]:
        """Shared use of the device for correctness work, which must not overlap another env's timing."""
        timeout = max(1.0, deadline - time.monotonic()) if deadline else self.config.verify_timeout
        return shared_slot(self.backend, self.cache_dir, timeout=timeout, label=label)

    def _memory_slot(self, deadline: float) -> contextlib.AbstractContextManager[float]:
        """One of the device's memory slots (``Tuning.memory_slots``) for a stage's checks or timing."""
        count = self.tuning.memory_slots
        return memory_slot(self.backend, self.cache_dir, count, timeout=max(1.0, deadline - time.monotonic()))

    def reference(self) -> ReferenceProcess:
        """The reference process, started on first use and (re)loaded with the current task."""
        preparation.join(self)
        if self._closing and preparation.preparing():
            raise RuntimeError("the evaluator is closing")
        task = self.task  # one snapshot: ``retarget`` may switch tasks while a preparation ahead loads
        if self._reference is None or not self._reference.alive:
            if self._reference is not None:
                self._stop_reference()
            preload = self.tuning.preload_compiler
            self._reference = ReferenceProcess(
                self.backend, self.config, preload_compiler=preload, env=bytecode.child_env(self.bytecode_dir)
            )
            self._loaded_task = None
        if self._loaded_task != task.id:
            # the process's first CUDA work (its context, the model's weights on the device) never runs beside a
            # timing of another environment's, as a candidate's start does not (its warm-up slot)
            with self._shared_slot("reference load"):
                reply = self._reference.call(
                    Load(
                        source=task.source_for(self.backend.name),
                        device=self.backend.device,
                        dtype=task.metadata.dtype,
                        weight_seed=secrets.randbits(62),
                        threads=self.backend.threads,
                    )
                )
            if reply.leaked_bytes > self.tuning.max_leaked_bytes:
                # device memory mapped by killed candidates is only returned when this process ends
                self._stop_reference()
                self._reference = None
                return self.reference()
            self._eval_mode = reply.eval_mode
            self._peak_bandwidth = reply.peak_bytes_per_s
            self._loaded_task = task.id
        return self._reference

    def input_verdict(self, deadline: float | None = None) -> InputVerdict:
        """The input kinds verification draws and whether the task is degenerate (``cudagym/input_probe.py``): the
        verdict stored in the cache, else probed now in the reference process (holding a memory slot and the device's
        shared slot, like a check) and stored. Raises RuntimeError when the reference fails (a harness error)."""
        task = self.task
        key = verdict_key_for(task, self.backend.name, self.config)
        verdict = self.verdicts.read(key)
        if verdict is not None:
            return verdict
        deadline = deadline or time.monotonic() + self.config.verify_timeout
        ref = self.reference()
        if self._loaded_task != task.id:
            raise RuntimeError(f"the task changed while its inputs were probed ({task.id})")
        with self._memory_slot(deadline), self._shared_slot("input probe", deadline):
            verdict = probe_verdict(ref, declared_kinds(task, self.config), self.atol, self.rtol)
        self.verdicts.write(key, verdict, task.id)
        return verdict

    def _job(self, workspace: Workspace, compiled: CompileResult, folder: Path) -> CandidateJob:
        """A serving candidate's job (``stages.candidates.job``); every candidate stage asks for it here."""
        return candidates.job(self, workspace, compiled, folder)

    # -- the stages (``cudagym.stages``) --------------------------------------------------------------

    def compile(self, workspace: Workspace) -> CompileResult:
        """Builds kernels/ into cuda_extension; a single-file model_new.py (load_inline) is imported instead."""
        return self._answered(CompileResult, Stage.COMPILE, lambda: compilation.compile_workspace(self, workspace))

    def verify(self, workspace: Workspace) -> VerifyResult:
        """Runs ModelNew on ``num_checks`` fresh input sets (and check 1's inputs once more, for determinism) in
        one candidate process; the reference process writes every input set, reads every output and compares."""
        return self._answered(VerifyResult, Stage.VERIFY, lambda: verification.verify(self, workspace))

    def profile(self, workspace: Workspace, *, ncu: bool = False) -> ProfileResult:
        """Times ModelNew on the reference process's clock (every call on fresh inputs and every timed call's output
        compared in full), and compares with the eager and torch.compile baselines (cached per task, device and
        torch, and re-validated by eager timed beside the candidate)."""
        return self._answered(ProfileResult, Stage.PROFILE, lambda: profiling.profile(self, workspace, ncu=ncu))

    def submit(self, workspace: Workspace) -> SubmitResult:
        """Compile, verify and profile in turn; the tier and every stage's findings."""
        return self._answered(SubmitResult, Stage.SUBMIT, lambda: submission.submit(self, workspace))

    def _answered(self, cls: type[_R], stage: Stage, run: Callable[[], _R]) -> _R:
        """``run()``'s result, or, where the machinery itself raised (a bug of ours, a library's error, not the
        agent's code, whose failures are results already), a harness-error result of ``cls`` saying why: a stage is
        answered, never raised into the caller (an RL trainer's loop). Its traceback goes to the log."""
        start = time.monotonic()
        try:
            return run()
        except Exception as exc:
            logger.exception("%s %s: the evaluation harness raised", stage.value, self.task.id)
            return candidates.harness_failure(cls, stage, exc, start)

    def baselines(
        self, key: str, *, ref: ReferenceProcess | None = None, task: Task | None = None, retime: bool = False
    ) -> Baselines:
        """(eager_ms, compile_ms, from_cache) of ``task`` (default: the current one), measured on the reference's
        input set ``key`` when not cached (or, with ``retime``, whatever the cache holds), each in the device's
        timing slot.

        compile_ms is None when ``EvalConfig.compile_baseline`` is off (tiers then stop at 2). ``ref``: the
        reference process to use as it is (the timing ahead, which must not wait for a preparation)."""
        return baseline_times.baselines(self, key, ref=ref, task=task, retime=retime)

    def _cached_baselines(self, task: Task | None = None) -> dict[str, Any] | None:
        """The cached baselines of ``task`` (default: the current one) when they hold every one this
        configuration needs, else None."""
        return baseline_times.cached(self, task)

    def _roofline(self, ref: ReferenceProcess, candidate_ms: float, moved_bytes: int) -> IntegrityFinding:
        """The speed-of-light bound of a profile (``stages.profiling.roofline``)."""
        return profiling.roofline(self, ref, candidate_ms, moved_bytes)

    # -- lifetime ------------------------------------------------------------------------------------

    def retarget(self, task: Task) -> None:
        """Switches to another task, keeping the processes (the reference reloads on its next use)."""
        if task.id != self.task.id:
            self.task = task  # the reference reloads on its next use (its loaded task differs)
            preparation.start(self)

    def process_ids(self) -> list[int]:
        """The processes this evaluator keeps running (its reference process, fork server and candidates): what the
        machine pool weighs when it bounds its memory (``cudagym.pool.evaluators``)."""
        reference = self._reference
        own = [reference.child.proc.pid] if reference is not None and reference.alive else []
        return own + self.pool.process_ids()

    def device_peak_bytes(self) -> int | None:
        """The most device memory the reference process has reserved since it started (its ``memory`` command: every
        command's and stage's peak), which the machine pool admits evaluators by (``cudagym.pool.admission``); None
        on cpu, before the process started, or while another call to it is in flight."""
        reference = self._reference
        if not self.backend.is_cuda or reference is None or not reference.alive:
            return None
        reply = reference.poll(Memory(), timeout=30.0)
        if reply is None:
            return None
        return reply.peak_reserved_bytes or None

    def _stop_reference(self) -> None:
        """Ends the reference process, in the device's shared slot where it comes within ``EXIT_SLOT_S``: the end of
        its CUDA context and the return of its device memory never run beside a timing of another environment's,
        which they would disturb (the trusted clock then refuses a calibration taken beside them). Ends it anyway
        after the wait: a close never hangs on the device's slots."""
        assert self._reference is not None
        if not self._reference.alive:  # ended already: nothing of it is left on the device
            self._reference.close()
            return
        with shared_slot_if_free(self.backend, self.cache_dir, EXIT_SLOT_S, label="reference exit"):
            self._reference.close()

    def close(self) -> None:
        """Stops the reference process and any candidate still running (idempotent)."""
        logger.debug("closing the evaluator of %s", self.task.id)
        self._closing = True  # a preparation ahead stops at its next step (its current call fails below)
        if self.bytecode_filler is not None:
            self.bytecode_filler.stop()
        if self._reference is not None:
            self._stop_reference()
        if self._ahead is not None:
            self._ahead.join(timeout=30)
            self._ahead = None
        if self._baselining is not None:  # its calls fail with the reference process closed
            self._baselining.join(timeout=30)
            self._baselining = None
        self.pool.close()
        if self._reference is not None:
            self._stop_reference()
            self._reference = None
        self._closing = False
