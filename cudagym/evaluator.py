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
import hashlib
import secrets
import shutil
import tempfile
import threading
import time
from pathlib import Path
from typing import Any, Protocol

from cudagym import bytecode
from cudagym.backends import Backend
from cudagym.baseline_cache import BaselineCache
from cudagym.build import Builder, default_cache_dir
from cudagym.candidate_pool import CandidatePool, Phases, candidate_output, classify
from cudagym.eval_config import (
    EvalConfig,
    pairs_eager,
    preloads_compiler,
    prepares_ahead,
    resolve_bytecode,
    resolve_timing,
)
from cudagym.gpu_lock import shared_slot, timing_slot, warmup_slot_env
from cudagym.harness.common import WARMUP_SLOT_ENV
from cudagym.harness.timing import TimingConfig
from cudagym.integrity import runtime
from cudagym.integrity.policy import IntegrityPolicy
from cudagym.integrity.static_checks import run_static_checks, violation_message
from cudagym.memory_slots import auto_slots, memory_slot
from cudagym.ncu import summarize_ncu
from cudagym.paired_timing import PairedTiming, interleave
from cudagym.reference_process import ReferenceProcess
from cudagym.results import (
    CheckResult,
    CompileResult,
    IntegrityFinding,
    KernelTime,
    ProfileResult,
    Stage,
    Status,
    SubmitResult,
    VerifyResult,
    milestone_tier,
)
from cudagym.sandbox import Child, exchange_dir
from cudagym.tasks.task import Task
from cudagym.text import clean
from cudagym.workspace import Workspace

_AHEAD = threading.local()  # ``active`` in the threads that prepare tasks ahead
COMPILE_POLL_S = 0.1  # how often the baselines timed ahead ask whether the reference's torch.compile is done


