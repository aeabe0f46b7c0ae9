"""``EvalConfig``: what an evaluation checks and measures (checks, tolerances, precision policy, timing, timeouts,
builds, the candidates' limits), the backend-dependent defaults its ``"auto"`` values stand for, and the one place
its throughput machinery (``EvalConfig.tuning``, ``cudagym.tuning``) is resolved."""

from __future__ import annotations

import dataclasses
import subprocess
from pathlib import Path
from typing import Literal

from cudagym import bytecode, sanitizer, tuning
from cudagym.backends import Backend
from cudagym.build import BuildOptions
from cudagym.harness import gpulib
from cudagym.harness.timing import TimingConfig
from cudagym.integrity.policy import IntegrityPolicy
from cudagym.sandbox import ChildLimits
from cudagym.tuning import ResolvedTuning, Tuning


@dataclasses.dataclass(frozen=True)
class EvalConfig:
    """What an evaluation checks and measures; how fast it is done is ``tuning`` (``cudagym.tuning``). Tolerances
    default to the task's (CUDA Agent's 1e-2)."""

    num_checks: int = 5
    atol: float | None = None
    rtol: float | None = None
    input_kinds: tuple[str, ...] | None = None  # None: the task's own list
    verify_timeout: float = 120.0
    profile_timeout: float = 300.0
    reference_timeout: float = 600.0
    # a hung or runaway candidate is found by its calls, not by the stage's timeout: a handshake (one call, or a
    # batch of calls on input sets of their own) unanswered after max(10 x the reference's time for those calls,
    # ``hang_seconds``) ends the stage as a timeout and the candidate is killed. "auto": 5 s on cuda, 20 s on cpu
    # (whose honest loops may be far slower than torch's and share two cores with the reference)
    hang_seconds: float | Literal["auto"] = "auto"
    timing: TimingConfig = dataclasses.field(default_factory=TimingConfig)
    build: BuildOptions = dataclasses.field(default_factory=BuildOptions)
    limits: ChildLimits = dataclasses.field(default_factory=ChildLimits)
    compile_baseline: bool = True  # time torch.compile too; off: no tier 3 (as where torch.compile is unavailable)
    output_chars: int = 6000  # how much of a child's output an observation may carry
    check_determinism: bool = True  # verify runs check 1's inputs twice and requires bitwise-equal outputs
    policy: IntegrityPolicy = dataclasses.field(default_factory=IntegrityPolicy)  # what solutions may do
    # after a CUDA fault in verify or profile, run the candidate once more under compute-sanitizer's memcheck to name
    # the kernel, thread and address (``cudagym.sanitizer``), on the cuda backend where compute-sanitizer is installed
    # (never where it is not). Off by default: the run (torch's start under memcheck, bounded by
    # ``sanitizer.TIMEOUT_S``) holds the GPU's shared slot, and its cost was not measured yet
    fault_sanitizer: bool = False
    # how the evaluation is made fast (spare candidates, the fork server, preparation ahead, ...): never a verdict, a
    # time or a tier; the defaults suit every user (``cudagym.tuning``)
    tuning: Tuning = dataclasses.field(default_factory=Tuning)

    def __post_init__(self) -> None:
        if self.num_checks < 1:
            raise ValueError(f"num_checks must be >= 1, got {self.num_checks}")
        for name in ("verify_timeout", "profile_timeout", "reference_timeout"):
            if getattr(self, name) <= 0:
                raise ValueError(f"{name} must be > 0, got {getattr(self, name)}")
        hang = self.hang_seconds
        if hang != "auto" and not (isinstance(hang, (int, float)) and not isinstance(hang, bool) and hang > 0):
            raise ValueError(f"hang_seconds must be 'auto' or a number of seconds > 0, got {self.hang_seconds!r}")


HANG_SECONDS = {True: 5.0, False: 20.0}  # cuda, cpu: what ``hang_seconds="auto"`` stands for


def resolve_hang_seconds(config: EvalConfig, backend: Backend) -> float:
    """The floor of the bound after which a handshake's candidate counts as hung (``EvalConfig.hang_seconds``)."""
    return HANG_SECONDS[backend.is_cuda] if config.hang_seconds == "auto" else float(config.hang_seconds)


def sanitizes_faults(config: EvalConfig, backend: Backend) -> bool:
    """Whether evaluators of ``config`` run compute-sanitizer after a CUDA fault (``EvalConfig.fault_sanitizer``)."""
    return config.fault_sanitizer and backend.is_cuda and sanitizer.find_tool() is not None


def resolve_tuning(config: EvalConfig, backend: Backend, cache_dir: Path) -> ResolvedTuning:
    """``config.tuning`` with every "auto" answered for ``backend`` and ``cache_dir`` (``cudagym.tuning.resolve``)."""
    return tuning.resolve(
        config.tuning,
        backend,
        cache_dir,
        compile_baseline=config.compile_baseline,
        readonly_filesystem=config.limits.readonly_filesystem,
    )


def resolve_bytecode(config: EvalConfig, cache_dir: Path) -> Path | None:
    """The bytecode folder the children of an evaluator on ``cache_dir`` use, None for none
    (``Tuning.bytecode_cache``, ``cudagym.bytecode.resolve``): the one answer of ``resolve_tuning`` that the
    processes started outside an evaluator (``cudagym prepare``, the synthesis filters) need."""
    return bytecode.resolve(config.tuning.bytecode_cache, cache_dir, config.limits.readonly_filesystem)


def resolve_timing(timing: TimingConfig, backend: Backend, cache_dir: Path, nvcc: str | None) -> TimingConfig:
    """The timing settings the reference process times with: ``timing`` and, on the cuda backend, the trusted side's
    GPU library (``harness/gpulib.py``: the hold, the handshake's flags, the output seal), built with ``nvcc`` for
    this device once per cache directory. The trusted clock cannot run without it: a failed build raises
    RuntimeError (a harness error for the stage that needed it)."""
    if not backend.is_cuda or timing.gpu_library:
        return timing
    try:
        library = gpulib.build(cache_dir / "gpulib", backend.arch, nvcc=nvcc or "nvcc")
    except (OSError, RuntimeError, subprocess.SubprocessError) as exc:
        raise RuntimeError(f"the trusted clock's GPU library could not be built: {exc}") from exc
    return dataclasses.replace(timing, gpu_library=str(library))
