"""What each stage of an evaluation returns: frozen dataclasses, failures as data.

Every tool call ends in exactly one result object. A compile error, a wrong output, a segfault or a
timeout is not an exception: it is a result whose ``status`` says what happened and whose fields carry
the evidence (diagnostics, the worst mismatch, the signal). The environment renders the observation
from the result and puts ``result.to_info()`` into ``info``; reward shapers read the same objects.
"""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import Mapping
from typing import Any

from cudagym.codec import encode


class Status(enum.StrEnum):
    """Outcome of one stage. ``OK`` is the only success."""

    OK = "ok"
    INVALID_CALL = "invalid_call"  # the action text did not parse into a valid tool call
    FILE_ERROR = "file_error"  # a file tool refused or failed (outside the writable set, too big, ...)
    COMPILE_ERROR = "compile_error"  # the compiler or linker rejected the sources
    LOAD_ERROR = "load_error"  # model_new.py or the extension failed to import / construct
    RUNTIME_ERROR = "runtime_error"  # the forward raised (a Python error or a CUDA error)
    MISMATCH = "mismatch"  # outputs differ from the reference beyond tolerance
    INVALID_OUTPUT = "invalid_output"  # wrong type, shape, dtype, device, NaN/Inf, aliasing, ...
    CRASH = "crash"  # the child process died from a signal (segfault, abort, ...)
    TIMEOUT = "timeout"  # the child process exceeded its stage's time limit
    INTEGRITY = "integrity"  # a rule of the evaluation policy was broken
    NOT_READY = "not_ready"  # a prerequisite stage has not succeeded yet (e.g. verify before compile)
    HARNESS_ERROR = "harness_error"  # the environment itself failed (reported, never hidden)


class Stage(enum.StrEnum):
    """The tool that produced a result."""

    PARSE = "parse"
    WRITE_FILE = "write_file"
    EDIT_FILE = "edit_file"
    READ_FILE = "read_file"
    LIST_FILES = "list_files"
    COMPILE = "compile"
    VERIFY = "verify"
    PROFILE = "profile"
    SUBMIT = "submit"


@dataclasses.dataclass(frozen=True)
class StageResult:
    """Fields shared by every stage's result."""

    stage: Stage
    status: Status
    message: str = ""  # one line for the agent: what happened
    seconds: float = 0.0  # wall-clock time the stage took

    @property
    def ok(self) -> bool:
        return self.status is Status.OK

    def to_info(self) -> dict[str, Any]:
        """The result as plain data, for ``info``: enums become strings, tuples lists."""
        return encode(self)


@dataclasses.dataclass(frozen=True)
class FileResult(StageResult):
    """A file tool's outcome. ``content`` holds what ``read_file``/``list_files`` return."""

    path: str = ""
    content: str = ""


@dataclasses.dataclass(frozen=True)
class KernelResources:
    """What ptxas reports for one CUDA kernel (``-Xptxas -v``)."""

    name: str
    registers: int = 0
    shared_bytes: int = 0
    stack_bytes: int = 0
    spill_stores: int = 0
    spill_loads: int = 0


@dataclasses.dataclass(frozen=True)
class CompileResult(StageResult):
    """Building the workspace into the ``cuda_extension`` module."""

    diagnostics: str = ""  # cleaned compiler/linker output (warnings too), cut head+tail when long
    commands: tuple[str, ...] = ()  # the compiler invocations that ran (cache hits excluded)
    cached: bool = False  # the whole build was a cache hit
    objects_compiled: int = 0  # translation units compiled in this call
    objects_reused: int = 0  # translation units taken from the object cache
    artifact: str = ""  # path of the built extension (empty on failure); internal, not for the agent
    build_hash: str = ""  # content hash of the build inputs
    kernels: tuple[KernelResources, ...] = ()  # per-kernel resources (cuda backend)
    # the gate's checks before anything was built (``cudagym.compile_gate``): fixed files unchanged, the static ones
    integrity: tuple[IntegrityFinding, ...] = ()


@dataclasses.dataclass(frozen=True)
class CheckResult:
    """One correctness check on one fresh input set."""

    index: int
    passed: bool
    max_abs_error: float | None = None
    max_rel_error: float | None = None
    worst_index: tuple[int, ...] | None = None  # where the largest error is (output index space)
    expected: float | None = None  # reference value at worst_index
    actual: float | None = None  # candidate value at worst_index
    mismatched: int = 0  # elements outside tolerance
    total: int = 0  # elements compared
    output: int = 0  # which output of a tuple/list result
    problem: str = ""  # type/shape/dtype/NaN problem, when not a numeric mismatch
    # an fp32 task's error against the float64 reference over the bound fp32 (or TF32) arithmetic meets; passes at
    # <= 1 (``cudagym.harness.compare.precision_bound``); None where not checked (bf16/fp16, or the check is off)
    precision_ratio: float | None = None


@dataclasses.dataclass(frozen=True)
class IntegrityFinding:
    """One integrity check and what it found."""

    check: str
    passed: bool
    detail: str = ""


@dataclasses.dataclass(frozen=True)
class CudaFault:
    """A CUDA fault of the candidate's code (an illegal memory access, a misaligned address, a device-side assert, a
    failed launch, ...) and what is known of where it happened."""

    error: str  # CUDA's words for it, as the candidate's error gave them ("an illegal memory access was encountered")
    kind: str  # which known fault it is (an entry of ``cudagym.harness.common.CUDA_ERROR_NAMES``)
    code: str = ""  # CUDA's error code, where the error text named it ("cudaErrorIllegalAddress")
    kernels: tuple[str, ...] = ()  # the kernels of the agent's build (ptxas), one of which faulted
    # compute-sanitizer's report (condensed) of a run of its own on the same files, when one ran
    # (``EvalConfig.fault_sanitizer``), or why it did not give one
    sanitizer: str = ""


