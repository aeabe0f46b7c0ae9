"""What the reference's comparison of one output costs: ``compare_outputs`` (the task's tolerance) and
``compare_precision`` (the float64 bound), beside the library's full path alone (the whole output at once, as a
failing output is described) and the same rules written as plain tensor expressions.

    python benchmarks/compare_cost.py --sizes 1048576,6291456 --runs 5 --threads 1
    python benchmarks/compare_cost.py --device cuda --sizes 16777216,536870912 --runs 5

Every verify check and every checked timed call runs both on the candidate's output in the reference process, so on
the cpu backend, whose outputs are tens of MB, their passes over memory are much of a stage's time. For each size
(float32 elements, a ReLU's output against its float64 twin, on ``--device``) the table gives the median
milliseconds of ``--runs`` runs of each, in this process with ``--threads`` torch threads: the library as a passing
output takes it (chunk by chunk, ``compare.CHUNK_ELEMENTS``), its full path, and the plain expressions, with the
last two over the first. On cuda the table also gives the library with the reference process's comparison kernels
(``gpulib``: one read of each tensor, built with nvcc into a temporary folder), the way the clock's checks take a
float32 output there, and the chunked figure over it. On cuda every run ends with the device synchronized. OpenMP's
threads wait asleep, as in the reference process (``OMP_WAIT_POLICY=PASSIVE`` unless set).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

# the reference process's OpenMP threads sleep while they wait (``cudagym.sandbox``): time the comparison alike
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
import torch

from cudagym.harness import compare, gpulib
from cudagym.harness.compare import (
    PRECISION_FLOOR_ULPS,
    PRECISION_MARGIN,
    UNIT_ROUNDOFF,
    compare_outputs,
    compare_precision,
)


def plain_tolerance(exp: Any, act: Any, atol: float, rtol: float) -> int:
    """The tolerance rule as its docstring states it, one temporary per operation: the count of failing elements."""
    err = (act - exp).abs()
    excess = torch.nan_to_num(err - (atol + rtol * exp.abs()), nan=math.inf)
    bad = int((excess > 0).sum())
    int(torch.argmax(excess))
    float(torch.nan_to_num(err, nan=math.inf).max())
    int((~torch.isfinite(act)).sum()) - int((~torch.isfinite(exp)).sum())
    return bad


def plain_precision(exp32: Any, exp64: Any, act: Any) -> float:
    """The float64 bound as its docstring states it, masked to where both references are finite: the error ratio."""
    finite = torch.isfinite(exp64) & torch.isfinite(exp32)
    reference = exp64[finite]
    own = float((exp32[finite].double() - reference).abs().max())
    floor = PRECISION_FLOOR_ULPS * UNIT_ROUNDOFF["fp32"] * float(reference.abs().max())
    bound = PRECISION_MARGIN * max(own, floor)
    err = torch.where(finite, (act.double() - exp64).abs(), torch.zeros_like(exp64))
    return float(err.max()) / bound


def median_ms(fn: Callable[[], Any], runs: int, device: str = "cpu") -> float:
    def timed() -> float:
        start = time.perf_counter()
        fn()
        if device == "cuda":
            torch.cuda.synchronize()
        return (time.perf_counter() - start) * 1e3

    timed()
    return statistics.median(timed() for _ in range(runs))


def full_path(fn: Callable[[], Any]) -> Callable[[], Any]:
    """``fn`` with the library's chunked passes of a passing output turned off: the whole output at once."""

    def run() -> Any:
        saved = compare._passing_figures, compare._within_bound
        compare._passing_figures = compare._within_bound = lambda *args: None  # type: ignore[assignment]
        try:
            return fn()
        finally:
            compare._passing_figures, compare._within_bound = saved

    return run


