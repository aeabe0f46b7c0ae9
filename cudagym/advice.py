"""What the agent should do next after a stage: one line, the observation's second, chosen by what happened.

The first line of an observation says what happened (the stage, its status and its message); this one says where to
look and what to call next. It is chosen from the result alone (status, signal, CUDA fault, the failed check, the
profile's speedups), so it names the likely cause of each kind of failure (an index past the end for an illegal memory
access, a misaligned vector access, a launch configuration over the device's limits, ...) without guessing beyond what
the result shows.
"""

from __future__ import annotations

from cudagym import compiler_text
from cudagym.results import (
    CheckResult,
    CompileResult,
    CudaFault,
    ProfileResult,
    StageResult,
    Status,
    VerifyResult,
    is_faster,
)

# by the entries of cudagym.harness.common.CUDA_ERROR_NAMES
CUDA_FAULT_ADVICE = {
    "illegal memory access": (
        "a kernel read or wrote outside its buffers: check every index against its tensor's size, and that the "
        "threads of a grid rounded up past the end return before touching memory"
    ),
    "misaligned address": (
        "a load or store was not aligned to its size: a float4/vector access at an offset that is not a multiple of "
        "16 bytes, or a pointer cast to a wider type; align it, or use scalar accesses at the edges"
    ),
    "unspecified launch failure": (
        "a kernel crashed (an out-of-bounds access, a trap, or a stack overflow): check its indices and pointers"
    ),
    "device-side assert": "an assert in a kernel failed: its condition, file and line are in the output below",
    "invalid configuration argument": (
        "a launch configuration is invalid: at most 1024 threads per block, no grid or block dimension of 0, grid "
        "y and z at most 65535, and no more dynamic shared memory than the device allows"
    ),
    "invalid argument": (
        "a CUDA call got an argument it refuses (a size, a pointer, or a shared-memory size over the limit without "
        "cudaFuncSetAttribute)"
    ),
    "too many resources requested for launch": (
        "a block needs more registers or shared memory than an SM has for it: launch fewer threads per block, or "
        "bound them with __launch_bounds__"
    ),
    "an illegal instruction was encountered": (
        "a kernel ran an invalid instruction (often a call through a bad pointer, or a stack overflow)"
    ),
    "out of memory": "the device ran out of memory: allocate less, and not once per element or per loop iteration",
    "invalid device function": "a kernel was not built for this GPU: do not choose an architecture in the sources",
    "no kernel image is available": "a kernel was not built for this GPU: do not choose an architecture in the sources",
}
SIGNAL_ADVICE = {
    "SIGSEGV": (
        "your native code touched memory it does not own (an index past a buffer's end, a null or dangling pointer): "
        "check the bounds of every array access in the kernels ModelNew called"
    ),
    "SIGBUS": "your native code made a misaligned or invalid memory access: check pointer casts and offsets",
    "SIGFPE": "your native code divided an integer by zero (or took a modulo by zero): check divisors",
    "SIGILL": (
        "your native code ran an illegal instruction; a function that returns a value but reaches its end without "
        "a return statement does this under optimisation"
    ),
    "SIGABRT": (
        "the process aborted: an uncaught C++ exception, a failed assert, or memory corruption the allocator "
        "detected (an out-of-bounds write); see the output below"
    ),
    "SIGKILL": "the process was killed, most likely for exceeding its memory limit: allocate less",
}


