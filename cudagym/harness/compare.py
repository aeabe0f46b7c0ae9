"""The trusted comparison of a candidate's output with the reference's: structure, exact type, shape, dtype, device,
finiteness, then values within tolerance; for fp32 tasks also the precision of the output against a float64 reference
(``precision_bound``). Runs in the reference process; imports only the standard library and torch.
"""

from __future__ import annotations

import math
from typing import Any, Protocol

UNIT_ROUNDOFF = {"fp32": 2.0**-24, "tf32": 2.0**-11}
"""The unit roundoff (half an ulp of 1.0) of the arithmetic a precision mode allows: plain fp32 (24-bit significand),
or TF32 tensor-core inputs (11-bit significand, ``IntegrityPolicy(allow_tf32=True)``). Mode "off" has no bound."""
PRECISION_MARGIN = 16.0
"""C of ``precision_bound``: how many times the fp32 reference's own error (or the floor) a candidate may be off. Room
for fp32-accurate schemes that are not plain fp32: 3xTF32 tensor-core GEMMs (each operand split into two TF32 parts)
reach about 9x cuBLAS's largest fp32 error over a 128 x 1024 x 1024 x 1024 bmm's outputs, while operands cut to TF32
err hundreds of times more."""
PRECISION_FLOOR_ULPS = 32.0
"""k of ``precision_bound``: the floor of the reference's error, in units of the mode's roundoff at the largest
output, for outputs that the fp32 reference computes (nearly) exactly, where its own error is no scale."""


CHUNK_ELEMENTS = {"cpu": 1 << 21, "cuda": 1 << 24}
"""Elements of an output that a passing comparison reads at a time (by the device's type; others take the cuda size).
The comparison's temporaries then take a chunk's memory instead of the whole output's, made once and reused (no
page faults of fresh memory per pass); every chunk's figures stay on the device until the one read at the end. On cpu
a chunk is large enough that each operation's wake-up of the reference's sleeping OpenMP threads
(``OMP_WAIT_POLICY=PASSIVE``, ``sandbox.py``) weighs little (``benchmarks/compare_cost.py``)."""


class FusedFigures(Protocol):
    """The figures of a passing comparison in one read of each tensor (``gpulib.GpuLib`` on cuda: the reference
    process's comparison kernels): each method answers None where it does not take the tensors given, and the
    torch path answers instead. Maxima do not depend on the order they are taken in, so the figures must be those
    of torch's operations exactly (``fused_agrees`` checks a device's kernels against them before they are used)."""

    def tolerance(self, exp: Any, act: Any, atol: float, rtol: float) -> tuple[bool, float, int, float] | None:
        """(an excess is NaN, the largest excess ``tolerance_excess``, the first flat index of it, max |act - exp|)."""
        ...

    def precision(self, exp32: Any, exp64: Any, act: Any) -> tuple[bool, float, float, float] | None:
        """(a difference is NaN, max |exp64 - exp32|, max |exp64|, max |act - exp64|), differences in float64."""
        ...


def check_reply(index: int, passed: bool, output: int = 0, **fields: Any) -> dict[str, Any]:
    """The fields of one check (``protocol.Check``)."""
    return {"index": index, "passed": passed, "output": output, **fields}


def flatten(value: Any) -> list[Any] | None:
    import torch

    if isinstance(value, torch.Tensor):
        return [value]
    if isinstance(value, (list, tuple)):
        return list(value)
    return None


