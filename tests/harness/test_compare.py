"""The precision bound of the trusted comparison (``cudagym/harness/compare.py``): an fp32 task's output is held to a
float64 twin of the reference within what plain fp32 arithmetic meets (``precision_bound``).

Honest fp32 variations (another summation order, fast-math transcendentals of a few ulp) pass with margin; TF32-like
arithmetic (GEMM inputs cut to 10 mantissa bits, truncated or rounded) and bf16 arithmetic fail, unless the mode is
"tf32", where TF32 passes. The thresholds asserted leave a factor of 2.5 or more to the measured ratios (in the
comments).
"""

from __future__ import annotations

import json
import math
import subprocess
import sys

import pytest
import torch

from cudagym.harness import compare
from cudagym.harness.compare import (
    PRECISION_FLOOR_ULPS,
    PRECISION_MARGIN,
    UNIT_ROUNDOFF,
    compare_outputs,
    compare_precision,
    compare_tensor,
    precision_bound,
    tolerance_excess,
)

U32 = UNIT_ROUNDOFF["fp32"]


def _tf32_truncated(x: torch.Tensor) -> torch.Tensor:
    """``x`` with the low 13 mantissa bits cleared: what a TF32 tensor core reads of an fp32 operand."""
    return (x.view(torch.int32) & ~0x1FFF).view(torch.float32)


def _tf32_rounded(x: torch.Tensor) -> torch.Tensor:
    """``x`` rounded to the nearest TF32 value (ties away from zero, as ``cvt.rna.tf32.f32``)."""
    return ((x.view(torch.int32) + 0x1000) & ~0x1FFF).view(torch.float32)