def _check_advice(check: CheckResult | None) -> str:
    if check is None:
        return "compare your kernels' arithmetic and indexing with model.py"
    where = f"output {check.output}" if check.output else "the output"
    if check.problem and check.max_abs_error is None:
        return f"{where} has the wrong structure (see above): return exactly what Model.forward returns"
    if check.problem and "NaN" in check.problem:
        return (
            f"{where} holds NaN/Inf where the reference is finite: look for a division by zero, an overflow or "
            "memory never written"
        )
    if check.problem:
        return f"{where}'s precision is too low: compute in fp32 (no TF32 or bf16 arithmetic)"
    if check.total and check.mismatched <= max(1, check.total // 100):
        return (
            f"only {check.mismatched} of {check.total} elements of {where} are wrong: look at the edges (the last "
            "partial block or vector, the tail of a loop)"
        )
    if check.total and check.mismatched >= check.total * 0.99:
        return f"nearly every element of {where} is wrong: check the formula against model.py and the output's layout"
    return f"compare your kernel's arithmetic and indexing with model.py at the index given for {where}"


def _fault_advice(fault: CudaFault) -> str:
    return CUDA_FAULT_ADVICE.get(fault.kind, "a kernel faulted: check its indices, pointers and launch configuration")


def _run_advice(result: VerifyResult | ProfileResult) -> str:
    """A candidate that failed while it ran (verify or profile)."""
    again = result.stage.value
    if result.fault is not None:
        return f"{_fault_advice(result.fault)}; then {again} again."
    if result.status is Status.COMPILE_ERROR:
        where = compiler_text.first_error_location(result.stderr)
        return f"fix the first compiler error{f' ({where})' if where else ''}, then compile."
    if result.status is Status.TIMEOUT:
        return (
            "look for a loop that never ends (a bound or stride that never reaches it, a wait on a flag) or work far "
            f"too slow for the task's sizes; then {again} again."
        )
    if result.status is Status.CRASH:
        cause = SIGNAL_ADVICE.get(result.signal, "find where the process died from its output below")
        return f"{cause}; then {again} again."
    below = " (output below)" if result.stderr.strip() else ""
    if result.status is Status.LOAD_ERROR:
        return f"fix what failed while importing model_new.py or building ModelNew{below}; then {again} again."
    if result.status is Status.RUNTIME_ERROR:
        return f"fix the error ModelNew's forward raised{below}; then {again} again."
    if result.status in (Status.MISMATCH, Status.INVALID_OUTPUT):
        failed = next((c for c in getattr(result, "checks", ()) if not c.passed), None)
        return f"{_check_advice(failed)}; then {again} again."
    if result.status is Status.INTEGRITY:
        return f"change what the rule above names (compute in your own kernels); then {again} again."
    return ""


def _profile_advice(result: ProfileResult) -> str:
    if not result.timing_fair:
        return "the machine was busy, so these figures are not fair: profile again before deciding."
    faster_eager = is_faster(result.candidate_ms, result.eager_ms)
    faster_compile = is_faster(result.candidate_ms, result.compile_ms)
    if faster_eager and faster_compile:
        return "faster than eager and torch.compile: submit, or optimise further and profile again."
    if faster_eager:
        return (
            "faster than eager, not than torch.compile: fuse more of the model into fewer kernels or cut memory "
            "traffic, then profile again; or submit."
        )
    return "not faster than eager yet: the table shows where the time goes; optimise that, then profile again."


def next_step(result: StageResult) -> str:
    """The observation's "Next:" line for ``result`` (without the word), "" where the message says it already (file
    tools, malformed calls, a stage not ready) or nothing is left to do."""
    if result.status is Status.HARNESS_ERROR:
        return "the evaluation itself failed, not your code: call the tool again."
    if isinstance(result, CompileResult):
        if result.ok:
            return "verify (ModelNew against the reference on fresh inputs)."
        if result.status is Status.INTEGRITY:
            return "change what the rule above names, then compile again."
        where = compiler_text.first_error_location(result.diagnostics)
        return f"fix the first error{f' ({where})' if where else ''}, then compile again."
    if isinstance(result, VerifyResult) and result.ok:
        return "profile (time against eager and torch.compile), or submit."
    if isinstance(result, ProfileResult) and result.ok:
        return _profile_advice(result)
    if isinstance(result, (VerifyResult, ProfileResult)):
        return _run_advice(result)
    return ""