def compare_outputs(
    expected: Any, actual: Any, atol: float, rtol: float, index: int, fused: FusedFigures | None = None
) -> dict[str, Any]:
    """Checks structure, type, shape, dtype, device and finiteness, then values within tolerance (``fused``: see
    ``compare_tensor``)."""
    import torch

    exp_items, act_items = flatten(expected), flatten(actual)
    if exp_items is None:
        same = type(expected) is type(actual) and expected == actual
        return check_reply(index, same, problem="" if same else f"expected {expected!r}, got {type(actual).__name__}")
    if isinstance(expected, torch.Tensor) and not isinstance(actual, torch.Tensor):
        return check_reply(index, False, problem=f"expected a torch.Tensor, got {type(actual).__name__}")
    if act_items is None or len(act_items) != len(exp_items) or type(actual) is not type(expected):
        return check_reply(
            index,
            False,
            problem=f"expected a {type(expected).__name__} of {len(exp_items)} outputs, got {type(actual).__name__}",
        )
    worst: dict[str, Any] | None = None
    for i, (exp, act) in enumerate(zip(exp_items, act_items, strict=False)):
        if not isinstance(exp, torch.Tensor):
            if type(exp) is not type(act) or exp != act:
                return check_reply(index, False, output=i, problem=f"output {i}: expected {exp!r}, got {act!r}")
            continue
        if type(act) is not torch.Tensor:
            return check_reply(
                index, False, output=i, problem=f"output {i}: expected torch.Tensor, got {type(act).__name__}"
            )
        if act.shape != exp.shape:
            return check_reply(
                index, False, output=i, problem=f"output {i}: shape {tuple(act.shape)}, expected {tuple(exp.shape)}"
            )
        if act.dtype != exp.dtype:
            return check_reply(index, False, output=i, problem=f"output {i}: dtype {act.dtype}, expected {exp.dtype}")
        if act.device.type != exp.device.type:
            return check_reply(
                index, False, output=i, problem=f"output {i}: device {act.device.type}, expected {exp.device.type}"
            )
        result = compare_tensor(exp, act, atol, rtol, fused)
        result["output"] = i
        if not result["passed"]:
            return {"index": index, **result}
        if worst is None or (result.get("max_abs_error") or 0) > (worst.get("max_abs_error") or 0):
            worst = result
    return {"index": index, **(worst or {"passed": True})}


def tolerance_excess(exp: Any, act: Any, atol: float, rtol: float, factor: float = 1.0) -> Any:
    """By how much each element of ``act`` misses ``exp``: ``|act - exp| - factor * (atol + rtol * |exp|)``, NaN as
    +inf. The tolerance rule of every comparison: an element passes where its excess is <= 0."""
    return _excess((act - exp).abs(), exp, atol, rtol, factor)


def _tolerance(exp: Any, atol: float, rtol: float, factor: float = 1.0, out: Any = None) -> Any:
    """``factor * (atol + rtol * |exp|)``, each element's allowance in every comparison, in ``out`` when given."""
    import torch

    tolerance = torch.abs(exp, out=out).mul_(rtol).add_(atol)
    return tolerance.mul_(factor) if factor != 1.0 else tolerance  # times 1.0 changes no value


def _excess(err: Any, exp: Any, atol: float, rtol: float, factor: float = 1.0) -> Any:
    """``tolerance_excess`` from the error ``|act - exp|`` already taken (``err``, left as it is): in place on one
    temporary where the error and ``|exp|`` share a dtype (large outputs then cost few passes), the same values."""
    import torch

    tolerance = _tolerance(exp, atol, rtol, factor)
    if tolerance.dtype != err.dtype:
        return torch.nan_to_num(err - tolerance, nan=math.inf)
    return tolerance.neg_().add_(err).nan_to_num_(nan=math.inf)