@dataclasses.dataclass
class _Measured:
    """What a profile got from its candidate: the timing (``timed`` message, and the interleaved ``pair`` when
    eager was paired), the per-kernel breakdown, the re-check on fresh inputs and the integrity findings."""

    timed: dict[str, Any] | None = None
    pair: PairedTiming | None = None
    kernels: list[dict[str, Any]] = dataclasses.field(default_factory=list)
    recheck: CheckResult | None = None
    findings: list[IntegrityFinding] = dataclasses.field(default_factory=list)


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
        self._single_file_ok: set[str] = set()
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
        (begun in the reference process's background, so that a first verify is served meanwhile) and the
        baselines (timed by a thread of their own once torch.compile is built; a profile waits for them).
        Stops early when the task changed or the evaluator closes."""
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
            switched = self._closing or self.task is not task
            if switched or self._cached_baselines() is not None:
                return
            key = f"ahead-{secrets.token_hex(4)}"  # its own name: a later preparation never reuses it
            folder = Path(tempfile.mkdtemp(prefix="cudagym-ahead-", dir=exchange_dir()))
            try:
                self._unchecked_inputs(ref, key, folder)
                if self.config.compile_baseline:  # in the reference's background: a first verify need not wait
                    slot = warmup_slot_env(self.backend, self.cache_dir).get(WARMUP_SLOT_ENV, "")
                    ref.call("compile_reference", key=key, background=True, slot=slot)
                self._mark_ahead("compile_started")
            finally:
                shutil.rmtree(folder, ignore_errors=True)
            self._baselining = threading.Thread(
                target=self._time_baselines_ahead, args=(ref, task, key), name="cudagym-baselines", daemon=True
            )
            self._baselining.start()
        except Exception as exc:  # the stages start what is missing and report their own errors
            self.ahead_error = f"{type(exc).__name__}: {exc}"

    def _mark_ahead(self, step: str) -> None:
        self.ahead_marks[step] = round(time.monotonic() - self._ahead_start, 3)

    def _prepare_header(self) -> None:
        """Builds the binding headers' precompiled header (once per toolchain, about 20 s on a fresh cache)
        while the agent writes its first files; a compile that needs it meanwhile waits for this build."""
        try:
            self.builder.precompiled_header()
        except Exception as exc:  # the compile builds it again and reports its own error
            self.ahead_error = f"precompiled header: {type(exc).__name__}: {exc}"

    def _unchecked_inputs(self, ref: ReferenceProcess, key: str, folder: Path) -> dict[str, Any]:
        """A fresh input set ``key`` from a secret seed, with no reference output kept for it."""
        return ref.call(
            "prepare",
            key=key,
            seed=secrets.randbits(62),
            kind="task",
            transport=self._transport(),
            path=str(folder / f"{key}.in.pt"),
            keep_output=False,
        )

    def _join_ahead(self) -> None:
        """Waits for the preparation ahead (the reference process serves one caller at a time)."""
        ahead = self._ahead
        if ahead is not None and not getattr(_AHEAD, "active", False):
            ahead.join()

    # -- compile -----------------------------------------------------------------------------------

    def compile(self, workspace: Workspace) -> CompileResult:
        """Builds kernels/ into cuda_extension; a single-file model_new.py (load_inline) is imported instead."""
        self.pool.fill()  # torch imports while the compiler runs
        start = time.monotonic()
        gate = self._gate(workspace)
        if gate is not None:
            return CompileResult(stage=Stage.COMPILE, status=gate[0], message=gate[1], seconds=time.monotonic() - start)
        if is_single_file(workspace):
            return self._compile_single_file(workspace)
        return self.builder.build(workspace)

    def _child_env(self) -> dict[str, str]:
        """Environment additions for candidate processes. On the cpu backend they see no GPU, also on a
        machine that has one: they need none, and the sandbox's namespaces apply only where none is seen."""
        env = {"TORCH_EXTENSIONS_DIR": str(self.cache_dir / "torch_extensions")}
        env.update(warmup_slot_env(self.backend, self.cache_dir))
        env.update(bytecode.child_env(self.bytecode_dir))
        if not self.backend.is_cuda:
            env["CUDA_VISIBLE_DEVICES"] = ""
        elif self.backend.arch.startswith("sm_"):
            digits = self.backend.arch[3:]
            env["TORCH_CUDA_ARCH_LIST"] = f"{digits[:-1]}.{digits[-1]}"
        return env

    def _compile_single_file(self, workspace: Workspace) -> CompileResult:
        """Imports model_new.py in a candidate process, which builds its load_inline kernels (cached by torch
        under the cache directory, so later stages load them without rebuilding)."""
        start = time.monotonic()
        source = (workspace.path / "model_new.py").read_bytes()
        digest = hashlib.sha256(source + self.backend.arch.encode()).hexdigest()[:16]
        if digest in self._single_file_ok:
            return CompileResult(
                stage=Stage.COMPILE,
                status=Status.OK,
                cached=True,
                build_hash=digest,
                message="model_new.py is unchanged since it last built (cached).",
            )
        job = {"mode": "import", "workspace": str(workspace.path)}
        child, finished, code = self.pool.run(job, self.config.build.timeout_seconds)
        status, message, _sig = classify(child, finished, code, self.config.build.timeout_seconds)
        diagnostics = candidate_output(child, workspace, self.config.output_chars)
        if status is not Status.OK:
            return CompileResult(
                stage=Stage.COMPILE,
                status=Status.COMPILE_ERROR,
                seconds=time.monotonic() - start,
                message=f"Importing the single-file model_new.py failed: {message}",
                diagnostics=diagnostics,
            )
        self._single_file_ok.add(digest)
        return CompileResult(
            stage=Stage.COMPILE,
            status=Status.OK,
            seconds=time.monotonic() - start,
            message="Imported the single-file model_new.py (its load_inline kernels are built).",
            diagnostics=diagnostics,
            build_hash=digest,
        )

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

    def _gate(self, workspace: Workspace) -> tuple[Status, str] | None:
        """The checks that come before anything is built or run: fixed files unchanged (restored when not)
        and the static integrity checks. Returns (status, message) of the first failure, or None."""
        tampered = workspace.tampered_fixed()
        self._tampered = tuple(tampered)
        if tampered:
            workspace.restore_fixed()
            return Status.INTEGRITY, (
                f"Fixed workspace files were modified ({', '.join(tampered)}); they have been restored. "
                "Fixed files must not be changed."
            )
        # static checks (cudagym.integrity); the task set may allow libraries
        policy = self.policy
        self.last_static_findings, violations = run_static_checks(
            workspace.snapshot(), policy, known_files=workspace.listing_names()
        )
        if violations:
            return Status.INTEGRITY, violation_message(violations, policy)
        return None

    def _prechecks(self, workspace: Workspace, stage: Stage, cls: type) -> tuple[CompileResult | None, Any]:
        """Compiles (cached when unchanged; the fixed-file and static checks come first); returns
        (compiled, failure)."""
        start = time.monotonic()
        compiled = self.compile(workspace)
        if not compiled.ok:
            integrity = compiled.status is Status.INTEGRITY
            return compiled, cls(
                stage=stage,
                status=compiled.status,
                seconds=time.monotonic() - start,
                message=compiled.message if integrity else "The build failed; call compile to see the diagnostics.",
                stderr=compiled.diagnostics,
            )
        if not (workspace.path / "model_new.py").is_file():
            return compiled, cls(
                stage=stage,
                status=Status.LOAD_ERROR,
                seconds=time.monotonic() - start,
                message="model_new.py does not exist; write it (it defines class ModelNew).",
            )
        return compiled, None

    def _base_job(self, workspace: Workspace, compiled: CompileResult, folder: Path, mode: str) -> dict[str, Any]:
        state = folder / "state.pt"
        self.reference().call("export_state", path=str(state))
        return {
            "mode": mode,
            "workspace": str(workspace.path),
            "extension": compiled.artifact,
            "state_path": str(state),
            "device": self.backend.device,
            "dtype": self.task.metadata.dtype,
            "threads": self.backend.threads,
            "eval_mode": self._eval_mode,
            "poison_bytes": self.config.poison_bytes if self.backend.is_cuda else 0,
        }

    # -- candidate conversations -------------------------------------------------------------------

    def _transport(self) -> str:
        """How inputs and outputs travel: CUDA IPC on the GPU, files on the CPU (``EvalConfig.transport``)."""
        if self.config.transport != "auto":
            return self.config.transport
        return "ipc" if self.backend.is_cuda else "file"

    def _run_check(
        self,
        child: Child,
        ref: ReferenceProcess,
        folder: Path,
        deadline: float,
        *,
        key: str,
        seed: int,
        kind: str,
        index: int,
        observe: bool = False,
        keep: bool = False,
        same_as: str = "",
    ) -> tuple[CheckResult | None, list[IntegrityFinding], dict[str, Any]]:
        """One input set through the candidate and the comparison: (check, findings, prepare reply).

        The check is None when the candidate failed before answering (its messages say why). Holds the
        device's shared slot: correctness work never overlaps another environment's timing."""
        with self._shared_slot("check", deadline):
            spec = ref.call(
                "prepare", key=key, seed=seed, kind=kind, transport=self._transport(), path=str(folder / f"{key}.in.pt")
            )
            try:
                child.send(
                    {"op": "run", "key": key, "inputs": spec["inputs"], "output": spec["output"], "observe": observe}
                )
                message = self.pool.await_stage(child, "checked", deadline, key)
                if message is None:
                    return None, [], spec
                reply = ref.call(
                    "compare",
                    key=key,
                    atol=self.atol,
                    rtol=self.rtol,
                    index=index,
                    meta=message["meta"],
                    keep=keep,
                    same_as=same_as,
                )["check"]
            finally:
                if not keep:
                    ref.call("drop", key=key)
            findings = [
                runtime.inputs_unchanged(reply.get("inputs_unchanged"), message.get("inputs_changed")),
                runtime.no_aliasing(message["meta"]),
                runtime.trusted_functions(message.get("replaced")),
                runtime.no_threads(message.get("threads_started")),
            ]
            if observe:
                findings.append(runtime.torch_compute(message.get("ops"), self.policy))
            if same_as:
                findings.append(runtime.deterministic(reply.get("deterministic")))
            return _check_result(reply), findings, spec

    # -- verify ------------------------------------------------------------------------------------

    def _run_checks(
        self, child: Child, ref: ReferenceProcess, folder: Path, deadline: float, kinds: tuple[str, ...]
    ) -> tuple[list[CheckResult], list[IntegrityFinding]]:
        """``num_checks`` fresh input sets through the candidate, then check 1's inputs again (determinism);
        stops at the first failed check or integrity finding. Returns the checks run and their findings."""
        checks: list[CheckResult] = []
        findings: list[IntegrityFinding] = []
        count = self.config.num_checks
        plan = [(f"check{i}", secrets.randbits(62), kinds[i % len(kinds)]) for i in range(count)]
        if self.config.check_determinism:
            plan.append(("repeat", plan[0][1], plan[0][2]))  # check 1's seed: the same inputs again
        for i, (key, seed, kind) in enumerate(plan):
            check, found, _ = self._run_check(
                child,
                ref,
                folder,
                deadline,
                key=key,
                seed=seed,
                kind=kind,
                index=i,
                observe=i == 0,
                keep=i == 0 and self.config.check_determinism,
                same_as="check0" if key == "repeat" else "",
            )
            if check is None:
                break
            checks.append(check)
            findings.extend(found)
            if not check.passed or runtime.first_failure(found) is not None:
                break
        return checks, findings

    def verify(self, workspace: Workspace) -> VerifyResult:
        """Runs ModelNew on ``num_checks`` fresh input sets (and check 1's inputs once more, for
        determinism) in one candidate process, comparing each output in the reference process."""
        start = time.monotonic()
        compiled, failure = self._prechecks(workspace, Stage.VERIFY, VerifyResult)
        if failure is not None:
            return failure
        assert compiled is not None
        kinds = self.config.input_kinds or self.task.metadata.input_kinds or ("task",)
        folder = Path(tempfile.mkdtemp(prefix="cudagym-eval-", dir=exchange_dir()))
        deadline = time.monotonic() + self.config.verify_timeout
        checks: list[CheckResult] = []
        findings: list[IntegrityFinding] = []
        child: Child | None = None
        try:
            phases = Phases(start)
            phases.mark("prechecks")
            ref = self.reference()
            phases.mark("reference")
            child = self.pool.start(self._base_job(workspace, compiled, folder, "verify"))
            ready = self.pool.await_stage(child, "ready", deadline)
            phases.mark("candidate_load")
            with self._memory_slot(deadline):
                phases.mark("memory_slot")
                if ready is not None:
                    checks, findings = self._run_checks(child, ref, folder, deadline, kinds)
                phases.mark("checks")
                ref.call("drop", key="check0")
            finished, code = self.pool.finish(child, deadline)
            phases.mark("candidate_exit")
            status, message, sig = classify(child, finished, code, self.config.verify_timeout)
        except RuntimeError as exc:
            return _harness_failure(VerifyResult, Stage.VERIFY, exc, start)
        finally:
            if child is not None:
                self.pool.discard(child)
            shutil.rmtree(folder, ignore_errors=True)
        stderr = candidate_output(child, workspace, self.config.output_chars)
        failed = next((c for c in checks if not c.passed), None)
        broken = runtime.first_failure(findings)
        if status is Status.OK and failed is not None:
            status = Status.INVALID_OUTPUT if failed.problem and failed.max_abs_error is None else Status.MISMATCH
            which = (
                f"check {failed.index + 1} of {self.config.num_checks}"
                if failed.index < self.config.num_checks
                else "the repeat of check 1 (same inputs again)"
            )
            message = f"Output mismatch on {which}: {describe_check(failed)}"
        elif status is Status.OK and broken is not None:
            status = Status.INTEGRITY
            message = f"Integrity check '{broken.check}' failed: {broken.detail}"
        elif status is Status.OK:
            message = f"All {self.config.num_checks} checks passed (atol={self.atol:g}, rtol={self.rtol:g})" + (
                "; the repeat of check 1 gave bitwise the same output." if self.config.check_determinism else "."
            )
        return VerifyResult(
            stage=Stage.VERIFY,
            status=status,
            message=message,
            seconds=time.monotonic() - start,
            checks=tuple(checks),
            atol=self.atol,
            rtol=self.rtol,
            stderr=stderr,
            signal=sig,
            integrity=tuple(findings),
            phases=phases.items(),
        )

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
        self, key: str, *, ref: ReferenceProcess | None = None, task: Task | None = None
    ) -> tuple[float, float | None, bool]:
        """(eager_ms, compile_ms, from_cache) of ``task`` (default: the current one), measured on the reference's
        input set ``key`` when not cached, each in the device's timing slot.

        compile_ms is None when ``EvalConfig.compile_baseline`` is off (tiers then stop at 2). ``ref``: the
        reference process to use as it is (the timing ahead, which must not wait for a preparation)."""
        task = task or self.task
        data = self._cached_baselines(task)
        if data is not None:
            return self._from_cache(data)
        timing = dataclasses.asdict(self.timing)
        ref = ref or self.reference()
        if self.config.compile_baseline:
            # nothing is timed beside a compile: its code generation would stretch the timed calls
            self._await_reference_compile(ref, task)
            ref.call("compile_reference", key=key)  # a compile's first call generates code: never timed
        self.pool.join_reapers()  # a used candidate still tearing down its CUDA context would disturb the timing
        with self._timing_slot("baselines"):
            data = self._cached_baselines(task)  # another environment of this task may have timed them meanwhile
            if data is not None:
                return self._from_cache(data)
            eager = ref.call("baseline", key=key, mode="eager", timing=timing)["median_ms"]
            compiled = None
            if self.config.compile_baseline:
                compiled = ref.call("baseline", key=key, mode="compile", timing=timing)["median_ms"]
        self.baseline_cache.write(task, eager, compiled)
        return eager, compiled, False

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
        finally:
            if ref.alive and not self._closing:
                try:
                    ref.call("drop", key=key)
                except RuntimeError as exc:
                    self.ahead_error = f"baselines: dropping their inputs: {exc}"

    def _profile_baselines(
        self, ref: ReferenceProcess, folder: Path, deadline: float
    ) -> tuple[float, float | None, bool]:
        """A profile's baselines, asked for once its candidate is timed: those being timed ahead, waited for
        outside any memory slot (a first profile's candidate is timed while the reference still compiles), or
        else timed now on an input set of their own."""
        self._await_baselines_ahead(deadline)
        data = self._cached_baselines()
        if data is not None:
            return self._from_cache(data)
        with self._memory_slot(deadline):
            self._unchecked_inputs(ref, "baselines", folder)
            try:
                return self.baselines("baselines")
            finally:
                ref.call("drop", key="baselines")

    def _await_baselines_ahead(self, deadline: float) -> None:
        """Waits for the baselines being timed ahead (a profile would otherwise time them a second time), until
        ``deadline`` at most: past it the profile goes on and times whatever is still missing itself."""
        thread = self._baselining
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout=max(0.0, deadline - time.monotonic()))

    def profile(self, workspace: Workspace, *, ncu: bool = False) -> ProfileResult:
        """Times ModelNew, then re-checks it on fresh inputs written into the buffers it was timed on, and
        compares with the eager and torch.compile baselines (cached per task, device and torch)."""
        start = time.monotonic()
        compiled, failure = self._prechecks(workspace, Stage.PROFILE, ProfileResult)
        if failure is not None:
            return failure
        assert compiled is not None
        folder = Path(tempfile.mkdtemp(prefix="cudagym-eval-", dir=exchange_dir()))
        deadline = time.monotonic() + self.config.profile_timeout
        measured = _Measured()
        child: Child | None = None
        try:
            phases = Phases(start)
            phases.mark("prechecks")
            ref = self.reference()
            phases.mark("reference")
            # quiet device while timing: no successor starts (CUDA init) and no used candidate is still dying
            child = self.pool.start(self._base_job(workspace, compiled, folder, "profile"), refill=False)
            self.pool.join_reapers()
            # the timed calls' output is not compared (the re-check's is): no reference output kept
            with self._memory_slot(deadline):
                phases.mark("memory_slot")
                prepared = self._unchecked_inputs(ref, "timing", folder)
                ready = self.pool.await_stage(child, "ready", deadline)
                phases.mark("inputs_and_candidate_load")
                # a compile begun ahead uses the device in the shared slot, which no timing overlaps; but on cpu it
                # would take the cores the timed calls run on, and eager timed beside the candidate waits for it
                if not self.backend.is_cuda or pairs_eager(self.config, self.backend):
                    ref.call("await_compile")
                    phases.mark("reference_compile")
                if ready is not None:
                    measured = self._measure(child, ref, prepared["inputs"], folder, deadline, phases)
                phases.mark("recheck")
                finished, code = self.pool.finish(child, deadline)
                phases.mark("candidate_exit")
                status, message, sig = classify(child, finished, code, self.config.profile_timeout)
                self.pool.fill()
                ncu_text = self._ncu(workspace, compiled, folder) if ncu else ""
                if ncu:
                    phases.mark("ncu")
                ref.call("drop", key="timing")
            eager_ms, compile_ms, cached = self._profile_baselines(ref, folder, deadline)
            phases.mark("baselines")
        except RuntimeError as exc:
            return _harness_failure(ProfileResult, Stage.PROFILE, exc, start)
        finally:
            if child is not None:
                self.pool.discard(child)
            shutil.rmtree(folder, ignore_errors=True)
        stderr = candidate_output(child, workspace, self.config.output_chars)
        timed, pair, recheck, findings = measured.timed, measured.pair, measured.recheck, measured.findings
        candidate_ms = timed["median_ms"] if timed else None
        if timed is not None:
            findings += [
                runtime.own_kernels(measured.kernels, self.backend.is_cuda, self.policy),
                runtime.within_roofline(candidate_ms, int(prepared.get("bytes", 0)), self._peak_bandwidth),
            ]
        broken = runtime.first_failure(findings)
        if status is Status.OK and recheck is not None and not recheck.passed:
            status = Status.MISMATCH
            message = f"Wrong output on fresh inputs written into the timed input buffers: {describe_check(recheck)}"
        elif status is Status.OK and broken is not None:
            status = Status.INTEGRITY
            message = f"Integrity check '{broken.check}' failed: {broken.detail}"
        if pair is not None and eager_ms > 0:  # eager under the candidate's conditions, and the drift it shows
            compile_ms = compile_ms * pair.eager_ms / eager_ms if compile_ms is not None else None
            eager_ms = pair.eager_ms
        speedup_eager = eager_ms / candidate_ms if candidate_ms else None
        speedup_compile = compile_ms / candidate_ms if candidate_ms and compile_ms else None
        if status is Status.OK:
            beside = " interleaved with it" if pair is not None else ""
            message = f"ModelNew {candidate_ms:.4g} ms | eager{beside} {eager_ms:.4g} ms ({speedup_eager:.3g}x) | " + (
                f"torch.compile {compile_ms:.4g} ms ({speedup_compile:.3g}x)"
                if compile_ms is not None
                else "torch.compile not timed (compile_baseline=False)"
            )
        return ProfileResult(
            stage=Stage.PROFILE,
            status=status,
            message=message,
            seconds=time.monotonic() - start,
            candidate_ms=candidate_ms,
            eager_ms=eager_ms,
            compile_ms=compile_ms,
            speedup_eager=speedup_eager,
            speedup_compile=speedup_compile,
            repetitions=timed["reps"] if timed else 0,
            spread=timed["spread"] if timed else None,
            kernels=tuple(KernelTime(k["name"], k["calls"], k["total_ms"], k["share"]) for k in measured.kernels),
            device=self.backend.device_name,
            method=timed["method"] if timed else "",
            baseline_cached=cached,
            eager_paired=pair is not None,
            ncu=ncu_text,
            stderr=stderr,
            signal=sig,
            integrity=tuple(findings),
            phases=phases.items(),
        )

    def _measure(
        self, child: Child, ref: ReferenceProcess, inputs: Any, folder: Path, deadline: float, phases: Phases
    ) -> _Measured:
        """Times the candidate on ``inputs`` inside the timing slot, takes its per-kernel breakdown, then
        re-checks it on fresh inputs written into the buffers it was timed on."""
        measured = _Measured()
        with self._timing_slot("candidate", deadline):
            measured.timed, measured.pair = self._time_candidate(child, ref, inputs, deadline)
            phases.mark("timing")
            breakdown = self.pool.await_stage(child, "kernels", deadline) if measured.timed else None
            phases.mark("kernel_breakdown")
        if breakdown is None:
            return measured
        measured.kernels = breakdown["kernels"]
        measured.findings += [
            runtime.trusted_functions(breakdown.get("replaced")),
            runtime.no_threads(breakdown.get("threads_started")),
        ]
        measured.recheck, found, _ = self._run_check(
            child, ref, folder, deadline, key="recheck", seed=secrets.randbits(62), kind="task", index=0
        )
        measured.findings += found
        return measured

    def _time_candidate(
        self, child: Child, ref: ReferenceProcess, inputs: Any, deadline: float
    ) -> tuple[dict[str, Any] | None, PairedTiming | None]:
        """Times the candidate on ``inputs`` (the caller holds the timing slot); returns its ``timed`` message
        (None when it failed) and, with ``paired_eager``, the interleaved timing it came from. The candidate's
        per-kernel breakdown follows as its next message either way."""
        if not pairs_eager(self.config, self.backend):
            child.send({"op": "time", "inputs": inputs, "timing": dataclasses.asdict(self.timing)})
            return self.pool.await_stage(child, "timed", deadline), None
        replies: list[dict[str, Any] | None] = []

        def candidate_round(timing: TimingConfig, last: bool) -> list[float] | None:
            command: dict[str, Any] = {"op": "time", "timing": dataclasses.asdict(timing), "breakdown": last}
            if not replies:
                command["inputs"] = inputs
            child.send(command)
            replies.append(self.pool.await_stage(child, "timed", deadline))
            return replies[-1]["times_ms"] if replies[-1] else None

        def eager_round(timing: TimingConfig) -> list[float]:
            return ref.call("baseline", key="timing", mode="eager", timing=dataclasses.asdict(timing))["times_ms"]

        pair = interleave(candidate_round, eager_round, self.timing, self.config.paired_rounds)
        if pair is None:
            return None, None
        method = replies[-1]["method"].rsplit(" of ", 1)[0]
        timed = {
            "median_ms": pair.candidate_ms,
            "spread": pair.spread,
            "reps": pair.reps,
            "method": f"{method} of {pair.reps}, interleaved with eager in {pair.rounds} rounds",
        }
        return timed, pair

    def _ncu(self, workspace: Workspace, compiled: CompileResult, folder: Path) -> str:
        """Nsight Compute's speed-of-light and occupancy figures for the candidate's own kernels."""
        if not self.backend.is_cuda:
            return "Nsight Compute needs the cuda backend."
        tool = shutil.which("ncu")
        if tool is None:
            return "Nsight Compute (ncu) is not installed on this machine."
        log = folder / "ncu.csv"
        job = self._base_job(workspace, compiled, folder, "ncu")
        job["inputs"] = self.reference().call(
            "prepare", key="ncu", seed=secrets.randbits(62), kind="task", transport="file", path=str(folder / "ncu.pt")
        )["inputs"]
        self.reference().call("drop", key="ncu")
        prefix = (
            tool,
            "--clock-control",
            "none",
            "--section",
            "SpeedOfLight",
            "--section",
            "Occupancy",
            "--csv",
            "--page",
            "details",
            "--log-file",
            str(log),
            "--launch-count",
            "40",
        )
        child, finished, code = self.pool.run(job, self.config.profile_timeout, prefix=prefix)
        status, message, _ = classify(child, finished, code, self.config.profile_timeout)
        if status is not Status.OK:
            return f"ncu run failed: {message}"
        if not log.exists():
            return "ncu produced no report: " + clean(child.output.text(), 1500)
        return summarize_ncu(log.read_text(errors="replace"))

    # -- submit ------------------------------------------------------------------------------------

    def submit(self, workspace: Workspace) -> SubmitResult:
        start = time.monotonic()
        compiled = self.compile(workspace)
        verify = self.verify(workspace) if compiled.ok else None
        correct = verify is not None and verify.ok
        profile = self.profile(workspace) if correct else None
        rejected = (Status.MISMATCH, Status.INTEGRITY)
        tier = milestone_tier(correct and (profile is None or profile.status not in rejected), profile)
        correct = correct and tier > 0
        findings = [
            IntegrityFinding(
                "fixed_files_unchanged",
                not self._tampered,
                f"restored: {', '.join(self._tampered)}" if self._tampered else "",
            ),
            *getattr(self, "last_static_findings", ()),
            *(verify.integrity if verify else ()),
            *(profile.integrity if profile else ()),
        ]
        if profile is not None:
            findings.append(
                IntegrityFinding(
                    "timed_output_rechecked",
                    profile.status is not Status.MISMATCH,
                    profile.message if profile.status is Status.MISMATCH else "",
                )
            )
        failing = next((r for r in (compiled, verify, profile) if r is not None and not r.ok), None)
        message = f"Tier {tier}. " + (failing.message if failing is not None and tier < 1 else "")
        if profile is not None and profile.ok:
            message += profile.message
        return SubmitResult(
            stage=Stage.SUBMIT,
            status=Status.OK if tier > 0 else (failing.status if failing else Status.MISMATCH),
            message=message.strip(),
            seconds=time.monotonic() - start,
            tier=tier,
            compiled=compiled.ok,
            correct=correct,
            speedup_eager=profile.speedup_eager if profile else None,
            speedup_compile=profile.speedup_compile if profile else None,
            compile=compiled,
            verify=verify,
            profile=profile,
            integrity=merge_findings(findings),
        )

    def retarget(self, task: Task) -> None:
        """Switches to another task, keeping the processes (the reference reloads on its next use)."""
        if task.id != self.task.id:
            self.task = task  # the reference reloads on its next use (its loaded task differs)
            self._start_ahead()

    def close(self) -> None:
        """Stops the reference process and any candidate still running (idempotent)."""
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


