"""Observations rendered from results: one pure function per result type, text for the agent."""

from __future__ import annotations

from cudagym.evaluator import describe_check
from cudagym.results import (
    CompileResult,
    FileResult,
    ProfileResult,
    StageResult,
    SubmitResult,
    VerifyResult,
)


def _header(result: StageResult) -> str:
    verdict = "OK" if result.ok else result.status.value.upper().replace("_", " ")
    timing = f" ({result.seconds:.1f} s)" if result.seconds >= 0.05 else ""
    return f"[{result.stage.value}] {verdict}{timing}: {result.message}"


def render_compile(result: CompileResult) -> str:
    lines = [_header(result)]
    if result.kernels:
        lines.append("kernel resources (ptxas):")
        lines.append(f"  {'kernel':<48} {'regs':>5} {'smem B':>8} {'stack B':>8} {'spills':>7}")
        for k in result.kernels:
            spills = k.spill_stores + k.spill_loads
            lines.append(f"  {k.name[:48]:<48} {k.registers:>5} {k.shared_bytes:>8} {k.stack_bytes:>8} {spills:>7}")
    if result.diagnostics.strip():
        lines.append("compiler output:")
        lines.append(result.diagnostics.rstrip())
    return "\n".join(lines)


def render_verify(result: VerifyResult) -> str:
    lines = [_header(result)]
    for check in result.checks:
        state = "pass" if check.passed else "FAIL"
        if check.passed:
            error = f"max abs error {check.max_abs_error:.3g}" if check.max_abs_error is not None else "exact"
            lines.append(f"  check {check.index + 1}: {state} ({error})")
        else:
            lines.append(f"  check {check.index + 1}: {state}: {describe_check(check)}")
    if result.stderr.strip() and not result.ok:
        lines.append("output of the candidate process:")
        lines.append(result.stderr.rstrip())
    return "\n".join(lines)


def render_profile(result: ProfileResult) -> str:
    lines = [_header(result)]
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
    if result.stderr.strip() and not result.ok:
        lines.append("output of the candidate process:")
        lines.append(result.stderr.rstrip())
    return "\n".join(lines)


def render_submit(result: SubmitResult) -> str:
    lines = [f"[submit] tier {result.tier}: {result.message}"]
    if result.compile is not None and not result.compile.ok:
        lines.append(render_compile(result.compile))
    if result.verify is not None:
        lines.append(render_verify(result.verify))
    if result.profile is not None:
        lines.append(render_profile(result.profile))
    lines.append("The episode is over.")
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