def compare_tensor(exp: Any, act: Any, atol: float, rtol: float, fused: FusedFigures | None = None) -> dict[str, Any]:
    """Elementwise |act - exp| <= atol + rtol * |exp| (NaN/Inf fail), with details of the worst element.

    The pass/fail pass runs in the output's own precision; only the reported worst element is read in
    float64, so checking a large output costs a few passes over it. ``fused``: the figures of a passing output
    from one read of each tensor where it takes them (``FusedFigures``); the same fields either way.
    """
    import torch

    total = exp.numel()
    if total == 0:
        return {"passed": True, "total": 0, "mismatched": 0}
    if not (exp.is_floating_point() or exp.is_complex()):
        diff = act != exp
        bad = int(diff.sum())
        fields: dict[str, Any] = {"passed": bad == 0, "total": total, "mismatched": bad}
        if bad:
            flat = int(diff.reshape(-1).nonzero()[0])
            fields.update(
                worst_index=_unravel(flat, exp.shape),
                expected=float(exp.reshape(-1)[flat]),
                actual=float(act.reshape(-1)[flat]),
            )
        return fields
    passing = None if exp.is_complex() else _passing_figures(exp, act, atol, rtol, fused)  # complex: full path
    if passing is not None:
        return passing
    err = (act - exp).abs()
    excess = _excess(err, exp, atol, rtol)  # NaN in the candidate counts as the worst error
    bad = int(torch.count_nonzero(excess > 0))
    flat = int(torch.argmax(excess.reshape(-1)).item())
    e = float(exp.reshape(-1)[flat].double())
    a = float(act.reshape(-1)[flat].double())
    # a NaN error always fails (its excess is inf), so the plain maximum is exact where nothing failed
    max_abs = float(torch.nan_to_num(err, nan=math.inf).max()) if bad else float(err.max())
    fields = {
        "passed": bad == 0,
        "total": total,
        "mismatched": bad,
        "max_abs_error": max_abs,
        "max_rel_error": abs(a - e) / max(abs(e), 1e-12) if math.isfinite(a) else math.inf,
        "worst_index": _unravel(flat, exp.shape),
        "expected": e,
        "actual": a,
    }
    if bad:
        nonfinite = int((~torch.isfinite(act)).sum()) - int((~torch.isfinite(exp)).sum())
        if nonfinite > 0:
            fields["problem"] = f"{nonfinite} NaN/Inf value(s) where the reference is finite"
    return fields


def _chunks(*tensors: Any) -> Any:
    """``(offset, parts)`` over equal-shaped ``tensors`` in flat order, ``CHUNK_ELEMENTS`` at a time where every one is
    contiguous (flat views, no copy); otherwise one part: the tensors themselves."""
    total = tensors[0].numel()
    size = CHUNK_ELEMENTS.get(tensors[0].device.type, CHUNK_ELEMENTS["cuda"])
    if total <= size or not all(t.is_contiguous() for t in tensors):
        yield 0, tensors
        return
    flat = [t.reshape(-1) for t in tensors]
    for start in range(0, total, size):
        yield start, [f[start : start + size] for f in flat]


class _Scratch:
    """The temporaries of one comparison, made once and reused by every chunk (a chunk's worth each): fresh ones per
    chunk would cost an allocation each, and page faults where the allocator hands memory back to the system."""

    def __init__(self) -> None:
        self._made: dict[str, Any] = {}

    def __call__(self, name: str, like: Any) -> Any:
        """A temporary of ``like``'s shape and dtype (contiguous), the one ``name`` made earlier where it fits."""
        import torch

        made = self._made.get(name)
        if made is None or made.numel() < like.numel() or made.dtype != like.dtype:
            made = self._made[name] = torch.empty(like.numel(), dtype=like.dtype, device=like.device)
        return made[: like.numel()].view(like.shape)