def _harness_failure(cls: type, stage: Stage, exc: Exception, start: float) -> Any:
    """A result saying that the evaluation machinery (not the agent's code) failed, with the reason."""
    return cls(
        stage=stage,
        status=Status.HARNESS_ERROR,
        seconds=time.monotonic() - start,
        message=f"The evaluation harness failed: {clean(str(exc), 1500)}",
    )


def is_single_file(workspace: Workspace) -> bool:
    """A KernelBench-style solution: no kernel sources, everything (load_inline) inside model_new.py."""
    return not workspace.kernel_sources() and (workspace.path / "model_new.py").is_file()


def _check_result(data: dict[str, Any]) -> CheckResult:
    fields = {f.name for f in dataclasses.fields(CheckResult)}
    values = {k: v for k, v in data.items() if k in fields}
    if values.get("worst_index") is not None:
        values["worst_index"] = tuple(values["worst_index"])
    return CheckResult(**values)


def merge_findings(findings: list[IntegrityFinding]) -> tuple[IntegrityFinding, ...]:
    """One finding per check, in first-seen order: the first failure when a stage failed it, else the first."""
    merged: dict[str, IntegrityFinding] = {}
    for finding in findings:
        if finding.check not in merged or (merged[finding.check].passed and not finding.passed):
            merged[finding.check] = finding
    return tuple(merged.values())


def describe_check(check: CheckResult) -> str:
    """One line for the agent: what was wrong and where (never the whole reference output)."""
    if check.problem and check.max_abs_error is None:
        return check.problem
    where = f" at index {list(check.worst_index)}" if check.worst_index is not None else ""
    parts = [
        f"{check.mismatched} of {check.total} elements outside tolerance",
        f"max abs error {check.max_abs_error:.4g}{where} (expected {check.expected:.6g}, got {check.actual:.6g})",
    ]
    if check.problem:
        parts.append(check.problem)
    return "; ".join(parts)