def _sequential_matmul(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """``a @ b`` in fp32 summed one k at a time, in order (a naive kernel's order, unlike the library's blocking)."""
    out = torch.zeros(a.shape[0], b.shape[1], dtype=torch.float32)
    for k in range(a.shape[1]):
        out += a[:, k : k + 1] * b[k : k + 1, :]
    return out


@pytest.fixture(scope="module")
def gemm() -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """Operands of a 256 x 1024 x 512 GEMM and its fp32 and float64 results."""
    gen = torch.Generator().manual_seed(0)
    a = torch.randn(256, 1024, generator=gen)
    b = torch.randn(1024, 512, generator=gen) / 32
    return a, b, a @ b, a.double() @ b.double()


def _ratio(exp32: torch.Tensor, exp64: torch.Tensor, act: torch.Tensor, mode: str = "fp32") -> float:
    return compare_precision(exp32, exp64, act, mode)["precision_ratio"]


def test_the_bound_is_the_fp32_references_own_error_or_the_floor_times_the_margin() -> None:
    exp64 = torch.tensor([1.0, -4.0, 2.0], dtype=torch.float64)
    exact = exp64.float()
    assert precision_bound(exact, exp64, U32) == pytest.approx(PRECISION_MARGIN * PRECISION_FLOOR_ULPS * U32 * 4.0)
    off = exact.clone()
    off[0] += 1e-3  # the reference itself errs: its error sets the scale
    assert precision_bound(off, exp64, U32) == pytest.approx(PRECISION_MARGIN * float(off[0] - 1.0))


def test_another_summation_order_passes(gemm) -> None:
    a, b, exp32, exp64 = gemm
    ratio = _ratio(exp32, exp64, _sequential_matmul(a, b))
    assert ratio < 0.25  # measured 0.09


def test_fast_math_of_a_few_ulp_passes() -> None:
    x = torch.randn(4096, 256, generator=torch.Generator().manual_seed(1)) * 3
    exp32, exp64 = torch.exp(-(x**2)), torch.exp(-(x.double() ** 2))
    noise = (torch.rand(x.shape, generator=torch.Generator().manual_seed(2)) * 2 - 1) * 8 * U32  # +-4 ulp
    assert _ratio(exp32, exp64, exp32 * (1 + noise)) < 0.25  # measured 0.03


@pytest.mark.parametrize("cut", [_tf32_truncated, _tf32_rounded])
def test_tf32_arithmetic_fails_the_fp32_bound_and_passes_the_tf32_one(gemm, cut) -> None:
    a, b, exp32, exp64 = gemm
    tf32 = cut(a) @ cut(b)
    failed = compare_precision(exp32, exp64, tf32, "fp32")
    assert failed["passed"] is False and failed["precision_ratio"] > 4  # measured 20 (rounded) and 51 (truncated)
    assert "less precise than fp32 arithmetic allows" in failed["problem"]
    assert "TF32 or bf16 arithmetic is not allowed" in failed["problem"] and "\n" not in failed["problem"]
    assert failed["mismatched"] > 0 and failed["max_abs_error"] > 0
    assert _ratio(exp32, exp64, tf32, "tf32") < 0.25  # measured 0.002-0.006


def test_bf16_arithmetic_fails_the_fp32_bound(gemm) -> None:
    a, b, exp32, exp64 = gemm
    bf16 = (a.bfloat16() @ b.bfloat16()).float()
    failed = compare_precision(exp32, exp64, bf16, "fp32")
    assert failed["passed"] is False and failed["precision_ratio"] > 40  # measured 256


def test_the_task_tolerance_alone_would_let_tf32_through(gemm) -> None:
    a, b, exp32, _ = gemm
    tolerance = compare_outputs(exp32, _tf32_truncated(a) @ _tf32_truncated(b), 1e-2, 1e-2, 0)
    assert tolerance["passed"]  # what the float64 bound adds


def test_an_exact_op_has_the_floor_and_input_rounding_fails_it() -> None:
    x = torch.randn(1 << 16, generator=torch.Generator().manual_seed(3))
    exp32, exp64 = torch.relu(x), torch.relu(x.double())
    assert _ratio(exp32, exp64, exp32.clone()) == 0.0
    assert compare_precision(exp32, exp64, torch.relu(_tf32_rounded(x)), "fp32")["passed"] is False


def test_nonfinite_reference_elements_and_non_float_outputs_are_left_out() -> None:
    exp64 = torch.tensor([1.0, float("inf"), 3.0], dtype=torch.float64)
    exp32 = exp64.float()
    act = torch.tensor([1.0, 5.0, 3.0])
    assert _ratio(exp32, exp64, act) == 0.0
    index = torch.tensor([1, 2])
    fields = compare_precision((exp32, index), (exp64, index), (exp32.clone(), index), "fp32")
    assert fields == {"precision_ratio": 0.0}


def _plain_bound(exp32: torch.Tensor, exp64: torch.Tensor, u: float) -> float:
    """The bound as its docstring states it, element by element masked: what the faster passes must equal."""
    finite = torch.isfinite(exp64) & torch.isfinite(exp32)
    if not finite.any():
        return float("inf")
    own = float((exp32[finite].double() - exp64[finite]).abs().max())
    floor = PRECISION_FLOOR_ULPS * u * float(exp64[finite].abs().max())
    return PRECISION_MARGIN * max(own, floor, torch.finfo(torch.float32).tiny)


@pytest.mark.parametrize("special", ["none", "inf", "nan", "all"])
def test_the_bound_and_the_tolerance_check_equal_their_plain_formulas(special: str) -> None:
    gen = torch.Generator().manual_seed(3)
    exp64 = torch.randn(4096, dtype=torch.float64, generator=gen) * 10
    if special in ("inf", "all"):
        exp64[7] = float("inf")
        exp64[9] = -float("inf")
    if special in ("nan", "all"):
        exp64[11] = float("nan")
    exp32 = exp64.float()
    assert precision_bound(exp32, exp64, U32) == _plain_bound(exp32, exp64, U32)
    act = exp32 + torch.randn(4096, generator=gen) * 1e-3
    act[100] = float("nan") if special in ("nan", "all") else act[100]
    before = act.clone()
    for atol, rtol in ((1e-2, 1e-2), (1e-4, 1e-4)):
        fields = compare_tensor(exp32, act, atol, rtol)
        excess = torch.nan_to_num((act - exp32).abs() - (atol + rtol * exp32.abs()), nan=float("inf"))
        assert fields["mismatched"] == int((excess > 0).sum()) and fields["passed"] == (fields["mismatched"] == 0)
        assert fields["max_abs_error"] == float(torch.nan_to_num((act - exp32).abs(), nan=float("inf")).max())
        assert fields["worst_index"] == [int(torch.argmax(excess))]
    for factor in (1.0, 4.0):  # the shortcut probes' rule too, at their "near" factor
        plain = torch.nan_to_num((act - exp32).abs() - factor * (1e-2 + 1e-2 * exp32.abs()), nan=float("inf"))
        assert torch.equal(tolerance_excess(exp32, act, 1e-2, 1e-2, factor), plain)
    torch.testing.assert_close(act, before, rtol=0, atol=0, equal_nan=True)  # the candidate's output left as it was


def test_an_output_the_twin_gives_in_fp32_is_left_to_the_tolerance() -> None:
    exp32 = torch.tensor([1.0, 2.0])
    assert compare_precision(exp32, exp32.clone(), exp32 + 1e-3, "fp32") == {"precision_ratio": 0.0}


def test_the_worst_element_of_a_failure_is_reported_against_the_float64_value() -> None:
    exp64 = torch.linspace(-1, 1, 101, dtype=torch.float64)
    exp32 = exp64.float()
    act = exp32.clone()
    act[37] += 1e-3
    failed = compare_precision([exp32], [exp64], [act], "fp32")
    assert failed["worst_index"] == [37] and failed["expected"] == pytest.approx(float(exp64[37]))
    assert failed["mismatched"] == 1 and failed["total"] == 101 and failed["output"] == 0


# -- what the comparison is fed: the reference process's float64 twin and its "large" inputs -----------------------

TWIN_PROBE = """
import json, os, sys
import torch
from cudagym.harness.reference import ReferenceServer
from cudagym.tasks import load

server = ReferenceServer(None)
softmax = load("builtin").get("builtin/softmax").source_for("cpu")
server.load(source=softmax, device="cpu", dtype="float32", weight_seed=1)
report = {"tf32": [torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32]}
scales = [float(server.draw_inputs(seed, "large")[0].std()) for seed in range(8)]
report["scales"] = [min(scales), max(scales)]
x = server._drawn(3, "large")
_, none = server._expected(x, False)
report["twin_before_use"] = none is None and server.model64 is None
expected, wide = server._expected(x, True)
close = bool(torch.allclose(wide.float(), expected, atol=1e-6))
report["twin"] = [str(wide.dtype), close, bool(expected.isfinite().all())]
server.load(source=softmax, device="cpu", dtype="bfloat16", weight_seed=1)
report["bf16"] = [server._expected(server._drawn(3, "task"), True)[1] is None, server.model64_error]
server.load(source=sys.argv[1], device="cpu", dtype="float32", weight_seed=1)
report["unrunnable"] = [server._expected(server._drawn(3, "task"), True)[1] is None, server.model64_error[:40]]
print(json.dumps(report))
"""

# a model whose forward only runs in float32
FLOAT32_ONLY = """
import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, x):
        if x.dtype != torch.float32:
            raise TypeError("float32 only")
        return x * 2


def get_inputs():
    return [torch.randn(64)]


def get_init_inputs():
    return []
"""


def test_the_reference_builds_its_float64_twin_on_first_use_only_for_fp32_and_draws_large_inputs() -> None:
    done = subprocess.run([sys.executable, "-c", TWIN_PROBE, FLOAT32_ONLY], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads(done.stdout.strip().splitlines()[-1])
    assert report["tf32"] == [False, False]  # the reference computes in plain fp32, also in cuDNN convolutions
    low, high = report["scales"]
    assert 90 < low and high < 1100 and high / low > 1.5  # one magnitude in 1e2-1e3 per input set
    assert report["twin_before_use"]  # no twin while no precision check asked for it
    assert report["twin"] == ["torch.float64", True, True]
    assert report["bf16"] == [True, "the task computes in torch.bfloat16, not float32"]
    assert report["unrunnable"][0] and report["unrunnable"][1].startswith("TypeError: float32 only")


def _full_path(monkeypatch: pytest.MonkeyPatch) -> None:
    """Only the full comparison: what the chunked passes of a passing output must equal field for field."""
    monkeypatch.setattr(compare, "_passing_figures", lambda *args: None)
    monkeypatch.setattr(compare, "_within_bound", lambda *args: None)


def _outputs(case: str) -> tuple[torch.Tensor, torch.Tensor]:
    """A reference output and a candidate's that passes (or, for the failing cases, does not) at atol = rtol = 1e-3."""
    gen = torch.Generator().manual_seed(5)
    exp = torch.randn(3, 1000, generator=gen)
    act = exp + torch.randn(3, 1000, generator=gen) * 1e-4
    if case == "ties":  # the largest excess in several chunks: the first element holding it is the worst
        act = exp.clone()
        act.view(-1)[[130, 1700, 2999]] = exp.view(-1)[[130, 1700, 2999]] + 5e-4
        exp.view(-1)[[130, 1700, 2999]] = 0.0
        act.view(-1)[[130, 1700, 2999]] = 5e-4
    elif case == "signed zeros":
        exp.view(-1)[::7], act.view(-1)[::7] = 0.0, -0.0
    elif case == "transposed":  # not contiguous: one part, the flat order still the logical one
        exp, act = exp.t(), act.t()
    elif case == "half":
        exp, act = exp.half(), act.half()
    elif case == "double":
        exp, act = exp.double(), act.double()
    elif case == "scalar":
        exp, act = exp[0, 0], act[0, 0]
    elif case == "complex":
        exp, act = torch.complex(exp, exp.flip(1)), torch.complex(act, act.flip(1))
    elif case == "mismatch":
        act.view(-1)[2500] += 1.0
    elif case == "nan":
        act.view(-1)[40] = float("nan")
    elif case == "inf":
        act.view(-1)[41] = float("inf")
    return exp, act


@pytest.mark.parametrize(
    "case",
    ["noise", "ties", "signed zeros", "transposed", "half", "double", "scalar", "complex", "mismatch", "nan", "inf"],
)
def test_the_chunked_passes_give_the_full_comparisons_fields(case: str, monkeypatch: pytest.MonkeyPatch) -> None:
    exp, act = _outputs(case)
    monkeypatch.setitem(compare.CHUNK_ELEMENTS, "cpu", 256)  # a dozen parts, the last one short
    chunked = compare_tensor(exp, act, 1e-3, 1e-3)
    _full_path(monkeypatch)
    assert json.dumps(chunked, sort_keys=True) == json.dumps(compare_tensor(exp, act, 1e-3, 1e-3), sort_keys=True)
    assert chunked["passed"] == (case not in ("mismatch", "nan", "inf"))
    if case == "ties":
        assert chunked["worst_index"] == [0, 130]


def _precision_case(case: str, gemm) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(the fp32 reference, the float64 one, a candidate's output) of a GEMM for one case of the precision bound."""
    _, _, exp32, exp64 = gemm
    act = exp32 + exp32 * 2e-7
    if case == "below":  # every error negative: its magnitude is read from the least difference
        act = (exp64 - exp64.abs() * 3e-6).float()
    elif case == "tf32":
        a, b, _, _ = gemm
        act = _tf32_rounded(a) @ _tf32_rounded(b)
    elif case == "nonfinite reference":
        exp64, exp32 = exp64.clone(), exp32.clone()
        exp64[3, 4], exp32[3, 4], exp64[200, 100] = float("inf"), float("inf"), float("nan")
    elif case == "nan output":
        act = act.clone()
        act[10, 10] = float("nan")
    elif case == "exact":
        exp64 = exp64.round()
        exp32, act = exp64.float(), exp64.float()
    return exp32, exp64, act


@pytest.mark.parametrize("case", ["close", "below", "tf32", "nonfinite reference", "nan output", "exact"])
def test_the_chunked_precision_passes_give_the_full_paths_fields(
    case: str, gemm, monkeypatch: pytest.MonkeyPatch
) -> None:
    exp32, exp64, act = _precision_case(case, gemm)
    monkeypatch.setitem(compare.CHUNK_ELEMENTS, "cpu", 1000)
    chunked = compare_precision([exp32], [exp64], [act], "fp32")
    _full_path(monkeypatch)
    full = compare_precision([exp32], [exp64], [act], "fp32")
    assert json.dumps(chunked, sort_keys=True) == json.dumps(full, sort_keys=True)
    assert ("passed" in chunked) == (case == "tf32")  # a NaN output is the tolerance check's to fail


class KernelFigures:
    """The rule of ``gpulib``'s comparison kernels written with torch's operations (each kernel reads every element
    once; these take passes, the same figures), or one of a faulty kernel's mistakes (``fault``)."""

    def __init__(self, fault: str = "") -> None:
        self.fault = fault

    def tolerance(self, exp, act, atol, rtol):
        if not (exp.dtype == act.dtype == torch.float32 and exp.is_contiguous() and act.is_contiguous()):
            return None
        e, a = exp.reshape(-1), act.reshape(-1)
        if self.fault == "misses the last element":
            e, a = e[:-1], a[:-1]
        err = (a - e).abs()
        excess = err - e.abs().mul(rtol).add(atol)
        nan = excess.isnan()
        if bool(nan.all()):
            return True, math.nan, 0, math.nan
        largest = excess[~nan].max()
        holding = (excess == largest).nonzero().view(-1)  # -0 equals +0, as the kernel's ordering has it
        first = int(holding[-1 if self.fault == "last of the ties" else 0])
        flagged = bool(nan.any()) and self.fault != "no NaN flag"
        return flagged, float(largest), first, float(err[~nan].max())

    def precision(self, exp32, exp64, act):
        if not (exp32.dtype == act.dtype == torch.float32 and exp64.dtype == torch.float64):
            return None
        if not (exp32.is_contiguous() and exp64.is_contiguous() and act.is_contiguous()):
            return None
        e32, e64, a = exp32.reshape(-1), exp64.reshape(-1), act.reshape(-1)
        own = (e64 - e32.double()).abs()
        if self.fault == "doubles the own error":  # a looser bound
            own = own * 2
        magnitude, err = e64.abs(), (a.double() - e64).abs()
        nan = own.isnan() | magnitude.isnan() | err.isnan()
        if bool(nan.all()):
            return True, 0.0, 0.0, 0.0
        figures = (float(t[~nan].max()) for t in (own, magnitude, err))
        return (bool(nan.any()), *figures)


@pytest.mark.parametrize(
    "case",
    ["noise", "ties", "signed zeros", "transposed", "half", "double", "scalar", "complex", "mismatch", "nan", "inf"],
)
def test_fused_figures_give_the_full_comparisons_fields(case: str, monkeypatch: pytest.MonkeyPatch) -> None:
    exp, act = _outputs(case)
    fused = compare_tensor(exp, act, 1e-3, 1e-3, KernelFigures())
    _full_path(monkeypatch)
    assert json.dumps(fused, sort_keys=True) == json.dumps(compare_tensor(exp, act, 1e-3, 1e-3), sort_keys=True)
    if case == "ties":
        assert fused["worst_index"] == [0, 130]


@pytest.mark.parametrize("case", ["close", "below", "tf32", "nonfinite reference", "nan output", "exact"])
def test_fused_precision_figures_give_the_full_paths_fields(case: str, gemm, monkeypatch: pytest.MonkeyPatch) -> None:
    exp32, exp64, act = _precision_case(case, gemm)
    fused = compare_precision([exp32], [exp64], [act], "fp32", KernelFigures())
    _full_path(monkeypatch)
    full = compare_precision([exp32], [exp64], [act], "fp32")
    assert json.dumps(fused, sort_keys=True) == json.dumps(full, sort_keys=True)


def test_a_kernel_that_gives_torchs_figures_is_trusted_and_a_faulty_one_is_not() -> None:
    """The self-check each reference process runs before its comparisons use the device's kernels (``clock.py``)."""
    assert compare.fused_agrees(KernelFigures(), "cpu", length=4099)
    # a kernel stricter than torch only sends outputs to the full path; these would pass or describe them otherwise
    for fault in ("misses the last element", "last of the ties", "no NaN flag", "doubles the own error"):
        assert not compare.fused_agrees(KernelFigures(fault), "cpu", length=4099), fault