def _passing_figures(
    exp: Any, act: Any, atol: float, rtol: float, fused: FusedFigures | None = None
) -> dict[str, Any] | None:
    """``compare_tensor``'s fields for a floating output where every element passes, in fewer passes over the output
    (``fused`` where it takes the tensors, else chunk by chunk, ``_chunks``); None where any element fails, for the
    full comparison to count and describe. The same rule and figures: the error ``|act - exp|`` and the tolerance
    ``atol + rtol * |exp|`` in the output's dtype, the worst element the first of the largest excess."""
    import torch

    figures = fused.tolerance(exp, act, atol, rtol) if fused is not None else None
    if figures is not None:
        nan, excess, flat, largest = figures
        return None if nan or not excess <= 0 else _passing_fields(exp, act, flat, largest)
    scratch = _Scratch()

    def excess_of(e: Any, a: Any) -> tuple[Any, Any]:
        err = torch.sub(a, e, out=scratch("err", e)).abs_()
        tolerance = _tolerance(e, atol, rtol, out=scratch("excess", e))
        return torch.sub(err, tolerance, out=tolerance), err

    parts, worst, largest = [], [], []
    for offset, (e, a) in _chunks(exp, act):
        excess, err = excess_of(e, a)
        parts.append((offset, e, a))
        worst.append(excess.amax())  # NaN where an error is NaN: then not <= 0, and the full comparison takes over
        largest.append(err.amax())
    figures = torch.stack(worst)
    if not float(figures.max()) <= 0:
        return None
    offset, e, a = parts[int(torch.argmax(figures))]  # the first part holding the largest excess, then its first
    flat = offset + int(torch.argmax(excess_of(e, a)[0]))
    return _passing_fields(exp, act, flat, float(torch.stack(largest).max()))


def _passing_fields(exp: Any, act: Any, flat: int, largest: float) -> dict[str, Any]:
    """The fields of a passing comparison whose worst element is at flat index ``flat``, largest error ``largest``."""
    e, a = float(exp.reshape(-1)[flat].double()), float(act.reshape(-1)[flat].double())
    return {
        "passed": True,
        "total": exp.numel(),
        "mismatched": 0,
        "max_abs_error": largest,
        "max_rel_error": abs(a - e) / max(abs(e), 1e-12),
        "worst_index": _unravel(flat, exp.shape),
        "expected": e,
        "actual": a,
    }


def precision_bound(exp32: Any, exp64: Any, unit_roundoff: float) -> float:
    """The largest error against the float64 reference that an output computed with the allowed arithmetic may have:

        bound = C * max(max|exp32 - exp64|, k * u * max|exp64|)

    ``exp32`` is the reference's output computed in fp32 (TF32 off), ``exp64`` the same model's output in float64 on
    the same inputs, ``u`` the mode's unit roundoff (``UNIT_ROUNDOFF``), C = ``PRECISION_MARGIN`` and
    k = ``PRECISION_FLOOR_ULPS``; maxima run over the elements where both references are finite. The fp32
    reference's own error sets the scale (an ill-conditioned op lets every fp32 computation err as much), with a floor
    of k roundoffs at the largest output for ops that fp32 computes exactly. Another summation order or fast-math
    transcendentals (a few ulp) stay far inside it; TF32 or bf16 arithmetic on an fp32 task does not (inputs rounded to
    11 or 8 significant bits err ~2^-11 or ~2^-8 relative, far above C * k * 2^-24), unless the mode is "tf32". Every
    element's bound is the same number: the rule measures errors at the scale of the whole output.
    """
    return _bound(exp32, exp64, unit_roundoff)[0]


def _bound(exp32: Any, exp64: Any, unit_roundoff: float) -> tuple[float, Any]:
    """``precision_bound``, and where both references are finite: None where that is everywhere (the common case,
    told by a finite largest difference, since an infinite or NaN reference makes the difference infinite or NaN)."""
    import torch

    if exp64.numel() == 0:
        return math.inf, None
    finite = None
    own = float(torch.sub(exp64, exp32).abs_().max())  # exp32 promoted to float64 in the subtraction
    if not math.isfinite(own):
        finite = torch.isfinite(exp64).logical_and_(torch.isfinite(exp32))
        exp32, exp64 = exp32[finite], exp64[finite]
        if exp64.numel() == 0:
            return math.inf, finite
        own = float(torch.sub(exp64, exp32).abs_().max())
    low, high = torch.aminmax(exp64)
    floor = PRECISION_FLOOR_ULPS * unit_roundoff * max(float(high), -float(low))
    return PRECISION_MARGIN * max(own, floor, torch.finfo(torch.float32).tiny), finite


