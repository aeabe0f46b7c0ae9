"""Observations rendered from results: one pure function per result type, text for the agent.

Every observation of an evaluation stage opens the same way: the first line says what happened (``[stage] STATUS (time):
message``), the second what to do next (``Next: ...``, from :mod:`cudagym.advice`); then the evidence, made short
for an agent that reads every byte: a CUDA fault by its name, the kernel and a few frames (:mod:`cudagym.fault_text`),
compiler output by its first error with its context (:mod:`cudagym.compiler_text`), the candidate's own output with
the harness's warnings, frames and repeats left out. The results keep the evidence whole (``info["result"]``).
"""

from __future__ import annotations

from cudagym import compiler_text, fault_text
from cudagym.advice import next_step
from cudagym.evaluator import describe_check
from cudagym.results import (
    CompileResult,
    CudaFault,
    FileResult,
    ProfileResult,
    StageResult,
    Status,
    SubmitResult,
    VerifyResult,
)

OUTPUT_CHARS = 3000  # of the candidate's output, once condensed (head and tail kept beyond)
COMPILER_CHARS = 4000  # of compiler output, once condensed
MAX_KERNELS_NAMED = 6


def _header(result: StageResult) -> str:
    verdict = "OK" if result.ok else result.status.value.upper().replace("_", " ")
    timing = f" ({result.seconds:.1f} s)" if result.seconds >= 0.05 else ""
    return f"[{result.stage.value}] {verdict}{timing}: {result.message}"


def _opening(result: StageResult, advise: bool) -> list[str]:
    """What happened and, where there is something to do, what to do next."""
    advice = next_step(result) if advise else ""
    return [_header(result), f"Next: {advice}"] if advice else [_header(result)]


def render_compiler_output(text: str) -> str:
    """Compiler or linker output as the agent sees it: the first error with its context, or (output in no compiler's
    form, such as a single-file solution's import) the candidate's output condensed."""
    if compiler_text.has_diagnostics(text):
        return compiler_text.condense(text, COMPILER_CHARS)
    return fault_text.condense(text, COMPILER_CHARS)


def render_fault(fault: CudaFault) -> list[str]:
    """A CUDA fault in a few lines: CUDA's name for it, the kernels it can be, compute-sanitizer's finding."""
    code = f" ({fault.code})" if fault.code else ""
    lines = [f"CUDA fault: {fault.error}{code}"]
    if len(fault.kernels) == 1:
        lines.append(f"  kernel: {fault.kernels[0]} (the build's only kernel)")
    elif fault.kernels:
        named = ", ".join(fault.kernels[:MAX_KERNELS_NAMED]) + (
            ", ..." if len(fault.kernels) > MAX_KERNELS_NAMED else ""
        )
        lines.append(
            f"  kernel: one of the build's {len(fault.kernels)} kernels ({named}); CUDA reports a fault at the next "
            "call that waits for the device, so the traceback shows where it surfaced, not which kernel faulted"
        )
    if fault.sanitizer:
        lines.append("  compute-sanitizer (a run of its own on one input set):")
        lines.extend(f"    {line}" for line in fault.sanitizer.splitlines())
    return lines


def render_compile(result: CompileResult, *, advise: bool = True) -> str:
    lines = _opening(result, advise)
    if result.kernels:
        lines.append("kernel resources (ptxas):")
        lines.append(f"  {'kernel':<48} {'regs':>5} {'smem B':>8} {'stack B':>8} {'spills':>7}")
        for k in result.kernels:
            spills = k.spill_stores + k.spill_loads
            lines.append(f"  {k.name[:48]:<48} {k.registers:>5} {k.shared_bytes:>8} {k.stack_bytes:>8} {spills:>7}")
    if result.diagnostics.strip() and result.diagnostics.strip() != result.message.strip():
        lines.append("compiler output:")
        lines.append(render_compiler_output(result.diagnostics))
    return "\n".join(lines)


def _candidate_output(result: VerifyResult | ProfileResult) -> list[str]:
    """The failed candidate's output, condensed; compiler output where the stage stopped at the build."""
    text = result.stderr.strip()
    if not text or result.ok:
        return []
    if result.status is Status.COMPILE_ERROR:
        return ["compiler output:", render_compiler_output(text)]
    condensed = fault_text.condense(text, OUTPUT_CHARS)
    return ["output of the candidate process:", condensed] if condensed else []


def render_verify(result: VerifyResult, *, advise: bool = True) -> str:
    lines = _opening(result, advise)
    if result.fault is not None:
        lines += render_fault(result.fault)
    for check in result.checks:
        state = "pass" if check.passed else "FAIL"
        if check.passed:
            error = f"max abs error {check.max_abs_error:.3g}" if check.max_abs_error is not None else "exact"
            lines.append(f"  check {check.index + 1}: {state} ({error})")
        else:
            described = describe_check(check)
            said = described in result.message  # the message, on the first line, describes it already
            lines.append(f"  check {check.index + 1}: {state}" + (" (above)" if said else f": {described}"))
    lines += _candidate_output(result)
    return "\n".join(lines)


def render_profile(result: ProfileResult, *, advise: bool = True) -> str:
    lines = _opening(result, advise)
    if result.fault is not None:
        lines += render_fault(result.fault)
    if result.candidate_ms is not None:
        lines.append(f"  {'':<14} {'median ms':>12} {'speedup':>9}")
        lines.append(f"  {'ModelNew':<14} {result.candidate_ms:>12.4g} {'':>9}")
        if result.eager_ms is not None and result.speedup_eager is not None:
            lines.append(f"  {'eager':<14} {result.eager_ms:>12.4g} {result.speedup_eager:>8.3g}x")
        if result.compile_ms is not None and result.speedup_compile is not None:
            lines.append(f"  {'torch.compile':<14} {result.compile_ms:>12.4g} {result.speedup_compile:>8.3g}x")
        spread = f", spread {result.spread:.1%}" if result.spread is not None else ""
        lines.append(f"  device: {result.device}; method: {result.method}{spread}")
    if result.kernels:
        lines.append(f"  {'kernel / op':<56} {'calls':>6} {'ms':>10} {'share':>7}")
        for k in result.kernels[:12]:
            lines.append(f"  {k.name[:56]:<56} {k.calls:>6} {k.total_ms:>10.4g} {k.share:>6.1%}")
    if result.ncu:
        lines.append("Nsight Compute:")
        lines.append(result.ncu.rstrip())
    lines += _candidate_output(result)
    return "\n".join(lines)


def render_submit(result: SubmitResult) -> str:
    """The tier and why, that the episode is over, then the stages that decided it (without advice: nothing is left
    to do)."""
    lines = [f"[submit] tier {result.tier}: {result.message}", "The episode is over."]
    if result.compile is not None and not result.compile.ok:
        lines.append(render_compile(result.compile, advise=False))
    if result.verify is not None:
        lines.append(render_verify(result.verify, advise=False))
    if result.profile is not None:
        lines.append(render_profile(result.profile, advise=False))
    return "\n".join(lines)


def render_file(result: FileResult) -> str:
    header = _header(result)
    return f"{header}\n{result.content}" if result.content else header


def render(result: StageResult) -> str:
    """The observation text for any stage result (not yet cleaned or cut)."""
    if isinstance(result, SubmitResult):
        return render_submit(result)
    if isinstance(result, CompileResult):
        return render_compile(result)
    if isinstance(result, VerifyResult):
        return render_verify(result)
    if isinstance(result, ProfileResult):
        return render_profile(result)
    if isinstance(result, FileResult):
        return render_file(result)
    return _header(result)
