"""``EvalConfig``: the knobs of evaluation (checks, tolerances, timing, processes, device sharing), and the
backend-dependent defaults its ``"auto"`` values stand for."""

from __future__ import annotations

import dataclasses
import subprocess
from pathlib import Path
from typing import Literal

from cudagym import bytecode, sanitizer
from cudagym.backends import Backend
from cudagym.build import BuildOptions
from cudagym.harness import gpulib
from cudagym.harness.timing import TimingConfig
from cudagym.integrity.policy import IntegrityPolicy
from cudagym.sandbox import ChildLimits


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
    # a hung or runaway candidate is found by its calls, not by the stage's timeout: a handshake (one call, or a
    # batch of calls on input sets of their own) unanswered after max(10 x the reference's time for those calls,
    # ``hang_seconds``) ends the stage as a timeout and the candidate is killed. "auto": 5 s on cuda, 20 s on cpu
    # (whose honest loops may be far slower than torch's and share two cores with the reference)
    hang_seconds: float | Literal["auto"] = "auto"
    timing: TimingConfig = dataclasses.field(default_factory=TimingConfig)
    build: BuildOptions = dataclasses.field(default_factory=BuildOptions)
    limits: ChildLimits = dataclasses.field(default_factory=ChildLimits)
    prestart: int = 2  # candidates kept started ahead (torch imported, CUDA and its tracing initialised); cpu: <= 1
    # fork candidates from a server that imported torch once (cudagym/forkserver.py; $CUDAGYM_FORK_SERVER=0
    # turns it off for the process)
    fork_server: bool = True
    # while the agent writes and compiles: start the reference process, load the task, build its torch.compile
    # and start spare candidates (a background thread per task); "auto": on for cuda, off for cpu (where it
    # would take cores from the agent's compiles)
    prepare_ahead: bool | Literal["auto"] = "auto"
    compile_baseline: bool = True  # time torch.compile too; off: no tier 3 (as where torch.compile is unavailable)
    # the reference process imports dynamo and the inductor from its start, beside the task's loading, so that
    # the torch.compile baseline (a cold cycle's critical path) is built sooner; "auto": when preparing ahead
    # with the compile baseline (off on cpu, where the import would take a core from the agent's compiles)
    preload_compiler: bool | Literal["auto"] = "auto"
    # at most this many environments of one GPU inside a verify or a profile at once, whose inputs, buffers and
    # reference outputs fill device memory (cudagym/memory_slots.py); "auto": one per 20 GiB of the device's
    # memory on cuda (7 on an H200), no bound on cpu; 0: no bound
    memory_slots: int | Literal["auto"] = "auto"
    output_chars: int = 6000  # how much of a child's output an observation may carry
    check_determinism: bool = True  # verify runs check 1's inputs twice and requires bitwise-equal outputs
    max_leaked_bytes: int = 4 * 1024**3  # the reference process restarts when this much device memory leaked
    policy: IntegrityPolicy = dataclasses.field(default_factory=IntegrityPolicy)  # what solutions may do
    # the children read imported modules' bytecode from <cache>/pycache, which the trusted ones write
    # (cudagym/bytecode.py): where the Python installation holds none, every child would compile torch from its
    # sources (13-18 s of the reference's imports on the H200 machine). "auto": where the installation holds no
    # bytecode and candidates cannot write the folder; True: always; False: never
    bytecode_cache: bool | Literal["auto"] = "auto"
    # after a CUDA fault in verify or profile, run the candidate once more under compute-sanitizer's memcheck to name
    # the kernel, thread and address (``cudagym.sanitizer``), on the cuda backend where compute-sanitizer is installed
    # (never where it is not). Off by default: the run (torch's start under memcheck, bounded by
    # ``sanitizer.TIMEOUT_S``) holds the GPU's shared slot, and its cost was not measured yet
    fault_sanitizer: bool = False

    def __post_init__(self) -> None:
        if self.num_checks < 1:
            raise ValueError(f"num_checks must be >= 1, got {self.num_checks}")
        if self.bytecode_cache not in (True, False, "auto"):
            raise ValueError(f"bytecode_cache must be True, False or 'auto', got {self.bytecode_cache!r}")
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


def prepares_ahead(config: EvalConfig, backend: Backend) -> bool:
    """Whether evaluators of ``config`` prepare each task in the background (``EvalConfig.prepare_ahead``)."""
    return config.prepare_ahead is True or (config.prepare_ahead == "auto" and backend.is_cuda)


def preloads_compiler(config: EvalConfig, backend: Backend) -> bool:
    """Whether reference processes import torch.compile's modules from their start (``EvalConfig.preload_compiler``)."""
    if not config.compile_baseline:
        return False
    return config.preload_compiler is True or (config.preload_compiler == "auto" and prepares_ahead(config, backend))


def sanitizes_faults(config: EvalConfig, backend: Backend) -> bool:
    """Whether evaluators of ``config`` run compute-sanitizer after a CUDA fault (``EvalConfig.fault_sanitizer``)."""
    return config.fault_sanitizer and backend.is_cuda and sanitizer.find_tool() is not None


def resolve_bytecode(config: EvalConfig, cache_dir: Path) -> Path | None:
    """The bytecode folder the children of an evaluator on ``cache_dir`` use, None for none
    (``EvalConfig.bytecode_cache``, ``cudagym.bytecode.resolve``)."""
    return bytecode.resolve(config.bytecode_cache, cache_dir, config.limits.readonly_filesystem)


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