def compare_precision(
    expected: Any, expected64: Any, actual: Any, mode: str, fused: FusedFigures | None = None
) -> dict[str, Any]:
    """After ``compare_outputs`` passed: every floating output within ``precision_bound`` of the float64 reference.

    ``expected``/``expected64``: the reference's outputs in fp32 and in float64 (same structure); ``actual``: the
    candidate's; ``mode``: "fp32" or "tf32" (``UNIT_ROUNDOFF``). Returns the fields to merge into the check:
    ``precision_ratio``, the largest error over its bound (<= 1 passes), and for a failure ``passed=False`` with the
    worst element and a one-line problem. Outputs the float64 reference does not give in float64 (a model that casts
    back itself) are left to the tolerance alone. ``fused``: see ``compare_tensor``.
    """
    import torch

    worst = 0.0
    pairs = zip(flatten(expected) or [], flatten(expected64) or [], flatten(actual) or [], strict=True)
    for i, (exp32, exp64, act) in enumerate(pairs):
        if not (isinstance(exp32, torch.Tensor) and exp32.dtype == torch.float32 and exp32.numel()):
            continue
        if not (isinstance(exp64, torch.Tensor) and exp64.dtype == torch.float64 and exp64.shape == exp32.shape):
            continue
        within = _within_bound(exp32, exp64, act, UNIT_ROUNDOFF[mode], fused)
        if within is not None:
            worst = max(worst, within)
            continue
        bound, finite = _bound(exp32, exp64, UNIT_ROUNDOFF[mode])
        err = torch.sub(act, exp64).abs_()  # act promoted to float64 in the subtraction
        if finite is not None:
            err.masked_fill_(~finite, 0.0)
        largest = float(err.max())
        if largest > bound:
            return {**_imprecise(exp64, act, err, bound, mode), "output": i}
        worst = max(worst, largest / bound)
    return {"precision_ratio": worst}


def _within_bound(
    exp32: Any, exp64: Any, act: Any, unit_roundoff: float, fused: FusedFigures | None = None
) -> float | None:
    """The largest error of ``act`` against ``exp64`` over ``precision_bound``, in fewer passes (``fused`` where it
    takes the tensors, else chunk by chunk, ``_chunks``: the largest magnitude of a difference read from its least
    and greatest values), where both references are finite everywhere and the output is within the bound; None
    otherwise, for the full path to judge and describe."""
    import torch

    figures = fused.precision(exp32, exp64, act) if fused is not None else None
    if figures is not None:
        nan, own, magnitude, largest = figures
        if nan:
            return None
    else:
        extremes, scratch = [], _Scratch()
        for _, (e32, e64, a) in _chunks(exp32, exp64, act):
            extremes += torch.aminmax(torch.sub(e64, e32, out=scratch("difference", e64)))
            extremes += torch.aminmax(e64)
            extremes += torch.aminmax(torch.sub(a, e64, out=scratch("difference", e64)))
        low_own, high_own, low, high, low_err, high_err = torch.stack(extremes).view(-1, 6).unbind(1)
        own = float(torch.cat([low_own, high_own]).abs().max())  # NaN or inf where a reference is not finite
        magnitude = max(float(high.max()), -float(low.min()))
        largest = float(torch.cat([low_err, high_err]).abs().max())
    if not math.isfinite(own):
        return None
    bound = PRECISION_MARGIN * max(
        own, PRECISION_FLOOR_ULPS * unit_roundoff * magnitude, torch.finfo(torch.float32).tiny
    )
    if not largest <= bound:  # beyond the bound, or NaN
        return None
    return largest / bound