@dataclasses.dataclass(frozen=True)
class VerifyResult(StageResult):
    """Running the candidate on several fresh random input sets against the reference."""

    checks: tuple[CheckResult, ...] = ()
    atol: float = 0.0
    rtol: float = 0.0
    input_kinds: tuple[str, ...] = ()  # the input kinds the checks drew in turn (``cudagym.input_probe``)
    stderr: str = ""  # the candidate process's output (cleaned, cut), e.g. a Python traceback
    signal: str = ""  # the signal that killed the child, if any (e.g. "SIGSEGV")
    fault: CudaFault | None = None  # the CUDA fault the candidate ran into, if any
    integrity: tuple[IntegrityFinding, ...] = ()  # run-time integrity checks and what they found
    phases: tuple[tuple[str, float], ...] = ()  # (part of the stage, wall-clock seconds), in order

    @property
    def passed(self) -> int:
        return sum(1 for c in self.checks if c.passed)


@dataclasses.dataclass(frozen=True)
class KernelTime:
    """One row of the per-kernel breakdown of a profile."""

    name: str
    calls: int
    total_ms: float
    share: float  # fraction of the candidate's device (or CPU op) time


@dataclasses.dataclass(frozen=True)
class ProfileResult(StageResult):
    """Timing the candidate, eager PyTorch and torch.compile by one method on one device.

    Times are medians in milliseconds. A speedup is baseline time / candidate time, so > 1 is faster.
    """

    candidate_ms: float | None = None
    eager_ms: float | None = None
    compile_ms: float | None = None
    speedup_eager: float | None = None
    speedup_compile: float | None = None
    repetitions: int = 0
    spread: float | None = None  # (p75 - p25) / median of the candidate's timings
    kernels: tuple[KernelTime, ...] = ()
    device: str = ""
    method: str = ""  # how time was taken: the trusted clock, and calls per handshake
    baseline_cached: bool = False
    # the machine was quiet enough for the figures to be trusted: eager timed beside the candidate agreed with the
    # cached baseline within the noise (or the cache was timed again) and the clock's own work was not slowed; when
    # False the speedups are the conservative ones and ``baseline_check`` says why
    timing_fair: bool = True
    baseline_check: str = ""  # the cached baseline against eager timed beside the candidate, in a line
    calls_per_handshake: int = 0  # candidate calls between two readings of the trusted clock
    checked_calls: int = 0  # calls whose output was compared in full: every timed one, a random share of warm-up
    # the trusted clock's own figures, for benchmarks and diagnosis: the calibrated cost of a handshake per number of
    # calls and the timed handshakes' median phases (microseconds), every timed handshake's time per call (ms)
    clock: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    ncu: str = ""  # Nsight Compute summary, when requested and available
    stderr: str = ""
    signal: str = ""
    fault: CudaFault | None = None  # the CUDA fault the candidate ran into, if any
    integrity: tuple[IntegrityFinding, ...] = ()  # run-time integrity checks and what they found
    phases: tuple[tuple[str, float], ...] = ()  # (part of the stage, wall-clock seconds), in order


@dataclasses.dataclass(frozen=True)
class SubmitResult(StageResult):
    """The final evaluation: compile, verify and profile again, then the milestone tier.

    ``tier`` is CUDA Agent's: -1 when compilation or correctness fails, 1 when correct, 2 when more than
    5% faster than eager, 3 when more than 5% faster than both eager and torch.compile. On a degenerate task (a
    shortcut passes whatever inputs verification draws, ``cudagym.tasks.input_verdict``) it is capped at 1 and the
    speedups are None (the profile keeps its figures): its speed proves nothing.
    """

    tier: int = -1
    compiled: bool = False
    correct: bool = False
    speedup_eager: float | None = None
    speedup_compile: float | None = None
    timing_fair: bool = True  # the profile's figures were taken on a quiet enough machine (ProfileResult.timing_fair)
    # the input kinds verification draws for the task and whether it is degenerate (``cudagym.input_probe``); empty and
    # None while undecided (the task's first verify decides)
    input_kinds: tuple[str, ...] = ()
    degenerate: bool | None = None
    compile: CompileResult | None = None
    verify: VerifyResult | None = None
    profile: ProfileResult | None = None
    integrity: tuple[IntegrityFinding, ...] = ()


SPEEDUP_MARGIN = 0.05
"""A candidate is "faster" than a baseline when (t0 - t) / t0 > SPEEDUP_MARGIN."""


def is_faster(candidate_ms: float | None, baseline_ms: float | None, margin: float = SPEEDUP_MARGIN) -> bool:
    """CUDA Agent's b(t, t0): true when the candidate beats the baseline by more than ``margin``."""
    if candidate_ms is None or baseline_ms is None or baseline_ms <= 0:
        return False
    return (baseline_ms - candidate_ms) / baseline_ms > margin


def milestone_tier(correct: bool, profile: ProfileResult | None, margin: float = SPEEDUP_MARGIN) -> int:
    """The milestone tier of CUDA Agent's Eq. 1 from correctness and one profile."""
    if not correct:
        return -1
    if profile is None or not profile.ok:
        return 1
    faster_eager = is_faster(profile.candidate_ms, profile.eager_ms, margin)
    faster_compile = is_faster(profile.candidate_ms, profile.compile_ms, margin)
    if faster_eager and faster_compile:
        return 3
    if faster_eager:
        return 2
    return 1


AnyResult = StageResult
