"""The evaluator: compile, verify, profile and submit for one task on one backend.

Trust layout (design.md, Evaluation):

* the environment's process builds the extension (it runs compilers, never the agent's code);
* a long-lived **reference process** runs only the task's reference: it draws inputs from secret seeds,
  keeps the reference outputs in its own memory, compares, and times the baselines;
* a fresh **candidate process** per stage loads the agent's extension and ``model_new.py``, reads the
  inputs and weights from files, and writes its outputs to files. It never holds a seed, a reference
  output or a verdict, and it is discarded after the stage (a crash or a CUDA fault taints nothing).

Every method returns a result object; nothing here raises at the agent.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import secrets
import threading
import time
from pathlib import Path
from typing import Any, Protocol

from cudagym import bytecode
from cudagym.backends import Backend
from cudagym.baseline_cache import BaselineCache
from cudagym.build import Builder, default_cache_dir
from cudagym.candidate_pool import CandidatePool
from cudagym.eval_config import (
    EvalConfig,
    preloads_compiler,
    prepares_ahead,
    resolve_bytecode,
    resolve_timing,
)
from cudagym.gpu_lock import shared_slot, timing_slot, warmup_slot_env
from cudagym.harness.common import WARMUP_SLOT_ENV
from cudagym.harness.timing import TimingConfig
from cudagym.inline_build import InlineBuilder
from cudagym.input_probe import declared_kinds, probe_verdict, verdict_key_for
from cudagym.integrity.policy import IntegrityPolicy
from cudagym.memory_slots import auto_slots, memory_slot
from cudagym.reference_process import ReferenceProcess
from cudagym.results import (
    CompileResult,
    IntegrityFinding,
    ProfileResult,
    SubmitResult,
    VerifyResult,
)
from cudagym.stage_judgement import (
    BaselineVerdict,
    judge_baselines,
)
from cudagym.stage_memo import FailureMemo
from cudagym.stages import candidates, compilation, profiling, submission, verification
from cudagym.stages.compilation import is_single_file, single_file_digest
from cudagym.stages.submission import merge_findings
from cudagym.stages.verification import describe_check
from cudagym.tasks.degeneracy import VerdictStore
from cudagym.tasks.input_verdict import InputVerdict
from cudagym.tasks.task import Task
from cudagym.workspace import Workspace

__all__ = [
    "EvalConfig",
    "Evaluator",
    "LocalEvaluator",
    "ReferenceProcess",
    "describe_check",
    "is_single_file",
    "merge_findings",
    "prepares_ahead",
    "single_file_digest",
]

logger = logging.getLogger(__name__)
_AHEAD = threading.local()  # ``active`` in the threads that prepare tasks ahead
COMPILE_POLL_S = 0.1  # how often the baselines timed ahead ask whether the reference's torch.compile is done


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
        self.builder = builder or Builder(backend, cache_dir=self.cache_dir, options=self.config.build)
        self.inline_builder = InlineBuilder(self.builder)
        self.verdicts = VerdictStore(self.cache_dir)  # the input probe's verdicts (``input_verdict``)
        self._reference: ReferenceProcess | None = None
        self._loaded_task: str | None = None  # the task the reference process holds
        self._ahead: threading.Thread | None = None
        self._baselining: threading.Thread | None = None  # the baselines timed ahead (``_time_baselines_ahead``)
        self._closing = False
        self.ahead_error = ""  # why the last preparation ahead stopped early (the stages redo what it missed)
        # seconds after the last preparation began at which each of its steps was done (``_mark_ahead``):
        # the timeline a first cycle's waits are read against (benchmarks/step_latency.py prints it)
        self.ahead_marks: dict[str, float] = {}
        self._ahead_start = time.monotonic()
        self._eval_mode = False
        # single-file solutions compiled: their digest -> (load_inline request key -> library built for it)
        self._inline_builds: dict[str, dict[str, str]] = {}
        self._peak_bandwidth: float | None = None
        self._tampered: tuple[str, ...] = ()
        self._timing: TimingConfig | None = None  # ``config.timing`` with the hold kernel (``timing``)
        self._timing_lock = threading.Lock()
        # where the children read (and the trusted ones write) imported modules' bytecode; None: the installation's
        self.bytecode_dir = resolve_bytecode(self.config, self.cache_dir)
        # a folder that holds nothing yet is compiled on every core at once, beside the reference's own imports
        self.bytecode_filler: bytecode.Filler | None = None
        if self.bytecode_dir is not None and not bytecode.filled(self.bytecode_dir):
            self.bytecode_filler = bytecode.Filler(self.bytecode_dir)
            threading.Thread(target=self.bytecode_filler.run, name="cudagym-bytecode", daemon=True).start()
        self.pool = CandidatePool(
            backend, self.config.limits, self.config.prestart, self._child_env(), fork_server=self.config.fork_server
        )
        self.last_static_findings: list[IntegrityFinding] = []  # one per static check, from the last precheck
        # timeouts and crashes of candidates, by content: unchanged files are not run into them again
        self.memo = FailureMemo()
        self._start_ahead()

    # -- preparation ahead -------------------------------------------------------------------------

    @property
    def prepares_ahead(self) -> bool:
        return prepares_ahead(self.config, self.backend)

    def _start_ahead(self) -> None:
        """Prepares the current task in a background thread (``EvalConfig.prepare_ahead``)."""
        if not self.prepares_ahead or self._closing:
            return
        previous, task = self._ahead, self.task
        self._ahead = threading.Thread(
            target=self._prepare_ahead, args=(previous, task), name="cudagym-prepare", daemon=True
        )
        self._ahead.start()

    def _prepare_ahead(self, previous: threading.Thread | None, task: Task) -> None:
        """What the first compile, verify and profile of ``task`` would otherwise wait for: spare candidates,
        the precompiled header, the reference process with the task loaded, the reference's torch.compile
        (begun in the reference process's background, so that a first verify is served meanwhile), the input
        verdict (``input_verdict``) and the baselines (timed by a thread of their own once torch.compile is built; a
        profile waits for them). Stops early when the task changed or the evaluator closes."""
        _AHEAD.active = True  # this thread prepares: it never waits for a preparation (its successor waits for it)
        if previous is not None:
            previous.join()
        try:
            if self._closing or self.task is not task:
                return
            self.ahead_marks, self._ahead_start = {}, time.monotonic()
            self.pool.fill()
            threading.Thread(target=self._prepare_header, name="cudagym-pch", daemon=True).start()
            # the hold kernel's build (a second or two, once per cache): beside the reference, not in a timing slot
            threading.Thread(target=lambda: self.timing, name="cudagym-hold", daemon=True).start()
            ref = self.reference()
            self._mark_ahead("reference_loaded")
            if self._closing or self.task is not task:
                return
            if self._cached_baselines() is not None:
                self.input_verdict()
                self._mark_ahead("input_verdict")
                return
            key = f"ahead-{secrets.token_hex(4)}"  # its own name: a later preparation never reuses it
            candidates.unchecked_inputs(self, ref, key)
            if self.config.compile_baseline:  # in the reference's background: a first verify need not wait
                slot = warmup_slot_env(self.backend, self.cache_dir).get(WARMUP_SLOT_ENV, "")
                ref.call("compile_reference", key=key, background=True, slot=slot)
            self._mark_ahead("compile_started")
            self.input_verdict()  # served beside the compile, which runs in the reference's background
            self._mark_ahead("input_verdict")
            self._baselining = threading.Thread(
                target=self._time_baselines_ahead, args=(ref, task, key), name="cudagym-baselines", daemon=True
            )
            self._baselining.start()
        except Exception as exc:  # the stages start what is missing and report their own errors
            self.ahead_error = f"{type(exc).__name__}: {exc}"
            logger.warning("preparing %s ahead failed (the stages do it themselves): %s", task.id, self.ahead_error)

    def _mark_ahead(self, step: str) -> None:
        self.ahead_marks[step] = round(time.monotonic() - self._ahead_start, 3)

    def _prepare_header(self) -> None:
        """Builds the binding headers' precompiled header (once per toolchain, about 20 s on a fresh cache)
        while the agent writes its first files; a compile that needs it meanwhile waits for this build."""
        try:
            self.builder.precompiled_header()
        except Exception as exc:  # the compile builds it again and reports its own error
            self.ahead_error = f"precompiled header: {type(exc).__name__}: {exc}"
            logger.warning("building the precompiled header ahead failed (the compile tries again): %s", exc)

    def _join_ahead(self) -> None:
        """Waits for the preparation ahead (the reference process serves one caller at a time)."""
        ahead = self._ahead
        if ahead is not None and not getattr(_AHEAD, "active", False):
            ahead.join()

    # -- compile -----------------------------------------------------------------------------------

    def compile(self, workspace: Workspace) -> CompileResult:
        """Builds kernels/ into cuda_extension; a single-file model_new.py (load_inline) is imported instead."""
        return compilation.compile_workspace(self, workspace)

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

    # -- helpers -----------------------------------------------------------------------------------

    @property
    def policy(self) -> IntegrityPolicy:
        """The integrity policy (``EvalConfig.policy``) with the task set's hints applied."""
        return self.config.policy.with_task_hints(self.task.metadata.extra.get("integrity_policy"))

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
        """One of the device's memory slots (``EvalConfig.memory_slots``) for a stage's checks or timing."""
        slots = self.config.memory_slots
        count = auto_slots(self.backend) if slots == "auto" else int(slots)
        return memory_slot(self.backend, self.cache_dir, count, timeout=max(1.0, deadline - time.monotonic()))

    @property
    def atol(self) -> float:
        return self.config.atol if self.config.atol is not None else self.task.metadata.atol

    @property
    def rtol(self) -> float:
        return self.config.rtol if self.config.rtol is not None else self.task.metadata.rtol

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

    def reference(self) -> ReferenceProcess:
        """The reference process, started on first use and (re)loaded with the current task."""
        self._join_ahead()
        if self._closing and getattr(_AHEAD, "active", False):
            raise RuntimeError("the evaluator is closing")
        task = self.task  # one snapshot: ``retarget`` may switch tasks while a preparation ahead loads
        if self._reference is None or not self._reference.alive:
            if self._reference is not None:
                self._reference.close()
            preload = preloads_compiler(self.config, self.backend)
            self._reference = ReferenceProcess(
                self.backend, self.config, preload_compiler=preload, env=bytecode.child_env(self.bytecode_dir)
            )
            self._loaded_task = None
        if self._loaded_task != task.id:
            reply = self._reference.call(
                "load",
                source=task.source_for(self.backend.name),
                device=self.backend.device,
                dtype=task.metadata.dtype,
                weight_seed=secrets.randbits(62),
                threads=self.backend.threads,
            )
            if reply.get("leaked_bytes", 0) > self.config.max_leaked_bytes:
                # device memory mapped by killed candidates is only returned when this process ends
                self._reference.close()
                self._reference = None
                return self.reference()
            self._eval_mode = bool(reply.get("eval_mode"))
            self._peak_bandwidth = reply.get("peak_bytes_per_s")
            self._loaded_task = task.id
        return self._reference

    def _roofline(self, ref: ReferenceProcess, candidate_ms: float, moved_bytes: int) -> IntegrityFinding:
        """The speed-of-light bound of a profile (``stages.profiling.roofline``)."""
        return profiling.roofline(self, ref, candidate_ms, moved_bytes)

    def _job(self, workspace: Workspace, compiled: CompileResult, folder: Path) -> dict[str, Any]:
        """A serving candidate's job (``stages.candidates.job``); every candidate stage asks for it here."""
        return candidates.job(self, workspace, compiled, folder)

    # -- verify ------------------------------------------------------------------------------------

    def verify(self, workspace: Workspace) -> VerifyResult:
        """Runs ModelNew on ``num_checks`` fresh input sets (and check 1's inputs once more, for determinism) in
        one candidate process; the reference process writes every input set, reads every output and compares."""
        return verification.verify(self, workspace)

    # -- profile -----------------------------------------------------------------------------------

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

    def _cached_baselines(self, task: Task | None = None) -> dict[str, Any] | None:
        """The cached baselines of ``task`` (default: the current one) when they hold every one this
        configuration needs, else None."""
        return self.baseline_cache.read(task or self.task, need_compile=self.config.compile_baseline)

    def baselines(
        self, key: str, *, ref: ReferenceProcess | None = None, task: Task | None = None, retime: bool = False
    ) -> tuple[float, float | None, bool]:
        """(eager_ms, compile_ms, from_cache) of ``task`` (default: the current one), measured on the reference's
        input set ``key`` when not cached (or, with ``retime``, whatever the cache holds), each in the device's
        timing slot.

        compile_ms is None when ``EvalConfig.compile_baseline`` is off (tiers then stop at 2). ``ref``: the
        reference process to use as it is (the timing ahead, which must not wait for a preparation)."""
        task = task or self.task
        data = None if retime else self._cached_baselines(task)
        if data is not None:
            return self._from_cache(data)
        timing = dataclasses.asdict(self.timing)
        ref = ref or self.reference()
        if self.config.compile_baseline:
            # nothing is timed beside a compile: its code generation would stretch the timed calls
            self._await_reference_compile(ref, task)
            with self._shared_slot("reference compile"):  # its first call generates code and runs: never timed
                ref.call("compile_reference", key=key)
        self.pool.join_reapers()  # a used candidate still tearing down its CUDA context would disturb the timing
        with self._timing_slot("baselines"):
            data = None if retime else self._cached_baselines(task)  # another environment may have timed them
            if data is not None:
                return self._from_cache(data)
            eager = ref.call("baseline", key=key, mode="eager", timing=timing)
            compiled = None
            if self.config.compile_baseline:
                compiled = ref.call("baseline", key=key, mode="compile", timing=timing)["median_ms"]
        self.baseline_cache.write(task, eager["median_ms"], compiled, eager_spread=eager["spread"])
        return eager["median_ms"], compiled, False

    def _from_cache(self, data: dict[str, Any]) -> tuple[float, float | None, bool]:
        """``baselines``' answer from a cache record."""
        return data["eager_ms"], data["compile_ms"] if self.config.compile_baseline else None, True

    def _await_reference_compile(self, ref: ReferenceProcess, task: Task) -> dict[str, Any]:
        """Waits, without holding the reference process, until a torch.compile it runs in the background is
        done (other threads' checks are served meanwhile), and returns its ``compile_done`` reply; raises when
        the task changed or the evaluator closes."""
        deadline = time.monotonic() + self.config.reference_timeout
        while not (state := ref.call("compile_done"))["done"]:
            if self._closing or self.task is not task:
                raise RuntimeError("the task changed or the evaluator closed while torch.compile ran")
            if time.monotonic() > deadline:
                raise RuntimeError(f"the reference's torch.compile took more than {self.config.reference_timeout:g} s")
            time.sleep(COMPILE_POLL_S)
        return state

    def _time_baselines_ahead(self, ref: ReferenceProcess, task: Task, key: str) -> None:
        """The baselines of ``task`` timed ahead, as soon as the reference's background compile is done, so
        that a first profile that comes later finds them cached instead of timing them itself. Drops the input
        set ``key`` when done."""
        try:
            if self.config.compile_baseline:
                seconds = self._await_reference_compile(ref, task).get("seconds") or {}
                done = time.monotonic() - self._ahead_start
                if "build" in seconds:  # when its imports were there: then came the device's slot and the build
                    after_imports = seconds["build"] + seconds.get("slot", 0.0)
                    self.ahead_marks["compiler_imported"] = round(done - after_imports, 3)
                self.ahead_marks["compile_done"] = round(done, 3)
            self.baselines(key, ref=ref, task=task)
            self._mark_ahead("baselines_timed")
        except Exception as exc:  # the profile times what is missing and reports its own errors
            if not self._closing and self.task is task:
                self.ahead_error = f"baselines: {type(exc).__name__}: {exc}"
                logger.warning("timing %s's baselines ahead failed (the profile times them): %s", task.id, exc)
        finally:
            if ref.alive and not self._closing:
                try:
                    ref.call("drop", key=key)
                except RuntimeError as exc:
                    self.ahead_error = f"baselines: dropping their inputs: {exc}"
                    logger.warning("dropping the inputs of %s's baselines timed ahead failed: %s", task.id, exc)

    def _profile_baselines(
        self, ref: ReferenceProcess, deadline: float, timed: dict[str, Any] | None
    ) -> tuple[BaselineVerdict, bool]:
        """A profile's baselines, asked for once its candidate is timed: those being timed ahead, waited for outside
        any memory slot (a first profile's candidate is timed while the reference still compiles), or else timed
        now; then judged against eager timed beside the candidate (``stage_judgement.judge_baselines``) and timed
        again when the cache proves stale. Returns the verdict and whether the times came from the cache."""
        self._await_baselines_ahead(deadline)
        data = self._cached_baselines()
        if data is None:
            eager_ms, compile_ms, _ = self._fresh_baselines(ref, deadline)
            data = {"eager_ms": eager_ms, "compile_ms": compile_ms, "eager_spread": 0.0}
            cached = False
        else:
            cached = True
        timed = timed or {}
        slowed = int(timed.get("clock_slowed", 0)) * 4 > max(1, int(timed.get("handshakes", 0)))
        compile_ms = data["compile_ms"] if self.config.compile_baseline else None
        verdict = judge_baselines(
            data["eager_ms"],
            compile_ms,
            float(data.get("eager_spread") or 0.0),
            list(timed.get("eager_ms", [])),
            cuda=self.backend.is_cuda,
            clock_slowed=slowed,
        )
        if timed.get("calibration_disturbed"):
            detail = (
                f"{verdict.detail}; the clock's calibration was never steady (calls {timed['calibration_disturbed']})"
            )
            verdict = dataclasses.replace(verdict, fair=False, detail=detail)
        if verdict.retime:
            eager_ms, compile_ms, _ = self._fresh_baselines(ref, deadline, retime=True)
            verdict = dataclasses.replace(
                verdict, eager_ms=eager_ms, compile_ms=compile_ms, detail=f"{verdict.detail}; timed again"
            )
            cached = False
        return verdict, cached

    def _fresh_baselines(
        self, ref: ReferenceProcess, deadline: float, *, retime: bool = False
    ) -> tuple[float, float | None, bool]:
        """The baselines timed now on an input set of their own (``baselines``)."""
        with self._memory_slot(deadline):
            candidates.unchecked_inputs(self, ref, "baselines")
            try:
                return self.baselines("baselines", retime=retime)
            finally:
                ref.call("drop", key="baselines")

    def _await_baselines_ahead(self, deadline: float) -> None:
        """Waits for the baselines being timed ahead (a profile would otherwise time them a second time), until
        ``deadline`` at most: past it the profile goes on and times whatever is still missing itself."""
        thread = self._baselining
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout=max(0.0, deadline - time.monotonic()))

    def profile(self, workspace: Workspace, *, ncu: bool = False) -> ProfileResult:
        """Times ModelNew on the reference process's clock (every call on fresh inputs, a random share of the calls
        compared in full), and compares with the eager and torch.compile baselines (cached per task, device and
        torch, and re-validated by eager timed beside the candidate)."""
        return profiling.profile(self, workspace, ncu=ncu)

    # -- CUDA faults -------------------------------------------------------------------------------

    # -- submit ------------------------------------------------------------------------------------

    def submit(self, workspace: Workspace) -> SubmitResult:
        """Compile, verify and profile in turn; the tier and every stage's findings."""
        return submission.submit(self, workspace)

    def retarget(self, task: Task) -> None:
        """Switches to another task, keeping the processes (the reference reloads on its next use)."""
        if task.id != self.task.id:
            self.task = task  # the reference reloads on its next use (its loaded task differs)
            self._start_ahead()

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
        reply = reference.poll("memory", timeout=30.0)
        if reply is None:
            return None
        return int(reply.get("peak_reserved_bytes") or 0) or None

    def close(self) -> None:
        """Stops the reference process and any candidate still running (idempotent)."""
        logger.debug("closing the evaluator of %s", self.task.id)
        self._closing = True  # a preparation ahead stops at its next step (its current call fails below)
        if self.bytecode_filler is not None:
            self.bytecode_filler.stop()
        if self._reference is not None:
            self._reference.close()
        if self._ahead is not None:
            self._ahead.join(timeout=30)
            self._ahead = None
        if self._baselining is not None:  # its calls fail with the reference process closed
            self._baselining.join(timeout=30)
            self._baselining = None
        self.pool.close()
        if self._reference is not None:
            self._reference.close()
            self._reference = None
        self._closing = False
