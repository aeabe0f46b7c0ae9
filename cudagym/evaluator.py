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

import dataclasses
import hashlib
import json
import os
import secrets
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any, Protocol

from cudagym.backends import Backend
from cudagym.build import Builder, BuildOptions, default_cache_dir
from cudagym.harness.timing import TimingConfig
from cudagym.ncu import summarize_ncu
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
from cudagym.sandbox import HARNESS_DIR, Child, ChildLimits, signal_name
from cudagym.tasks.task import Task
from cudagym.text import clean
from cudagym.workspace import Workspace


@dataclasses.dataclass(frozen=True)
class EvalConfig:
    """Knobs of evaluation. Tolerances default to the task's (CUDA Agent's 1e-2)."""

    num_checks: int = 5
    atol: float | None = None
    rtol: float | None = None
    input_kinds: tuple[str, ...] | None = None  # None: the task's own list
    verify_timeout: float = 120.0
    profile_timeout: float = 300.0
    reference_timeout: float = 600.0
    timing: TimingConfig = dataclasses.field(default_factory=TimingConfig)
    build: BuildOptions = dataclasses.field(default_factory=BuildOptions)
    limits: ChildLimits = dataclasses.field(default_factory=ChildLimits)
    poison_bytes: int = 64 * 1024 * 1024  # cuda: NaN-filled device memory freed before each call
    prestart: bool = True  # keep one candidate process started ahead, torch already imported
    compile_baseline: bool = True  # time torch.compile too; off: no tier 3 (as where torch.compile is unavailable)
    output_chars: int = 6000  # how much of a child's output an observation may carry

    def __post_init__(self) -> None:
        if self.num_checks < 1:
            raise ValueError(f"num_checks must be >= 1, got {self.num_checks}")
        for name in ("verify_timeout", "profile_timeout", "reference_timeout"):
            if getattr(self, name) <= 0:
                raise ValueError(f"{name} must be > 0, got {getattr(self, name)}")


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
        self.source = task.source_for(backend.name)
        self._reference: ReferenceProcess | None = None
        self._loaded = False
        self._eval_mode = False
        self._children: list[Child] = []
        self._single_file_ok: set[str] = set()
        self._spare: Child | None = None

    # -- compile -----------------------------------------------------------------------------------

    def compile(self, workspace: Workspace) -> CompileResult:
        """Builds kernels/ into cuda_extension; a single-file model_new.py (load_inline) is imported instead."""
        if is_single_file(workspace):
            return self._compile_single_file(workspace)
        return self.builder.build(workspace)

    def _child_env(self) -> dict[str, str]:
        env = {"TORCH_EXTENSIONS_DIR": str(self.cache_dir / "torch_extensions")}
        if self.backend.is_cuda and self.backend.arch.startswith("sm_"):
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
        child, finished, code = self._spawn_candidate(job, self.config.build.timeout_seconds)
        status, message, _sig = self._child_failure(child, finished, code, self.config.build.timeout_seconds)
        diagnostics = self._candidate_output(child, workspace)
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
    def atol(self) -> float:
        return self.config.atol if self.config.atol is not None else self.task.metadata.atol

    @property
    def rtol(self) -> float:
        return self.config.rtol if self.config.rtol is not None else self.task.metadata.rtol

    def reference(self) -> ReferenceProcess:
        """The reference process, started on first use and (re)loaded with the current task."""
        if self._reference is None or not self._reference.alive:
            if self._reference is not None:
                self._reference.close()
            self._reference = ReferenceProcess(self.backend, self.config)
            self._loaded = False
        if not self._loaded:
            reply = self._reference.call(
                "load",
                source=self.source,
                device=self.backend.device,
                dtype=self.task.metadata.dtype,
                weight_seed=secrets.randbits(62),
                threads=self.backend.threads,
            )
            self._eval_mode = bool(reply.get("eval_mode"))
            self._loaded = True
        return self._reference

    def _prechecks(self, workspace: Workspace, stage: Stage, cls: type) -> tuple[CompileResult | None, Any]:
        """Compiles (cached when unchanged) and checks the fixed files; returns (compiled, failure)."""
        start = time.monotonic()
        tampered = workspace.tampered_fixed()
        if tampered:
            workspace.restore_fixed()
            return None, cls(
                stage=stage,
                status=Status.INTEGRITY,
                seconds=time.monotonic() - start,
                message=f"Fixed workspace files were modified ({', '.join(tampered)}); they have been "
                "restored. Fixed files must not be changed.",
            )
        compiled = self.compile(workspace)
        if not compiled.ok:
            return compiled, cls(
                stage=stage,
                status=compiled.status,
                seconds=time.monotonic() - start,
                message="The build failed; call compile to see the diagnostics.",
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

    def _new_candidate(self, prefix: tuple[str, ...] = ()) -> Child:
        return Child(
            "candidate", limits=self.config.limits, threads=self.backend.threads, env=self._child_env(), prefix=prefix
        )

    def _take_candidate(self, prefix: tuple[str, ...]) -> Child:
        """A single-use candidate process: the one started ahead (torch already imported) when there is one,
        and a new spare for the next stage."""
        if prefix:  # a wrapped run (ncu) needs its own process; the warm spare stays for the next stage
            return self._new_candidate(prefix)
        spare, self._spare = self._spare, (self._new_candidate() if self.config.prestart else None)
        if spare is not None and spare.alive:
            return spare
        if spare is not None:
            spare.kill()
        return self._new_candidate()

    def _spawn_candidate(
        self, job: dict[str, Any], timeout: float, prefix: tuple[str, ...] = ()
    ) -> tuple[Child, bool, int | None]:
        """Runs one candidate process to its end or its deadline; returns (child, finished, returncode)."""
        child = self._take_candidate(prefix)
        self._children.append(child)
        child.send(job, close_stdin=True)
        deadline = time.monotonic() + timeout
        finished = child.receive_all(deadline)
        code = child.wait(deadline - time.monotonic() + 1) if finished else None
        child.kill()
        self._children.remove(child)
        return child, finished and code is not None, code

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

    def _child_failure(self, child: Child, finished: bool, code: int | None, timeout: float) -> tuple[Status, str, str]:
        """Classifies a candidate that did not end cleanly: (status, message, signal name)."""
        errors = [m for m in child.messages if m.get("ok") is False]
        stages = [m.get("stage") for m in child.messages]
        if not finished:
            return Status.TIMEOUT, f"The candidate did not finish within {timeout:.0f} s and was killed.", ""
        sig = signal_name(code)
        if errors:
            err = errors[-1]
            info = err.get("error", {})
            where = "loading model_new.py / the extension" if err.get("stage") == "load" else "running ModelNew"
            status = Status.LOAD_ERROR if err.get("stage") == "load" else Status.RUNTIME_ERROR
            fault = f" (CUDA error: {info['cuda']})" if info.get("cuda") else ""
            return status, f"{info.get('type')} while {where}{fault}: {info.get('message', '')[:500]}", sig
        if sig:
            where = "while loading" if "run" not in stages else "while running"
            return Status.CRASH, f"The candidate process was killed by {sig} {where} ModelNew.", sig
        if "done" not in stages:
            return Status.CRASH, f"The candidate process exited with status {code} before finishing.", sig
        return Status.OK, "", sig

    def _candidate_output(self, child: Child, workspace: Workspace) -> str:
        """The candidate's traceback (if it reported one) and its stdout/stderr, cleaned and cut."""
        tracebacks = [
            m["error"].get("traceback", "") for m in child.messages if m.get("ok") is False and m.get("error")
        ]
        text = "\n".join([*tracebacks, child.output.text()]).strip()
        replace = {str(workspace.path): "", str(HARNESS_DIR): "<harness>"}
        return clean(text, self.config.output_chars, replace_paths=replace)

    # -- verify ------------------------------------------------------------------------------------

    def verify(self, workspace: Workspace) -> VerifyResult:
        start = time.monotonic()
        compiled, failure = self._prechecks(workspace, Stage.VERIFY, VerifyResult)
        if failure is not None:
            return failure
        assert compiled is not None
        kinds = self.config.input_kinds or self.task.metadata.input_kinds or ("task",)
        folder = Path(tempfile.mkdtemp(prefix="cudagym-eval-", dir=_scratch_dir()))
        ref = self.reference()
        try:
            job = self._base_job(workspace, compiled, folder, "verify")
            job["checks"] = []
            for i in range(self.config.num_checks):
                key = f"check{i}"
                ref.call(
                    "make_inputs",
                    key=key,
                    seed=secrets.randbits(62),
                    kind=kinds[i % len(kinds)],
                    path=str(folder / f"{key}.in.pt"),
                )
                job["checks"].append(
                    {"key": key, "inputs": str(folder / f"{key}.in.pt"), "output": str(folder / f"{key}.out.pt")}
                )
            child, finished, code = self._spawn_candidate(job, self.config.verify_timeout)
            status, message, sig = self._child_failure(child, finished, code, self.config.verify_timeout)
            done = [m["key"] for m in child.messages if m.get("stage") == "checked"]
            checks = []
            for i, key in enumerate(done):
                reply = ref.call(
                    "compare", key=key, path=str(folder / f"{key}.out.pt"), atol=self.atol, rtol=self.rtol, index=i
                )
                checks.append(_check_result(reply["check"]))
            for item in job["checks"]:
                ref.call("drop", key=item["key"])
        except RuntimeError as exc:
            return _harness_failure(VerifyResult, Stage.VERIFY, exc, start)
        finally:
            shutil.rmtree(folder, ignore_errors=True)
        stderr = self._candidate_output(child, workspace)
        failed = next((c for c in checks if not c.passed), None)
        if status is Status.OK and failed is not None:
            status = Status.INVALID_OUTPUT if failed.problem and failed.max_abs_error is None else Status.MISMATCH
            message = (
                f"Output mismatch on check {failed.index + 1} of {self.config.num_checks}: {describe_check(failed)}"
            )
        elif status is Status.OK:
            message = f"All {len(checks)} checks passed (atol={self.atol:g}, rtol={self.rtol:g})."
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
        )

    # -- profile -----------------------------------------------------------------------------------

    def _baseline_key(self) -> str:
        blob = json.dumps(
            [
                self.task.fingerprint(self.backend.name),
                self.backend.name,
                self.backend.device_name,
                self.builder.toolchain.torch_version,
                self.backend.threads,
                dataclasses.asdict(self.config.timing),
            ],
            sort_keys=True,
        )
        return hashlib.sha256(blob.encode()).hexdigest()[:24]

    def baselines(self, key: str) -> tuple[float, float | None, bool]:
        """(eager_ms, compile_ms, from_cache), measured on input set ``key`` when not cached.

        compile_ms is None when ``EvalConfig.compile_baseline`` is off (tiers then stop at 2).
        """
        path = self.cache_dir / "baselines" / f"{self._baseline_key()}.json"
        if path.exists():
            data = json.loads(path.read_text())
            if data.get("compile_ms") is not None or not self.config.compile_baseline:
                return data["eager_ms"], data["compile_ms"] if self.config.compile_baseline else None, True
        timing = dataclasses.asdict(self.config.timing)
        eager = self.reference().call("baseline", key=key, mode="eager", timing=timing)["median_ms"]
        compiled = None
        if self.config.compile_baseline:
            compiled = self.reference().call("baseline", key=key, mode="compile", timing=timing)["median_ms"]
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(
            json.dumps(
                {
                    "task": self.task.id,
                    "device": self.backend.device_name,
                    "eager_ms": eager,
                    "compile_ms": compiled,
                    "torch": self.builder.toolchain.torch_version,
                }
            )
        )
        os.replace(tmp, path)
        return eager, compiled, False

    def profile(self, workspace: Workspace, *, ncu: bool = False) -> ProfileResult:
        start = time.monotonic()
        compiled, failure = self._prechecks(workspace, Stage.PROFILE, ProfileResult)
        if failure is not None:
            return failure
        assert compiled is not None
        folder = Path(tempfile.mkdtemp(prefix="cudagym-eval-", dir=_scratch_dir()))
        try:
            ref = self.reference()
            job = self._base_job(workspace, compiled, folder, "profile")
            ref.call("make_inputs", key="timing", seed=secrets.randbits(62), kind="task", path=str(folder / "t.in.pt"))
            job.update(
                inputs=str(folder / "t.in.pt"),
                output=str(folder / "t.out.pt"),
                timing=dataclasses.asdict(self.config.timing),
            )
            child, finished, code = self._spawn_candidate(job, self.config.profile_timeout)
            status, message, sig = self._child_failure(child, finished, code, self.config.profile_timeout)
            timed = next((m for m in child.messages if m.get("stage") == "timed"), None)
            kernels = next((m["kernels"] for m in child.messages if m.get("stage") == "kernels"), [])
            recheck = None
            if timed is not None:
                recheck = _check_result(
                    ref.call(
                        "compare", key="timing", path=str(folder / "t.out.pt"), atol=self.atol, rtol=self.rtol, index=0
                    )["check"]
                )
            eager_ms, compile_ms, cached = self.baselines("timing")
            ncu_text = self._ncu(workspace, compiled, folder) if ncu else ""
            ref.call("drop", key="timing")
        except RuntimeError as exc:
            return _harness_failure(ProfileResult, Stage.PROFILE, exc, start)
        finally:
            shutil.rmtree(folder, ignore_errors=True)
        stderr = self._candidate_output(child, workspace)
        candidate_ms = timed["median_ms"] if timed else None
        if status is Status.OK and recheck is not None and not recheck.passed:
            status = Status.MISMATCH
            message = f"The output of the timed runs is wrong: {describe_check(recheck)}"
        speedup_eager = eager_ms / candidate_ms if candidate_ms else None
        speedup_compile = compile_ms / candidate_ms if candidate_ms and compile_ms else None
        if status is Status.OK:
            message = f"ModelNew {candidate_ms:.4g} ms | eager {eager_ms:.4g} ms ({speedup_eager:.3g}x) | " + (
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
            kernels=tuple(KernelTime(k["name"], k["calls"], k["total_ms"], k["share"]) for k in kernels),
            device=self.backend.device_name,
            method=timed["method"] if timed else "",
            baseline_cached=cached,
            ncu=ncu_text,
            stderr=stderr,
            signal=sig,
        )

    def _ncu(self, workspace: Workspace, compiled: CompileResult, folder: Path) -> str:
        """Nsight Compute's speed-of-light and occupancy figures for the candidate's own kernels."""
        if not self.backend.is_cuda:
            return "Nsight Compute needs the cuda backend."
        tool = shutil.which("ncu")
        if tool is None:
            return "Nsight Compute (ncu) is not installed on this machine."
        log = folder / "ncu.csv"
        job = self._base_job(workspace, compiled, folder, "ncu")
        job["inputs"] = str(folder / "t.in.pt")
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
        child, finished, code = self._spawn_candidate(job, self.config.profile_timeout, prefix=prefix)
        status, message, _ = self._child_failure(child, finished, code, self.config.profile_timeout)
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
        tier = milestone_tier(correct and (profile is None or profile.status is not Status.MISMATCH), profile)
        correct = correct and tier > 0
        findings = [IntegrityFinding("fixed_files_unchanged", not (verify and verify.status is Status.INTEGRITY))]
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
            integrity=tuple(findings),
        )

    def retarget(self, task: Task) -> None:
        """Switches to another task, keeping the processes (the reference reloads on its next use)."""
        if task.id != self.task.id:
            self.task = task
            self.source = task.source_for(self.backend.name)
            self._loaded = False

    def close(self) -> None:
        """Stops the reference process and any candidate still running (idempotent)."""
        for child in list(self._children):
            child.kill()
        self._children.clear()
        if self._spare is not None:
            self._spare.kill()
            self._spare = None
        if self._reference is not None:
            self._reference.close()
            self._reference = None


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


def _scratch_dir() -> str | None:
    """Where inputs and outputs travel between processes: RAM-backed /dev/shm when it is there."""
    return "/dev/shm" if os.path.isdir("/dev/shm") and os.access("/dev/shm", os.W_OK) else None


def _check_result(data: dict[str, Any]) -> CheckResult:
    fields = {f.name for f in dataclasses.fields(CheckResult)}
    values = {k: v for k, v in data.items() if k in fields}
    if values.get("worst_index") is not None:
        values["worst_index"] = tuple(values["worst_index"])
    return CheckResult(**values)


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