def _imprecise(exp64: Any, act: Any, err: Any, bound: float, mode: str) -> dict[str, Any]:
    """The fields of a check that failed the precision bound: where the worst error is and a one-line problem."""
    flat = int(err.reshape(-1).argmax())
    largest = float(err.reshape(-1)[flat])
    e, a = float(exp64.reshape(-1)[flat]), float(act.reshape(-1)[flat].double())
    arithmetic = "fp32" if mode == "fp32" else "TF32"
    allowed = (
        "TF32 or bf16 arithmetic is not allowed for this task unless the policy allows TF32"
        if mode == "fp32"
        else "arithmetic coarser than TF32 is not allowed"
    )
    return {
        "passed": False,
        "total": exp64.numel(),
        "mismatched": int((err > bound).sum()),
        "max_abs_error": largest,
        "max_rel_error": abs(a - e) / max(abs(e), 1e-12),
        "worst_index": _unravel(flat, exp64.shape),
        "expected": e,
        "actual": a,
        "precision_ratio": largest / bound,
        "problem": f"the output is less precise than {arithmetic} arithmetic allows: max error {largest:.3g} against "
        f"the float64 reference, {largest / bound:.3g}x the bound {bound:.3g}; {allowed}",
    }


def _unravel(flat: int, shape: Any) -> list[int]:
    index = []
    for size in reversed(list(shape)):
        index.append(flat % size if size else 0)
        flat = flat // size if size else 0
    return list(reversed(index))


def fused_agrees(fused: FusedFigures, device: str, length: int = 3 * (1 << 20) + 17) -> bool:
    """Whether ``fused`` gives exactly the fields of the torch path on ``device`` over outputs made to test it: an odd
    length with two elements tied for the largest excess, signed zeros, and outputs that fail the tolerance (one
    element off, NaN, inf) or the precision bound (pass the tolerance with TF32-sized errors). A device whose
    kernels disagree anywhere keeps the torch path (``clock.py``). ``length``: of the outputs, at least 16."""
    import torch

    generator = torch.Generator(device=device).manual_seed(20261208)
    n = length
    exp = torch.randn(n, generator=generator, device=device)
    exp[5] = exp[n - 3] = 0.0
    exp[7], exp[11] = -0.0, 0.0
    act = exp + torch.randn(n, generator=generator, device=device) * 1e-6
    act[5] = act[n - 3] = 5e-5  # the largest excess, twice: the first index is the worst
    act[7], act[11] = 0.0, -0.0
    off, nan, inf = act.clone(), act.clone(), act.clone()
    off[n // 2] += 1.0
    nan[n - 1] = math.nan
    inf[3] = math.inf
    # the fp32 reference's own error well above the floor: the bound is its multiple, which an output may near
    exp64 = exp.double() + torch.randn(n, generator=generator, device=device, dtype=torch.float64) * 1e-5
    near = exp64.float() + torch.randn(n, generator=generator, device=device) * 1e-4
    coarse = exp + exp * torch.randn(n, generator=generator, device=device) * 2.0**-11  # TF32-sized errors
    for actual in (act, off, nan, inf, exp.clone(), near, coarse):
        for atol, rtol in ((1e-4, 1e-3), (0.0, 0.0), (1e-2, 1e-2)):
            if repr(compare_tensor(exp, actual, atol, rtol, fused)) != repr(compare_tensor(exp, actual, atol, rtol)):
                return False
        for mode in ("fp32", "tf32"):
            plain = compare_precision(exp, exp64, actual, mode)
            if repr(compare_precision(exp, exp64, actual, mode, fused)) != repr(plain):
                return False
    return True


def same_values(a: Any, b: Any) -> bool:
    """Bitwise-equal tensors, NaN equal to NaN (for the inputs-unchanged and determinism checks)."""
    import torch

    if a.shape != b.shape or a.dtype != b.dtype:
        return False
    if a.is_floating_point() or a.is_complex():
        if torch.equal(a, b):  # no NaN, or NaN nowhere different: the common case, in one pass
            return True
        return bool(((a == b) | (torch.isnan(a) & torch.isnan(b))).all())
    return bool(torch.equal(a, b))