def measure(numel: int, runs: int, device: str = "cpu", kernels: Any = None) -> dict[str, float | None]:
    """One size's row: a ReLU output against its float64 twin, the candidate's a few ulp off; ``kernels``: the
    comparison kernels (``gpulib.GpuLib``) for the columns of the library with them."""
    x = torch.randn(numel, generator=torch.Generator().manual_seed(0)).to(device)
    exp32, exp64 = torch.relu(x), torch.relu(x.double())
    act = exp32 + 1e-7 * torch.randn(numel, generator=torch.Generator().manual_seed(1)).to(device)
    del x

    def tolerance() -> Any:
        return compare_outputs(exp32, act, 1e-2, 1e-2, 0)

    def precision() -> Any:
        return compare_precision(exp32, exp64, act, "fp32")

    fused = None
    if kernels is not None:
        assert compare_outputs(exp32, act, 1e-2, 1e-2, 0, kernels) == tolerance()  # the same fields, faster
        assert compare_precision(exp32, exp64, act, "fp32", kernels) == precision()
        fused = {
            "kernel_tolerance_ms": median_ms(lambda: compare_outputs(exp32, act, 1e-2, 1e-2, 0, kernels), runs, device),
            "kernel_precision_ms": median_ms(
                lambda: compare_precision(exp32, exp64, act, "fp32", kernels), runs, device
            ),
        }
    return {
        **(fused or {"kernel_tolerance_ms": None, "kernel_precision_ms": None}),
        "numel": numel,
        "tolerance_ms": median_ms(tolerance, runs, device),
        "full_tolerance_ms": median_ms(full_path(tolerance), runs, device),
        "plain_tolerance_ms": median_ms(lambda: plain_tolerance(exp32, act, 1e-2, 1e-2), runs, device),
        "precision_ms": median_ms(precision, runs, device),
        "full_precision_ms": median_ms(full_path(precision), runs, device),
        "plain_precision_ms": median_ms(lambda: plain_precision(exp32, exp64, act), runs, device),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="1048576,6291456", help="comma list of output sizes (float32 elements)")
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--threads", type=int, default=1, help="torch threads (the reference's own count on cpu)")
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu", choices=("cpu", "cuda"))
    parser.add_argument("--json")
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    with tempfile.TemporaryDirectory(prefix="cudagym-compare-cost-") as folder:
        kernels = None
        if args.device == "cuda":
            major, minor = torch.cuda.get_device_capability()
            kernels = gpulib.GpuLib(gpulib.build(Path(folder), f"sm_{major}{minor}"), torch.cuda.current_device())
            if not compare.fused_agrees(kernels, "cuda"):
                raise SystemExit("the comparison kernels disagree with torch on this device")
        rows = [measure(int(size), args.runs, args.device, kernels) for size in args.sizes.split(",")]
    print(
        f"The reference's comparison of one float32 output on {args.device}, {args.threads} torch thread(s), "
        f"median of {args.runs} (ms; full: the whole output at once; kernels: with the comparison kernels; the ratios "
        "over the library's chunked figure)"
    )
    print("| elements | tolerance | kernels | full | plain | float64 bound | kernels | full | plain |")
    print("|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        tol, pre = r["tolerance_ms"], r["precision_ms"]
        kernel_tol, kernel_pre = (
            "-" if r[key] is None else f"{r[key]:.1f} ({r[key] / base:.2f}x)"
            for key, base in (("kernel_tolerance_ms", tol), ("kernel_precision_ms", pre))
        )
        print(
            f"| {r['numel']} | {tol:.1f} | {kernel_tol} | {r['full_tolerance_ms']:.1f} "
            f"({r['full_tolerance_ms'] / tol:.2f}x) | {r['plain_tolerance_ms']:.1f} "
            f"({r['plain_tolerance_ms'] / tol:.2f}x) | {pre:.1f} | {kernel_pre} | "
            f"{r['full_precision_ms']:.1f} ({r['full_precision_ms'] / pre:.2f}x) | "
            f"{r['plain_precision_ms']:.1f} ({r['plain_precision_ms'] / pre:.2f}x) |"
        )
    if args.json:
        report = {"threads": args.threads, "runs": args.runs, "device": args.device, "rows": rows}
        Path(args.json).write_text(json.dumps(report, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
