"""What the reference's comparison of one output costs: ``compare_outputs`` (the task's tolerance) and
``compare_precision`` (the float64 bound), beside the same rules written as plain tensor expressions.

    python benchmarks/compare_cost.py --sizes 1048576,6291456 --runs 5 --threads 1

Every verify check and every checked timed call runs both on the candidate's output in the reference process, so on
the cpu backend, whose outputs are tens of MB, their passes over memory are much of a stage's time. For each size
(float32 elements, a ReLU's output against its float64 twin) the table gives the median milliseconds of ``--runs``
runs of each, in this process with ``--threads`` torch threads, and the plain expressions over the library's.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

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


def median_ms(fn: Callable[[], Any], runs: int) -> float:
    fn()
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        fn()
        times.append((time.perf_counter() - start) * 1e3)
    return statistics.median(times)


def measure(numel: int, runs: int) -> dict[str, float]:
    """One size's row: a ReLU output against its float64 twin, the candidate's a few ulp off."""
    x = torch.randn(numel, generator=torch.Generator().manual_seed(0))
    exp32, exp64 = torch.relu(x), torch.relu(x.double())
    act = exp32 + 1e-7 * torch.randn(numel, generator=torch.Generator().manual_seed(1))
    return {
        "numel": numel,
        "tolerance_ms": median_ms(lambda: compare_outputs(exp32, act, 1e-2, 1e-2, 0), runs),
        "plain_tolerance_ms": median_ms(lambda: plain_tolerance(exp32, act, 1e-2, 1e-2), runs),
        "precision_ms": median_ms(lambda: compare_precision(exp32, exp64, act, "fp32"), runs),
        "plain_precision_ms": median_ms(lambda: plain_precision(exp32, exp64, act), runs),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="1048576,6291456", help="comma list of output sizes (float32 elements)")
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--threads", type=int, default=1, help="torch threads (the reference's own count on cpu)")
    parser.add_argument("--json")
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    rows = [measure(int(size), args.runs) for size in args.sizes.split(",")]
    print(f"The reference's comparison of one float32 output, {args.threads} torch thread(s), median of {args.runs}")
    print("| elements | tolerance ms | plain | plain / library | float64 bound ms | plain | plain / library |")
    print("|---|---|---|---|---|---|---|")
    for r in rows:
        print(
            f"| {r['numel']} | {r['tolerance_ms']:.1f} | {r['plain_tolerance_ms']:.1f} | "
            f"{r['plain_tolerance_ms'] / r['tolerance_ms']:.2f}x | {r['precision_ms']:.1f} | "
            f"{r['plain_precision_ms']:.1f} | {r['plain_precision_ms'] / r['precision_ms']:.2f}x |"
        )
    if args.json:
        Path(args.json).write_text(json.dumps({"threads": args.threads, "runs": args.runs, "rows": rows}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
